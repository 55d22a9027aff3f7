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
