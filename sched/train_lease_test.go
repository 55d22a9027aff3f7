package sched

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"idunno/kernel"
	"idunno/sched/train"
)

// TestTrainLeaseStraggler drives the shard leasing decision on an injected clock: free
// shards first, no twin for a shard within the straggler bound, a twin for a worker at 2x
// the median shard time, never a twin to the holder itself, and a shard of a dead worker
// handed out again.
func TestTrainLeaseStraggler(t *testing.T) {
	spec := TrainSpec{Name: "j", Epochs: 1, Batch: 4, Shards: 2, Samples: 40, LR: 0.1, Threads: 1,
		Optimizer: kernel.Optimizer{Kind: "sgd"}, Schedule: train.Schedule{Kind: "constant"}}
	r := &trainRun{spec: spec, ready: true, results: map[int]*ShardPush{}, leases: map[int][]shardLease{},
		durs: []float64{2, 2, 2, 2}} // median shard time 2 s
	alive := map[string]bool{"a": true, "b": true, "c": true}
	t0 := time.Unix(1000, 0)
	lease := func(w string, at time.Duration) (int, bool) {
		o, ok := r.lease(w, alive, t0.Add(at))
		return o.Shard, ok
	}
	if k, ok := lease("a", 0); !ok || k != 0 {
		t.Fatalf("a: shard %d %v, want 0", k, ok)
	}
	if k, ok := lease("b", 0); !ok || k != 1 {
		t.Fatalf("b: shard %d %v, want 1", k, ok)
	}
	r.results[1] = &ShardPush{} // b is back after 2 s (the median); a is at 2x
	if _, ok := lease("c", 2*time.Second); ok {
		t.Fatal("a twin within 1x the median")
	}
	if _, ok := lease("a", 4*time.Second); ok {
		t.Fatal("the straggler was given its own shard again")
	}
	if k, ok := lease("c", 4*time.Second); !ok || k != 0 {
		t.Fatalf("no twin for a shard at 2x the median: %d %v", k, ok)
	}
	if _, ok := lease("b", 5*time.Second); ok {
		t.Fatal("a third copy of a shard already twinned")
	}

	// millisecond shards: no twin below the floor, however many medians late
	r = &trainRun{spec: spec, ready: true, results: map[int]*ShardPush{}, leases: map[int][]shardLease{}, durs: []float64{0.005}}
	lease("a", 0)
	lease("b", 0)
	if _, ok := lease("c", 500*time.Millisecond); ok {
		t.Fatal("a twin below StragglerFloor")
	}
	// a dead holder's shard goes to the next worker at once
	delete(alive, "a")
	if k, ok := lease("c", 600*time.Millisecond); !ok || k != 0 {
		t.Fatalf("a dead worker's shard was not handed out again: %d %v", k, ok)
	}
}

// TestFloatBytes: the in-place views and the copying fallback (a misaligned buffer) give
// the same little-endian bytes and floats.
func TestFloatBytes(t *testing.T) {
	v := []float32{1, -2.5, 3e-38, float32(math.Inf(1)), float32(math.NaN())}
	b := floatsToBytes(v)
	want := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(want[4*i:], math.Float32bits(f))
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("bytes % x, want % x", b, want)
	}
	odd := make([]byte, len(want)+1)[1:] // misaligned: read by copying
	copy(odd, want)
	for _, in := range [][]byte{want, odd} {
		got, err := bytesToFloats(in)
		if err != nil || len(got) != len(v) {
			t.Fatal(err, len(got))
		}
		for i := range v {
			if math.Float32bits(got[i]) != math.Float32bits(v[i]) {
				t.Fatalf("float %d: %v, want %v", i, got[i], v[i])
			}
		}
	}
	if _, err := bytesToFloats(want[:5]); err == nil {
		t.Fatal("5 bytes read as floats")
	}
	if f, err := bytesToFloats(nil); err != nil || len(f) != 0 {
		t.Fatal(f, err)
	}
}

// FuzzAddChunk feeds the coordinator's assembly of chunked shard results arbitrary chunk
// offsets, sizes and totals: it must never panic, never hold more than it bounds, and give
// back exactly the bytes sent when the chunks came in order.
func FuzzAddChunk(f *testing.F) {
	f.Add([]byte{0, 8, 3, 5, 8}, uint16(16))
	f.Add([]byte{1, 0, 200, 7}, uint16(300))
	f.Fuzz(func(t *testing.T, ops []byte, total16 uint16) {
		r := &trainRun{params: make([]byte, 64), partial: map[partKey]*partialPush{}}
		total := int(total16)
		src := make([]byte, total)
		for i := range src {
			src[i] = byte(i * 7)
		}
		off := 0
		for i := 0; i+1 < len(ops); i += 2 {
			worker := string('a' + rune(ops[i]%4))
			at, n := int(ops[i+1])%(total+2), int(ops[i])%40+1
			if ops[i]&0x80 == 0 { // mostly the next chunk in order from worker a
				worker, at = "a", off
			}
			end := min(at+n, total)
			if at > total || end <= at {
				continue
			}
			others := 0 // results of shard 0 from other workers being assembled
			for k := range r.partial {
				if k.worker != worker {
					others++
				}
			}
			whole, err := r.addChunk(&ShardPush{Shard: 0, Worker: worker, Offset: at, Total: total}, src[at:end])
			if worker != "a" {
				continue
			}
			if at != off && at != 0 {
				if err == nil {
					t.Fatalf("a chunk at %d accepted when %d bytes were in", at, off)
				}
				continue
			}
			if err != nil && at == 0 && others >= 2 {
				continue // the bound on results assembled at once
			}
			if err != nil {
				if total <= 2*len(r.params)+(1<<20) {
					t.Fatalf("chunk %d-%d of %d from a refused: %v", at, end, total, err)
				}
				return
			}
			off = end // in order, or a restart from the first byte
			if whole != nil {
				if !bytes.Equal(whole, src) {
					t.Fatalf("assembled %d bytes differ from the %d sent", len(whole), total)
				}
				return
			}
		}
		if len(r.partial) > 4 {
			t.Fatalf("%d results assembled at once", len(r.partial))
		}
	})
}
