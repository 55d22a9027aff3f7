package kernel

import (
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// FuzzLoadAndRun feeds mutated model files through the whole path (decode, validate,
// compile, lower, C plan build, one run): whatever the bytes, the result is a model or an
// error, never a crash.
func FuzzLoadAndRun(f *testing.F) {
	src, err := zoo.Build("lenet5", zoo.Options{Seed: 3})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(onnx.Encode(src))
	// a small transformer: fused attention with a padding mask, fused GELU, int64 inputs
	text, err := zoo.BuildText(zoo.TextOptions{Vocab: 50, Length: 8, Layers: 1, Heads: 2, Width: 8, Classes: 3, Seed: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(onnx.Encode(text))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := onnx.Decode(b)
		if err != nil || m.Graph == nil {
			return
		}
		// keep each execution small: the point is malformed structure, not big tensors
		for _, vi := range m.Graph.Inputs {
			n := int64(1)
			for _, d := range vi.Dims {
				if d > 0 {
					n *= d
				}
				if n > 1<<16 {
					return
				}
			}
		}
		md, err := LoadModel(m, Options{Threads: 1})
		if err != nil {
			return
		}
		defer md.Close()
		var ins []*onnx.Tensor
		for _, vi := range md.Inputs() {
			d := append([]int64(nil), vi.Dims...)
			n := int64(1)
			for i := range d {
				if d[i] < 0 {
					d[i] = 1
				}
				n *= d[i]
			}
			if n > 1<<20 || vi.DType != onnx.Float {
				return
			}
			ins = append(ins, &onnx.Tensor{DType: onnx.Float, Dims: d, F32: make([]float32, n)})
		}
		md.Run(ins)
	})
}
