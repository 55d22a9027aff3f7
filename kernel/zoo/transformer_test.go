package zoo_test

import (
	"bytes"
	"math"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

func tokens(vals ...int64) *onnx.Tensor {
	return &onnx.Tensor{DType: onnx.Int64, Dims: []int64{2, int64(len(vals) / 2)}, I64: vals}
}

// TestTransformerEncoderRuns loads the text model in the kernel and checks what the mask
// means: tokens under a 0 change nothing, a real token changes that row only.
func TestTransformerEncoderRuns(t *testing.T) {
	needKernel(t)
	opt := zoo.TextOptions{Vocab: 100, Length: 6, Layers: 2, Heads: 2, Width: 16, Classes: 3, Seed: 7}
	m, err := zoo.BuildText(opt)
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := zoo.BuildText(opt)
	b1 := onnx.Encode(m)
	b2 := onnx.Encode(m2)
	if !bytes.Equal(b1, b2) {
		t.Fatal("same options gave different bytes")
	}
	km, err := kernel.LoadModel(m, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer km.Close()
	mask := tokens(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0)
	run := func(ids *onnx.Tensor) []float32 {
		t.Helper()
		out, err := km.Run([]*onnx.Tensor{ids, mask})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 1 || len(out[0].Dims) != 2 || out[0].Dims[0] != 2 || out[0].Dims[1] != 3 {
			t.Fatalf("output %+v", out)
		}
		for _, v := range out[0].F32 {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("non-finite output %v", out[0].F32)
			}
		}
		return out[0].F32
	}
	base := run(tokens(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))
	padded := run(tokens(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 98, 99))
	for i := range base {
		if math.Abs(float64(base[i]-padded[i])) > 1e-5 {
			t.Fatalf("tokens under the mask changed the output: %v vs %v", base, padded)
		}
	}
	changed := run(tokens(1, 2, 3, 4, 5, 6, 7, 50, 9, 10, 11, 12))
	same0, same1 := true, true
	for i := 0; i < 3; i++ {
		same0 = same0 && base[i] == changed[i]
		same1 = same1 && base[3+i] == changed[3+i]
	}
	if !same0 || same1 {
		t.Fatalf("changing a real token of row 1: row 0 same %v (want true), row 1 same %v (want false)", same0, same1)
	}
	if _, err := km.Run([]*onnx.Tensor{tokens(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 100), mask}); err == nil {
		t.Fatal("token id 100 of a vocabulary of 100 ran; want an out-of-range error")
	}
}

func TestTransformerEncoderRejects(t *testing.T) {
	for _, o := range []zoo.TextOptions{{Heads: 3, Width: 16}, {Vocab: 1}, {Length: -1}, {Layers: 100}} {
		if _, err := zoo.BuildText(o); err == nil {
			t.Errorf("%+v built", o)
		}
	}
}
