package zoo

import (
	"fmt"
	"math"

	"idunno/kernel/onnx"
)

// TransformerEncoder is the zoo's text architecture: a BERT-style encoder classifier.
const TransformerEncoder = "transformer_encoder"

// TextOpset is the opset of the text models (LayerNormalization is an operator from 17).
const TextOpset = 17

// TextOptions size a transformer_encoder. Zero values take the defaults (vocabulary
// 30522, length 128, 2 layers, 4 heads, width 256, 2 classes).
type TextOptions struct {
	Vocab, Length, Layers, Heads, Width, Classes int64
	Seed                                         uint64
}

// BuildText returns transformer_encoder as an ONNX model with int64 inputs "ids" and
// "mask" of shape (N, Length) (mask: 1 for a token, 0 for padding; N symbolic) and output
// "output" holding (N, classes) logits. Each layer is torch.nn.TransformerEncoderLayer's
// (post-norm, GELU, feed-forward 4x width): token embedding by Gather on the ids plus a
// learned position embedding, multi-head attention through MatMul and Softmax with the
// padding masked out, LayerNormalization, then mean pooling over the real tokens, a
// final LayerNormalization and a linear head. Weights are N(0, 0.02) from Seed (layer
// norms 1 and 0); the same options always give the same bytes.
func BuildText(opt TextOptions) (*onnx.Model, error) {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&opt.Vocab, 30522)
	def(&opt.Length, 128)
	def(&opt.Layers, 2)
	def(&opt.Heads, 4)
	def(&opt.Width, 256)
	def(&opt.Classes, 2)
	switch {
	case opt.Vocab < 2 || opt.Vocab > 1<<20:
		return nil, fmt.Errorf("zoo: %s: vocabulary %d out of range (2..%d)", TransformerEncoder, opt.Vocab, 1<<20)
	case opt.Length < 1 || opt.Length > 8192:
		return nil, fmt.Errorf("zoo: %s: length %d out of range (1..8192)", TransformerEncoder, opt.Length)
	case opt.Layers < 1 || opt.Layers > 48:
		return nil, fmt.Errorf("zoo: %s: %d layers out of range (1..48)", TransformerEncoder, opt.Layers)
	case opt.Width < 1 || opt.Width > 4096:
		return nil, fmt.Errorf("zoo: %s: width %d out of range (1..4096)", TransformerEncoder, opt.Width)
	case opt.Heads < 1 || opt.Width%opt.Heads != 0:
		return nil, fmt.Errorf("zoo: %s: %d heads do not divide width %d", TransformerEncoder, opt.Heads, opt.Width)
	case opt.Classes < 1 || opt.Classes > 100000:
		return nil, fmt.Errorf("zoo: %s: %d classes out of range (1..100000)", TransformerEncoder, opt.Classes)
	}
	if opt.Vocab*opt.Width > 1<<28 {
		return nil, fmt.Errorf("zoo: %s: embedding of %d x %d too large", TransformerEncoder, opt.Vocab, opt.Width)
	}
	b := newBuilder(opt.Seed)
	t := &textBuilder{builder: b, opt: opt}
	out := t.build()
	last := b.g.Nodes[len(b.g.Nodes)-1]
	if last.Outputs[0] != out {
		panic("zoo: the last node does not produce the model output")
	}
	last.Outputs[0] = "output"
	b.g.Name = TransformerEncoder
	L := opt.Length
	b.g.Inputs = []onnx.ValueInfo{
		{Name: "ids", DType: onnx.Int64, Dims: []int64{-1, L}, DimParams: []string{"N", ""}, HasShape: true},
		{Name: "mask", DType: onnx.Int64, Dims: []int64{-1, L}, DimParams: []string{"N", ""}, HasShape: true},
	}
	b.g.Outputs = []onnx.ValueInfo{{Name: "output", DType: onnx.Float, Dims: []int64{-1, opt.Classes},
		DimParams: []string{"N", ""}, HasShape: true}}
	return &onnx.Model{IRVersion: 8, ProducerName: "idunno-zoo", Opset: TextOpset,
		Opsets: map[string]int64{"": TextOpset}, Graph: b.g}, nil
}

type textBuilder struct {
	*builder
	opt TextOptions
}

func (t *textBuilder) ints(name string, v ...int64) string {
	t.g.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Int64, Dims: []int64{int64(len(v))}, I64: v}
	return name
}

func (t *textBuilder) scalar(name string, v float32) string {
	t.g.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: []int64{}, F32: []float32{v}}
	return name
}

// linear is x @ W^T + b with W stored as torch does (out, in), transposed once here so the
// graph is a plain MatMul.
func (t *textBuilder) linear(x, prefix string, in, out int64) string {
	w := t.param(prefix+".weight_t", t.normal(0.02), in, out)
	bias := t.param(prefix+".bias", t.normal(0.02), out)
	return t.node("Add", []string{t.node("MatMul", []string{x, w}), bias})
}

func (t *textBuilder) layerNorm(x, prefix string) string {
	d := t.opt.Width
	w := t.param(prefix+".weight", constant(1), d)
	bias := t.param(prefix+".bias", constant(0), d)
	return t.node("LayerNormalization", []string{x, w, bias}, intAttr("axis", -1), floatAttr("epsilon", 1e-5))
}

// gelu is x * 0.5 * (1 + erf(x / sqrt 2)), as exporters write GELU before opset 20.
func (t *textBuilder) gelu(x string) string {
	e := t.node("Erf", []string{t.node("Div", []string{x, "sqrt2"})})
	return t.node("Mul", []string{t.node("Mul", []string{x, t.node("Add", []string{e, "one"})}), "half"})
}

func (t *textBuilder) build() string {
	o := t.opt
	d, h, L := o.Width, o.Heads, o.Length
	dh := d / h
	t.scalar("one", 1)
	t.scalar("half", 0.5)
	t.scalar("sqrt2", float32(math.Sqrt2))
	t.scalar("neg_big", -1e9)
	t.scalar("inv_sqrt_dh", float32(1/math.Sqrt(float64(dh))))
	tok := t.param("tok.weight", t.normal(0.02), o.Vocab, d)
	pos := t.param("pos.weight", t.normal(0.02), L, d)
	x := t.node("Add", []string{t.node("Gather", []string{tok, "ids"}, intAttr("axis", 0)), pos})
	// mask (N, L) int64 -> m (N, L) float; bias (N, 1, 1, L) = (1 - m) * -1e9
	m := t.node("Cast", []string{"mask"}, intAttr("to", int64(onnx.Float)))
	bias := t.node("Mul", []string{t.node("Sub", []string{"one", m}), "neg_big"})
	bias = t.node("Unsqueeze", []string{bias, t.ints("axes_1_2", 1, 2)})
	heads := t.ints("shape_heads", 0, L, h, dh)
	flat := t.ints("shape_flat", 0, L, d)
	for i := int64(0); i < o.Layers; i++ {
		p := fmt.Sprintf("enc.layers.%d", i)
		split := func(name string, perm ...int64) string {
			y := t.linear(x, p+".self_attn."+name, d, d)
			return t.node("Transpose", []string{t.node("Reshape", []string{y, heads})}, ints("perm", perm...))
		}
		q := split("q", 0, 2, 1, 3) // (N, h, L, dh)
		k := split("k", 0, 2, 3, 1) // (N, h, dh, L)
		v := split("v", 0, 2, 1, 3)
		s := t.node("Add", []string{t.node("Mul", []string{t.node("MatMul", []string{q, k}), "inv_sqrt_dh"}), bias})
		a := t.node("MatMul", []string{t.node("Softmax", []string{s}, intAttr("axis", -1)), v})
		a = t.node("Reshape", []string{t.node("Transpose", []string{a}, ints("perm", 0, 2, 1, 3)), flat})
		x = t.layerNorm(t.node("Add", []string{x, t.linear(a, p+".self_attn.out_proj", d, d)}), p+".norm1")
		f := t.linear(t.gelu(t.linear(x, p+".linear1", d, 4*d)), p+".linear2", 4*d, d)
		x = t.layerNorm(t.node("Add", []string{x, f}), p+".norm2")
	}
	// mean over the real tokens
	m3 := t.node("Unsqueeze", []string{m, t.ints("axes_2", 2)}) // (N, L, 1)
	axis1 := t.ints("axes_1", 1)
	sum := t.node("ReduceSum", []string{t.node("Mul", []string{x, m3}), axis1}, intAttr("keepdims", 0))
	cnt := t.node("Max", []string{t.node("ReduceSum", []string{m3, axis1}, intAttr("keepdims", 0)), "one"})
	pooled := t.layerNorm(t.node("Div", []string{sum, cnt}), "norm")
	return t.linear(pooled, "head", d, o.Classes)
}
