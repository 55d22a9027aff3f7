package kernel

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"idunno/kernel/onnx"
)

// toF32 converts a float64 tensor to float32 (the kernel's float type).
func toF32(t *onnx.Tensor) *onnx.Tensor {
	if t.DType != onnx.Double {
		return t
	}
	f := make([]float32, len(t.F64))
	for i, v := range t.F64 {
		f[i] = float32(v)
	}
	return &onnx.Tensor{Name: t.Name, DType: onnx.Float, Dims: t.Dims, F32: f}
}

// TestEinsumBackendCases runs the ONNX backend test data's Einsum cases, which are
// float64, converted to float32 (the conformance test lists them as skipped for their type).
func TestEinsumBackendCases(t *testing.T) {
	cases, _ := filepath.Glob(filepath.Join(testDataRoot, "node", "test_einsum_*"))
	if len(cases) == 0 {
		t.Fatalf("no Einsum cases under %s: install libonnx-testdata (make test-deps)", testDataRoot)
	}
	for _, c := range cases {
		t.Run(filepath.Base(c), func(t *testing.T) {
			m, err := onnx.ReadFile(filepath.Join(c, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			for _, vs := range [][]onnx.ValueInfo{m.Graph.Inputs, m.Graph.Outputs} {
				for i := range vs {
					if vs[i].DType == onnx.Double {
						vs[i].DType = onnx.Float
					}
				}
			}
			md, err := loadModel(m, Options{Threads: 1}, false)
			if err != nil {
				t.Fatal(err)
			}
			defer md.Close()
			set := filepath.Join(c, "test_data_set_0")
			var ins []*onnx.Tensor
			for i := 0; ; i++ {
				in, err := onnx.ReadTensorFile(filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
				if err != nil {
					break
				}
				ins = append(ins, toF32(in))
			}
			want, err := onnx.ReadTensorFile(filepath.Join(set, "output_0.pb"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := md.Run(ins)
			if err != nil {
				t.Fatal(err)
			}
			w := toF32(want)
			if len(got) != 1 || len(got[0].F32) != len(w.F32) || !equalDims(got[0].Dims, w.Dims) {
				t.Fatalf("got %v, want dims %v", got, w.Dims)
			}
			for i, v := range w.F32 {
				if math.Abs(float64(got[0].F32[i]-v)) > 1e-5+1e-4*math.Abs(float64(v)) {
					t.Fatalf("value %d: %v, want %v", i, got[0].F32[i], v)
				}
			}
		})
	}
}
