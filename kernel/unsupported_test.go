package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// TestUnsupportedOpFailsAtLoad: a model file with an operator the kernel lacks fails in
// Load (not at the first query), naming the node and the operator.
func TestUnsupportedOpFailsAtLoad(t *testing.T) {
	vi := func(name string, dims ...int64) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: dims, DimParams: make([]string, len(dims)), HasShape: true}
	}
	m := &onnx.Model{IRVersion: 8, Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
		Name: "g",
		Nodes: []*onnx.Node{
			{Name: "act", OpType: "Relu", Inputs: []string{"x"}, Outputs: []string{"r"}},
			{Name: "warp", OpType: "GridSample", Inputs: []string{"r", "grid"}, Outputs: []string{"y"}},
		},
		Inputs:       []onnx.ValueInfo{vi("x", 1, 1, 4, 4), vi("grid", 1, 4, 4, 2)},
		Outputs:      []onnx.ValueInfo{vi("y", 1, 1, 4, 4)},
		Initializers: map[string]*onnx.Tensor{},
	}}
	p := filepath.Join(t.TempDir(), "grid.onnx")
	if err := os.WriteFile(p, onnx.Encode(m), 0o644); err != nil {
		t.Fatal(err)
	}
	md, err := Load(p, Options{Threads: 1})
	if err == nil {
		md.Close()
		t.Fatal("a model with GridSample loaded")
	}
	if !strings.Contains(err.Error(), "node warp (GridSample)") || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("error %q does not name node warp and operator GridSample", err)
	}
}

// TestUnsupportedOpFailsAtLoadWithValueInputs: a model whose plans depend on an input's
// values (here Reshape's shape, a graph input), so that Load cannot compile it before the
// first run, still fails in Load on an operator the kernel lacks, naming the node.
func TestUnsupportedOpFailsAtLoadWithValueInputs(t *testing.T) {
	m := &onnx.Model{IRVersion: 8, Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
		Name: "g",
		Nodes: []*onnx.Node{
			{Name: "shape_it", OpType: "Reshape", Inputs: []string{"x", "shape"}, Outputs: []string{"r"}},
			{Name: "warp", OpType: "GridSample", Inputs: []string{"r", "grid"}, Outputs: []string{"y"}},
		},
		Inputs: []onnx.ValueInfo{
			{Name: "x", DType: onnx.Float, Dims: []int64{1, 16}, DimParams: make([]string, 2), HasShape: true},
			{Name: "shape", DType: onnx.Int64, Dims: []int64{4}, DimParams: make([]string, 1), HasShape: true},
			{Name: "grid", DType: onnx.Float, Dims: []int64{1, 4, 4, 2}, DimParams: make([]string, 4), HasShape: true},
		},
		Outputs:      []onnx.ValueInfo{{Name: "y", DType: onnx.Float}},
		Initializers: map[string]*onnx.Tensor{},
	}}
	md, err := LoadModel(m, Options{Threads: 1})
	if err == nil {
		md.Close()
		t.Fatal("a model with GridSample loaded")
	}
	if !strings.Contains(err.Error(), "node warp (GridSample)") || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("error %q does not name node warp and operator GridSample", err)
	}
	// Without the unsupported node it loads (and compiles at the first run).
	m.Graph.Nodes = m.Graph.Nodes[:1]
	m.Graph.Nodes[0].Outputs[0] = "y"
	m.Graph.Inputs = m.Graph.Inputs[:2]
	if md, err = LoadModel(m, Options{Threads: 1}); err != nil {
		t.Fatal(err)
	}
	md.Close()
}
