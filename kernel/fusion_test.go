package kernel

import (
	"math"
	"testing"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// logits loads m on two threads, runs it on inputs and returns its first output.
func logits(t *testing.T, m *onnx.Model, inputs ...*onnx.Tensor) []float32 {
	t.Helper()
	md, err := LoadModel(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	out, err := md.Run(inputs)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].F32
}

// runText runs a small zoo transformer_encoder (padding in every row) and returns its logits.
func runText(t *testing.T, m *onnx.Model) []float32 {
	t.Helper()
	const n, l = 3, 16
	ids := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{n, l}, I64: make([]int64, n*l)}
	mask := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{n, l}, I64: make([]int64, n*l)}
	for i := range ids.I64 {
		ids.I64[i] = int64(i*37) % 100
		if i%l < 5+3*(i/l) {
			mask.I64[i] = 1
		}
	}
	return logits(t, m, ids, mask)
}

// TestTransformerFusionMatchesUnfused: the fused attention (with a padding mask) and GELU
// give the unfused ops' logits to 1e-5 of the largest.
func TestTransformerFusionMatchesUnfused(t *testing.T) {
	m, err := zoo.BuildText(zoo.TextOptions{Vocab: 100, Length: 16, Layers: 2, Heads: 4, Width: 32, Classes: 5, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(graph.NoFusionEnv, "0")
	fused := runText(t, m)
	t.Setenv(graph.NoFusionEnv, "1")
	plain := runText(t, m)
	checkClose(t, "transformer, fused against unfused", plain, fused, 1e-5)
}

// TestFusedGeluTanh runs torch's export of GELU's tanh approximation (fused into one
// Gelu) against the formula.
func TestFusedGeluTanh(t *testing.T) {
	vi := func(name string) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: []int64{2, 8}, DimParams: make([]string, 2), HasShape: true}
	}
	sc := func(name string, v float32) *onnx.Tensor {
		return &onnx.Tensor{Name: name, DType: onnx.Float, Dims: []int64{}, F32: []float32{v}}
	}
	node := func(op string, out string, ins ...string) *onnx.Node {
		return &onnx.Node{Name: out, OpType: op, Inputs: ins, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
	}
	m := &onnx.Model{IRVersion: 8, Opset: 14, Opsets: map[string]int64{"": 14}, Graph: &onnx.Graph{
		Name: "gelu",
		Nodes: []*onnx.Node{
			node("Mul", "x2", "x", "x"), node("Mul", "x3", "x", "x2"), node("Mul", "k", "kappa", "x3"),
			node("Add", "s", "x", "k"), node("Mul", "in", "beta", "s"), node("Tanh", "t", "in"),
			node("Add", "a", "one", "t"), node("Mul", "mm", "x", "a"), node("Mul", "y", "half", "mm"),
		},
		Inputs:  []onnx.ValueInfo{vi("x")},
		Outputs: []onnx.ValueInfo{vi("y")},
		Initializers: map[string]*onnx.Tensor{"kappa": sc("kappa", 0.044715), "beta": sc("beta", 0.7978845608028654),
			"one": sc("one", 1), "half": sc("half", 0.5)},
	}}
	g, err := graph.Compile(m, map[string][]int64{"x": {2, 8}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Nodes) != 1 || g.Nodes[0].OpType != "Gelu" {
		t.Fatalf("compiled to %d nodes, first %s; want one Gelu", len(g.Nodes), g.Nodes[0].OpType)
	}
	md, err := LoadModel(m, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	x := &onnx.Tensor{DType: onnx.Float, Dims: []int64{2, 8}, F32: make([]float32, 16)}
	for i := range x.F32 {
		x.F32[i] = float32(i-8) * 0.6
	}
	out, err := md.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range x.F32 {
		f := float64(v)
		want := 0.5 * f * (1 + math.Tanh(0.7978845608028654*(f+0.044715*f*f*f)))
		if d := math.Abs(float64(out[0].F32[i]) - want); d > 1e-5+1e-5*math.Abs(want) {
			t.Fatalf("gelu(%v) = %v, want %v", v, out[0].F32[i], want)
		}
	}
}
