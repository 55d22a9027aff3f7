package kernel

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// referenceQDQ returns a copy of a QDQ model whose weight DequantizeLinear nodes are
// replaced by their float values: the graph compiler then finds no int8 weights, and the
// model runs the reference path (activation QuantizeLinear/DequantizeLinear as C loops,
// float Conv) instead of oneDNN's int8 convolution.
func referenceQDQ(t *testing.T, m *onnx.Model) *onnx.Model {
	t.Helper()
	g := *m.Graph
	g.Initializers = map[string]*onnx.Tensor{}
	for k, v := range m.Graph.Initializers {
		g.Initializers[k] = v
	}
	g.Nodes = nil
	for _, n := range m.Graph.Nodes {
		q := m.Graph.Initializers[n.Inputs[0]]
		if n.OpType != "DequantizeLinear" || q == nil {
			g.Nodes = append(g.Nodes, n)
			continue
		}
		s := m.Graph.Initializers[n.Inputs[1]]
		axis := int(n.Attrs["axis"].I)
		inner := int64(1)
		for _, d := range q.Dims[axis+1:] {
			inner *= d
		}
		f := make([]float32, len(q.I64))
		for i, v := range q.I64 {
			c := (int64(i) / inner) % q.Dims[axis]
			f[i] = float32(v) * s.F32[c%int64(len(s.F32))] // zero points are 0; one scale: per tensor
		}
		g.Initializers[n.Outputs[0]] = &onnx.Tensor{Name: n.Outputs[0], DType: onnx.Float, Dims: q.Dims, F32: f}
	}
	out := *m
	out.Graph = &g
	return &out
}

// qdqConvModel is x -> Q/DQ (uint8, zero point zp) -> Conv(int8 per-channel weights) -> Relu
// -> Q/DQ -> Conv (grouped, with bias) -> + residual -> output.
func qdqConvModel(zp int64, rng *rand.Rand) *onnx.Model {
	ini := map[string]*onnx.Tensor{}
	f32 := func(name string, dims []int64, v []float32) string {
		ini[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v}
		return name
	}
	i64 := func(name string, dt onnx.DataType, dims []int64, v []int64) string {
		ini[name] = &onnx.Tensor{Name: name, DType: dt, Dims: dims, I64: v}
		return name
	}
	weights := func(name string, dims []int64) (string, string, string) {
		n := dims[0] * dims[1] * dims[2] * dims[3]
		q := make([]int64, n)
		for i := range q {
			q[i] = int64(rng.Intn(255) - 127)
		}
		s := make([]float32, dims[0])
		for i := range s {
			s[i] = 0.001 + 0.01*rng.Float32()
		}
		return i64(name+"_q", onnx.Int8, dims, q), f32(name+"_s", []int64{dims[0]}, s), i64(name+"_z", onnx.Int8, []int64{dims[0]}, make([]int64, dims[0]))
	}
	attrs := func(kv ...any) map[string]*onnx.Attribute {
		a := map[string]*onnx.Attribute{}
		for i := 0; i < len(kv); i += 2 {
			name := kv[i].(string)
			switch v := kv[i+1].(type) {
			case int:
				a[name] = &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: int64(v)}
			case []int64:
				a[name] = &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
			}
		}
		return a
	}
	node := func(op string, in []string, out string, a map[string]*onnx.Attribute) *onnx.Node {
		if a == nil {
			a = map[string]*onnx.Attribute{}
		}
		return &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a}
	}
	xs := f32("xs", []int64{}, []float32{0.02})
	xz := i64("xz", onnx.Uint8, []int64{}, []int64{zp})
	w1q, w1s, w1z := weights("w1", []int64{16, 3, 3, 3})
	ys := f32("ys", []int64{}, []float32{0.05})
	yz := i64("yz", onnx.Uint8, []int64{}, []int64{0})
	w2q, w2s, w2z := weights("w2", []int64{16, 4, 3, 3})
	b := make([]float32, 16)
	for i := range b {
		b[i] = rng.Float32() - 0.5
	}
	f32("b2", []int64{16}, b)
	nodes := []*onnx.Node{
		node("QuantizeLinear", []string{"x", xs, xz}, "xq", nil),
		node("DequantizeLinear", []string{"xq", xs, xz}, "xd", nil),
		node("DequantizeLinear", []string{w1q, w1s, w1z}, "w1d", attrs("axis", 0)),
		node("Conv", []string{"xd", "w1d"}, "c1", attrs("pads", []int64{1, 1, 1, 1})),
		node("Relu", []string{"c1"}, "r1", nil),
		node("QuantizeLinear", []string{"r1", ys, yz}, "rq", nil),
		node("DequantizeLinear", []string{"rq", ys, yz}, "rd", nil),
		node("DequantizeLinear", []string{w2q, w2s, w2z}, "w2d", attrs("axis", 0)),
		node("Conv", []string{"rd", "w2d", "b2"}, "c2", attrs("pads", []int64{1, 1, 1, 1}, "group", 4)),
		node("Add", []string{"c2", "r1"}, "y", nil),
	}
	return &onnx.Model{IRVersion: 8, Opset: 13, Graph: &onnx.Graph{
		Name: "qdq", Nodes: nodes, Initializers: ini,
		Inputs:  []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{2, 3, 9, 9}, HasShape: true}},
		Outputs: []onnx.ValueInfo{{Name: "y", DType: onnx.Float}},
	}}
}

// TestQDQConvInt8MatchesReference checks oneDNN's int8 convolution path against the
// reference path (float Conv on dequantized values) on the same QDQ model: equal within
// float rounding of the accumulation (1e-4 of the output's largest magnitude), for a zero
// and a non-zero input zero point, and byte-identical over two runs.
func TestQDQConvInt8MatchesReference(t *testing.T) {
	for _, zp := range []int64{0, 128} {
		rng := rand.New(rand.NewSource(zp + 1))
		m := qdqConvModel(zp, rng)
		x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: []int64{2, 3, 9, 9}, F32: make([]float32, 2*3*9*9)}
		for i := range x.F32 {
			x.F32[i] = float32(rng.NormFloat64())
		}
		checkMatchesReference(t, fmt.Sprintf("zp %d", zp), m, x, 2, "Conv")
	}
}

// checkMatchesReference loads m on two threads, checks that want of its nodes of the given
// types run in int8 (and none in its reference model), runs x twice (same bytes) and fails
// unless the int8 path is within 1e-4 of the output's largest magnitude of the reference
// path (float products on dequantized values). It returns the number of steps of m's plan.
func checkMatchesReference(t *testing.T, what string, m *onnx.Model, x *onnx.Tensor, want int, types ...string) int32 {
	t.Helper()
	fast, err := LoadModel(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	if n := fast.int8Nodes(t, x.Dims, types...); n != want {
		t.Fatalf("%s: %d of %v run in int8, want %d", what, n, types, want)
	}
	ref, err := LoadModel(referenceQDQ(t, m), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if n := ref.int8Nodes(t, x.Dims, types...); n != 0 {
		t.Fatalf("%s: the reference model runs %d of %v in int8", what, n, types)
	}
	got, err := fast.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	steps := planSteps(t, fast)
	again, err := fast.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	exp, err := ref.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	var big, worst float64
	for i, w := range exp[0].F32 {
		big = math.Max(big, math.Abs(float64(w)))
		worst = math.Max(worst, math.Abs(float64(got[0].F32[i]-w)))
		if math.Float32bits(got[0].F32[i]) != math.Float32bits(again[0].F32[i]) {
			t.Fatalf("%s: value %d differs between two runs", what, i)
		}
	}
	if big == 0 || worst > 1e-4*big {
		t.Errorf("%s: int8 path differs from the reference by %g (largest output %g)", what, worst, big)
	}
	t.Logf("%s: largest difference %g of %g", what, worst, big)
	return steps
}

// int8Nodes compiles the model for these input dims and counts the nodes of the given types
// marked for int8.
func (m *Model) int8Nodes(t *testing.T, dims []int64, types ...string) int {
	t.Helper()
	g, err := graph.Compile(m.src, map[string][]int64{m.inputs[0].Name: dims}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, nd := range g.Nodes {
		for _, ty := range types {
			if nd.OpType == ty && nd.Attrs["idunno.qdq_w"] != nil {
				n++
			}
		}
	}
	return n
}

// qdqChainModel is x -> Q/DQ (uint8, zero point zp) -> Conv(bias) -> x*Sigmoid(x) (SiLU: a
// post-op requantized by a last linear one) -> Q/DQ (zero
// point 3) -> Conv(grouped) -> Clip(0, 2) -> Q/DQ -> two 1x1 Convs (bias) -> Add -> output: the first
// two Convs write 8-bit outputs (chainQDQ), the second one read by both 1x1 Convs.
func qdqChainModel(zp int64, rng *rand.Rand) *onnx.Model {
	m := qdqConvModel(zp, rng) // for its initializers' helpers' style; the graph is rebuilt
	ini := m.Graph.Initializers
	f32 := func(name string, dims []int64, v []float32) string {
		ini[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v}
		return name
	}
	i64 := func(name string, dt onnx.DataType, dims []int64, v []int64) string {
		ini[name] = &onnx.Tensor{Name: name, DType: dt, Dims: dims, I64: v}
		return name
	}
	weights := func(name string, dims []int64) (string, string, string) {
		n := dims[0] * dims[1] * dims[2] * dims[3]
		q := make([]int64, n)
		for i := range q {
			q[i] = int64(rng.Intn(255) - 127)
		}
		s := make([]float32, dims[0])
		for i := range s {
			s[i] = 0.001 + 0.01*rng.Float32()
		}
		return i64(name+"_q", onnx.Int8, dims, q), f32(name+"_s", []int64{dims[0]}, s), i64(name+"_z", onnx.Int8, []int64{dims[0]}, make([]int64, dims[0]))
	}
	bias := func(name string, n int) string {
		b := make([]float32, n)
		for i := range b {
			b[i] = rng.Float32() - 0.5
		}
		return f32(name, []int64{int64(n)}, b)
	}
	node := func(op string, in []string, out string, kv ...any) *onnx.Node {
		a := map[string]*onnx.Attribute{}
		for i := 0; i < len(kv); i += 2 {
			switch v := kv[i+1].(type) {
			case int:
				a[kv[i].(string)] = &onnx.Attribute{Name: kv[i].(string), Type: onnx.AttrInt, I: int64(v)}
			case []int64:
				a[kv[i].(string)] = &onnx.Attribute{Name: kv[i].(string), Type: onnx.AttrInts, Ints: v}
			}
		}
		return &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a}
	}
	zs := f32("zs", []int64{}, []float32{0.08})
	zz := i64("zz", onnx.Uint8, []int64{}, []int64{0})
	f32("ys3", []int64{}, []float32{0.05})
	i64("yz3", onnx.Uint8, []int64{}, []int64{3})
	c1q, c1s, c1z := weights("c1", []int64{16, 3, 3, 3})
	c2q, c2s, c2z := weights("c2", []int64{16, 4, 3, 3})
	c3q, c3s, c3z := weights("c3", []int64{8, 16, 1, 1})
	c4q, c4s, c4z := weights("c4", []int64{8, 16, 1, 1})
	pads := []int64{1, 1, 1, 1}
	m.Graph.Nodes = []*onnx.Node{
		node("QuantizeLinear", []string{"x", "xs", "xz"}, "xq"),
		node("DequantizeLinear", []string{"xq", "xs", "xz"}, "xd"),
		node("DequantizeLinear", []string{c1q, c1s, c1z}, "c1d", "axis", 0),
		node("Conv", []string{"xd", "c1d", bias("c1b", 16)}, "a1", "pads", pads),
		node("Sigmoid", []string{"a1"}, "s1"),
		node("Mul", []string{"a1", "s1"}, "r1"),
		node("QuantizeLinear", []string{"r1", "ys3", "yz3"}, "r1q"),
		node("DequantizeLinear", []string{"r1q", "ys3", "yz3"}, "r1d"),
		node("DequantizeLinear", []string{c2q, c2s, c2z}, "c2d", "axis", 0),
		node("Conv", []string{"r1d", "c2d"}, "a2", "pads", pads, "group", 4),
		node("Clip", []string{"a2", f32("lo", []int64{}, []float32{0}), f32("hi", []int64{}, []float32{2})}, "r2"),
		node("QuantizeLinear", []string{"r2", zs, zz}, "r2q"),
		node("DequantizeLinear", []string{"r2q", zs, zz}, "r2d"),
		node("DequantizeLinear", []string{c3q, c3s, c3z}, "c3d", "axis", 0),
		node("DequantizeLinear", []string{c4q, c4s, c4z}, "c4d", "axis", 0),
		node("Conv", []string{"r2d", "c3d", bias("c3b", 8)}, "a3"),
		node("Conv", []string{"r2d", "c4d", bias("c4b", 8)}, "a4"),
		node("Add", []string{"a3", "a4"}, "y"),
	}
	return m
}

// TestQDQChainInt8 checks chainQDQ: the two int8 Convs whose outputs only int8 Convs read
// write 8-bit values, and the result matches both the reference path (float Convs on
// dequantized values) and the unchained int8 path (IDK_INT8_CHAIN=0); repeated runs give the
// same bytes. Tolerance: an intermediate value within float rounding of a rounding tie may
// quantize one step apart in two paths (the accumulation order differs; the unchained path
// shows it against the reference too), which moves a few outputs by about a step times a
// weight; so 99% of the outputs must agree within 1e-4 of the largest magnitude and all
// within 2% of it.
func TestQDQChainInt8(t *testing.T) {
	dims := []int64{2, 3, 9, 9}
	for _, zp := range []int64{0, 128} {
		rng := rand.New(rand.NewSource(zp + 11))
		m := qdqChainModel(zp, rng)
		x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, 2*3*9*9)}
		for i := range x.F32 {
			x.F32[i] = float32(rng.NormFloat64())
		}
		run := func(m *onnx.Model, chain string) ([]float32, int) {
			return runInt8Twice(t, m, x, graph.Int8ChainEnv, chain)
		}
		fast, n := run(m, "1")
		if n != 2 {
			t.Fatalf("zp %d: %d convolutions write 8-bit outputs, want 2", zp, n)
		}
		plain, n0 := run(m, "0")
		if n0 != 0 {
			t.Fatalf("zp %d: IDK_INT8_CHAIN=0 still chains %d convolutions", zp, n0)
		}
		want, _ := run(referenceQDQ(t, m), "1")
		checkInt8Near(t, fmt.Sprintf("zp %d: chained int8", zp), fast, "reference", want)
		checkInt8Near(t, fmt.Sprintf("zp %d: chained int8", zp), fast, "unchained int8", plain)
	}
}

// runInt8Twice loads m on two threads with the environment variable env set to val,
// counts the convolutions its compiled graph lets write 8-bit outputs (chainQDQ), runs x
// twice and fails unless both runs give the same bytes.
func runInt8Twice(t *testing.T, m *onnx.Model, x *onnx.Tensor, env, val string) ([]float32, int) {
	t.Helper()
	t.Setenv(env, val)
	k, err := LoadModel(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	g, err := graph.Compile(k.src, map[string][]int64{x.Name: x.Dims}, nil)
	if err != nil {
		t.Fatal(err)
	}
	chained := 0
	for _, n := range g.Nodes {
		if n.Attrs[graph.QDQAttrs.YScale] != nil {
			chained++
		}
	}
	got, err := k.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	again, err := k.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got[0].F32 {
		if math.Float32bits(got[0].F32[i]) != math.Float32bits(again[0].F32[i]) {
			t.Fatalf("%s=%s: value %d differs between two runs", env, val, i)
		}
	}
	return got[0].F32, chained
}

// checkInt8Near fails unless other is not all zero, 99% of fast's values are within 1e-4
// of other's largest magnitude and all within 2% of it (TestQDQChainInt8 says why:
// rounding ties).
func checkInt8Near(t *testing.T, what string, fast []float32, name string, other []float32) {
	t.Helper()
	var big, worst float64
	for _, w := range other {
		big = math.Max(big, math.Abs(float64(w)))
	}
	off := 0
	for i, w := range other {
		d := math.Abs(float64(fast[i] - w))
		worst = math.Max(worst, d)
		if d > 1e-4*big {
			off++
		}
	}
	if big == 0 || worst > 0.02*big || off > len(fast)/100 {
		t.Errorf("%s differs from the %s path by up to %g (largest output %g), %d of %d values beyond 1e-4 of it",
			what, name, worst, big, off, len(fast))
	}
	t.Logf("%s: against the %s path, largest difference %g of %g, %d of %d values beyond 1e-4 of it", what, name, worst, big, off, len(fast))
}

// qdqMatMulModel is x (2, 5, 12) -> Q/DQ (uint8, zero point zp) -> MatMul(int8 weights (12,
// 20) per column) + bias -> Relu -> Flatten -> Q/DQ -> Gemm(transB, int8 weights (7, 100) per
// row, bias) -> + Gemm(transB 0, per-tensor weights (100, 7), no bias) -> output.
func qdqMatMulModel(zp int64, rng *rand.Rand) *onnx.Model {
	ini := map[string]*onnx.Tensor{}
	f32 := func(name string, dims []int64, v []float32) string {
		ini[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v}
		return name
	}
	i64 := func(name string, dt onnx.DataType, dims []int64, v []int64) string {
		ini[name] = &onnx.Tensor{Name: name, DType: dt, Dims: dims, I64: v}
		return name
	}
	rnd := func(n int64, lo, span float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = lo + span*rng.Float32()
		}
		return v
	}
	// weights quantized along axis (scales: one per index of axis, or one when axis < 0)
	weights := func(name string, dims []int64, axis int) (string, string, string) {
		q := make([]int64, dims[0]*dims[1])
		for i := range q {
			q[i] = int64(rng.Intn(255) - 127)
		}
		ns := int64(1)
		sd := []int64{}
		if axis >= 0 {
			ns = dims[axis]
			sd = []int64{ns}
		}
		return i64(name+"_q", onnx.Int8, dims, q), f32(name+"_s", sd, rnd(ns, 0.001, 0.01)), i64(name+"_z", onnx.Int8, sd, make([]int64, ns))
	}
	node := func(op string, in []string, out string, kv ...any) *onnx.Node {
		a := map[string]*onnx.Attribute{}
		for i := 0; i < len(kv); i += 2 {
			a[kv[i].(string)] = &onnx.Attribute{Name: kv[i].(string), Type: onnx.AttrInt, I: int64(kv[i+1].(int))}
		}
		return &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a}
	}
	xs := f32("xs", []int64{}, []float32{0.02})
	xz := i64("xz", onnx.Uint8, []int64{}, []int64{zp})
	ys := f32("ys", []int64{}, []float32{0.05})
	yz := i64("yz", onnx.Uint8, []int64{}, []int64{0})
	w1q, w1s, w1z := weights("w1", []int64{12, 20}, 1)
	w2q, w2s, w2z := weights("w2", []int64{7, 100}, 0)
	w3q, w3s, w3z := weights("w3", []int64{100, 7}, -1)
	f32("b1", []int64{20}, rnd(20, -0.5, 1))
	f32("b2", []int64{7}, rnd(7, -0.5, 1))
	nodes := []*onnx.Node{
		node("QuantizeLinear", []string{"x", xs, xz}, "xq"),
		node("DequantizeLinear", []string{"xq", xs, xz}, "xd"),
		node("DequantizeLinear", []string{w1q, w1s, w1z}, "w1d", "axis", 1),
		node("MatMul", []string{"xd", "w1d"}, "m1"),
		node("Add", []string{"m1", "b1"}, "a1"),
		node("Relu", []string{"a1"}, "r1"),
		node("Flatten", []string{"r1"}, "f1", "axis", 1),
		node("QuantizeLinear", []string{"f1", ys, yz}, "fq"),
		node("DequantizeLinear", []string{"fq", ys, yz}, "fd"),
		node("DequantizeLinear", []string{w2q, w2s, w2z}, "w2d", "axis", 0),
		node("Gemm", []string{"fd", "w2d", "b2"}, "g2", "transB", 1),
		node("DequantizeLinear", []string{w3q, w3s, w3z}, "w3d", "axis", 1),
		node("Gemm", []string{"fd", "w3d"}, "g3"),
		node("Add", []string{"g2", "g3"}, "y"),
	}
	return &onnx.Model{IRVersion: 8, Opset: 13, Graph: &onnx.Graph{
		Name: "qdq_mm", Nodes: nodes, Initializers: ini,
		Inputs:  []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{2, 5, 12}, HasShape: true}},
		Outputs: []onnx.ValueInfo{{Name: "y", DType: onnx.Float}},
	}}
}

// TestQDQMatMulInt8MatchesReference checks oneDNN's int8 matmul path (MatMul with a bias
// and ReLU, Gemm with transB and a bias, Gemm with per-tensor weights) against the
// reference path on the same QDQ model, within 1e-4 of the output's largest magnitude, for
// a zero and a non-zero input zero point, and byte-identical over two runs.
func TestQDQMatMulInt8MatchesReference(t *testing.T) {
	dims := []int64{2, 5, 12}
	for _, zp := range []int64{0, 128} {
		rng := rand.New(rand.NewSource(zp + 7))
		m := qdqMatMulModel(zp, rng)
		x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, 2*5*12)}
		for i := range x.F32 {
			x.F32[i] = float32(rng.NormFloat64())
		}
		checkMatchesReference(t, fmt.Sprintf("zp %d", zp), m, x, 3, "MatMul", "Gemm")
	}
}

// TestPeakInt8 reports the VNNI and AMX int8 peaks beside the FP32 one (benchmarks quote
// them), and checks the AMX loop runs exactly where oneDNN's int8 kernels use AMX.
func TestPeakInt8(t *testing.T) {
	g := PeakInt8GOPS(2)
	c := PeakInt8GOPSPerCPUSecond()
	f := PeakGFLOPSPerCPUSecond()
	t.Logf("int8 peak: %.1f GOP/s with 2 threads (wall), %.1f GOP/s per CPU second; FP32: %.1f GFLOP/s per CPU second", g, c, f)
	a := PeakInt8AMXGOPS(2)
	ac := PeakInt8AMXGOPSPerCPUSecond()
	t.Logf("int8 AMX peak: %.1f GOP/s with 2 threads (wall), %.1f GOP/s per CPU second", a, ac)
	if g < 0 || c < 0 || a < 0 || ac < 0 {
		t.Fatalf("negative peak")
	}
	if amx := strings.Contains(BF16Support(), "amx"); amx != (a > 0) {
		t.Errorf("oneDNN uses AMX: %v, but the AMX int8 peak is %.1f GOP/s", amx, a)
	}
	if k := PeakInt8KernelGOPSPerCPUSecond(); k <= 0 && c > 0 {
		t.Errorf("kernel int8 peak %.1f", k)
	}
}

// TestQDQMatMulSlicedStaysInt8: an int8 MatMul whose output only last-axis Slices read (a
// quantized ViT's fused q/k/v in-projection) is left whole by the sliced-Linear pass (its
// int8 weights live in the node's attributes, which a per-Slice product could not take), so
// it loads, runs in int8, and matches the reference path. (The Slices feed other nodes: the
// pass leaves a Slice that is a graph output alone.)
func TestQDQMatMulSlicedStaysInt8(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	ini := map[string]*onnx.Tensor{}
	add := func(t *onnx.Tensor) string { ini[t.Name] = t; return t.Name }
	q := make([]int64, 12*24)
	for i := range q {
		q[i] = int64(rng.Intn(255) - 127)
	}
	ws := make([]float32, 24)
	for i := range ws {
		ws[i] = 0.001 + 0.01*rng.Float32()
	}
	add(&onnx.Tensor{Name: "wq", DType: onnx.Int8, Dims: []int64{12, 24}, I64: q})
	add(&onnx.Tensor{Name: "ws", DType: onnx.Float, Dims: []int64{24}, F32: ws})
	add(&onnx.Tensor{Name: "wz", DType: onnx.Int8, Dims: []int64{24}, I64: make([]int64, 24)})
	add(&onnx.Tensor{Name: "xs", DType: onnx.Float, Dims: []int64{}, F32: []float32{0.02}})
	add(&onnx.Tensor{Name: "xz", DType: onnx.Uint8, Dims: []int64{}, I64: []int64{128}})
	add(&onnx.Tensor{Name: "axis", DType: onnx.Int64, Dims: []int64{1}, I64: []int64{-1}})
	nodes := []*onnx.Node{
		{Name: "q", OpType: "QuantizeLinear", Inputs: []string{"x", "xs", "xz"}, Outputs: []string{"xq"}},
		{Name: "dq", OpType: "DequantizeLinear", Inputs: []string{"xq", "xs", "xz"}, Outputs: []string{"xd"}},
		{Name: "dqw", OpType: "DequantizeLinear", Inputs: []string{"wq", "ws", "wz"}, Outputs: []string{"wd"},
			Attrs: map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: 1}}},
		{Name: "mm", OpType: "MatMul", Inputs: []string{"xd", "wd"}, Outputs: []string{"m"}},
	}
	var outs []onnx.ValueInfo
	for i, y := range []string{"yq", "yk", "yv"} {
		s := add(&onnx.Tensor{Name: y + "_s", DType: onnx.Int64, Dims: []int64{1}, I64: []int64{int64(8 * i)}})
		e := add(&onnx.Tensor{Name: y + "_e", DType: onnx.Int64, Dims: []int64{1}, I64: []int64{int64(8*i + 8)}})
		nodes = append(nodes, &onnx.Node{Name: y, OpType: "Slice", Inputs: []string{"m", s, e, "axis"}, Outputs: []string{y + "_sl"}},
			&onnx.Node{Name: y + "_neg", OpType: "Neg", Inputs: []string{y + "_sl"}, Outputs: []string{y}})
		outs = append(outs, onnx.ValueInfo{Name: y, DType: onnx.Float})
	}
	m := &onnx.Model{IRVersion: 8, Opset: 13, Graph: &onnx.Graph{Name: "qdq_sliced", Nodes: nodes, Initializers: ini,
		Inputs:  []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{2, 5, 12}, HasShape: true}},
		Outputs: outs}}
	dims := []int64{2, 5, 12}
	x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, 2*5*12)}
	for i := range x.F32 {
		x.F32[i] = float32(rng.NormFloat64())
	}
	fast, err := LoadModel(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	if n := fast.int8Nodes(t, dims, "MatMul"); n != 1 {
		t.Fatalf("%d int8 MatMuls, want 1", n)
	}
	ref, err := LoadModel(referenceQDQ(t, m), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	got, err := fast.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	for k := range want {
		var big, worst float64
		for i, w := range want[k].F32 {
			big = math.Max(big, math.Abs(float64(w)))
			worst = math.Max(worst, math.Abs(float64(got[k].F32[i]-w)))
		}
		if worst > 1e-4*big {
			t.Errorf("output %d: int8 path differs from the reference by %g (largest %g)", k, worst, big)
		}
	}
}

// qdqSharedInputModel is x -> Q/DQ (uint8, zero point 128) -> two int8 Convs (3x3 and 1x1,
// per-channel weights, bias) -> Add -> output; with split set, the second Conv reads its own
// Q/DQ of x with another scale.
func qdqSharedInputModel(split bool, rng *rand.Rand) *onnx.Model {
	ini := map[string]*onnx.Tensor{}
	f32 := func(name string, dims []int64, v []float32) string {
		ini[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v}
		return name
	}
	i64 := func(name string, dt onnx.DataType, dims []int64, v []int64) string {
		ini[name] = &onnx.Tensor{Name: name, DType: dt, Dims: dims, I64: v}
		return name
	}
	weights := func(name string, dims []int64) (string, string, string) {
		q := make([]int64, dims[0]*dims[1]*dims[2]*dims[3])
		for i := range q {
			q[i] = int64(rng.Intn(255) - 127)
		}
		s := make([]float32, dims[0])
		b := make([]float32, dims[0])
		for i := range s {
			s[i] = 0.001 + 0.01*rng.Float32()
			b[i] = rng.Float32() - 0.5
		}
		f32(name+"_b", []int64{dims[0]}, b)
		return i64(name+"_q", onnx.Int8, dims, q), f32(name+"_s", []int64{dims[0]}, s), i64(name+"_z", onnx.Int8, []int64{dims[0]}, make([]int64, dims[0]))
	}
	node := func(op string, in []string, out string, a map[string]*onnx.Attribute) *onnx.Node {
		if a == nil {
			a = map[string]*onnx.Attribute{}
		}
		return &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a}
	}
	axis0 := map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: 0}}
	f32("xs", []int64{}, []float32{0.02})
	f32("xs2", []int64{}, []float32{0.021})
	i64("xz", onnx.Uint8, []int64{}, []int64{128})
	w1q, w1s, w1z := weights("w1", []int64{16, 8, 3, 3})
	w2q, w2s, w2z := weights("w2", []int64{16, 8, 1, 1})
	x2 := "xd"
	nodes := []*onnx.Node{
		node("QuantizeLinear", []string{"x", "xs", "xz"}, "xq", nil),
		node("DequantizeLinear", []string{"xq", "xs", "xz"}, "xd", nil),
	}
	if split {
		x2 = "xd2"
		nodes = append(nodes, node("QuantizeLinear", []string{"x", "xs2", "xz"}, "xq2", nil),
			node("DequantizeLinear", []string{"xq2", "xs2", "xz"}, "xd2", nil))
	}
	nodes = append(nodes,
		node("DequantizeLinear", []string{w1q, w1s, w1z}, "w1d", axis0),
		node("DequantizeLinear", []string{w2q, w2s, w2z}, "w2d", axis0),
		node("Conv", []string{"xd", "w1d", "w1_b"}, "c1", map[string]*onnx.Attribute{"pads": {Name: "pads", Type: onnx.AttrInts, Ints: []int64{1, 1, 1, 1}}}),
		node("Conv", []string{x2, "w2d", "w2_b"}, "c2", nil),
		node("Add", []string{"c1", "c2"}, "y", nil))
	return &onnx.Model{IRVersion: 8, Opset: 13, Graph: &onnx.Graph{
		Name: "qdq_shared", Nodes: nodes, Initializers: ini,
		Inputs:  []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{2, 8, 10, 10}, HasShape: true}},
		Outputs: []onnx.ValueInfo{{Name: "y", DType: onnx.Float}},
	}}
}

// TestQDQSharedQuantize: two int8 Convs reading the same tensor quantized the same way share
// one quantizing reorder (a plan step fewer than when the second one quantizes with another
// scale), and the result matches the reference path within 1e-4 of the largest output, with
// the same bytes over two runs.
func TestQDQSharedQuantize(t *testing.T) {
	dims := []int64{2, 8, 10, 10}
	steps := map[bool]int32{}
	for _, split := range []bool{false, true} {
		rng := rand.New(rand.NewSource(5))
		m := qdqSharedInputModel(split, rng)
		x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, 2*8*10*10)}
		for i := range x.F32 {
			x.F32[i] = float32(rng.NormFloat64())
		}
		steps[split] = checkMatchesReference(t, fmt.Sprintf("split %v", split), m, x, 2, "Conv")
	}
	if steps[true] != steps[false]+1 {
		t.Errorf("plan steps: %d with one shared quantized input, %d with two; want one fewer", steps[false], steps[true])
	}
}

// TestQDQChainThroughMaxPool: an int8 Conv (+ReLU) read only by a MaxPool whose readers are
// int8 Convs quantizing the same way writes 8-bit values and the MaxPool pools them (max
// commutes with quantization); checked against the reference path and the path without it
// (IDK_INT8_POOL=0) with TestQDQChainInt8's tolerance, and the same bytes over two runs.
func TestQDQChainThroughMaxPool(t *testing.T) {
	dims := []int64{2, 3, 12, 12}
	for _, zp := range []int64{0, 7} {
		rng := rand.New(rand.NewSource(zp + 21))
		m := qdqConvModel(0, rng) // its initializers (x's Q/DQ, w1, w2, b2); the graph is rebuilt
		ini := m.Graph.Initializers
		ini["ps"] = &onnx.Tensor{Name: "ps", DType: onnx.Float, Dims: []int64{}, F32: []float32{0.04}}
		ini["pz"] = &onnx.Tensor{Name: "pz", DType: onnx.Uint8, Dims: []int64{}, I64: []int64{zp}}
		ini["xz"].I64[0] = 128
		ints := func(v ...int64) *onnx.Attribute { return &onnx.Attribute{Type: onnx.AttrInts, Ints: v} }
		node := func(op string, in []string, out string, a map[string]*onnx.Attribute) *onnx.Node {
			if a == nil {
				a = map[string]*onnx.Attribute{}
			}
			for k, v := range a {
				v.Name = k
			}
			return &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a}
		}
		m.Graph.Inputs[0].Dims = dims
		m.Graph.Nodes = []*onnx.Node{
			node("QuantizeLinear", []string{"x", "xs", "xz"}, "xq", nil),
			node("DequantizeLinear", []string{"xq", "xs", "xz"}, "xd", nil),
			node("DequantizeLinear", []string{"w1_q", "w1_s", "w1_z"}, "w1d", map[string]*onnx.Attribute{"axis": {Type: onnx.AttrInt}}),
			node("Conv", []string{"xd", "w1d"}, "c1", map[string]*onnx.Attribute{"pads": ints(1, 1, 1, 1)}),
			node("Relu", []string{"c1"}, "r1", nil),
			node("MaxPool", []string{"r1"}, "p1", map[string]*onnx.Attribute{"kernel_shape": ints(3, 3), "strides": ints(2, 2), "pads": ints(1, 1, 1, 1)}),
			node("QuantizeLinear", []string{"p1", "ps", "pz"}, "pq", nil),
			node("DequantizeLinear", []string{"pq", "ps", "pz"}, "pd", nil),
			node("DequantizeLinear", []string{"w2_q", "w2_s", "w2_z"}, "w2d", map[string]*onnx.Attribute{"axis": {Type: onnx.AttrInt}}),
			node("Conv", []string{"pd", "w2d", "b2"}, "c2", map[string]*onnx.Attribute{"pads": ints(1, 1, 1, 1), "group": {Type: onnx.AttrInt, I: 4}}),
			node("Conv", []string{"pd", "w2d"}, "c3", map[string]*onnx.Attribute{"pads": ints(2, 2, 2, 2), "dilations": ints(2, 2), "group": {Type: onnx.AttrInt, I: 4}}),
			node("Add", []string{"c2", "c3"}, "y", nil),
		}
		x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
		for i := range x.F32 {
			x.F32[i] = float32(rng.NormFloat64())
		}
		run := func(m *onnx.Model, pool string) ([]float32, int) {
			return runInt8Twice(t, m, x, graph.Int8PoolEnv, pool)
		}
		fast, n := run(m, "1")
		if n != 1 {
			t.Fatalf("zp %d: %d convolutions write 8-bit outputs, want 1 (through the MaxPool)", zp, n)
		}
		plain, n0 := run(m, "0")
		if n0 != 0 {
			t.Fatalf("zp %d: IDK_INT8_POOL=0 still chains %d convolutions", zp, n0)
		}
		want, _ := run(referenceQDQ(t, m), "1")
		checkInt8Near(t, fmt.Sprintf("zp %d: int8 through the MaxPool", zp), fast, "reference", want)
		checkInt8Near(t, fmt.Sprintf("zp %d: int8 through the MaxPool", zp), fast, "unchained int8", plain)
	}
}

// TestQDQSlowAMXEltwise: an int8 Conv with a SiLU post-op (qdqChainModel's first) takes a
// non-AMX implementation (slow_amx_eltwise in quant.c); with it and without it
// (IDK_INT8_AMX_ELTWISE=0) the outputs match the reference path with TestQDQChainInt8's
// tolerance and repeat their bytes.
func TestQDQSlowAMXEltwise(t *testing.T) {
	dims := []int64{2, 3, 9, 9}
	rng := rand.New(rand.NewSource(31))
	m := qdqChainModel(128, rng)
	x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
	for i := range x.F32 {
		x.F32[i] = float32(rng.NormFloat64())
	}
	want, _ := runInt8Twice(t, referenceQDQ(t, m), x, "IDK_INT8_AMX_ELTWISE", "1")
	for _, env := range []string{"1", "0"} {
		got, _ := runInt8Twice(t, m, x, "IDK_INT8_AMX_ELTWISE", env)
		checkInt8Near(t, "IDK_INT8_AMX_ELTWISE="+env, got, "reference", want)
	}
}

// qdqResidualModel is two residual blocks as `idunno quantize` writes them (Q/DQ on both
// inputs of each Add): x (2, 8, 10, 10) -> Q/DQ (zero point zp) -> Conv+ReLU = a -> Q/DQ ->
// Conv+ReLU -> Q/DQ -> 1x1 Conv = c; Add(Q/DQ(c) (zero point 120), Q/DQ(a)) -> ReLU = y1 ->
// Q/DQ -> Conv+ReLU -> Q/DQ -> 1x1 Conv = d, and the shortcut 1x1 Conv on y1 = s (after d);
// Add(Q/DQ(d) (zero point zp), Q/DQ(s)) = y, the float output. The scales are irregular:
// with round ones the sums land on rounding ties often. With aOut, a is a second output
// (its Conv then writes float, and the first fused Conv quantizes its summand itself).
func qdqResidualModel(zp int64, rng *rand.Rand, aOut bool) *onnx.Model {
	ini := map[string]*onnx.Tensor{}
	f32 := func(name string, dims []int64, v ...float32) string {
		ini[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v}
		return name
	}
	qp := func(name string, s float32, z int64) []string {
		ini[name+"_z"] = &onnx.Tensor{Name: name + "_z", DType: onnx.Uint8, Dims: []int64{}, I64: []int64{z}}
		return []string{f32(name+"_s", []int64{}, s), name + "_z"}
	}
	var nodes []*onnx.Node
	node := func(op string, in []string, out string, a map[string]*onnx.Attribute) string {
		if a == nil {
			a = map[string]*onnx.Attribute{}
		}
		for k, v := range a {
			v.Name = k
		}
		nodes = append(nodes, &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a})
		return out
	}
	qdq := func(x string, p []string) string {
		q := node("QuantizeLinear", append([]string{x}, p...), x+"_q", nil)
		return node("DequantizeLinear", append([]string{q}, p...), x+"_d", nil)
	}
	conv := func(name, x string, cin, cout, k int64, relu bool) string {
		w := make([]int64, cout*cin*k*k)
		for i := range w {
			w[i] = int64(rng.Intn(255) - 127)
		}
		s := make([]float32, cout)
		b := make([]float32, cout)
		for i := range s {
			s[i] = (0.5 + rng.Float32()) / float32(20*cin*k*k)
			b[i] = 0.4*rng.Float32() - 0.2
		}
		ini[name+"_wq"] = &onnx.Tensor{Name: name + "_wq", DType: onnx.Int8, Dims: []int64{cout, cin, k, k}, I64: w}
		ini[name+"_wz"] = &onnx.Tensor{Name: name + "_wz", DType: onnx.Int8, Dims: []int64{cout}, I64: make([]int64, cout)}
		wd := node("DequantizeLinear", []string{name + "_wq", f32(name+"_ws", []int64{cout}, s...), name + "_wz"}, name+"_wd",
			map[string]*onnx.Attribute{"axis": {Type: onnx.AttrInt}})
		p := (k - 1) / 2
		y := node("Conv", []string{x, wd, f32(name+"_b", []int64{cout}, b...)}, name,
			map[string]*onnx.Attribute{"pads": {Type: onnx.AttrInts, Ints: []int64{p, p, p, p}}})
		if relu {
			y = node("Relu", []string{y}, name+"_relu", nil)
		}
		return y
	}
	a := conv("ca", qdq("x", qp("xp", 0.0513, zp)), 8, 16, 3, true)
	ad := qdq(a, qp("ap", 0.0417, 0))
	c := conv("cc", qdq(conv("cb", ad, 16, 16, 3, true), qp("bp", 0.0309, 0)), 16, 16, 1, false)
	y1 := node("Relu", []string{node("Add", []string{qdq(c, qp("cp", 0.0521, 120)), ad}, "add1", nil)}, "y1", nil)
	y1d := qdq(y1, qp("y1p", 0.0611, 0))
	d := conv("cd", qdq(conv("cx", y1d, 16, 16, 3, true), qp("xp2", 0.0297, 0)), 16, 16, 1, false)
	s := conv("cs", y1d, 16, 16, 1, false)
	node("Add", []string{qdq(d, qp("dp", 0.0487, zp)), qdq(s, qp("sp", 0.0433, 100))}, "y", nil)
	outs := []onnx.ValueInfo{{Name: "y", DType: onnx.Float}}
	if aOut {
		outs = append(outs, onnx.ValueInfo{Name: a, DType: onnx.Float})
	}
	return &onnx.Model{IRVersion: 8, Opset: 13, Graph: &onnx.Graph{
		Name: "qdq_residual", Nodes: nodes, Initializers: ini,
		Inputs:  []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{2, 8, 10, 10}, HasShape: true}},
		Outputs: outs,
	}}
}

// TestQDQResidualAddInt8 checks fuseQDQAdd: both residual Adds fuse into an int8 Conv's sum
// post-op (the second into the later shortcut Conv), five Convs write 8-bit outputs (the
// residual stream y1 and the summands a and d among them), and the output matches the
// unfused path (IDK_INT8_ADD=0: the Adds' Q/DQ on the reference path), the reference path
// (float Convs on dequantized values) and the fused path without 8-bit outputs
// (IDK_INT8_CHAIN=0: float summands quantized and dequantized by the kernel), with
// TestQDQChainInt8's tolerance (rounding ties), and repeats its bytes. With a as a second
// output (aOut: four 8-bit outputs), the first fused Conv writes 8 bits over a quantized
// copy of its float summand.
func TestQDQResidualAddInt8(t *testing.T) {
	dims := []int64{2, 8, 10, 10}
	for _, tc := range []struct {
		zp   int64
		aOut bool
	}{{0, false}, {130, false}, {7, true}} {
		zp := tc.zp
		rng := rand.New(rand.NewSource(zp + 31))
		m := qdqResidualModel(zp, rng, tc.aOut)
		t.Setenv(graph.Int8ChainEnv, "1")
		x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
		for i := range x.F32 {
			x.F32[i] = float32(rng.NormFloat64())
		}
		g, err := graph.Compile(m, map[string][]int64{"x": dims}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fused := 0
		for _, n := range g.Nodes {
			if n.OpType == "Add" || n.OpType == "QuantizeLinear" {
				t.Fatalf("zp %d: %s %s left after fusion", zp, n.OpType, n.Name)
			}
			if n.Attrs[graph.QDQAttrs.OScale] != nil {
				fused++
			}
		}
		if fused != 2 {
			t.Fatalf("zp %d: %d Adds fused, want 2", zp, fused)
		}
		fast, n := runInt8Twice(t, m, x, graph.Int8AddEnv, "1")
		if want := map[bool]int{false: 5, true: 4}[tc.aOut]; n != want {
			t.Fatalf("zp %d: %d convolutions write 8-bit outputs, want %d", zp, n, want)
		}
		unfused, _ := runInt8Twice(t, m, x, graph.Int8AddEnv, "0")
		want, _ := runInt8Twice(t, referenceQDQ(t, m), x, graph.Int8AddEnv, "0")
		t.Setenv(graph.Int8ChainEnv, "0")
		float, n0 := runInt8Twice(t, m, x, graph.Int8AddEnv, "1")
		if n0 != 0 {
			t.Fatalf("zp %d: IDK_INT8_CHAIN=0 still chains %d convolutions", zp, n0)
		}
		what := fmt.Sprintf("zp %d: int8 residual Adds", zp)
		checkInt8Near(t, what, fast, "unfused", unfused)
		checkInt8Near(t, what, fast, "reference", want)
		checkInt8Near(t, what, fast, "fused without 8-bit outputs", float)
		checkInt8Near(t, what+" without 8-bit outputs", float, "unfused", unfused)
	}
}

// TestQDQChainHardSigmoid: an int8 Conv with a HardSigmoid post-op (oneDNN's linear + clip)
// read by an int8 Conv through Q/DQ is not chained (its requantizing linear post-op would be
// a second linear one, which oneDNN 2.6 applies with the first one's scale) and matches the
// reference path with TestQDQChainInt8's tolerance.
func TestQDQChainHardSigmoid(t *testing.T) {
	dims := []int64{2, 3, 9, 9}
	rng := rand.New(rand.NewSource(41))
	m := qdqConvModel(0, rng) // its initializers (x's Q/DQ, w1, w2, b2); the graph is rebuilt
	ini := m.Graph.Initializers
	ini["hs"] = &onnx.Tensor{Name: "hs", DType: onnx.Float, Dims: []int64{}, F32: []float32{0.0041}}
	ini["hz"] = &onnx.Tensor{Name: "hz", DType: onnx.Uint8, Dims: []int64{}, I64: []int64{0}}
	node := func(op string, in []string, out string, a map[string]*onnx.Attribute) *onnx.Node {
		if a == nil {
			a = map[string]*onnx.Attribute{}
		}
		for k, v := range a {
			v.Name = k
		}
		return &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a}
	}
	pads := &onnx.Attribute{Type: onnx.AttrInts, Ints: []int64{1, 1, 1, 1}}
	m.Graph.Nodes = []*onnx.Node{
		node("QuantizeLinear", []string{"x", "xs", "xz"}, "xq", nil),
		node("DequantizeLinear", []string{"xq", "xs", "xz"}, "xd", nil),
		node("DequantizeLinear", []string{"w1_q", "w1_s", "w1_z"}, "w1d", map[string]*onnx.Attribute{"axis": {Type: onnx.AttrInt}}),
		node("Conv", []string{"xd", "w1d"}, "c1", map[string]*onnx.Attribute{"pads": pads}),
		node("HardSigmoid", []string{"c1"}, "h1", map[string]*onnx.Attribute{"alpha": {Type: onnx.AttrFloat, F: 0.3}, "beta": {Type: onnx.AttrFloat, F: 0.4}}),
		node("QuantizeLinear", []string{"h1", "hs", "hz"}, "hq", nil),
		node("DequantizeLinear", []string{"hq", "hs", "hz"}, "hd", nil),
		node("DequantizeLinear", []string{"w2_q", "w2_s", "w2_z"}, "w2d", map[string]*onnx.Attribute{"axis": {Type: onnx.AttrInt}}),
		node("Conv", []string{"hd", "w2d", "b2"}, "y", map[string]*onnx.Attribute{"pads": pads, "group": {Type: onnx.AttrInt, I: 4}}),
	}
	x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
	for i := range x.F32 {
		x.F32[i] = float32(rng.NormFloat64())
	}
	fast, n := runInt8Twice(t, m, x, graph.Int8ChainEnv, "1")
	if n != 0 {
		t.Errorf("%d convolutions with a HardSigmoid post-op write 8-bit outputs, want 0", n)
	}
	want, _ := runInt8Twice(t, referenceQDQ(t, m), x, graph.Int8ChainEnv, "1")
	checkInt8Near(t, "int8 after a HardSigmoid", fast, "reference", want)
}
