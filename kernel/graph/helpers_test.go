package graph

import (
	"math/rand"

	"idunno/kernel/onnx"
)

// builder assembles small graphs by hand for tests.
type builder struct {
	m      *onnx.Model
	shapes map[string][]int64
	consts map[string]*onnx.Tensor
}

func newBuilder(opset int64) *builder {
	return &builder{
		m:      &onnx.Model{Opset: opset, Graph: &onnx.Graph{Initializers: map[string]*onnx.Tensor{}}},
		shapes: map[string][]int64{},
		consts: map[string]*onnx.Tensor{},
	}
}

// input declares a float run-time input with exact dims.
func (b *builder) input(name string, dims ...int64) *builder {
	b.m.Graph.Inputs = append(b.m.Graph.Inputs, onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: dims, HasShape: true})
	b.shapes[name] = dims
	return b
}

// constInput declares an int64 graph input whose value is given to Compile.
func (b *builder) constInput(name string, vals ...int64) *builder {
	b.m.Graph.Inputs = append(b.m.Graph.Inputs, onnx.ValueInfo{Name: name, DType: onnx.Int64, Dims: []int64{int64(len(vals))}, HasShape: true})
	b.consts[name] = ints(vals...)
	return b
}

func (b *builder) init(name string, t *onnx.Tensor) *builder {
	t.Name = name
	b.m.Graph.Initializers[name] = t
	return b
}

func (b *builder) node(op string, ins, outs []string, attrs ...*onnx.Attribute) *builder {
	n := &onnx.Node{Name: op + "_" + outs[0], OpType: op, Inputs: ins, Outputs: outs, Attrs: map[string]*onnx.Attribute{}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	b.m.Graph.Nodes = append(b.m.Graph.Nodes, n)
	return b
}

func (b *builder) output(names ...string) *builder {
	for _, n := range names {
		b.m.Graph.Outputs = append(b.m.Graph.Outputs, onnx.ValueInfo{Name: n})
	}
	return b
}

func (b *builder) compile() (*onnx.Graph, error) { return Compile(b.m, b.shapes, b.consts) }

func ints(v ...int64) *onnx.Tensor {
	return &onnx.Tensor{DType: onnx.Int64, Dims: []int64{int64(len(v))}, I64: v}
}

func scalarF(v float32) *onnx.Tensor {
	return &onnx.Tensor{DType: onnx.Float, Dims: []int64{}, F32: []float32{v}}
}

func randTensor(r *rand.Rand, dims ...int64) *onnx.Tensor {
	n, _ := numel(dims)
	t := &onnx.Tensor{DType: onnx.Float, Dims: dims, F32: make([]float32, n)}
	for i := range t.F32 {
		t.F32[i] = float32(r.NormFloat64())
	}
	return t
}

func aInt(name string, v int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: v}
}

func aInts(name string, v ...int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
}

func aFloat(name string, v float32) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrFloat, F: v}
}

func aString(name, v string) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrString, S: v}
}

func aTensor(name string, t *onnx.Tensor) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrTensor, T: t}
}

func ss(v ...string) []string { return v }
