package kernel

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"idunno/kernel/graph"
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
		t.Run(filepath.Base(c), func(t *testing.T) { runAsFloat32(t, c) })
	}
}

// TestFloat64CasesAsFloat32 runs the other float64-only backend cases of operators the
// kernel runs in float32 (CumSum in every mode, variadic Max/Min, fmod), converted to
// float32; the conformance test lists them as skipped for their type.
func TestFloat64CasesAsFloat32(t *testing.T) {
	var cases []string
	for _, g := range []string{"test_cumsum_*", "test_max_float64", "test_min_float64", "test_mod_mixed_sign_float64"} {
		m, _ := filepath.Glob(filepath.Join(testDataRoot, "node", g))
		cases = append(cases, m...)
	}
	if len(cases) < 10 {
		t.Fatalf("%d float64 cases under %s: install libonnx-testdata (make test-deps)", len(cases), testDataRoot)
	}
	for _, c := range cases {
		t.Run(filepath.Base(c), func(t *testing.T) { runAsFloat32(t, c) })
	}
}

// runAsFloat32 runs a float64 backend case with its float64 inputs and outputs declared and
// fed as float32, and compares with the expected output to 1e-5 + 1e-4 relative.
func runAsFloat32(t *testing.T, c string) {
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
}

// naiveEinsum evaluates a resolved equation by looping over every letter's values.
func naiveEinsum(e *graph.Einsum, ins []*onnx.Tensor) ([]int64, []float32) {
	size := map[byte]int64{}
	var letters []byte
	for i, ls := range e.In {
		for j, c := range ls {
			if _, ok := size[c]; !ok {
				letters = append(letters, c)
			}
			size[c] = ins[i].Dims[j]
		}
	}
	od := make([]int64, len(e.Out))
	for i, c := range e.Out {
		od[i] = size[c]
	}
	out := make([]float32, volume(od))
	val := map[byte]int64{}
	var rec func(k int)
	rec = func(k int) {
		if k == len(letters) {
			p := float32(1)
			for i, ls := range e.In {
				off := int64(0)
				for j, c := range ls {
					off = off*ins[i].Dims[j] + val[c]
				}
				p *= ins[i].F32[off]
			}
			off := int64(0)
			for j, c := range e.Out {
				off = off*od[j] + val[c]
			}
			out[off] += p
			return
		}
		for v := int64(0); v < size[letters[k]]; v++ {
			val[letters[k]] = v
			rec(k + 1)
		}
	}
	rec(0)
	return od, out
}

// TestEinsumForms runs equations exporters and users write (implicit outputs, ellipses,
// outer products, diagonals, sums, transposes) against a direct evaluation.
func TestEinsumForms(t *testing.T) {
	mk := func(seed int, d ...int64) *onnx.Tensor {
		tt := &onnx.Tensor{DType: onnx.Float, Dims: d, F32: make([]float32, volume(d))}
		for i := range tt.F32 {
			tt.F32[i] = float32((i*7+seed*13)%11)/5 - 1
		}
		return tt
	}
	cases := []struct {
		eq   string
		dims [][]int64
	}{
		{"ij,jk", [][]int64{{3, 4}, {4, 5}}},
		{"bhqd,bhkd->bhqk", [][]int64{{2, 3, 4, 5}, {2, 3, 6, 5}}},
		{"bhqk,bhkd->bhqd", [][]int64{{2, 3, 4, 6}, {2, 3, 6, 5}}},
		{"...ij,...jk->...ik", [][]int64{{2, 3, 4}, {2, 4, 5}}},
		{"i,j->ij", [][]int64{{3}, {4}}},
		{"ij->", [][]int64{{3, 4}}},
		{"ii->i", [][]int64{{4, 4}}},
		{"bij,bjk->ik", [][]int64{{2, 3, 4}, {2, 4, 5}}},
		{"ijk->kji", [][]int64{{2, 3, 4}}},
		{"ij,ij->i", [][]int64{{3, 4}, {3, 4}}},
		{"bn,anm,bm->ba", [][]int64{{2, 3}, {4, 3, 5}, {2, 5}}},
		// torch passes the equation through as written: MaxViT's, upper case and spaces
		{"B G H I D, B G H J D -> B G H I J", [][]int64{{1, 2, 2, 3, 4}, {1, 2, 2, 5, 4}}},
		{"Ab,bC", [][]int64{{3, 4}, {4, 2}}},
	}
	for _, c := range cases {
		t.Run(c.eq, func(t *testing.T) {
			var ins []*onnx.Tensor
			var ranks []int
			var gin []onnx.ValueInfo
			var names []string
			for i, d := range c.dims {
				name := fmt.Sprintf("x%d", i)
				ins = append(ins, mk(i, d...))
				ranks = append(ranks, len(d))
				names = append(names, name)
				gin = append(gin, onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: d, DimParams: make([]string, len(d)), HasShape: true})
			}
			e, err := graph.ParseEinsum(c.eq, ranks)
			if err != nil {
				t.Fatal(err)
			}
			od, want := naiveEinsum(e, ins)
			m := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: &onnx.Graph{
				Name: "einsum",
				Nodes: []*onnx.Node{{Name: "e", OpType: "Einsum", Inputs: names, Outputs: []string{"y"},
					Attrs: map[string]*onnx.Attribute{"equation": {Name: "equation", Type: onnx.AttrString, S: c.eq}}}},
				Inputs:       gin,
				Outputs:      []onnx.ValueInfo{{Name: "y", DType: onnx.Float, Dims: od, DimParams: make([]string, len(od)), HasShape: true}},
				Initializers: map[string]*onnx.Tensor{},
			}}
			md, err := LoadModel(m, Options{Threads: 1})
			if len(c.dims) > 2 {
				if err == nil || !strings.Contains(err.Error(), "one or two") {
					t.Fatalf("three operands: %v, want a load error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer md.Close()
			got, err := md.Run(ins)
			if err != nil {
				t.Fatal(err)
			}
			if !equalDims(got[0].Dims, od) {
				t.Fatalf("dims %v, want %v", got[0].Dims, od)
			}
			for i, w := range want {
				if math.Abs(float64(got[0].F32[i]-w)) > 1e-5+1e-5*math.Abs(float64(w)) {
					t.Fatalf("value %d: %v, want %v", i, got[0].F32[i], w)
				}
			}
		})
	}
}
