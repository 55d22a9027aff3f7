package torchcheck

import (
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// opGraph builds a small graph in which train_ref.py's ops appear with the attributes the
// zoo never writes (asymmetric pads, dilations, groups, ceil_mode, count_include_pad 0,
// Gemm's alpha and beta, Reshape's 0 and -1, Clip's inputs, broadcasting Add, Constant).
type opGraph struct {
	g   *onnx.Graph
	rng *rand.Rand
}

func (b *opGraph) init(name string, dims ...int64) string {
	t := &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
	for i := range t.F32 {
		t.F32[i] = float32(b.rng.NormFloat64() * 0.5)
	}
	b.g.Initializers[name] = t
	return name
}

func (b *opGraph) node(op string, inputs []string, attrs ...*onnx.Attribute) string {
	out := strings.ToLower(op) + "_" + string(rune('a'+len(b.g.Nodes)))
	n := &onnx.Node{Name: out, OpType: op, Inputs: inputs, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	b.g.Nodes = append(b.g.Nodes, n)
	return out
}

func ints(name string, v ...int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
}

func intAttr(name string, v int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: v}
}

func floatAttr(name string, v float32) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrFloat, F: v}
}

// opsModel returns the graph (input N,2,9,9; output N,8) and the initializers train_ref.py
// must train: Conv W/B, Gemm B/C, MatMul B and BatchNormalization scale/bias, nothing else.
func opsModel() (*onnx.Model, []string) {
	b := &opGraph{g: &onnx.Graph{Name: "ops", Initializers: map[string]*onnx.Tensor{}}, rng: rand.New(rand.NewPCG(3, 3))}
	x := "input"
	c1 := b.node("Conv", []string{x, b.init("w1", 4, 2, 3, 3), b.init("b1", 4)},
		ints("kernel_shape", 3, 3), ints("strides", 2, 1), ints("pads", 1, 0, 2, 1), ints("dilations", 1, 2)) // N,4,5,6
	mean := b.init("bn.mean", 4)
	variance := b.init("bn.var", 4)
	for i := range b.g.Initializers[variance].F32 {
		v := &b.g.Initializers[variance].F32[i]
		*v = 0.5 + *v**v
	}
	bn := b.node("BatchNormalization", []string{c1, b.init("bn.scale", 4), b.init("bn.bias", 4), mean, variance},
		floatAttr("epsilon", 1e-5), floatAttr("momentum", 0.9))
	c2 := b.node("Conv", []string{bn, b.init("w2", 4, 2, 3, 3)}, ints("pads", 1, 1, 1, 1), intAttr("group", 2))
	t := b.node("Tanh", []string{b.node("LeakyRelu", []string{c2}, floatAttr("alpha", 0.2))})
	s := b.node("Sigmoid", []string{c1})
	a := b.node("Add", []string{t, b.init("shift", 4, 1, 1)})
	b.g.Initializers["lo"] = &onnx.Tensor{Name: "lo", DType: onnx.Float, F32: []float32{-0.5}}
	b.g.Initializers["hi"] = &onnx.Tensor{Name: "hi", DType: onnx.Float, F32: []float32{0.5}}
	cl := b.node("Clip", []string{a, "lo", "hi"})
	cat := b.node("Concat", []string{cl, b.node("Relu", []string{s})}, intAttr("axis", 1)) // N,8,5,6
	mp := b.node("MaxPool", []string{cat}, ints("kernel_shape", 2, 2), ints("strides", 2, 2), intAttr("ceil_mode", 1))
	ap := b.node("AveragePool", []string{cat}, ints("kernel_shape", 3, 3), ints("strides", 2, 2),
		ints("pads", 1, 1, 1, 1), intAttr("count_include_pad", 0)) // both N,8,3,3
	sum := b.node("Add", []string{mp, ap})
	b.g.Initializers["shape"] = &onnx.Tensor{Name: "shape", DType: onnx.Int64, Dims: []int64{2}, I64: []int64{0, -1}}
	flat := b.node("Identity", []string{b.node("Reshape", []string{sum, "shape"})}) // N,72
	g1 := b.node("Gemm", []string{flat, b.init("wg", 72, 5), b.init("cg", 5)}, floatAttr("alpha", 0.5), floatAttr("beta", 2))
	mm := b.node("MatMul", []string{g1, b.init("wm", 5, 5)})
	gap := b.node("Flatten", []string{b.node("GlobalAveragePool", []string{sum})}, intAttr("axis", 1)) // N,8
	k := b.node("Constant", nil, &onnx.Attribute{Name: "value", Type: onnx.AttrTensor,
		T: &onnx.Tensor{DType: onnx.Float, Dims: []int64{3}, F32: []float32{0.1, -0.2, 0.3}}})
	g2 := b.node("Add", []string{b.node("Gemm", []string{gap, b.init("w4", 3, 8)}, intAttr("transB", 1)), k})
	b.node("Concat", []string{mm, g2}, intAttr("axis", 1))
	b.g.Nodes[len(b.g.Nodes)-1].Outputs[0] = "output"
	b.g.Inputs = []onnx.ValueInfo{{Name: "input", DType: onnx.Float, Dims: []int64{-1, 2, 9, 9}, DimParams: []string{"N", "", "", ""}, HasShape: true}}
	b.g.Outputs = []onnx.ValueInfo{{Name: "output", DType: onnx.Float, Dims: []int64{-1, 8}, DimParams: []string{"N", ""}, HasShape: true}}
	trainable := []string{"w1", "b1", "bn.scale", "bn.bias", "w2", "wg", "cg", "wm", "w4"}
	sort.Strings(trainable)
	return &onnx.Model{IRVersion: 8, ProducerName: "torchcheck", Opset: 13, Opsets: map[string]int64{"": 13}, Graph: b.g}, trainable
}

// TestTrainRefOpsMatchKernel checks train_ref.py's forward of every op in its training set
// against IDunno's inference kernel (eval mode), and which initializers it trains.
func TestTrainRefOpsMatchKernel(t *testing.T) {
	requireTorch(t)
	m, trainable := opsModel()
	path := filepath.Join(t.TempDir(), "ops.onnx")
	if err := onnx.WriteFile(path, m); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	dims := []int64{3, 2, 9, 9}
	x := make([]float32, volume(dims))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := []int64{0, 7, 3}
	r := runTorchTrain(t, path, x, dims, y, TorchTrainConfig{Optimizer: "sgd", LR: 0.1, Steps: 1}, "float64")
	d := relDiff(r.LogitsEval, kernelOutput(t, m, x, dims), nil)
	if !(d <= trainTol) {
		t.Errorf("eval-mode output differs from the kernel's by %.3g", d)
	}
	t.Logf("eval-mode output within %.3g of the kernel's", d)
	if got := strings.Join(sortedNames(r.Grad), " "); got != strings.Join(trainable, " ") {
		t.Errorf("trained initializers %s, want %s", got, strings.Join(trainable, " "))
	}
	for name, g := range r.Grad {
		if relDiff(g, make([]float64, len(g)), nil) == 0 {
			t.Errorf("%s: all-zero gradient", name)
		}
	}
	for _, name := range []string{"lo", "hi", "shift", "bn.mean", "bn.var"} {
		if _, ok := r.After[0][name]; !ok {
			t.Errorf("after_1 lacks %s", name)
		}
	}
	if d := relDiff(r.After[0]["shift"], initial(m, "shift"), nil); d != 0 {
		t.Errorf("the constant shift changed by %.3g in a step", d)
	}
}
