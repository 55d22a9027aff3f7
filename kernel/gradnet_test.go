package kernel

// gradnet_test.go: a small builder of ONNX test models for the gradient checks. Shapes
// come from the float64 reference interpreter, so a test names only channels and windows.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"idunno/kernel/onnx"
)

type netBuilder struct {
	t     testing.TB
	rng   *rand.Rand
	g     *onnx.Graph
	in    []int64 // the input's dims, batch first
	next  int
	opset int64
}

func newNet(t testing.TB, seed uint64, in ...int64) *netBuilder {
	g := &onnx.Graph{Name: "gradcheck", Initializers: map[string]*onnx.Tensor{}}
	dims := append([]int64{-1}, in[1:]...)
	params := make([]string, len(dims))
	params[0] = "N"
	g.Inputs = []onnx.ValueInfo{{Name: "input", DType: onnx.Float, Dims: dims, DimParams: params, HasShape: true}}
	return &netBuilder{t: t, rng: rand.New(rand.NewPCG(seed, 99)), g: g, in: in, opset: 13}
}

func aInts(name string, v ...int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
}
func aInt(name string, v int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: v}
}
func aFloat(name string, v float32) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrFloat, F: v}
}

// node appends a node and returns its output's name.
func (b *netBuilder) node(op string, inputs []string, attrs ...*onnx.Attribute) string {
	b.next++
	out := fmt.Sprintf("%s_%d", op, b.next)
	n := &onnx.Node{Name: out, OpType: op, Inputs: inputs, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	b.g.Nodes = append(b.g.Nodes, n)
	return out
}

// param adds a float initializer of normal values with the given mean and deviation.
func (b *netBuilder) param(prefix string, mean, std float64, dims ...int64) string {
	b.next++
	name := fmt.Sprintf("%s_%d", prefix, b.next)
	v := make([]float32, volume(dims))
	for i := range v {
		v[i] = float32(mean + std*b.rng.NormFloat64())
	}
	b.g.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v}
	return name
}

func (b *netBuilder) scalar(v float32) string {
	b.next++
	name := fmt.Sprintf("const_%d", b.next)
	b.g.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Float, F32: []float32{v}}
	return name
}

func (b *netBuilder) int64s(v ...int64) string {
	b.next++
	name := fmt.Sprintf("shape_%d", b.next)
	b.g.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Int64, Dims: []int64{int64(len(v))}, I64: v}
	return name
}

// dims evaluates the graph built so far in the reference to find value x's dims.
func (b *netBuilder) dims(x string) []int64 {
	b.t.Helper()
	m := b.model(x, nil)
	r := newRefNet(m)
	for _, n := range m.Graph.Nodes {
		r.dropOp[n.Name] = 0 // any index: only shapes are wanted
	}
	vals, err := r.forward(make([]float64, volume(b.in)), b.in, 0)
	if err != nil {
		b.t.Fatalf("reference: %v", err)
	}
	return vals[x].dims
}

// conv adds a Conv with out channels, a kh x kw kernel (kh 0: a 1-D kernel of kw) and the
// given attributes (strides, pads, dilations, group); weights have deviation
// 1.2/sqrt(fan-in).
func (b *netBuilder) conv(x string, out int64, kh, kw int64, bias bool, attrs ...*onnx.Attribute) string {
	c := b.dims(x)[1]
	if kh == 0 {
		fan := float64(c * kw)
		for _, a := range attrs {
			if a.Name == "group" {
				fan /= float64(a.I)
			}
		}
		g := int64(1)
		for _, a := range attrs {
			if a.Name == "group" {
				g = a.I
			}
		}
		in := []string{x, b.param("w", 0, 1.2/math.Sqrt(fan), out, c/g, kw)}
		if bias {
			in = append(in, b.param("b", 0, 0.2, out))
		}
		return b.node("Conv", in, append(attrs, aInts("kernel_shape", kw))...)
	}
	group := int64(1)
	for _, a := range attrs {
		if a.Name == "group" {
			group = a.I
		}
	}
	fan := float64(c / group * kh * kw)
	in := []string{x, b.param("w", 0, 1.2/math.Sqrt(fan), out, c/group, kh, kw)}
	if bias {
		in = append(in, b.param("b", 0, 0.2, out))
	}
	return b.node("Conv", in, append(attrs, aInts("kernel_shape", kh, kw))...)
}

// gemm adds Gemm(x, W, bias) with W (out, in) when transB, else (in, out).
func (b *netBuilder) gemm(x string, out int64, transB, bias bool) string {
	d := b.dims(x)
	if len(d) != 2 {
		b.t.Fatalf("gemm on %v", d)
	}
	return b.gemmN(x, d[1], out, transB, bias)
}

// gemmN is gemm on a (batch, in) value whose shape the reference need not know.
func (b *netBuilder) gemmN(x string, in, out int64, transB, bias bool) string {
	wd := []int64{in, out}
	if transB {
		wd = []int64{out, in}
	}
	inputs := []string{x, b.param("w", 0, 1.5/math.Sqrt(float64(in)), wd...)}
	if bias {
		inputs = append(inputs, b.param("b", 0, 0.2, out))
	}
	tb := int64(0)
	if transB {
		tb = 1
	}
	return b.node("Gemm", inputs, aInt("transB", tb))
}

func (b *netBuilder) bn(x string, eps, momentum float32) string {
	c := b.dims(x)[1]
	return b.node("BatchNormalization", []string{x, b.param("gamma", 1, 0.2, c), b.param("beta", 0, 0.2, c),
		b.param("mean", 0, 0.1, c), b.param("var", 1, 0.1, c)}, aFloat("epsilon", eps), aFloat("momentum", momentum))
}

// head flattens x (if needed) and adds Gemm to classes logits.
func (b *netBuilder) head(x string, classes int64) string {
	if len(b.dims(x)) != 2 {
		x = b.node("Flatten", []string{x}, aInt("axis", 1))
	}
	return b.gemm(x, classes, true, true)
}

// model returns the model whose output is value out (a copy of the graph so far).
func (b *netBuilder) model(out string, outDims []int64) *onnx.Model {
	g := *b.g
	g.Nodes = append([]*onnx.Node(nil), b.g.Nodes...)
	g.Initializers = map[string]*onnx.Tensor{}
	for k, v := range b.g.Initializers {
		g.Initializers[k] = v
	}
	od := append([]int64(nil), outDims...)
	if len(od) > 0 {
		od[0] = -1
	}
	dp := make([]string, len(od))
	if len(dp) > 0 {
		dp[0] = "N"
	}
	g.Outputs = []onnx.ValueInfo{{Name: out, DType: onnx.Float, Dims: od, DimParams: dp, HasShape: outDims != nil}}
	return &onnx.Model{IRVersion: 8, ProducerName: "gradcheck", Opset: b.opset, Opsets: map[string]int64{"": b.opset}, Graph: &g}
}

// finish returns the model with output logits.
func (b *netBuilder) finish(logits string) *onnx.Model {
	return b.model(logits, b.dims(logits))
}
