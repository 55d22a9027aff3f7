package kernel

import (
	"testing"

	"idunno/kernel/onnx"
)

// BenchmarkNoopCall is the bare cost of one purego call into the library.
func BenchmarkNoopCall(b *testing.B) {
	for b.Loop() {
		callNoop()
	}
}

// BenchmarkDispatchLeNet5 measures Model.Run for LeNet-5 at batch 1 and splits it into the
// time inside the C kernel (entry to return of idk_plan_run) and the Go→C dispatch
// overhead around it (input checks, plan lookup, output allocation, the call itself).
func BenchmarkDispatchLeNet5(b *testing.B) {
	m := lenetB(b)
	in := []*onnx.Tensor{images(1, 5)}
	if _, err := m.Run(in); err != nil {
		b.Fatal(err)
	}
	var inC int64
	for b.Loop() {
		if _, err := m.Run(in); err != nil {
			b.Fatal(err)
		}
		inC += m.LastRunKernelNanos(1)
	}
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(float64(inC)/float64(b.N)/1e3, "kernel-µs/op")
	b.ReportMetric((perOp-float64(inC)/float64(b.N))/1e3, "overhead-µs/op")
}
