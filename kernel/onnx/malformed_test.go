package onnx

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallModel is a two-node graph built in code, so these tests do not depend on files.
func smallModel() *Model {
	w := &Tensor{Name: "w", DType: Float, Dims: []int64{2, 3}, F32: []float32{1, 2, 3, 4, 5, 6}}
	return &Model{
		IRVersion: 8, ProducerName: "test", Opset: 13,
		Graph: &Graph{
			Name: "g",
			Nodes: []*Node{
				{Name: "mm", OpType: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"y"}, Attrs: map[string]*Attribute{}},
				{Name: "act", OpType: "LeakyRelu", Inputs: []string{"y"}, Outputs: []string{"z"},
					Attrs: map[string]*Attribute{"alpha": {Name: "alpha", Type: AttrFloat, F: 0.1}}},
			},
			Inputs:       []ValueInfo{{Name: "x", DType: Float, Dims: []int64{-1, 2}, DimParams: []string{"N", ""}, HasShape: true}},
			Outputs:      []ValueInfo{{Name: "z", DType: Float, Dims: []int64{-1, 3}, DimParams: []string{"N", ""}, HasShape: true}},
			Initializers: map[string]*Tensor{"w": w},
		},
	}
}

func TestRoundTripBuiltModel(t *testing.T) {
	m := smallModel()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	got, err := Decode(Encode(m))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(Encode(got), Encode(m)) || got.Opset != 13 || got.Graph.Inputs[0].DimParams[0] != "N" ||
		got.Graph.Nodes[1].Attrs["alpha"].F != 0.1 || got.Graph.Initializers["w"].F32[5] != 6 {
		t.Fatalf("round trip changed the model: %+v", got.Graph)
	}
}

func TestTensorTypes(t *testing.T) {
	cases := []*Tensor{
		{Name: "f", DType: Float, Dims: []int64{2}, F32: []float32{1.5, -2}},
		{Name: "d", DType: Double, Dims: []int64{1}, F64: []float64{3.25}},
		{Name: "i64", DType: Int64, Dims: []int64{3}, I64: []int64{-1, 0, 1 << 40}},
		{Name: "i32", DType: Int32, Dims: []int64{2}, I64: []int64{-7, 1 << 30}},
		{Name: "i8", DType: Int8, Dims: []int64{2}, I64: []int64{-128, 127}},
		{Name: "u8", DType: Uint8, Dims: []int64{2}, I64: []int64{0, 255}},
		{Name: "b", DType: Bool, Dims: []int64{2}, I64: []int64{1, 0}},
		{Name: "h", DType: Float16, Dims: []int64{1}, Raw: []byte{0x00, 0x3c}},
		{Name: "s", DType: String, Dims: []int64{2}, Strings: []string{"a", "bc"}},
		{Name: "scalar", DType: Float, F32: []float32{7}},
		{Name: "empty", DType: Float, Dims: []int64{0, 3}, F32: []float32{}},
	}
	for _, want := range cases {
		got, err := DecodeTensor(EncodeTensor(want))
		if err != nil {
			t.Errorf("%s: %v", want.Name, err)
			continue
		}
		if got.Name != want.Name || got.DType != want.DType || got.Len() != want.Len() ||
			!bytes.Equal(EncodeTensor(got), EncodeTensor(want)) {
			t.Errorf("%s: got %+v, want %+v", want.Name, got, want)
		}
	}
}

// protoTensor builds a TensorProto by hand: dims, data type, then extra raw fields.
func protoTensor(dims []int64, dt DataType, extra ...[]byte) []byte {
	b := EncodeTensor(&Tensor{DType: dt, Dims: dims, Raw: []byte{}})
	// Drop the empty raw_data field EncodeTensor wrote (tag 0x4a, length 0).
	b = bytes.TrimSuffix(b, []byte{0x4a, 0x00})
	for _, e := range extra {
		b = append(b, e...)
	}
	return b
}

func TestTypedDataFields(t *testing.T) {
	// float_data packed: field 4, 2 floats (1.0, 2.0).
	floats := []byte{0x22, 8, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}
	got, err := DecodeTensor(protoTensor([]int64{2}, Float, floats))
	if err != nil || got.F32[0] != 1 || got.F32[1] != 2 {
		t.Fatalf("float_data: %v %+v", err, got)
	}
	// int32_data unpacked for int8: field 5 varints -1 (10-byte encoding) and 5.
	neg := []byte{0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x28, 0x05}
	got, err = DecodeTensor(protoTensor([]int64{2}, Int8, neg))
	if err != nil || got.I64[0] != -1 || got.I64[1] != 5 {
		t.Fatalf("int32_data: %v %+v", err, got)
	}
	// int64_data packed: field 7.
	got, err = DecodeTensor(protoTensor([]int64{3}, Int64, []byte{0x3a, 3, 1, 2, 3}))
	if err != nil || got.I64[2] != 3 {
		t.Fatalf("int64_data: %v %+v", err, got)
	}
	// double_data packed: field 10, one double 1.0.
	got, err = DecodeTensor(protoTensor([]int64{1}, Double, []byte{0x52, 8, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}))
	if err != nil || got.F64[0] != 1 {
		t.Fatalf("double_data: %v %+v", err, got)
	}
}

func TestTensorErrors(t *testing.T) {
	cases := map[string]struct {
		b    []byte
		want string
	}{
		"too few floats":    {protoTensor([]int64{3}, Float, []byte{0x22, 4, 0, 0, 0x80, 0x3f}), "needs 3 elements"},
		"raw size mismatch": {protoTensor([]int64{2, 2}, Float, []byte{0x4a, 4, 0, 0, 0, 0}), "needs 16 bytes"},
		"absurd dims":       {protoTensor([]int64{1 << 31, 1 << 31, 1 << 31}, Float), "more than 4294967296 elements"},
		"negative dim":      {protoTensor([]int64{-2}, Float), "negative dimension"},
		"external data":     {protoTensor([]int64{1}, Float, []byte{0x70, 1}), "external data"},
		"external entries":  {protoTensor([]int64{1}, Float, []byte{0x6a, 0}), "external data"},
		"raw and typed":     {protoTensor([]int64{1}, Float, []byte{0x4a, 4, 0, 0, 0, 0, 0x22, 4, 0, 0, 0, 0}), "both"},
		"undefined type":    {protoTensor([]int64{1}, Undefined, []byte{0x4a, 4, 0, 0, 0, 0}), "not supported"},
		"bad packed floats": {protoTensor([]int64{1}, Float, []byte{0x22, 3, 0, 0, 0}), "multiple of 4"},
		"truncated":         {[]byte{0x0a, 5, 1}, "onnx: "},
		"wrong wire type":   {[]byte{0x15, 0, 0, 0, 0}, "want varint"},
	}
	for name, c := range cases {
		_, err := DecodeTensor(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "onnx: ") {
			t.Errorf("%s: got error %v, want one containing %q", name, err, c.want)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	cases := map[string]struct {
		edit func(m *Model)
		want string
	}{
		"opset too old":  {func(m *Model) { m.Opset = 6 }, "opset 6"},
		"opset too new":  {func(m *Model) { m.Opset = 22 }, "opset 22"},
		"unknown domain": {func(m *Model) { m.Graph.Nodes[1].Domain = "com.example" }, `node 1 "act" (LeakyRelu): unknown operator domain`},
		"dangling input": {func(m *Model) { m.Graph.Nodes[0].Inputs[1] = "nope" }, `node 0 "mm" (MatMul): input "nope" is not defined`},
		"out of order": {func(m *Model) {
			g := m.Graph
			g.Nodes[0], g.Nodes[1] = g.Nodes[1], g.Nodes[0]
		}, `node 0 "act" (LeakyRelu): input "y" is used before node 1 defines it`},
		"cycle":                     {func(m *Model) { m.Graph.Nodes[0].Inputs[0] = "z" }, "topological order, or the graph has a cycle"},
		"duplicate output":          {func(m *Model) { m.Graph.Nodes[1].Outputs[0] = "y" }, `output "y" is already defined`},
		"output shadows input":      {func(m *Model) { m.Graph.Nodes[0].Outputs[0] = "x" }, `output "x" is already defined`},
		"graph output not produced": {func(m *Model) { m.Graph.Outputs[0].Name = "q" }, `graph output "q" is not produced`},
		"no outputs":                {func(m *Model) { m.Graph.Outputs = nil }, "no outputs"},
		"initializer short":         {func(m *Model) { m.Graph.Initializers["w"].F32 = []float32{1} }, `initializer "w": shape [2 3] needs 6 elements`},
		"initializer vs input type": {func(m *Model) {
			m.Graph.Inputs = append(m.Graph.Inputs, ValueInfo{Name: "w", DType: Int64})
		}, "graph input of that name is int64"},
		"absurd input dim": {func(m *Model) { m.Graph.Inputs[0].Dims[1] = 1 << 40 }, "absurd dimension"},
		"empty op":         {func(m *Model) { m.Graph.Nodes[0].OpType = "" }, "no op_type"},
		"subgraph dangling": {func(m *Model) {
			body := &Graph{Nodes: []*Node{{OpType: "Identity", Inputs: []string{"missing"}, Outputs: []string{"o"}}},
				Outputs: []ValueInfo{{Name: "o"}}}
			m.Graph.Nodes[1].Attrs["then_branch"] = &Attribute{Name: "then_branch", Type: AttrGraph, G: body}
		}, `attribute "then_branch": node 0 (Identity): input "missing"`},
	}
	for name, c := range cases {
		m := smallModel()
		c.edit(m)
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "onnx: ") {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
	// Subgraphs may use outer-scope values defined before their node.
	m := smallModel()
	body := &Graph{Nodes: []*Node{{OpType: "Identity", Inputs: []string{"y"}, Outputs: []string{"o"}}},
		Outputs: []ValueInfo{{Name: "o"}}}
	m.Graph.Nodes[1].Attrs["body"] = &Attribute{Name: "body", Type: AttrGraph, G: body}
	if err := m.Validate(); err != nil {
		t.Errorf("outer-scope use: %v", err)
	}
}

func TestModelDecodeErrors(t *testing.T) {
	if _, err := Decode(nil); err == nil || !strings.Contains(err.Error(), "no graph") {
		t.Errorf("empty model: %v", err)
	}
	// Graphs nested past the limit: a node whose attribute holds a graph, repeatedly.
	g := &Graph{Outputs: []ValueInfo{{Name: "o"}}}
	for i := 0; i < MaxGraphDepth+2; i++ {
		g = &Graph{Nodes: []*Node{{OpType: "If", Outputs: []string{"o"},
			Attrs: map[string]*Attribute{"b": {Name: "b", Type: AttrGraph, G: g}}}}, Outputs: []ValueInfo{{Name: "o"}}}
	}
	if _, err := Decode(Encode(&Model{Opset: 13, Graph: g})); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("deep nesting: %v", err)
	}
}

// TestTruncatedAndCorruptFiles cuts and corrupts real models: every cut inside the data
// is an error, and no corruption panics.
func TestTruncatedAndCorruptFiles(t *testing.T) {
	paths := []string{
		filepath.Join(testdataRoot, "node", "test_conv_with_strides_padding", "model.onnx"),
		filepath.Join(testdataRoot, "pytorch-converted", "test_ConvTranspose2d", "model.onnx"),
		filepath.Join(testdataRoot, "simple", "test_single_relu_model", "model.onnx"),
	}
	rng := rand.New(rand.NewSource(1))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(b[:len(b)-1]); err == nil {
			t.Errorf("%s cut by one byte decoded without error", p)
		}
		for cut := 0; cut < len(b); cut += 1 + len(b)/200 {
			if m, err := Decode(b[:cut]); err == nil {
				_ = m.Validate() // a prefix may be a valid message; it must not panic either
			}
		}
		for i := 0; i < 2000; i++ {
			c := append([]byte(nil), b...)
			for k := 0; k < 1+rng.Intn(4); k++ {
				c[rng.Intn(len(c))] = byte(rng.Intn(256))
			}
			if m, err := Decode(c); err == nil {
				_ = m.Validate()
				_ = Encode(m)
			}
		}
	}
}
