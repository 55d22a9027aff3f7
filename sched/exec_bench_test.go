package sched_test

import (
	"context"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/sched"
	"idunno/sched/dataset"
)

// BenchmarkExecutorLeNet5 runs one 512-query task of LeNet-5 at batch 64 with 2 threads
// through the worker's executor (cached dataset, preprocessing, kernel, argmax), beside
// the kernel alone on the same batches: the difference is the executor's own cost.
func BenchmarkExecutorLeNet5(b *testing.B) {
	if err := kernel.Available(); err != nil || bin == "" {
		b.Skip("needs the kernel library and the idunno binary")
	}
	model, idx, blobs := lenetInBlobs(b, "d.gz")
	ctx := context.Background()
	x := &sched.KernelExecutor{Blobs: blobs, Threads: 2}
	spec := sched.JobSpec{Name: "j", Model: "m.onnx", Data: "d.gz", Batch: 64, Pre: dataset.Preprocess{Scale: 1.0 / 255}}
	if _, err := x.Probe(ctx, spec); err != nil {
		b.Fatal(err)
	}
	b.Run("executor", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, _, err := x.Run(ctx, spec, 0, 512); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "queries/s")
	})
	b.Run("preprocess", func(b *testing.B) {
		ds, _ := dataset.OpenBytes(idx)
		var buf []float32
		for i := 0; i < b.N; i++ {
			for q := 0; q < 512; q += 64 {
				in, err := dataset.BatchInto(buf, ds, q, q+64, spec.Pre, []int64{64, 1, 28, 28})
				if err != nil {
					b.Fatal(err)
				}
				buf = in.F32[:cap(in.F32)]
			}
		}
		b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "queries/s")
	})
	b.Run("kernel", func(b *testing.B) {
		m, err := kernel.Load(model, kernel.Options{Threads: 2})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		ds, _ := dataset.OpenBytes(idx)
		in, _ := dataset.Batch(ds, 0, 64, spec.Pre, []int64{64, 1, 28, 28})
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for q := 0; q < 512; q += 64 {
				if _, err := m.Run([]*onnx.Tensor{in}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "queries/s")
	})
}
