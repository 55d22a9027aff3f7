package kernel

import (
	"fmt"
	"math"
	"testing"

	"idunno/kernel/onnx"
)

// numpyMatMul is numpy's matmul: 1-D operands are promoted (and the added dim removed from
// the result), batch dims broadcast.
func numpyMatMul(a []float32, ad []int64, b []float32, bd []int64) ([]float32, []int64) {
	a2, b2 := append([]int64(nil), ad...), append([]int64(nil), bd...)
	if len(ad) == 1 {
		a2 = []int64{1, ad[0]}
	}
	if len(bd) == 1 {
		b2 = []int64{bd[0], 1}
	}
	r := max(len(a2), len(b2))
	pad := func(d []int64) []int64 {
		for len(d) < r {
			d = append([]int64{1}, d...)
		}
		return d
	}
	a2, b2 = pad(a2), pad(b2)
	m, k, n := a2[r-2], a2[r-1], b2[r-1]
	batch := make([]int64, r-2)
	for i := range batch {
		batch[i] = max(a2[i], b2[i])
	}
	nb := volume(batch)
	out := make([]float32, nb*m*n)
	idx := make([]int64, len(batch))
	for bi := int64(0); bi < nb; bi++ {
		rem := bi
		for i := len(batch) - 1; i >= 0; i-- {
			idx[i] = rem % batch[i]
			rem /= batch[i]
		}
		var ao, bo int64
		for i := range batch {
			ai, bj := idx[i], idx[i]
			if a2[i] == 1 {
				ai = 0
			}
			if b2[i] == 1 {
				bj = 0
			}
			ao = ao*a2[i] + ai
			bo = bo*b2[i] + bj
		}
		ao *= m * k
		bo *= k * n
		for i := int64(0); i < m; i++ {
			for j := int64(0); j < n; j++ {
				var s float64
				for p := int64(0); p < k; p++ {
					s += float64(a[ao+i*k+p]) * float64(b[bo+p*n+j])
				}
				out[bi*m*n+i*n+j] = float32(s)
			}
		}
	}
	dims := append(batch, m, n)
	if len(ad) == 1 {
		dims = append(dims[:len(dims)-2], n)
	}
	if len(bd) == 1 {
		dims = dims[:len(dims)-1]
	}
	return out, dims
}

// TestBatchedMatMulBroadcast runs MatMul on run-time operands of different ranks whose
// batch dims broadcast (numpy rules, 1-D operands included) against a direct evaluation.
func TestBatchedMatMulBroadcast(t *testing.T) {
	for _, c := range []struct{ a, b []int64 }{
		{[]int64{2, 1, 3, 4}, []int64{5, 4, 6}},
		{[]int64{3, 4}, []int64{2, 4, 5}},
		{[]int64{2, 3, 4}, []int64{4}},
		{[]int64{4}, []int64{2, 4, 5}},
		{[]int64{1, 2, 3, 4}, []int64{3, 1, 4, 2}},
		{[]int64{2, 2, 3, 5, 4}, []int64{2, 1, 1, 4, 3}},
	} {
		t.Run(fmt.Sprintf("%v_x_%v", c.a, c.b), func(t *testing.T) {
			vi := func(name string, d []int64) onnx.ValueInfo {
				return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: d, DimParams: make([]string, len(d)), HasShape: true}
			}
			m := &onnx.Model{IRVersion: 8, Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
				Name:         "mm",
				Nodes:        []*onnx.Node{{Name: "mm", OpType: "MatMul", Inputs: []string{"a", "b"}, Outputs: []string{"y"}, Attrs: map[string]*onnx.Attribute{}}},
				Inputs:       []onnx.ValueInfo{vi("a", c.a), vi("b", c.b)},
				Outputs:      []onnx.ValueInfo{{Name: "y", DType: onnx.Float}},
				Initializers: map[string]*onnx.Tensor{},
			}}
			fill := func(d []int64, seed float64) *onnx.Tensor {
				t := &onnx.Tensor{DType: onnx.Float, Dims: d, F32: make([]float32, volume(d))}
				for i := range t.F32 {
					t.F32[i] = float32(math.Sin(seed + float64(i)*0.37))
				}
				return t
			}
			a, b := fill(c.a, 1), fill(c.b, 2)
			want, wd := numpyMatMul(a.F32, c.a, b.F32, c.b)
			md, err := LoadModel(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer md.Close()
			out, err := md.Run([]*onnx.Tensor{a, b})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(out[0].Dims) != fmt.Sprint(wd) {
				t.Fatalf("dims %v, want %v", out[0].Dims, wd)
			}
			for i := range want {
				if d := math.Abs(float64(out[0].F32[i] - want[i])); d > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("value %d: %v, want %v", i, out[0].F32[i], want[i])
				}
			}
		})
	}
}
