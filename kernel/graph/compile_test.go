package graph

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"idunno/kernel/onnx"
)

func opTypes(g *onnx.Graph) string {
	var s []string
	for _, n := range g.Nodes {
		s = append(s, n.OpType)
	}
	return strings.Join(s, ",")
}

func postOps(n *onnx.Node) string {
	a, ok := n.Attrs[PostOpsAttr]
	if !ok {
		return ""
	}
	return strings.Join(a.Strings, " ")
}

// TestFoldTorchFlattenChain folds the Shape→Gather→Unsqueeze→Concat chain that
// torch.onnx.export writes for x.view(x.size(0), -1) into one Reshape.
func TestFoldTorchFlattenChain(t *testing.T) {
	b := newBuilder(11).input("x", 2, 3, 4, 5).
		node("Shape", ss("x"), ss("s")).
		node("Constant", nil, ss("zero"), aTensor("value", &onnx.Tensor{DType: onnx.Int64, Dims: []int64{}, I64: []int64{0}})).
		node("Gather", ss("s", "zero"), ss("g"), aInt("axis", 0)).
		node("Unsqueeze", ss("g"), ss("u"), aInts("axes", 0)).
		node("Constant", nil, ss("minus1"), aTensor("value", ints(-1))).
		node("Concat", ss("u", "minus1"), ss("shape"), aInt("axis", 0)).
		node("Reshape", ss("x", "shape"), ss("y")).
		output("y")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Reshape" {
		t.Fatalf("nodes %s; want only Reshape", opTypes(g))
	}
	shape := g.Initializers[g.Nodes[0].Inputs[1]]
	if shape == nil || !dimsEqual(shape.I64, []int64{2, -1}) {
		t.Fatalf("folded shape %+v; want [2 -1]", shape)
	}
	if !dimsEqual(g.Values["y"].Dims, []int64{2, 60}) {
		t.Fatalf("y dims %v", g.Values["y"].Dims)
	}
	if len(g.Initializers) != 1 {
		t.Fatalf("unused initializers kept: %d", len(g.Initializers))
	}
	checkComplete(t, g)
}

// TestFoldArithmeticChain folds shape arithmetic (Gather, Mul, Slice, Cast, Concat) at opset 13.
func TestFoldArithmeticChain(t *testing.T) {
	b := newBuilder(13).input("x", 2, 3, 4, 5).
		node("Shape", ss("x"), ss("s")).
		init("i1", &onnx.Tensor{DType: onnx.Int64, Dims: []int64{}, I64: []int64{1}}).
		init("i2", &onnx.Tensor{DType: onnx.Int64, Dims: []int64{}, I64: []int64{2}}).
		init("ax0", ints(0)).
		node("Gather", ss("s", "i1"), ss("a")).
		node("Gather", ss("s", "i2"), ss("c")).
		node("Mul", ss("a", "c"), ss("p")).
		node("Unsqueeze", ss("p", "ax0"), ss("pu")).
		init("st", ints(0)).init("en", ints(1)).
		node("Slice", ss("s", "st", "en"), ss("head")).
		init("st3", ints(-1)).init("en3", ints(math.MaxInt64)).
		node("Slice", ss("s", "st3", "en3"), ss("tail")).
		node("Cast", ss("tail"), ss("tailf"), aInt("to", int64(onnx.Float))).
		node("Cast", ss("tailf"), ss("tail64"), aInt("to", int64(onnx.Int64))).
		node("Concat", ss("head", "pu", "tail64"), ss("shape"), aInt("axis", 0)).
		node("Reshape", ss("x", "shape"), ss("r")).
		node("Relu", ss("r"), ss("y")).
		output("y")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Reshape,Relu" {
		t.Fatalf("nodes %s", opTypes(g))
	}
	if got := g.Initializers[g.Nodes[0].Inputs[1]].I64; !dimsEqual(got, []int64{2, 12, 5}) {
		t.Fatalf("folded shape %v; want [2 12 5]", got)
	}
	checkComplete(t, g)
}

// TestFoldConstantInputs treats int64 graph inputs given as values as constants.
func TestFoldConstantInputs(t *testing.T) {
	b := newBuilder(13).input("x", 4, 6).constInput("shape", 3, 8).
		node("Reshape", ss("x", "shape"), ss("y")).output("y")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Inputs) != 1 || g.Inputs[0].Name != "x" {
		t.Fatalf("run-time inputs %+v; want only x", g.Inputs)
	}
	if g.Initializers["shape"] == nil || !dimsEqual(g.Values["y"].Dims, []int64{3, 8}) {
		t.Fatalf("shape not constant or y dims wrong: %+v", g.Values["y"])
	}
}

// TestFoldAllConstant folds a graph with no run-time work: the output is an initializer.
func TestFoldAllConstant(t *testing.T) {
	b := newBuilder(13).init("a", &onnx.Tensor{DType: onnx.Float, Dims: []int64{2, 2}, F32: []float32{1, 2, 3, 4}}).
		init("b", &onnx.Tensor{DType: onnx.Float, Dims: []int64{2}, F32: []float32{10, 20}}).
		node("Add", ss("a", "b"), ss("s")).
		node("Transpose", ss("s"), ss("y")).output("y")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Nodes) != 0 {
		t.Fatalf("nodes left: %s", opTypes(g))
	}
	y := g.Initializers["y"]
	if y == nil || !dimsEqual(y.Dims, []int64{2, 2}) || y.F32[0] != 11 || y.F32[1] != 13 || y.F32[2] != 22 || y.F32[3] != 24 {
		t.Fatalf("y = %+v; want [[11 13] [22 24]]", y)
	}
}

// TestFoldShapeStartEnd folds Shape with opset-15 start/end and rejects them earlier.
func TestFoldShapeStartEnd(t *testing.T) {
	b := newBuilder(15).input("x", 2, 3, 4, 5).
		node("Shape", ss("x"), ss("y"), aInt("start", 1), aInt("end", -1)).output("y")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if y := g.Initializers["y"]; y == nil || !dimsEqual(y.I64, []int64{3, 4}) || g.Values["y"].DType != onnx.Int64 {
		t.Fatalf("y = %+v; want int64 [3 4]", y)
	}
	b = newBuilder(14).input("x", 2, 3).node("Shape", ss("x"), ss("y"), aInt("start", 1)).output("y")
	if _, err := b.compile(); err == nil || !strings.Contains(err.Error(), "need opset 15") {
		t.Fatalf("start at opset 14: %v", err)
	}
}

// TestInitializerInputOverride runs an input that has an initializer default as a
// run-time input when its shape is given, and as a constant otherwise.
func TestInitializerInputOverride(t *testing.T) {
	mk := func() *builder {
		b := newBuilder(13).input("x", 2, 3).input("bias", 3).
			init("bias", &onnx.Tensor{DType: onnx.Float, Dims: []int64{3}, F32: []float32{1, 2, 3}}).
			node("Add", ss("x", "bias"), ss("y")).output("y")
		return b
	}
	g, err := mk().compile()
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Inputs) != 2 || g.Initializers["bias"] != nil {
		t.Fatalf("bias with a shape: inputs %v, initializer %v", g.Inputs, g.Initializers["bias"])
	}
	b := mk()
	delete(b.shapes, "bias")
	if g, err = b.compile(); err != nil {
		t.Fatal(err)
	}
	if len(g.Inputs) != 1 || g.Initializers["bias"] == nil {
		t.Fatalf("bias without a shape: inputs %v, initializer %v", g.Inputs, g.Initializers["bias"])
	}
}

// TestIdentityAndDropoutRemoved renames through Identity and Dropout and keeps output names.
func TestIdentityAndDropoutRemoved(t *testing.T) {
	b := newBuilder(13).input("x", 2, 3).
		node("Relu", ss("x"), ss("a")).
		node("Identity", ss("a"), ss("b")).
		node("Dropout", ss("b"), ss("c", "mask")).
		node("Sigmoid", ss("c"), ss("d")).
		node("Identity", ss("d"), ss("y")).
		output("y")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Relu,Sigmoid" {
		t.Fatalf("nodes %s", opTypes(g))
	}
	if g.Nodes[1].Inputs[0] != "a" || g.Nodes[1].Outputs[0] != "y" {
		t.Fatalf("sigmoid %v -> %v; want a -> y", g.Nodes[1].Inputs, g.Nodes[1].Outputs)
	}
	checkComplete(t, g)

	// A graph that is only an Identity keeps one copy node.
	b = newBuilder(13).input("x", 2).node("Identity", ss("x"), ss("y")).output("y")
	if g, err = b.compile(); err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Identity" {
		t.Fatalf("nodes %s; want Identity", opTypes(g))
	}
}

// naiveConv is a reference 2-D convolution (NCHW, groups, strides, pads).
func naiveConv(x, w, bias *onnx.Tensor, group, stride, pad int64) *onnx.Tensor {
	n, c, h, wd := x.Dims[0], x.Dims[1], x.Dims[2], x.Dims[3]
	m, cg, kh, kw := w.Dims[0], w.Dims[1], w.Dims[2], w.Dims[3]
	oh, ow := (h+2*pad-kh)/stride+1, (wd+2*pad-kw)/stride+1
	out := &onnx.Tensor{DType: onnx.Float, Dims: []int64{n, m, oh, ow}, F32: make([]float32, n*m*oh*ow)}
	mg := m / group
	_ = c
	for b := int64(0); b < n; b++ {
		for o := int64(0); o < m; o++ {
			g := o / mg
			for i := int64(0); i < oh; i++ {
				for j := int64(0); j < ow; j++ {
					var s float64
					if bias != nil {
						s = float64(bias.F32[o])
					}
					for ci := int64(0); ci < cg; ci++ {
						for u := int64(0); u < kh; u++ {
							for v := int64(0); v < kw; v++ {
								y, xx := i*stride-pad+u, j*stride-pad+v
								if y < 0 || y >= h || xx < 0 || xx >= wd {
									continue
								}
								s += float64(x.F32[((b*c+g*cg+ci)*h+y)*wd+xx]) * float64(w.F32[((o*cg+ci)*kh+u)*kw+v])
							}
						}
					}
					out.F32[((b*m+o)*oh+i)*ow+j] = float32(s)
				}
			}
		}
	}
	return out
}

// TestBatchNormFold checks numerically that Conv+BN equals the folded Conv.
func TestBatchNormFold(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, group := range []int64{1, 2} {
		x := randTensor(r, 2, 4, 6, 6)
		w := randTensor(r, 6, 4/group, 3, 3)
		bias := randTensor(r, 6)
		gamma, beta, mean := randTensor(r, 6), randTensor(r, 6), randTensor(r, 6)
		variance := randTensor(r, 6)
		for i := range variance.F32 {
			variance.F32[i] = variance.F32[i]*variance.F32[i] + 0.1
		}
		const eps = 1e-3
		b := newBuilder(13).input("x", 2, 4, 6, 6).init("w", w).init("b", bias).
			init("gamma", gamma).init("beta", beta).init("mean", mean).init("var", variance).
			node("Conv", ss("x", "w", "b"), ss("c"), aInt("group", group), aInts("pads", 1, 1, 1, 1), aInts("strides", 2, 2)).
			node("BatchNormalization", ss("c", "gamma", "beta", "mean", "var"), ss("y"), aFloat("epsilon", eps)).
			output("y")
		g, err := b.compile()
		if err != nil {
			t.Fatal(err)
		}
		if opTypes(g) != "Conv" || g.Nodes[0].Outputs[0] != "y" {
			t.Fatalf("group %d: nodes %s, output %v", group, opTypes(g), g.Nodes[0].Outputs)
		}
		conv := g.Nodes[0]
		got := naiveConv(x, g.Initializers[conv.Inputs[1]], g.Initializers[conv.Inputs[2]], group, 2, 1)
		ref := naiveConv(x, w, bias, group, 2, 1)
		hw := int64(len(ref.F32)) / (2 * 6)
		var maxAbs, maxErr float64
		for i, v := range ref.F32 {
			ch := (int64(i) / hw) % 6
			bn := (float64(v)-float64(mean.F32[ch]))/math.Sqrt(float64(variance.F32[ch])+eps)*float64(gamma.F32[ch]) + float64(beta.F32[ch])
			maxAbs = math.Max(maxAbs, math.Abs(bn))
			maxErr = math.Max(maxErr, math.Abs(bn-float64(got.F32[i])))
		}
		if maxErr > 1e-5*math.Max(1, maxAbs) {
			t.Fatalf("group %d: folded conv differs by %g (max magnitude %g)", group, maxErr, maxAbs)
		}
		if !dimsEqual(g.Values["y"].Dims, []int64{2, 6, 3, 3}) {
			t.Fatalf("y dims %v", g.Values["y"].Dims)
		}
	}
}

// TestBatchNormNotFoldedWhenShared keeps BN when the conv output has another consumer.
func TestBatchNormNotFoldedWhenShared(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	b := newBuilder(13).input("x", 1, 2, 4, 4).init("w", randTensor(r, 2, 2, 1, 1)).
		init("s", randTensor(r, 2)).init("bb", randTensor(r, 2)).init("m", randTensor(r, 2)).init("v", randTensor(r, 2)).
		node("Conv", ss("x", "w"), ss("c")).
		node("BatchNormalization", ss("c", "s", "bb", "m", "v"), ss("y")).
		node("Relu", ss("c"), ss("z")).output("y", "z")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Conv,BatchNormalization,Relu" {
		t.Fatalf("nodes %s", opTypes(g))
	}
}

// resnetBlock builds conv-bn-relu-conv-bn-add-relu with an optional downsample branch.
func resnetBlock(r *rand.Rand, downsample bool) *builder {
	bn := func(b *builder, p string) {
		b.init(p+"s", randTensor(r, 4)).init(p+"b", randTensor(r, 4)).init(p+"m", randTensor(r, 4))
		v := randTensor(r, 4)
		for i := range v.F32 {
			v.F32[i] = v.F32[i]*v.F32[i] + 1
		}
		b.init(p+"v", v)
	}
	b := newBuilder(13).input("x", 1, 4, 8, 8).init("w1", randTensor(r, 4, 4, 3, 3)).init("w2", randTensor(r, 4, 4, 3, 3))
	bn(b, "bn1")
	bn(b, "bn2")
	pads := aInts("pads", 1, 1, 1, 1)
	b.node("Conv", ss("x", "w1"), ss("c1"), pads).
		node("BatchNormalization", ss("c1", "bn1s", "bn1b", "bn1m", "bn1v"), ss("b1")).
		node("Relu", ss("b1"), ss("r1")).
		node("Conv", ss("r1", "w2"), ss("c2"), pads).
		node("BatchNormalization", ss("c2", "bn2s", "bn2b", "bn2m", "bn2v"), ss("b2"))
	skip := "x"
	if downsample {
		b.init("wd", randTensor(r, 4, 4, 1, 1))
		bn(b, "bnd")
		b.node("Conv", ss("x", "wd"), ss("cd")).
			node("BatchNormalization", ss("cd", "bnds", "bndb", "bndm", "bndv"), ss("d"))
		skip = "d"
	}
	return b.node("Add", ss("b2", skip), ss("sum")).node("Relu", ss("sum"), ss("out")).output("out")
}

// TestFuseResNetBlock fuses BN, the residual Add and ReLU into the convolutions.
func TestFuseResNetBlock(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	g, err := resnetBlock(r, false).compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Conv,Conv" {
		t.Fatalf("nodes %s; want Conv,Conv", opTypes(g))
	}
	if p := postOps(g.Nodes[0]); p != "relu" {
		t.Fatalf("conv1 post-ops %q; want relu", p)
	}
	if p := postOps(g.Nodes[1]); p != "sum:x relu" {
		t.Fatalf("conv2 post-ops %q; want sum:x relu", p)
	}
	if g.Nodes[1].Outputs[0] != "out" || g.Nodes[1].Inputs[0] != g.Nodes[0].Outputs[0] {
		t.Fatalf("wiring: %v -> %v -> %v", g.Nodes[0].Outputs, g.Nodes[1].Inputs, g.Nodes[1].Outputs)
	}
	checkComplete(t, g)

	// With a downsample branch computed after conv2, the sum goes into the downsample conv.
	g, err = resnetBlock(r, true).compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Conv,Conv,Conv" {
		t.Fatalf("nodes %s", opTypes(g))
	}
	c2 := g.Nodes[1].Outputs[0]
	if p := postOps(g.Nodes[1]); p != "" {
		t.Fatalf("conv2 post-ops %q; want none", p)
	}
	if p := postOps(g.Nodes[2]); p != "sum:"+c2+" relu" {
		t.Fatalf("downsample post-ops %q; want sum:%s relu", p, c2)
	}
	checkComplete(t, g)
}

// TestFuseActivations covers every activation's post-op string and the cases that must not fuse.
func TestFuseActivations(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	cases := []struct {
		op    string
		opset int64
		attrs []*onnx.Attribute
		extra []string
		want  string
	}{
		{"Relu", 13, nil, nil, "relu"},
		{"LeakyRelu", 13, []*onnx.Attribute{aFloat("alpha", 0.1)}, nil, "leaky_relu:0.1"},
		{"LeakyRelu", 13, nil, nil, "leaky_relu:0.01"},
		{"Clip", 9, []*onnx.Attribute{aFloat("min", 0), aFloat("max", 6)}, nil, "clip:0:6"},
		{"Clip", 13, nil, []string{"lo", "hi"}, "clip:-1:2.5"},
		{"Sigmoid", 13, nil, nil, "sigmoid"},
		{"Tanh", 13, nil, nil, "tanh"},
		{"Elu", 13, []*onnx.Attribute{aFloat("alpha", 0.5)}, nil, "elu:0.5"},
		{"HardSigmoid", 13, nil, nil, "hard_sigmoid:0.2:0.5"},
		{"HardSwish", 14, nil, nil, "hard_swish"},
	}
	for _, tc := range cases {
		for _, producer := range []string{"Conv", "Gemm", "MatMul"} {
			b := newBuilder(tc.opset).init("lo", scalarF(-1)).init("hi", scalarF(2.5))
			switch producer {
			case "Conv":
				b.input("x", 1, 2, 4, 4).init("w", randTensor(r, 3, 2, 1, 1)).node("Conv", ss("x", "w"), ss("c"))
			case "Gemm":
				b.input("x", 2, 4).init("w", randTensor(r, 4, 3)).init("bias", randTensor(r, 3)).node("Gemm", ss("x", "w", "bias"), ss("c"))
			case "MatMul":
				b.input("x", 2, 4).init("w", randTensor(r, 4, 3)).node("MatMul", ss("x", "w"), ss("c"))
			}
			b.node(tc.op, append(ss("c"), tc.extra...), ss("y"), tc.attrs...).output("y")
			g, err := b.compile()
			if err != nil {
				t.Fatalf("%s after %s: %v", tc.op, producer, err)
			}
			if len(g.Nodes) != 1 || postOps(g.Nodes[0]) != tc.want || g.Nodes[0].Outputs[0] != "y" {
				t.Fatalf("%s after %s: nodes %s post-ops %q; want %q", tc.op, producer, opTypes(g), postOps(g.Nodes[0]), tc.want)
			}
		}
	}

	// Not fused: the intermediate is a graph output, or has two consumers, or the Add
	// broadcasts (a run-time operand), or the Add follows a Gemm.
	notFused := map[string]*builder{
		"graph output": newBuilder(13).input("x", 1, 2, 4, 4).init("w", randTensor(r, 2, 2, 1, 1)).
			node("Conv", ss("x", "w"), ss("c")).node("Relu", ss("c"), ss("y")).output("y", "c"),
		"two consumers": newBuilder(13).input("x", 1, 2, 4, 4).init("w", randTensor(r, 2, 2, 1, 1)).
			node("Conv", ss("x", "w"), ss("c")).node("Relu", ss("c"), ss("y")).node("Sigmoid", ss("c"), ss("z")).output("y", "z"),
		"broadcast add": newBuilder(13).input("x", 1, 2, 4, 4).input("bias", 2, 1, 1).init("w", randTensor(r, 2, 2, 1, 1)).
			node("Conv", ss("x", "w"), ss("c")).node("Add", ss("c", "bias"), ss("y")).output("y"),
		"add after gemm": newBuilder(13).input("x", 2, 4).input("s", 2, 3).init("w", randTensor(r, 4, 3)).
			init("bias", randTensor(r, 3)).node("Gemm", ss("x", "w", "bias"), ss("c")).node("Add", ss("c", "s"), ss("y")).output("y"),
		"broadcast add after matmul": newBuilder(13).input("x", 2, 4).input("s", 1, 3).init("w", randTensor(r, 4, 3)).
			node("MatMul", ss("x", "w"), ss("c")).node("Add", ss("c", "s"), ss("y")).output("y"),
		"add of a later value": newBuilder(13).input("x", 1, 2, 4, 4).init("w", randTensor(r, 2, 2, 1, 1)).
			node("Conv", ss("x", "w"), ss("c")).node("Sigmoid", ss("x"), ss("later")).node("Add", ss("c", "later"), ss("y")).output("y"),
	}
	for name, b := range notFused {
		g, err := b.compile()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, n := range g.Nodes {
			if p := postOps(n); p != "" {
				t.Fatalf("%s: %s fused %q", name, n.OpType, p)
			}
		}
		checkComplete(t, g)
	}
}

// TestFoldPads merges zero spatial Pads into Conv and AveragePool windows, and only then.
func TestFoldPads(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	w := randTensor(r, 4, 2, 3, 3)
	padded := func(pads []int64, value float32, consumer func(b *builder)) *builder {
		b := newBuilder(13).input("x", 1, 2, 8, 8).init("w", w).init("p", ints(pads...)).init("v", scalarF(value)).
			node("Pad", ss("x", "p", "v"), ss("xp"))
		consumer(b)
		return b.output("y")
	}
	conv := func(b *builder) { b.node("Conv", ss("xp", "w"), ss("y"), aInts("pads", 1, 0, 1, 0)) }
	avg := func(b *builder) {
		b.node("AveragePool", ss("xp"), ss("y"), aInts("kernel_shape", 3, 3), aInts("strides", 1, 1))
	}
	maxp := func(b *builder) { b.node("MaxPool", ss("xp"), ss("y"), aInts("kernel_shape", 3, 3)) }
	cases := []struct {
		name     string
		b        *builder
		nodes    string
		wantPads []int64
	}{
		{"conv", padded([]int64{0, 0, 0, 1, 0, 0, 1, 2}, 0, conv), "Conv", []int64{1, 1, 2, 2}},
		{"avgpool", padded([]int64{0, 0, 1, 1, 0, 0, 1, 1}, 0, avg), "AveragePool", []int64{1, 1, 1, 1}},
		{"nonzero value", padded([]int64{0, 0, 1, 1, 0, 0, 1, 1}, 1, conv), "Pad,Conv", nil},
		{"channel pad", padded([]int64{0, 1, 0, 0, 0, 0, 0, 0}, 0, avg), "Pad,AveragePool", nil},
		{"maxpool", padded([]int64{0, 0, 1, 1, 0, 0, 1, 1}, 0, maxp), "Pad,MaxPool", nil},
		{"pad as large as the window", padded([]int64{0, 0, 3, 0, 0, 0, 0, 0}, 0, avg), "Pad,AveragePool", nil},
	}
	for _, tc := range cases {
		g, err := tc.b.compile()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if opTypes(g) != tc.nodes {
			t.Fatalf("%s: nodes %s; want %s", tc.name, opTypes(g), tc.nodes)
		}
		n := g.Nodes[len(g.Nodes)-1]
		if tc.wantPads != nil {
			if !dimsEqual(n.Attrs["pads"].Ints, tc.wantPads) || n.Inputs[0] != "x" {
				t.Fatalf("%s: pads %v input %s; want %v from x", tc.name, n.Attrs["pads"].Ints, n.Inputs[0], tc.wantPads)
			}
			if n.OpType == "AveragePool" && n.Attrs["count_include_pad"].I != 1 {
				t.Fatalf("%s: count_include_pad not set", tc.name)
			}
		}
		checkComplete(t, g)
	}
}

// TestCompileRejects covers malformed graphs and inputs: errors, never panics.
func TestCompileRejects(t *testing.T) {
	cases := map[string]struct {
		b    func() *builder
		want string
	}{
		"cycle": {func() *builder {
			return newBuilder(13).input("x", 2).node("Add", ss("x", "b"), ss("a")).node("Relu", ss("a"), ss("b")).output("b")
		}, "cycle"},
		"dangling": {func() *builder { return newBuilder(13).input("x", 2).node("Add", ss("x", "nope"), ss("y")).output("y") }, `"nope" is not defined`},
		"defined twice": {func() *builder {
			return newBuilder(13).input("x", 2).node("Relu", ss("x"), ss("y")).node("Sigmoid", ss("x"), ss("y")).output("y")
		}, "defined more than once"},
		"absurd dims": {func() *builder {
			return newBuilder(13).input("x", 1<<40, 1<<40).node("Relu", ss("x"), ss("y")).output("y")
		}, "exceeds"},
		"overflow": {func() *builder {
			return newBuilder(13).input("x", 1<<20, 1<<20, 1<<20).node("Relu", ss("x"), ss("y")).output("y")
		}, "more than"},
		"negative dim":   {func() *builder { return newBuilder(13).input("x", -3).node("Relu", ss("x"), ss("y")).output("y") }, "negative"},
		"missing output": {func() *builder { return newBuilder(13).input("x", 2).node("Relu", ss("x"), ss("y")).output("z") }, `"z" is not computed`},
		"old opset":      {func() *builder { return newBuilder(5).input("x", 2).node("Relu", ss("x"), ss("y")).output("y") }, "opset 5 not supported"},
		"reshape overflow": {func() *builder {
			return newBuilder(13).input("x", 4).init("s", ints(1<<40, 1<<40, 0)).node("Reshape", ss("x", "s"), ss("y")).output("y")
		}, "too large"},
		"huge fold": {func() *builder {
			return newBuilder(13).init("a", ints(1)).init("s", ints(1<<20, 1<<20)).node("Reshape", ss("a", "s"), ss("y")).output("y")
		}, "too large"},
		"huge broadcast fold feeding a shape": {func() *builder {
			// too big to fold, so it runs at run time, where a shape cannot come from
			a := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{1 << 14, 1}, I64: make([]int64, 1<<14)}
			c := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{1, 1 << 14}, I64: make([]int64, 1<<14)}
			return newBuilder(13).init("a", a).init("c", c).node("Add", ss("a", "c"), ss("s")).
				input("x", 1).node("Reshape", ss("x", "s"), ss("y")).output("y")
		}, "shape (input 1) must be a constant"},
		"pad huge": {func() *builder {
			return newBuilder(13).input("x", 2).init("p", ints(1<<62, 1<<62)).node("Pad", ss("x", "p"), ss("y")).output("y")
		}, "absurd pads"},
		"conv huge stride": {func() *builder {
			return newBuilder(13).input("x", 1, 1, 4, 4).init("w", &onnx.Tensor{DType: onnx.Float, Dims: []int64{1, 1, 1, 1}, F32: []float32{1}}).
				node("Conv", ss("x", "w"), ss("y"), aInts("strides", 1<<62, 1)).output("y")
		}, "strides"},
		"bad initializer": {func() *builder {
			return newBuilder(13).input("x", 2).init("w", &onnx.Tensor{DType: onnx.Float, Dims: []int64{3}, F32: []float32{1}}).
				node("Add", ss("x", "w"), ss("y")).output("y")
		}, "has 1 elements"},
		"int runtime input": {func() *builder {
			b := newBuilder(13)
			b.m.Graph.Inputs = append(b.m.Graph.Inputs, onnx.ValueInfo{Name: "x", DType: onnx.Int64, Dims: []int64{2}, HasShape: true})
			b.shapes["x"] = []int64{2}
			return b.node("Relu", ss("x"), ss("y")).output("y")
		}, "input 0 is int64; want float32"},
		"string runtime input": {func() *builder {
			b := newBuilder(13)
			b.m.Graph.Inputs = append(b.m.Graph.Inputs, onnx.ValueInfo{Name: "x", DType: onnx.String, Dims: []int64{2}, HasShape: true})
			b.shapes["x"] = []int64{2}
			return b.node("Identity", ss("x"), ss("y")).output("y")
		}, "must be float32, an integer type or bool"},
		"shape mismatch declared": {func() *builder {
			b := newBuilder(13).input("x", 2, 3).node("Relu", ss("x"), ss("y")).output("y")
			b.shapes["x"] = []int64{2, 4}
			return b
		}, "graph declares"},
		"no shape given": {func() *builder {
			b := newBuilder(13).input("x", 2).node("Relu", ss("x"), ss("y")).output("y")
			delete(b.shapes, "x")
			return b
		}, "no shape or value given"},
		"unknown shape name": {func() *builder {
			b := newBuilder(13).input("x", 2).node("Relu", ss("x"), ss("y")).output("y")
			b.shapes["q"] = []int64{1}
			return b
		}, "not a graph input"},
		"int div by zero": {func() *builder {
			return newBuilder(13).init("a", ints(1)).init("b", ints(0)).node("Div", ss("a", "b"), ss("c")).
				input("x", 1).node("Reshape", ss("x", "c"), ss("y")).output("y")
		}, "division by zero"},
	}
	for name, tc := range cases {
		g, err := tc.b().compile()
		if err == nil {
			t.Errorf("%s: compiled (%d nodes); want error containing %q", name, len(g.Nodes), tc.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "graph: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q; want %q", name, err, tc.want)
		}
	}
	if _, err := Compile(nil, nil, nil); err == nil {
		t.Error("nil model compiled")
	}
}

// TestLargeFoldRunsAtRunTime keeps a float node whose folded result would be too large.
func TestLargeFoldRunsAtRunTime(t *testing.T) {
	a := &onnx.Tensor{DType: onnx.Float, Dims: []int64{1 << 13, 1}, F32: make([]float32, 1<<13)}
	c := &onnx.Tensor{DType: onnx.Float, Dims: []int64{1, 1 << 13}, F32: make([]float32, 1<<13)}
	g, err := newBuilder(13).init("a", a).init("c", c).node("Add", ss("a", "c"), ss("y")).output("y").compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Add" || !dimsEqual(g.Values["y"].Dims, []int64{1 << 13, 1 << 13}) {
		t.Fatalf("nodes %s, y %v", opTypes(g), g.Values["y"].Dims)
	}
}

// TestFoldBudget stops a model that folds many large constants from exhausting memory.
func TestFoldBudget(t *testing.T) {
	b := newBuilder(13).init("shape", ints(2048, 1024))
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("c%d", i)
		b.node("ConstantOfShape", ss("shape"), ss(name)).output(name)
	}
	_, err := b.compile()
	if err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Fatalf("err = %v; want the fold budget exceeded", err)
	}
}

// TestCompileLargeGraph compiles 50,000 nodes (conv, BN, add, relu blocks and Identity
// chains) quickly: the passes are near-linear, so a huge model cannot stall a node.
func TestCompileLargeGraph(t *testing.T) {
	r := rand.New(rand.NewSource(17))
	b := newBuilder(13).input("x", 1, 2, 2, 2).init("w", randTensor(r, 2, 2, 1, 1)).
		init("s", randTensor(r, 2)).init("bb", randTensor(r, 2)).init("m", randTensor(r, 2)).
		init("v", &onnx.Tensor{DType: onnx.Float, Dims: []int64{2}, F32: []float32{1, 2}})
	prev := "x"
	const blocks = 10000
	for i := 0; i < blocks; i++ {
		p := fmt.Sprintf("b%d_", i)
		b.node("Conv", ss(prev, "w"), ss(p+"c")).
			node("BatchNormalization", ss(p+"c", "s", "bb", "m", "v"), ss(p+"n")).
			node("Add", ss(p+"n", prev), ss(p+"a")).
			node("Relu", ss(p+"a"), ss(p+"r")).
			node("Identity", ss(p+"r"), ss(p+"i"))
		prev = p + "i"
	}
	b.output(prev)
	start := time.Now()
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Nodes) != blocks || postOps(g.Nodes[blocks-1]) != "sum:"+g.Nodes[blocks-2].Outputs[0]+" relu" {
		t.Fatalf("%d nodes, last post-ops %q", len(g.Nodes), postOps(g.Nodes[blocks-1]))
	}
	if g.Nodes[blocks-1].Outputs[0] != prev {
		t.Fatalf("graph output renamed: %v", g.Nodes[blocks-1].Outputs)
	}
	if d := time.Since(start); d > 30*time.Second { // quadratic passes would take minutes
		t.Fatalf("compiling %d nodes took %v", 5*blocks, d)
	}
}

// TestCompileDoesNotMutate checks that the input model encodes identically after Compile.
func TestCompileDoesNotMutate(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	b := resnetBlock(r, true)
	b.m.Graph.Nodes = append(b.m.Graph.Nodes, &onnx.Node{Name: "id", OpType: "Identity", Inputs: ss("out"), Outputs: ss("out2"), Attrs: map[string]*onnx.Attribute{}})
	b.m.Graph.Outputs = []onnx.ValueInfo{{Name: "out2"}}
	before := onnx.Encode(b.m)
	if _, err := b.compile(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, onnx.Encode(b.m)) {
		t.Fatal("Compile changed its input model")
	}
}

// TestFLOPs counts a convolution's multiply-adds twice.
func TestFLOPs(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	b := newBuilder(13).input("x", 1, 3, 32, 32).init("w", randTensor(r, 8, 3, 3, 3)).
		node("Conv", ss("x", "w"), ss("c")).node("Flatten", ss("c"), ss("f")).
		init("fc", randTensor(r, 7200, 10)).node("MatMul", ss("f", "fc"), ss("y")).output("y")
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	want := 2.0*8*30*30*27 + 2.0*10*7200
	if got := FLOPs(g); got != want {
		t.Fatalf("FLOPs = %g; want %g", got, want)
	}
}

// TestFuseSwish: Conv then x*Sigmoid(x) (PyTorch's SiLU export) becomes the post-op
// "swish:1", in either Mul operand order, followed by further activations; it does not fuse
// when the Sigmoid's output has another reader or the product is not x*Sigmoid(x).
func TestFuseSwish(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	conv := func() *builder {
		return newBuilder(13).input("x", 1, 2, 4, 4).init("w", randTensor(r, 3, 2, 1, 1)).node("Conv", ss("x", "w"), ss("c"))
	}
	for _, order := range [][]string{{"c", "s"}, {"s", "c"}} {
		g, err := conv().node("Sigmoid", ss("c"), ss("s")).node("Mul", ss(order...), ss("m")).
			node("Relu", ss("m"), ss("y")).output("y").compile()
		if err != nil {
			t.Fatal(err)
		}
		if opTypes(g) != "Conv" || postOps(g.Nodes[0]) != "swish:1 relu" || g.Nodes[0].Outputs[0] != "y" {
			t.Fatalf("Mul%v: nodes %s post-ops %q", order, opTypes(g), postOps(g.Nodes[0]))
		}
		checkComplete(t, g)
	}
	notFused := map[string]*builder{
		"sigmoid read twice": conv().node("Sigmoid", ss("c"), ss("s")).node("Mul", ss("c", "s"), ss("y")).
			node("Relu", ss("s"), ss("z")).output("y", "z"),
		"mul of another value": conv().node("Sigmoid", ss("c"), ss("s")).node("Mul", ss("s", "s"), ss("y")).
			node("Relu", ss("c"), ss("z")).output("y", "z"),
	}
	for name, b := range notFused {
		g, err := b.compile()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, n := range g.Nodes {
			if p := postOps(n); strings.Contains(p, "swish") {
				t.Fatalf("%s: %s fused %q", name, n.OpType, p)
			}
		}
		checkComplete(t, g)
	}
}

// TestFuseMatMulBias: MatMul by constant 2-D weights takes the constant bias Add after it
// as a third input, then Gelu and the residual Add as post-ops; a bias that is not along
// the last dim, or weights computed at run time, stay separate Adds.
func TestFuseMatMulBias(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	g, err := newBuilder(20).input("x", 2, 3, 4).init("w", randTensor(r, 4, 4)).init("b", randTensor(r, 1, 4)).
		node("Relu", ss("x"), ss("z")).node("MatMul", ss("z", "w"), ss("m")).node("Add", ss("b", "m"), ss("a")).
		node("Gelu", ss("a"), ss("h")).node("MatMul", ss("h", "w"), ss("m2")).node("Add", ss("m2", "b"), ss("a2")).
		node("Add", ss("z", "a2"), ss("y")).output("y").compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Relu,MatMul,MatMul" || len(g.Nodes[1].Inputs) != 3 || g.Nodes[1].Inputs[2] != "b" ||
		postOps(g.Nodes[1]) != "gelu_erf" || len(g.Nodes[2].Inputs) != 3 || postOps(g.Nodes[2]) != "sum:z" || g.Nodes[2].Outputs[0] != "y" {
		t.Fatalf("nodes %s, inputs %v %v, post-ops %q %q", opTypes(g), g.Nodes[1].Inputs, g.Nodes[2].Inputs, postOps(g.Nodes[1]), postOps(g.Nodes[2]))
	}
	checkComplete(t, g)
	for name, b := range map[string]*builder{
		"bias along another dim": newBuilder(13).input("x", 2, 4, 4).init("w", randTensor(r, 4, 4)).init("b", randTensor(r, 4, 1)).
			node("MatMul", ss("x", "w"), ss("m")).node("Add", ss("m", "b"), ss("y")).output("y"),
		"run-time weights": newBuilder(13).input("x", 2, 4).input("w", 4, 3).init("b", randTensor(r, 3)).
			node("MatMul", ss("x", "w"), ss("m")).node("Add", ss("m", "b"), ss("y")).output("y"),
	} {
		g, err := b.compile()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if opTypes(g) != "MatMul,Add" || len(g.Nodes[0].Inputs) != 2 {
			t.Fatalf("%s: nodes %s", name, opTypes(g))
		}
	}
}

// TestDropExpands: Div(x, Expand(n, shape)) reads n directly when the broadcast gives the
// same output (F.normalize's export); an Expand that widens the output, or that another
// node reads, stays.
func TestDropExpands(t *testing.T) {
	shape := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{3}, I64: []int64{2, 3, 4}}
	g, err := newBuilder(13).input("x", 2, 3, 4).input("n", 2, 3, 1).init("shape", shape).
		node("Expand", ss("n", "shape"), ss("e")).node("Div", ss("x", "e"), ss("y")).output("y").compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Div" || g.Nodes[0].Inputs[1] != "n" {
		t.Fatalf("nodes %s, inputs %v", opTypes(g), g.Nodes[0].Inputs)
	}
	checkComplete(t, g)
	for name, b := range map[string]*builder{
		"widens": newBuilder(13).input("x", 3, 1).input("n", 3, 1).init("shape", shape).
			node("Expand", ss("n", "shape"), ss("e")).node("Div", ss("x", "e"), ss("y")).output("y"),
		"two readers": newBuilder(13).input("x", 2, 3, 4).input("n", 2, 3, 1).init("shape", shape).
			node("Expand", ss("n", "shape"), ss("e")).node("Div", ss("x", "e"), ss("y")).node("Relu", ss("e"), ss("z")).output("y", "z"),
	} {
		g, err := b.compile()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if opTypes(g)[:6] != "Expand" {
			t.Fatalf("%s: nodes %s", name, opTypes(g))
		}
	}
}

// TestFoldFloatOps: MatMul ((..., K) by (K, N)), Sigmoid, Exp and Clip of constants fold
// (Swin V2's position-bias MLP and logit scale) to the values computed directly.
func TestFoldFloatOps(t *testing.T) {
	tab := &onnx.Tensor{DType: onnx.Float, Dims: []int64{1, 3, 2}, F32: []float32{1, 2, -1, 0.5, 0, 3}}
	w := &onnx.Tensor{DType: onnx.Float, Dims: []int64{2, 2}, F32: []float32{0.5, -1, 2, 0.25}}
	hi := &onnx.Tensor{DType: onnx.Float, Dims: []int64{}, F32: []float32{1.5}}
	g, err := newBuilder(13).input("x", 1, 3, 2).init("tab", tab).init("w", w).init("hi", hi).
		node("MatMul", ss("tab", "w"), ss("m")).node("Sigmoid", ss("m"), ss("s")).node("Clip", ss("m", "", "hi"), ss("c")).
		node("Exp", ss("c"), ss("e")).node("Add", ss("s", "e"), ss("k")).node("Mul", ss("x", "k"), ss("y")).output("y").compile()
	if err != nil {
		t.Fatal(err)
	}
	if opTypes(g) != "Mul" {
		t.Fatalf("nodes %s", opTypes(g))
	}
	k := g.Initializers[g.Nodes[0].Inputs[1]]
	for r := 0; r < 3; r++ {
		for j := 0; j < 2; j++ {
			m := float64(tab.F32[2*r])*float64(w.F32[j]) + float64(tab.F32[2*r+1])*float64(w.F32[2+j])
			want := float32(1/(1+math.Exp(-m))) + float32(math.Exp(math.Min(m, 1.5)))
			if got := k.F32[2*r+j]; math.Abs(float64(got-want)) > 1e-6*math.Abs(float64(want)) {
				t.Fatalf("element %d,%d: %v, want %v", r, j, got, want)
			}
		}
	}
}

// TestFuseHardSwishPair: Conv then x*HardSigmoid(x) with alpha 1/6 and beta 0.5 (PyTorch's
// HardSwish before opset 14) becomes the post-op "hard_swish"; other slopes stay apart.
func TestFuseHardSwishPair(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	conv := func() *builder {
		return newBuilder(13).input("x", 1, 2, 4, 4).init("w", randTensor(r, 3, 2, 1, 1)).node("Conv", ss("x", "w"), ss("c"))
	}
	for _, order := range [][]string{{"c", "s"}, {"s", "c"}} {
		g, err := conv().node("HardSigmoid", ss("c"), ss("s"), aFloat("alpha", 1.0/6), aFloat("beta", 0.5)).
			node("Mul", ss(order...), ss("y")).output("y").compile()
		if err != nil {
			t.Fatal(err)
		}
		if opTypes(g) != "Conv" || postOps(g.Nodes[0]) != "hard_swish" || g.Nodes[0].Outputs[0] != "y" {
			t.Fatalf("Mul%v: nodes %s post-ops %q", order, opTypes(g), postOps(g.Nodes[0]))
		}
		checkComplete(t, g)
	}
	g, err := conv().node("HardSigmoid", ss("c"), ss("s")).node("Mul", ss("c", "s"), ss("y")).output("y").compile()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if strings.Contains(postOps(n), "hard_swish") {
			t.Fatalf("HardSigmoid of alpha 0.2 fused as HardSwish: %s %q", n.OpType, postOps(n))
		}
	}
	checkComplete(t, g)
}
