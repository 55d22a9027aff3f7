package kernel

import (
	"math"
	"testing"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// TestSlicedLinear: a Linear whose output is read only by Slices along its last axis
// (nn.MultiheadAttention's fused in-projection) becomes one product per Slice
// (graph.SlicedLinearEnv). The outputs match a direct float64 evaluation and the kept
// Slices' path to 1e-5, and two runs give the same bytes.
func TestSlicedLinear(t *testing.T) {
	const B, L, D, H = 2, 5, 8, 6
	vi := func(name string, d ...int64) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: d, DimParams: make([]string, len(d)), HasShape: true}
	}
	ints := func(name string, v int64) *onnx.Tensor {
		return &onnx.Tensor{Name: name, DType: onnx.Int64, Dims: []int64{1}, I64: []int64{v}}
	}
	node := func(op string, ins []string, out string) *onnx.Node {
		return &onnx.Node{Name: out, OpType: op, Inputs: ins, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
	}
	w, b := sinTensor(1, D, 3*H), sinTensor(2, 3*H)
	w.Name, b.Name = "w", "b"
	x := sinTensor(3, B, L, D)
	model := func() *onnx.Model {
		// q = p[..., 0:6], k = p[..., 6:12], v = p[..., -6:] (a negative start, an end past
		// the dim); y = q + k, z = relu(v)
		return &onnx.Model{IRVersion: 9, Opset: 20, Opsets: map[string]int64{"": 20}, Graph: &onnx.Graph{
			Name: "sliced", Inputs: []onnx.ValueInfo{vi("x", B, L, D)},
			Nodes: []*onnx.Node{
				node("MatMul", []string{"x", "w"}, "m"),
				node("Add", []string{"m", "b"}, "p"),
				node("Slice", []string{"p", "s0", "e0", "ax"}, "q"),
				node("Slice", []string{"p", "s1", "e1", "ax", "one"}, "k"),
				node("Slice", []string{"p", "s2", "e2", "axn"}, "v"),
				node("Add", []string{"q", "k"}, "y"),
				node("Relu", []string{"v"}, "z"),
			},
			Outputs: []onnx.ValueInfo{{Name: "y", DType: onnx.Float}, {Name: "z", DType: onnx.Float}},
			Initializers: map[string]*onnx.Tensor{"w": w, "b": b, "s0": ints("s0", 0), "e0": ints("e0", H),
				"s1": ints("s1", H), "e1": ints("e1", 2*H), "s2": ints("s2", -H), "e2": ints("e2", 1<<40),
				"ax": ints("ax", 2), "axn": ints("axn", -1), "one": ints("one", 1)},
		}}
	}
	p := make([]float64, B*L*3*H)
	for r := 0; r < B*L; r++ {
		for j := 0; j < 3*H; j++ {
			s := float64(b.F32[j])
			for k := 0; k < D; k++ {
				s += float64(x.F32[r*D+k]) * float64(w.F32[k*3*H+j])
			}
			p[r*3*H+j] = s
		}
	}
	slices := func() int {
		g, err := graph.Compile(model(), map[string][]int64{"x": {B, L, D}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, nd := range g.Nodes {
			if nd.OpType == "Slice" {
				n++
			}
		}
		return n
	}
	run := func() []*onnx.Tensor {
		md, err := LoadModel(model(), Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer md.Close()
		out, err := md.Run([]*onnx.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if n := slices(); n != 0 {
		t.Fatalf("%d Slices left, want 0", n)
	}
	got, again := run(), run()
	t.Setenv(graph.SlicedLinearEnv, "0")
	if n := slices(); n != 3 {
		t.Fatalf("%s=0: %d Slices, want 3", graph.SlicedLinearEnv, n)
	}
	kept := run()
	for o, want := range [][]float64{make([]float64, B*L*H), make([]float64, B*L*H)} {
		for r := 0; r < B*L; r++ {
			for j := 0; j < H; j++ {
				if o == 0 {
					want[r*H+j] = float64(float32(p[r*3*H+j])) + float64(float32(p[r*3*H+H+j]))
				} else {
					want[r*H+j] = math.Max(0, p[r*3*H+2*H+j])
				}
			}
		}
		for i, v := range want {
			g := float64(got[o].F32[i])
			if math.Abs(g-v) > 1e-5*math.Max(1, math.Abs(v)) || math.Abs(g-float64(kept[o].F32[i])) > 1e-5*math.Max(1, math.Abs(v)) {
				t.Fatalf("output %d value %d: %v, want %v (kept Slices: %v)", o, i, g, v, kept[o].F32[i])
			}
			if math.Float32bits(got[o].F32[i]) != math.Float32bits(again[o].F32[i]) {
				t.Fatalf("output %d value %d: %v then %v", o, i, got[o].F32[i], again[o].F32[i])
			}
		}
	}
}
