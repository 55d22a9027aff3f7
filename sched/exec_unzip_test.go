package sched_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/sched"
	"idunno/sched/dataset"
)

// TestUnzippedDatasetCopy: the coordinator's probe of a job over a gzip dataset writes the
// decompressed copy (UnzippedName); a worker then reads the copy, not decompressing the
// file, and predicts what a worker that decompressed it does; a copy that does not open
// is passed over for the file.
func TestUnzippedDatasetCopy(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	gz, err := os.ReadFile(fmnistTest)
	if err != nil {
		t.Fatalf("Debian's dataset-fashion-mnist is needed: %v", err)
	}
	m, err := zoo.Build("lenet5", zoo.Options{InputShape: []int64{1, 28, 28}, Classes: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store := func() *countingBlobs {
		b := &countingBlobs{MemBlobs: sched.NewMemBlobs(), reads: map[string]int{}}
		b.Put(ctx, "lenet.onnx", onnx.Encode(m))
		b.Put(ctx, "images.gz", gz)
		return b
	}
	spec := sched.JobSpec{Name: "j", Model: "lenet.onnx", Data: "images.gz", Batch: 8, Pre: dataset.Preprocess{Scale: 1.0 / 255}}
	copyName := sched.UnzippedName(gz)

	// Without a copy: the worker decompresses the file.
	plain := store()
	want, _, err := (&sched.KernelExecutor{Blobs: plain, Threads: 1}).Run(ctx, spec, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	if plain.count(copyName) != 1 {
		t.Fatalf("the worker did not look for the copy")
	}
	if _, err := plain.MemBlobs.Get(ctx, copyName); err == nil {
		t.Fatal("a worker wrote the copy (only a probe does)")
	}

	// The probe writes the copy in the background; a worker reads it.
	blobs := store()
	n, err := (&sched.KernelExecutor{Blobs: blobs, Threads: 1}).Probe(ctx, spec)
	if err != nil || n != 10000 {
		t.Fatalf("probe: %d queries, %v", n, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, err := blobs.MemBlobs.Get(ctx, copyName); err != nil; _, err = blobs.MemBlobs.Get(ctx, copyName) {
		if time.Now().After(deadline) {
			t.Fatal("no decompressed copy 30 s after the probe")
		}
		time.Sleep(10 * time.Millisecond)
	}
	raw, _ := blobs.MemBlobs.Get(ctx, copyName)
	if unz, err := dataset.Gunzip(gz); err != nil || !slices.Equal(raw, unz) {
		t.Fatalf("the copy is not the file's content (%d bytes, %v)", len(raw), err)
	}
	before := blobs.count(copyName)
	got, _, err := (&sched.KernelExecutor{Blobs: blobs, Threads: 1}).Run(ctx, spec, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	if blobs.count(copyName) != before+1 || !slices.Equal(got, want) {
		t.Fatalf("worker with the copy: read it %d times, predictions equal: %v", blobs.count(copyName)-before, slices.Equal(got, want))
	}

	// A copy that does not open (here: a truncated one) is a lost shortcut, not an error.
	bad := store()
	bad.Put(ctx, copyName, raw[:len(raw)/2])
	got, _, err = (&sched.KernelExecutor{Blobs: bad, Threads: 1}).Run(ctx, spec, 0, 64)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("worker with a bad copy: %v, predictions equal: %v", err, slices.Equal(got, want))
	}
}
