package sched_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/sched"
)

// TestJobPrecision: a job's precision reaches the worker's kernel. A bad name fails
// validation, int8 on a float model fails the probe with kernel.ErrNotQuantized, and a bf16
// job (where the CPU has bf16) gives the predictions of the kernel run directly in bf16,
// the same bytes on every run, and shares the worker with the model's fp32 instance.
func TestJobPrecision(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	m, err := zoo.BuildText(zoo.TextOptions{Vocab: 50, Length: 5, Layers: 1, Heads: 2, Width: 16, Classes: 4, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	const rows = 6
	ids := make([]int64, rows*5)
	mask := make([]int64, rows*5)
	for i := range ids {
		ids[i] = int64(i*11) % 50
		mask[i] = 1
	}
	blobs := sched.NewMemBlobs()
	ctx := context.Background()
	blobs.Put(ctx, "te.onnx", onnx.Encode(m))
	blobs.Put(ctx, "ids.npy", npyInt64([]int{rows, 5}, ids))
	blobs.Put(ctx, "mask.npy", npyInt64([]int{rows, 5}, mask))
	x := &sched.KernelExecutor{Blobs: blobs, Threads: 1}
	spec := sched.JobSpec{Name: "j", Model: "te.onnx", Inputs: map[string]string{"ids": "ids.npy", "mask": "mask.npy"}, Batch: 2}

	bad := spec
	bad.Precision = "fp16"
	if err := bad.ValidateRequest(); err == nil || !strings.Contains(err.Error(), "fp16") {
		t.Errorf("precision fp16 validated: %v", err)
	}
	q := spec
	q.Precision = "int8"
	if err := q.ValidateRequest(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Probe(ctx, q); !errors.Is(err, kernel.ErrNotQuantized) {
		t.Errorf("int8 job on a float model: %v, want kernel.ErrNotQuantized", err)
	}

	fp32, _, err := x.Run(ctx, spec, 0, rows)
	if err != nil {
		t.Fatal(err)
	}
	if kernel.BF16Support() == "" {
		t.Skip("no bf16 on this CPU")
	}
	b := spec
	b.Precision = "bf16"
	if _, err := x.Probe(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, _, err := x.Run(ctx, b, 0, rows)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := x.Run(ctx, b, 0, rows)
	if err != nil || !slices.Equal(got, again) {
		t.Fatalf("bf16 job: two runs differ (%v)", err)
	}
	km, err := kernel.LoadModel(m, kernel.Options{Threads: 1, Precision: kernel.BF16})
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
	same := 0
	for i := range want {
		if got[i].Top1 != want[i].Top1 {
			t.Errorf("query %d: bf16 job says %d, the bf16 kernel alone %d", i, got[i].Top1, want[i].Top1)
		}
		if got[i].Top1 == fp32[i].Top1 {
			same++
		}
	}
	t.Logf("bf16 job agrees with the fp32 job on %d of %d queries", same, rows)
	after, _, err := x.Run(ctx, spec, 0, rows)
	if err != nil || !slices.Equal(after, fp32) {
		t.Fatalf("the fp32 job changed after a bf16 one ran (%v)", err)
	}
	// journals written before precisions decode as fp32, and fp32 specs encode as before
	js, _ := json.Marshal(sched.JobSpec{Name: "j", Model: "m", Data: "d", Batch: 1})
	if strings.Contains(string(js), "precision") {
		t.Errorf("fp32 spec encodes %s", js)
	}
}
