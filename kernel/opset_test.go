package kernel

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// Opsets 18 to 21 changed how some operators take their arguments (Reduce* axes as an
// input and Split's num_outputs from 18; Gelu is an operator from 20) but not what the
// operators this kernel runs compute. These tests load models at those opsets through
// onnx.Validate and the graph compiler and check the answers.

// opsetModel is a small hand-built model for the opset tests.
type opsetModel struct{ m *onnx.Model }

func newOpsetModel(opset int64) *opsetModel {
	return &opsetModel{m: &onnx.Model{IRVersion: 8, Opset: opset, Opsets: map[string]int64{"": opset},
		Graph: &onnx.Graph{Name: "opset", Initializers: map[string]*onnx.Tensor{}}}}
}

func (b *opsetModel) input(name string, dims ...int64) {
	b.m.Graph.Inputs = append(b.m.Graph.Inputs, onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: dims,
		DimParams: make([]string, len(dims)), HasShape: true})
}

func (b *opsetModel) output(name string) {
	b.m.Graph.Outputs = append(b.m.Graph.Outputs, onnx.ValueInfo{Name: name, DType: onnx.Float})
}

func (b *opsetModel) ints(name string, v ...int64) string {
	b.m.Graph.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Int64, Dims: []int64{int64(len(v))}, I64: v}
	return name
}

func (b *opsetModel) node(op, name string, ins, outs []string, attrs ...*onnx.Attribute) {
	n := &onnx.Node{Name: name, OpType: op, Inputs: ins, Outputs: outs, Attrs: map[string]*onnx.Attribute{}}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	b.m.Graph.Nodes = append(b.m.Graph.Nodes, n)
}

func intsAttr(name string, v ...int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
}

func intAttr(name string, v int64) *onnx.Attribute {
	return &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: v}
}

// reduceSplitModel reduces and splits x (2, 3, 4) the way its opset writes it: axes as
// attributes and Split's sizes as an input before 18, axes as inputs and num_outputs from
// 18. axesAttrAt18 writes ReduceMean's axes as an attribute whatever the opset.
func reduceSplitModel(opset int64, axesAttrAt18 bool) *onnx.Model {
	b := newOpsetModel(opset)
	b.input("x", 2, 3, 4)
	reduce := func(op, out string, keep int64, axes ...int64) {
		if opset < 18 || (axesAttrAt18 && op == "ReduceMean") {
			b.node(op, "r_"+out, []string{"x"}, []string{out}, intsAttr("axes", axes...), intAttr("keepdims", keep))
			return
		}
		b.node(op, "r_"+out, []string{"x", b.ints("axes_"+out, axes...)}, []string{out}, intAttr("keepdims", keep))
	}
	reduce("ReduceMean", "mean", 1, -1)
	reduce("ReduceMax", "max", 0, 1)
	reduce("ReduceMin", "min", 1, 0, 2)
	if opset < 18 {
		b.node("Split", "split", []string{"x", b.ints("sizes", 2, 2)}, []string{"s0", "s1"}, intAttr("axis", 2))
	} else {
		b.node("Split", "split", []string{"x"}, []string{"s0", "s1"}, intAttr("axis", 2), intAttr("num_outputs", 2))
	}
	for _, o := range []string{"mean", "max", "min", "s0", "s1"} {
		b.output(o)
	}
	return b.m
}

// reduceSplitWant computes reduceSplitModel's outputs directly.
func reduceSplitWant(x []float32) [][]float32 {
	at := func(i, j, k int) float32 { return x[i*12+j*4+k] }
	var mean, mx, mn, s0, s1 []float32
	for i := 0; i < 2; i++ {
		for j := 0; j < 3; j++ {
			var s float32
			for k := 0; k < 4; k++ {
				s += at(i, j, k)
			}
			mean = append(mean, s/4)
		}
	}
	for i := 0; i < 2; i++ {
		for k := 0; k < 4; k++ {
			v := at(i, 0, k)
			for j := 1; j < 3; j++ {
				v = max(v, at(i, j, k))
			}
			mx = append(mx, v)
		}
	}
	for j := 0; j < 3; j++ {
		v := at(0, j, 0)
		for i := 0; i < 2; i++ {
			for k := 0; k < 4; k++ {
				v = min(v, at(i, j, k))
			}
		}
		mn = append(mn, v)
	}
	for i := 0; i < 2; i++ {
		for j := 0; j < 3; j++ {
			s0 = append(s0, at(i, j, 0), at(i, j, 1))
			s1 = append(s1, at(i, j, 2), at(i, j, 3))
		}
	}
	return [][]float32{mean, mx, mn, s0, s1}
}

// TestOpsets18To21 loads models written at every opset from 17 to 21: the zoo's text
// encoder gives the same bytes at each, Reduce*/Split in each opset's form give the
// directly computed answers, and a ReduceMean that keeps the old axes attribute at 18 is
// refused at load, naming the node.
func TestOpsets18To21(t *testing.T) {
	text, err := zoo.BuildText(zoo.TextOptions{Vocab: 100, Length: 16, Layers: 2, Heads: 4, Width: 32, Classes: 5, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	base := runText(t, text)
	x := &onnx.Tensor{DType: onnx.Float, Dims: []int64{2, 3, 4}, F32: make([]float32, 24)}
	for i := range x.F32 {
		x.F32[i] = float32(math.Sin(float64(i)*1.7)) * 3
	}
	want := reduceSplitWant(x.F32)
	for v := int64(17); v <= 21; v++ {
		t.Run(fmt.Sprintf("opset%d", v), func(t *testing.T) {
			text.Opset, text.Opsets[""] = v, v
			got := runText(t, text)
			for i := range base {
				if math.Float32bits(got[i]) != math.Float32bits(base[i]) {
					t.Fatalf("text encoder logit %d: %v at opset %d, %v at opset 17", i, got[i], v, base[i])
				}
			}
			md, err := LoadModel(reduceSplitModel(v, false), Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer md.Close()
			outs, err := md.Run([]*onnx.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range want {
				if len(outs[i].F32) != len(w) {
					t.Fatalf("output %d: %d values, want %d", i, len(outs[i].F32), len(w))
				}
				for j := range w {
					if math.Abs(float64(outs[i].F32[j]-w[j])) > 1e-6 {
						t.Fatalf("output %d value %d: %v, want %v", i, j, outs[i].F32[j], w[j])
					}
				}
			}
		})
	}
	md, err := LoadModel(reduceSplitModel(18, true), Options{Threads: 1})
	if err == nil {
		md.Close()
		t.Fatal("ReduceMean with an axes attribute loaded at opset 18")
	}
	if !strings.Contains(err.Error(), "node r_mean (ReduceMean)") || !strings.Contains(err.Error(), "axes") {
		t.Fatalf("error %q does not name node r_mean and its axes", err)
	}
	md, err = LoadModel(reduceSplitModel(22, false), Options{Threads: 1})
	if err == nil {
		md.Close()
		t.Fatal("a model at opset 22 loaded")
	}
}

// TestGeluOperator runs the Gelu operator of opset 20 (exact and tanh forms) against
// its formula in float64.
func TestGeluOperator(t *testing.T) {
	for _, approx := range []string{"none", "tanh"} {
		b := newOpsetModel(20)
		b.input("x", 4, 16)
		var attrs []*onnx.Attribute
		if approx == "tanh" {
			attrs = append(attrs, &onnx.Attribute{Name: "approximate", Type: onnx.AttrString, S: "tanh"})
		}
		b.node("Gelu", "gelu", []string{"x"}, []string{"y"}, attrs...)
		b.output("y")
		md, err := LoadModel(b.m, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		x := &onnx.Tensor{DType: onnx.Float, Dims: []int64{4, 16}, F32: make([]float32, 64)}
		for i := range x.F32 {
			x.F32[i] = float32(i-32) / 6
		}
		outs, err := md.Run([]*onnx.Tensor{x})
		md.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range x.F32 {
			f := float64(v)
			w := 0.5 * f * (1 + math.Erf(f/math.Sqrt2))
			if approx == "tanh" {
				w = 0.5 * f * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(f+0.044715*f*f*f)))
			}
			if d := math.Abs(float64(outs[0].F32[i]) - w); d > 1e-5*math.Max(1, math.Abs(w)) {
				t.Fatalf("approximate=%s: gelu(%v) = %v, want %v", approx, v, outs[0].F32[i], w)
			}
		}
	}
}

// TestMishOperator runs the Mish operator (opset 18) and the form torch 1.13 exports
// before it (x * Tanh(Softplus(x))) against x * tanh(log(1 + e^x)) in float64; the backend
// test data of ONNX 1.12 has no Mish case.
func TestMishOperator(t *testing.T) {
	x := &onnx.Tensor{DType: onnx.Float, Dims: []int64{4, 16}, F32: make([]float32, 64)}
	for i := range x.F32 {
		x.F32[i] = float32(i-40) / 4 // -10 .. 5.75
	}
	for _, opset := range []int64{17, 18} {
		b := newOpsetModel(opset)
		b.input("x", 4, 16)
		if opset >= 18 {
			b.node("Mish", "mish", []string{"x"}, []string{"y"})
		} else {
			b.node("Softplus", "sp", []string{"x"}, []string{"s"})
			b.node("Tanh", "th", []string{"s"}, []string{"h"})
			b.node("Mul", "mul", []string{"x", "h"}, []string{"y"})
		}
		b.output("y")
		md, err := LoadModel(b.m, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		outs, err := md.Run([]*onnx.Tensor{x})
		md.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range x.F32 {
			f := float64(v)
			w := f * math.Tanh(math.Log1p(math.Exp(f)))
			if d := math.Abs(float64(outs[0].F32[i]) - w); d > 1e-5*math.Max(1, math.Abs(w)) {
				t.Fatalf("opset %d: mish(%v) = %v, want %v", opset, v, outs[0].F32[i], w)
			}
		}
	}
}
