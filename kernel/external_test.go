package kernel

import (
	"testing"

	"idunno/kernel/onnx"
)

// TestLoadExternalData runs a model whose weights python3-onnx saved beside it
// (save_as_external_data=True) and its inline copy: same outputs, bit for bit.
func TestLoadExternalData(t *testing.T) {
	x := &onnx.Tensor{DType: onnx.Float, Dims: []int64{2, 4}, F32: []float32{1, -2, 3, 0.5, -1, 0.25, 2, -3}}
	var outs [][]float32
	for _, p := range []string{"onnx/testdata/external/model.onnx", "onnx/testdata/external/inline.onnx"} {
		md, err := Load(p, Options{Threads: 1})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		got, err := md.Run([]*onnx.Tensor{x})
		md.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		outs = append(outs, got[0].F32)
	}
	if len(outs[0]) != 6 {
		t.Fatalf("output %v", outs[0])
	}
	for i := range outs[0] {
		if outs[0][i] != outs[1][i] {
			t.Fatalf("external %v, inline %v", outs[0], outs[1])
		}
	}
}
