package zoo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"idunno/kernel/onnx"
)

// value is a 4-D activation (N, C, H, W) in the graph being built; N is symbolic.
type value struct {
	name    string
	c, h, w int64
}

// builder appends nodes and seeded initializers to a graph. Initializers are named like
// the keys of torchvision's state_dict, so a model's weights load into the matching
// torchvision module (the PyTorch cross-check relies on this).
type builder struct {
	rng   *rand.Rand
	g     *onnx.Graph
	next  int         // counter for intermediate value names
	err   error       // the first shape error; later calls do nothing
	torch *torchRules // Init "torch": PyTorch's initialisation; nil: the seeded inference weights
}

func newBuilder(seed uint64) *builder {
	return &builder{
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		g:   &onnx.Graph{Initializers: map[string]*onnx.Tensor{}},
	}
}

func (b *builder) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf(format, args...)
	}
}

func (b *builder) tmp(kind string) string {
	b.next++
	return fmt.Sprintf("%s_%d", kind, b.next)
}

func (b *builder) node(op string, inputs []string, attrs ...*onnx.Attribute) string {
	out := b.tmp(op)
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

// param adds an initializer of the given shape filled by gen.
func (b *builder) param(name string, gen func() float64, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(gen())
	}
	if _, dup := b.g.Initializers[name]; dup {
		panic("zoo: duplicate initializer " + name) // a bug in an architecture table
	}
	b.g.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: data}
	return name
}

func (b *builder) normal(std float64) func() float64 {
	return func() float64 { return b.rng.NormFloat64() * std }
}

func (b *builder) uniform(lo, hi float64) func() float64 {
	return func() float64 { return lo + (hi-lo)*b.rng.Float64() }
}

func constant(v float64) func() float64 { return func() float64 { return v } }

// convSpec describes one convolution; kernel, stride and pad are (H, W).
type convSpec struct {
	out    int64
	kh, kw int64
	sh, sw int64
	ph, pw int64
	groups int64
	bias   bool
}

func k(n int64) convSpec { return convSpec{kh: n, kw: n, sh: 1, sw: 1, groups: 1} }

func (s convSpec) stride(n int64) convSpec  { s.sh, s.sw = n, n; return s }
func (s convSpec) pad(n int64) convSpec     { s.ph, s.pw = n, n; return s }
func (s convSpec) pad2(h, w int64) convSpec { s.ph, s.pw = h, w; return s }
func (s convSpec) group(n int64) convSpec   { s.groups = n; return s }
func (s convSpec) withBias() convSpec       { s.bias = true; return s }
func (s convSpec) outC(n int64) convSpec    { s.out = n; return s }
func kk(h, w int64) convSpec                { return convSpec{kh: h, kw: w, sh: 1, sw: 1, groups: 1} }

// conv adds a Conv with weights "<prefix>.weight" (and "<prefix>.bias"): He-initialised,
// or under Init "torch" as the architecture's torchRules say.
func (b *builder) conv(x value, prefix string, s convSpec) value {
	if b.err != nil {
		return x
	}
	oh := (x.h+2*s.ph-s.kh)/s.sh + 1
	ow := (x.w+2*s.pw-s.kw)/s.sw + 1
	if x.h+2*s.ph < s.kh || x.w+2*s.pw < s.kw {
		b.fail("%s: a %dx%d input is too small for a %dx%d convolution", prefix, x.h, x.w, s.kh, s.kw)
		return x
	}
	fanIn := x.c / s.groups * s.kh * s.kw
	wgen, bgen := b.normal(math.Sqrt(2/float64(fanIn))), b.normal(0.05)
	if b.torch != nil {
		wgen, bgen = b.torch.convInit(b, fanIn, s.out*s.kh*s.kw)
	}
	w := b.param(prefix+".weight", wgen, s.out, x.c/s.groups, s.kh, s.kw)
	inputs := []string{x.name, w}
	if s.bias {
		inputs = append(inputs, b.param(prefix+".bias", bgen, s.out))
	}
	y := b.node("Conv", inputs,
		ints("kernel_shape", s.kh, s.kw), ints("strides", s.sh, s.sw),
		ints("pads", s.ph, s.pw, s.ph, s.pw), ints("dilations", 1, 1), intAttr("group", s.groups))
	return value{name: y, c: s.out, h: oh, w: ow}
}

// bn adds an inference BatchNormalization with seeded statistics, named like torch's
// "<prefix>.weight/.bias/.running_mean/.running_var". gain scales gamma: residual
// branches use a small gain so activations stay O(1) through deep nets. Under Init
// "torch" it is a fresh nn.BatchNorm2d instead: weight 1, bias 0, running mean 0,
// running variance 1 (gain ignored). momentum 0.9 in ONNX's convention (running =
// running*momentum + batch*(1-momentum)) is torch's momentum 0.1.
func (b *builder) bn(x value, prefix string, eps float32, gain float64) value {
	if b.err != nil {
		return x
	}
	gGamma, gBeta, gMean, gVar := b.uniform(0.8*gain, 1.2*gain), b.normal(0.1), b.normal(0.1), b.uniform(0.5, 1.5)
	if b.torch != nil {
		gGamma, gBeta, gMean, gVar = constant(1), constant(0), constant(0), constant(1)
	}
	gamma := b.param(prefix+".weight", gGamma, x.c)
	beta := b.param(prefix+".bias", gBeta, x.c)
	mean := b.param(prefix+".running_mean", gMean, x.c)
	variance := b.param(prefix+".running_var", gVar, x.c)
	y := b.node("BatchNormalization", []string{x.name, gamma, beta, mean, variance},
		floatAttr("epsilon", eps), floatAttr("momentum", 0.9))
	return value{name: y, c: x.c, h: x.h, w: x.w}
}

func (b *builder) relu(x value) value {
	if b.err != nil {
		return x
	}
	x.name = b.node("Relu", []string{x.name})
	return x
}

// relu6 is Clip(x, 0, 6) with opset-13 min/max inputs.
func (b *builder) relu6(x value) value {
	if b.err != nil {
		return x
	}
	if _, ok := b.g.Initializers["clip_min"]; !ok {
		b.g.Initializers["clip_min"] = &onnx.Tensor{Name: "clip_min", DType: onnx.Float, F32: []float32{0}}
		b.g.Initializers["clip_max"] = &onnx.Tensor{Name: "clip_max", DType: onnx.Float, F32: []float32{6}}
	}
	x.name = b.node("Clip", []string{x.name, "clip_min", "clip_max"})
	return x
}

func (b *builder) add(x, y value) value {
	if b.err != nil {
		return x
	}
	x.name = b.node("Add", []string{x.name, y.name})
	return x
}

// pool adds MaxPool or AveragePool (count_include_pad=1, as torch's default).
func (b *builder) pool(op string, x value, kernel, stride, pad int64, ceil bool) value {
	if b.err != nil {
		return x
	}
	if x.h+2*pad < kernel || x.w+2*pad < kernel {
		b.fail("%s: a %dx%d input is too small for a %dx%d window", op, x.h, x.w, kernel, kernel)
		return x
	}
	out := func(n int64) int64 {
		span := n + 2*pad - kernel
		o := span/stride + 1
		if ceil && span%stride != 0 {
			o++
			if (o-1)*stride >= n+pad { // the last window must start inside the input
				o--
			}
		}
		return o
	}
	attrs := []*onnx.Attribute{ints("kernel_shape", kernel, kernel), ints("strides", stride, stride),
		ints("pads", pad, pad, pad, pad)}
	if ceil {
		attrs = append(attrs, intAttr("ceil_mode", 1))
	}
	if op == "AveragePool" {
		attrs = append(attrs, intAttr("count_include_pad", 1))
	}
	y := b.node(op, []string{x.name}, attrs...)
	return value{name: y, c: x.c, h: out(x.h), w: out(x.w)}
}

// adaptiveAvg mimics torch's AdaptiveAvgPool2d to a size x size map where the input
// divides evenly (the only case an exporter writes as a plain AveragePool).
func (b *builder) adaptiveAvg(x value, size int64) value {
	if b.err != nil || (x.h == size && x.w == size) {
		return x
	}
	if x.h%size != 0 || x.w%size != 0 || x.h != x.w {
		b.fail("the %dx%d feature map does not pool evenly to %dx%d (choose an input size that does)", x.h, x.w, size, size)
		return x
	}
	return b.pool("AveragePool", x, x.h/size, x.h/size, 0, false)
}

func (b *builder) globalAvg(x value) value {
	if b.err != nil {
		return x
	}
	y := b.node("GlobalAveragePool", []string{x.name})
	return value{name: y, c: x.c, h: 1, w: 1}
}

func (b *builder) concat(xs ...value) value {
	if b.err != nil {
		return xs[0]
	}
	names := make([]string, len(xs))
	c := int64(0)
	for i, x := range xs {
		names[i] = x.name
		c += x.c
		if x.h != xs[0].h || x.w != xs[0].w {
			b.fail("concat of %dx%d and %dx%d maps", xs[0].h, xs[0].w, x.h, x.w)
			return xs[0]
		}
	}
	y := b.node("Concat", names, intAttr("axis", 1))
	return value{name: y, c: c, h: xs[0].h, w: xs[0].w}
}

// flatten turns (N, C, H, W) into (N, C*H*W); the result's c holds the feature count.
func (b *builder) flatten(x value) value {
	if b.err != nil {
		return x
	}
	y := b.node("Flatten", []string{x.name}, intAttr("axis", 1))
	return value{name: y, c: x.c * x.h * x.w, h: 1, w: 1}
}

// linear adds Gemm(x, W^T, bias) with W of shape (out, in) as torch's nn.Linear stores it.
// hidden layers (followed by ReLU) use He scaling; the final layer keeps logits O(1).
// Under Init "torch" the architecture's torchRules decide instead.
func (b *builder) linear(x value, prefix string, out int64, hidden bool) value {
	if b.err != nil {
		return x
	}
	gain := 1.0
	if hidden {
		gain = 2
	}
	wgen, bgen := b.normal(math.Sqrt(gain/float64(x.c))), b.normal(0.05)
	if b.torch != nil {
		wgen, bgen = b.torch.linearInit(b, x.c)
	}
	w := b.param(prefix+".weight", wgen, out, x.c)
	bias := b.param(prefix+".bias", bgen, out)
	y := b.node("Gemm", []string{x.name, w, bias},
		floatAttr("alpha", 1), floatAttr("beta", 1), intAttr("transB", 1))
	return value{name: y, c: out, h: 1, w: 1}
}

// dropout adds torch's nn.Dropout(p) as an ONNX Dropout (opset 13: the ratio a constant
// input, training_mode absent, so inference treats it as the identity) under Init "torch";
// the inference weights leave it out, as before. module is the torch module's name
// ("classifier.0"), kept as the node's name.
func (b *builder) dropout(x value, module string, p float32) value {
	if b.err != nil || b.torch == nil {
		return x
	}
	ratio := "dropout_ratio_" + strconv.FormatFloat(float64(p), 'g', -1, 32)
	if _, ok := b.g.Initializers[ratio]; !ok {
		b.g.Initializers[ratio] = &onnx.Tensor{Name: ratio, DType: onnx.Float, F32: []float32{p}}
	}
	x.name = b.node("Dropout", []string{x.name, ratio})
	b.g.Nodes[len(b.g.Nodes)-1].Name = module
	return x
}
