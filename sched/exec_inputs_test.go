package sched_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/sched"
)

// npyInt64 writes a C-order int64 .npy of the given shape.
func npyInt64(shape []int, v []int64) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	h := fmt.Sprintf("{'descr': '<i8', 'fortran_order': False, 'shape': (%s,), }", strings.Join(dims, ", "))
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// TestMultiInputJob runs a transformer_encoder job whose ids and mask come from two SDFS
// .npy arrays bound by input name, and checks every prediction against the kernel run
// directly on the same rows.
func TestMultiInputJob(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	m, err := zoo.BuildText(zoo.TextOptions{Vocab: 50, Length: 5, Layers: 1, Heads: 2, Width: 8, Classes: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	const rows = 7
	ids := make([]int64, rows*5)
	mask := make([]int64, rows*5)
	for i := range ids {
		ids[i] = int64(i*7) % 50
		if i%5 < 5-i/5%3 {
			mask[i] = 1
		}
	}
	blobs := sched.NewMemBlobs()
	ctx := context.Background()
	blobs.Put(ctx, "te.onnx", onnx.Encode(m))
	blobs.Put(ctx, "ids.npy", npyInt64([]int{rows, 5}, ids))
	blobs.Put(ctx, "mask.npy", npyInt64([]int{rows, 5}, mask))
	blobs.Put(ctx, "short.npy", npyInt64([]int{rows - 1, 5}, mask[:(rows-1)*5]))
	x := &sched.KernelExecutor{Blobs: blobs, Threads: 1}
	spec := sched.JobSpec{Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy", "mask": "mask.npy"}, Batch: 3}
	if err := spec.ValidateRequest(); err != nil {
		t.Fatal(err)
	}
	n, err := x.Probe(ctx, spec)
	if err != nil || n != rows {
		t.Fatalf("probe: %d queries, %v; want %d", n, err, rows)
	}
	preds, lat, err := x.Run(ctx, spec, 0, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(preds) != rows || len(lat) != 3 {
		t.Fatalf("%d predictions and %d batch latencies; want %d and 3", len(preds), len(lat), rows)
	}
	km, err := kernel.LoadModel(m, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer km.Close()
	out, err := km.Run([]*onnx.Tensor{
		{DType: onnx.Int64, Dims: []int64{rows, 5}, I64: ids},
		{DType: onnx.Int64, Dims: []int64{rows, 5}, I64: mask},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := sched.Argmax(out[0].F32, rows, 4)
	for i := range want {
		if preds[i].Top1 != want[i].Top1 {
			t.Errorf("query %d: class %d, the kernel alone gives %d", i, preds[i].Top1, want[i].Top1)
		}
	}
	for name, bad := range map[string]sched.JobSpec{
		"unbound input":    {Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy"}, Batch: 3},
		"wrong name":       {Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy", "attn": "mask.npy"}, Batch: 3},
		"rows differ":      {Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy", "mask": "short.npy"}, Batch: 3},
		"missing array":    {Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy", "mask": "nope.npy"}, Batch: 3},
		"not a .npy array": {Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy", "mask": "te.onnx"}, Batch: 3},
	} {
		if _, err := x.Probe(ctx, bad); err == nil {
			t.Errorf("%s: probe accepted %+v", name, bad.Inputs)
		}
	}
	both := spec
	both.Data = "d.gz"
	if both.ValidateRequest() == nil {
		t.Error("a job with both --data and --input validated")
	}
}

// TestJobSpecInputsJournalCompatible: a spec without named inputs encodes as before (no
// "inputs" key), and a journal entry written before the field decodes with none.
func TestJobSpecInputsJournalCompatible(t *testing.T) {
	b, _ := json.Marshal(sched.JobSpec{Name: "j", Model: "m", Data: "d", Batch: 1})
	if strings.Contains(string(b), "inputs") {
		t.Fatalf("spec without inputs encodes %s", b)
	}
	var s sched.JobSpec
	if err := json.Unmarshal([]byte(`{"name":"j","model":"m","data":"d","format":"","batch":1,"pre":{},"queries":3,"task_size":1,"id":4}`), &s); err != nil || s.Inputs != nil {
		t.Fatalf("old entry: %v, inputs %v", err, s.Inputs)
	}
}

// countingBlobs counts the reads of each name.
type countingBlobs struct {
	*sched.MemBlobs
	mu    sync.Mutex
	reads map[string]int
}

func (b *countingBlobs) Get(ctx context.Context, name string) ([]byte, error) {
	b.mu.Lock()
	b.reads[name]++
	b.mu.Unlock()
	return b.MemBlobs.Get(ctx, name)
}

func (b *countingBlobs) count(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reads[name]
}

// The executor's caches of models and of input arrays are LRU caches of Keep entries: a
// use moves an entry to the front, the least recently used leaves first, and what left is
// read from the store again when asked for.
func TestKernelExecutorCachesAreLRU(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	blobs := &countingBlobs{MemBlobs: sched.NewMemBlobs(), reads: map[string]int{}}
	ctx := context.Background()
	for i, name := range []string{"a.onnx", "b.onnx", "c.onnx"} {
		m, err := zoo.BuildText(zoo.TextOptions{Vocab: 50, Length: 5, Layers: 1, Heads: 2, Width: 8, Classes: 4, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		blobs.Put(ctx, name, onnx.Encode(m))
	}
	x := &sched.KernelExecutor{Blobs: blobs, Threads: 1, Keep: 2}
	for _, name := range []string{"a.onnx", "b.onnx", "a.onnx", "c.onnx", "a.onnx", "b.onnx"} {
		if err := x.ProbeModel(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// a: read once (used again before each eviction); b: evicted by c (a was used after
	// it), read again; c: once.
	for name, want := range map[string]int{"a.onnx": 1, "b.onnx": 2, "c.onnx": 1} {
		if got := blobs.count(name); got != want {
			t.Errorf("%s read %d times, want %d", name, got, want)
		}
	}
	// A failed load is not kept: the file may appear later.
	if err := x.ProbeModel(ctx, "late.onnx"); err == nil {
		t.Fatal("missing model loaded")
	}
	m, _ := blobs.MemBlobs.Get(ctx, "c.onnx")
	blobs.Put(ctx, "late.onnx", m)
	if err := x.ProbeModel(ctx, "late.onnx"); err != nil {
		t.Fatalf("model stored after a failed load: %v", err)
	}
	// A job with more input arrays than the cache keeps still runs (each array is used as
	// it is loaded, not looked up in the cache again).
	y := &sched.KernelExecutor{Blobs: blobs, Threads: 1, Keep: 1}
	ids, ones := make([]int64, 2*5), make([]int64, 2*5)
	for i := range ones {
		ids[i], ones[i] = int64(i), 1
	}
	blobs.Put(ctx, "ids.npy", npyInt64([]int{2, 5}, ids))
	blobs.Put(ctx, "mask.npy", npyInt64([]int{2, 5}, ones))
	spec := sched.JobSpec{Name: "j", Model: "a.onnx", Inputs: map[string]string{"ids": "ids.npy", "mask": "mask.npy"}, Batch: 2}
	if _, _, err := y.Run(ctx, spec, 0, 2); err != nil {
		t.Fatalf("two arrays through a cache of one: %v", err)
	}
}

// TestKernelExecutorPrepare: Ready is false until the job's model is loaded, the plan for
// its batch size built and its inputs read; Prepare gets it there (Preparer), and a task
// then gives the same predictions as one run on a fresh executor.
func TestKernelExecutorPrepare(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	m, err := zoo.BuildText(zoo.TextOptions{Vocab: 50, Length: 5, Layers: 1, Heads: 2, Width: 16, Classes: 4, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	const rows = 4
	ids := make([]int64, rows*5)
	mask := make([]int64, rows*5)
	for i := range ids {
		ids[i], mask[i] = int64(i*7)%50, 1
	}
	blobs := sched.NewMemBlobs()
	ctx := context.Background()
	blobs.Put(ctx, "te.onnx", onnx.Encode(m))
	blobs.Put(ctx, "ids.npy", npyInt64([]int{rows, 5}, ids))
	blobs.Put(ctx, "mask.npy", npyInt64([]int{rows, 5}, mask))
	spec := sched.JobSpec{Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy", "mask": "mask.npy"}, Batch: 2}
	var x sched.Preparer = &sched.KernelExecutor{Blobs: blobs, Threads: 1}
	if x.Ready(spec) || len(x.Loaded()) != 0 {
		t.Fatalf("ready before anything was loaded (loaded %q)", x.Loaded())
	}
	if err := x.Prepare(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if !x.Ready(spec) || !slices.Equal(x.Loaded(), []string{sched.ModelKey(spec)}) {
		t.Fatalf("not ready after Prepare (loaded %q)", x.Loaded())
	}
	other := spec
	other.Batch = 4
	if x.Ready(other) {
		t.Fatal("ready at a batch size whose plan was never built")
	}
	got, _, err := x.(sched.Executor).Run(ctx, spec, 0, rows)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := (&sched.KernelExecutor{Blobs: blobs, Threads: 1}).Run(ctx, spec, 0, rows)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("predictions after Prepare %v, fresh %v", got, want)
	}
	missing := spec
	missing.Model = "nope.onnx"
	if err := x.Prepare(ctx, missing); err == nil || x.Ready(missing) {
		t.Fatalf("a missing model: Prepare %v, Ready %v", err, x.Ready(missing))
	}
}
