package kernel

import (
	"os"
	"path/filepath"
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
	// integer arithmetic that wraps (uint8), and the L1/L2/sum-square/product reductions
	for _, c := range []string{"node/test_mul_uint8", "node/test_sub_uint8", "node/test_reduce_l2_keep_dims_random",
		"node/test_reduce_sum_square_do_not_keepdims_random", "node/test_reduce_prod_negative_axes_keepdims_random",
		"node/test_reduce_l1_default_axes_keepdims_random"} {
		if b, err := os.ReadFile(filepath.Join(testDataRoot, c, "model.onnx")); err == nil {
			f.Add(b)
		}
	}
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
			if n > 1<<20 {
				return
			}
			switch _, ok := kernelDType(vi.DType); {
			case vi.DType == onnx.Float:
				ins = append(ins, &onnx.Tensor{DType: onnx.Float, Dims: d, F32: make([]float32, n)})
			case ok: // integers and booleans: zeros (a valid token id, a padding mask)
				ins = append(ins, &onnx.Tensor{DType: vi.DType, Dims: d, I64: make([]int64, n)})
			default:
				return
			}
		}
		md.Run(ins)
	})
}
