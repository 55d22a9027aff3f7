package sdfs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"
)

// BenchmarkPut64MiB and BenchmarkGet64MiB move a 64 MiB file on an in-process 4-node
// cluster (real TCP on loopback, real fsyncs); benchmarks/sdfs has the multi-process figures.
func BenchmarkPut64MiB(b *testing.B) {
	tc, data := benchCluster(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tc.client().Put(context.Background(), "bench", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet64MiB(b *testing.B) {
	tc, data := benchCluster(b)
	if _, err := tc.client().Put(context.Background(), "bench", bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tc.client().Get(context.Background(), "bench", io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func benchCluster(b *testing.B) (*testCluster, []byte) {
	cfg := DefaultConfig()
	cfg.ScrubInterval = 0
	tc := newTestCluster(b, 4, cfg)
	for _, nd := range tc.nodes {
		nd.store.Logf = func(string, ...any) {}
	}
	return tc, randBytes(64<<20, 1)
}

// BenchmarkPut1KiB is the latency of a small put (task results are small files).
func BenchmarkPut1KiB(b *testing.B) {
	tc, _ := benchCluster(b)
	data := randBytes(1024, 2)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tc.client().Put(context.Background(), "small", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiskSmallWrite compares one replica's install of a small unsynced version (a
// task's result) through a staging directory and packed in one file (writePacked).
func BenchmarkDiskSmallWrite(b *testing.B) {
	for _, direct := range []bool{false, true} {
		b.Run(map[bool]string{false: "staged", true: "packed"}[direct], func(b *testing.B) {
			d, err := openDisk(b.TempDir(), testConfig())
			if err != nil {
				b.Fatal(err)
			}
			body := block(200, 1)
			for i := 0; b.Loop(); i++ {
				m := manifestFor(fmt.Sprintf("job/result/%d", i), Version{Seq: 1, Writer: randHex(8)}, body)
				if direct {
					err = d.writePacked(m, body)
				} else {
					txn := randHex(16)
					if err = d.beginSync(txn, m.Name, m.Version, time.Now(), false); err == nil {
						if err = d.putBlock(txn, 0, m.Sums[0], body, time.Now()); err == nil {
							err = d.commitAs(txn, m, time.Now(), false)
						}
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
