package zoo

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// torchExpect restates, independently of torchinit.go, what Init "torch" must draw for
// each architecture (PyTorch 1.13 / torchvision 0.14 source), and where its Dropouts are.
var torchExpect = map[string]struct {
	convFanOut     bool     // kaiming_normal_(fan_out) with bias 0; else nn.Conv2d's default
	linear001      bool     // N(0, 0.01) with bias 0; else nn.Linear's default
	eps            float32  // BatchNormalization epsilon
	dropouts       []string // "module p -> consumer": the module name, its p, the next parametric layer
	shape          []int64  // a small input that keeps the test quick (nil: the default)
	heavyInDefault bool     // half a gigabyte of weights: skipped with -short
}{
	"lenet5":       {eps: 1e-5},
	"resnet18":     {convFanOut: true, eps: 1e-5, shape: []int64{3, 64, 64}},
	"resnet50":     {convFanOut: true, eps: 1e-5, shape: []int64{3, 64, 64}},
	"alexnet":      {eps: 1e-5, dropouts: []string{"classifier.0 0.5 -> classifier.1", "classifier.3 0.5 -> classifier.4"}, heavyInDefault: true},
	"vgg16":        {convFanOut: true, linear001: true, eps: 1e-5, dropouts: []string{"classifier.2 0.5 -> classifier.3", "classifier.5 0.5 -> classifier.6"}, heavyInDefault: true},
	"mobilenet_v2": {convFanOut: true, linear001: true, eps: 1e-5, dropouts: []string{"classifier.0 0.2 -> classifier.1"}, shape: []int64{3, 64, 64}},
	"squeezenet":   {eps: 1e-5, dropouts: []string{"classifier.0 0.5 -> classifier.1"}, shape: []int64{3, 64, 64}},
	"inception_v3": {eps: 1e-3, dropouts: []string{"dropout 0.5 -> fc"}, shape: []int64{3, 96, 96}},
}

// dist is the distribution one tensor must have been drawn from.
type dist struct {
	kind  string  // "const", "uniform" (on [-a, a]) or "normal" (mean 0, std a)
	a     float64 // the constant, the bound or the std
	label string
}

// expectedDists maps every initializer of a torch-initialised model to its distribution,
// from the node that reads it and its shape.
func expectedDists(t *testing.T, name string, m *onnx.Model) map[string]dist {
	t.Helper()
	e := torchExpect[name]
	want := map[string]dist{}
	set := func(init string, d dist) {
		if old, ok := want[init]; ok && old != d {
			t.Fatalf("%s read as %v and %v", init, old, d)
		}
		want[init] = d
	}
	for _, n := range m.Graph.Nodes {
		switch n.OpType {
		case "Conv":
			w := m.Graph.Initializers[n.Inputs[1]]
			rf := float64(w.Dims[2] * w.Dims[3])
			fanIn, fanOut := float64(w.Dims[1])*rf, float64(w.Dims[0])*rf
			if e.convFanOut {
				set(n.Inputs[1], dist{"normal", math.Sqrt(2 / fanOut), "conv kaiming_normal fan_out"})
			} else {
				set(n.Inputs[1], dist{"uniform", 1 / math.Sqrt(fanIn), "conv kaiming_uniform a=sqrt(5)"})
			}
			if len(n.Inputs) > 2 {
				if e.convFanOut {
					set(n.Inputs[2], dist{"const", 0, "conv bias"})
				} else {
					set(n.Inputs[2], dist{"uniform", 1 / math.Sqrt(fanIn), "conv bias"})
				}
			}
		case "Gemm":
			in := float64(m.Graph.Initializers[n.Inputs[1]].Dims[1])
			if e.linear001 {
				set(n.Inputs[1], dist{"normal", 0.01, "linear N(0, 0.01)"})
				set(n.Inputs[2], dist{"const", 0, "linear bias"})
			} else {
				set(n.Inputs[1], dist{"uniform", 1 / math.Sqrt(in), "linear default"})
				set(n.Inputs[2], dist{"uniform", 1 / math.Sqrt(in), "linear bias"})
			}
		case "BatchNormalization":
			for i, v := range []float64{1, 0, 0, 1} {
				set(n.Inputs[i+1], dist{"const", v, "batchnorm"})
			}
			if eps := n.Attrs["epsilon"]; eps == nil || eps.F != e.eps {
				t.Errorf("%s %s: epsilon %v, want %v", name, n.Name, eps, e.eps)
			}
			if mom := n.Attrs["momentum"]; mom == nil || mom.F != 0.9 {
				t.Errorf("%s %s: momentum %v, want 0.9 (torch's 0.1)", name, n.Name, mom)
			}
		case "Clip":
			set(n.Inputs[1], dist{"const", 0, "clip min"})
			set(n.Inputs[2], dist{"const", 6, "clip max"})
		case "Dropout":
			if len(n.Inputs) == 2 {
				set(n.Inputs[1], dist{"const", float64(m.Graph.Initializers[n.Inputs[1]].F32[0]), "dropout ratio"})
			}
		}
	}
	for init := range m.Graph.Initializers {
		if _, ok := want[init]; !ok {
			t.Errorf("%s: initializer %s is read by no node the test knows", name, init)
		}
	}
	return want
}

// checkDist tests a tensor's values against d: exact for constants; bounds always for
// uniform; mean and standard deviation within 5 standard errors for 1,000 values or more.
func checkDist(data []float32, d dist) error {
	n := float64(len(data))
	if d.kind == "const" {
		for i, v := range data {
			if float64(v) != d.a {
				return fmt.Errorf("value %d is %v, want the constant %v", i, v, d.a)
			}
		}
		return nil
	}
	var sum, sq, maxAbs float64
	for _, v := range data {
		x := float64(v)
		sum += x
		sq += x * x
		maxAbs = math.Max(maxAbs, math.Abs(x))
	}
	mean := sum / n
	std := math.Sqrt(sq/n - mean*mean)
	wantStd := d.a
	if d.kind == "uniform" {
		wantStd = d.a / math.Sqrt(3)
		if maxAbs > d.a*(1+1e-6) {
			return fmt.Errorf("|value| %v over the bound %v", maxAbs, d.a)
		}
	} else if maxAbs > 8*d.a {
		return fmt.Errorf("|value| %v is over 8 standard deviations (%v)", maxAbs, d.a)
	}
	if n < 1000 {
		return nil
	}
	if math.Abs(mean) > 5*wantStd/math.Sqrt(n) {
		return fmt.Errorf("mean %v, want 0 within %v", mean, 5*wantStd/math.Sqrt(n))
	}
	if tol := 5 / math.Sqrt(2*n); math.Abs(std/wantStd-1) > tol {
		return fmt.Errorf("std %v, want %v within %.2g%%", std, wantStd, 100*tol)
	}
	if d.kind == "uniform" && maxAbs < d.a*0.99 {
		return fmt.Errorf("|value| at most %v: does not fill the bound %v", maxAbs, d.a)
	}
	return nil
}

func buildTorch(t *testing.T, name string, seed uint64) *onnx.Model {
	t.Helper()
	e := torchExpect[name]
	if e.heavyInDefault && testing.Short() {
		t.Skip("half a gigabyte of weights (-short)")
	}
	m, err := Build(name, Options{Seed: seed, Init: InitTorch, InputShape: e.shape, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTorchInit builds every architecture once with Init "torch" and compares it with
// torchvision's freshly built module (compareWithTorch), checks every initializer against
// the distribution the rules above say, the Dropout nodes (named after torchvision's
// module, opset 13 form: data and a scalar ratio, one output, no attributes, followed by
// the right layer) and that the model validates.
func TestTorchInit(t *testing.T) {
	var names []string
	for _, n := range Names() {
		if !(testing.Short() && torchExpect[n].heavyInDefault) {
			names = append(names, n)
		}
	}
	ref, noTorch := torchvisionReference(t, names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			m := buildTorch(t, name, 11)
			t.Run("torchvision", func(t *testing.T) {
				if ref == nil {
					t.Skip(noTorch)
				}
				compareWithTorch(t, name, m, ref[name])
			})
			if err := m.Validate(); err != nil {
				t.Fatal(err)
			}
			want := expectedDists(t, name, m)
			checked := 0
			for init, d := range want {
				if err := checkDist(m.Graph.Initializers[init].F32, d); err != nil {
					t.Errorf("%s %s (%s %s %.4g): %v", name, init, d.label, d.kind, d.a, err)
				}
				if len(m.Graph.Initializers[init].F32) >= 1000 && d.kind != "const" {
					checked++
				}
			}
			if checked == 0 {
				t.Errorf("%s: no tensor large enough for the moment checks", name)
			}
			if got, want := dropouts(t, m), torchExpect[name].dropouts; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s dropouts %q, want %q", name, got, want)
			}
		})
	}
}

// dropouts lists a model's Dropout nodes as "module p -> next parametric layer".
func dropouts(t *testing.T, m *onnx.Model) []string {
	t.Helper()
	consumers := map[string][]*onnx.Node{}
	for _, n := range m.Graph.Nodes {
		for _, in := range n.Inputs {
			consumers[in] = append(consumers[in], n)
		}
	}
	var got []string
	for _, n := range m.Graph.Nodes {
		if n.OpType != "Dropout" {
			continue
		}
		if len(n.Inputs) != 2 || len(n.Outputs) != 1 || len(n.Attrs) != 0 {
			t.Fatalf("Dropout %s has inputs %v outputs %v attrs %v", n.Name, n.Inputs, n.Outputs, n.Attrs)
		}
		r := m.Graph.Initializers[n.Inputs[1]]
		if r == nil || r.DType != onnx.Float || len(r.Dims) != 0 || len(r.F32) != 1 {
			t.Fatalf("Dropout %s ratio %+v is not a constant float scalar", n.Name, r)
		}
		next := n
		for next.OpType != "Gemm" && next.OpType != "Conv" {
			c := consumers[next.Outputs[0]]
			if len(c) != 1 {
				t.Fatalf("%s's output has %d readers", next.Name, len(c))
			}
			next = c[0]
		}
		got = append(got, fmt.Sprintf("%s %g -> %s", n.Name, r.F32[0], strings.TrimSuffix(next.Inputs[1], ".weight")))
	}
	return got
}

// TestTorchInitAggregate pools a whole network's conv weights, each scaled by its
// expected std, so that the many small tensors' errors would show together.
func TestTorchInitAggregate(t *testing.T) {
	m := buildTorch(t, "mobilenet_v2", 3)
	var sum, sq, n float64
	for _, node := range m.Graph.Nodes {
		if node.OpType != "Conv" {
			continue
		}
		w := m.Graph.Initializers[node.Inputs[1]]
		std := math.Sqrt(2 / float64(w.Dims[0]*w.Dims[2]*w.Dims[3]))
		for _, v := range w.F32 {
			x := float64(v) / std
			sum += x
			sq += x * x
			n++
		}
	}
	if mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n)); math.Abs(mean) > 5/math.Sqrt(n) || math.Abs(std-1) > 5/math.Sqrt(2*n) {
		t.Errorf("mobilenet_v2 conv weights over their stds: mean %v std %v over %v values", mean, std, n)
	}
}

// TestTorchInitEncodesAndCounts: torch-initialised models with Dropout survive an ONNX
// round trip, and the Dropout ratios are not counted as parameters (torchvision's counts
// at the default shapes; alexnet and vgg16 are left out for their size).
func TestTorchInitEncodesAndCounts(t *testing.T) {
	for _, name := range []string{"lenet5", "mobilenet_v2", "squeezenet"} {
		m, err := Build(name, Options{Seed: 2, Init: InitTorch})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ParamCount(m), torchvisionParams[name]; got != want {
			t.Errorf("%s has %d parameters, torchvision's has %d", name, got, want)
		}
		back, err := onnx.Decode(onnx.Encode(m))
		if err != nil {
			t.Fatal(err)
		}
		if err := back.Validate(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(onnx.Encode(back), onnx.Encode(m)) {
			t.Errorf("%s: decode and encode changed the bytes", name)
		}
	}
}

func TestTorchInitDeterminism(t *testing.T) {
	enc := func(o Options) []byte {
		m, err := Build("resnet18", o)
		if err != nil {
			t.Fatal(err)
		}
		return onnx.Encode(m)
	}
	small := []int64{3, 32, 32}
	a := enc(Options{Seed: 5, Init: InitTorch, InputShape: small})
	if !bytes.Equal(a, enc(Options{Seed: 5, Init: InitTorch, InputShape: small})) {
		t.Error("the same seed gave different models")
	}
	if bytes.Equal(a, enc(Options{Seed: 6, Init: InitTorch, InputShape: small})) {
		t.Error("different seeds gave the same model")
	}
	if bytes.Equal(a, enc(Options{Seed: 5, InputShape: small})) {
		t.Error("Init torch gave the default weights")
	}
	for _, name := range []string{"lenet5", "mobilenet_v2"} {
		x, _ := Build(name, Options{Seed: 9, Init: InitTorch, InputShape: torchExpect[name].shape})
		y, _ := Build(name, Options{Seed: 9, Init: InitTorch, InputShape: torchExpect[name].shape})
		if !bytes.Equal(onnx.Encode(x), onnx.Encode(y)) {
			t.Errorf("%s: the same seed gave different models", name)
		}
	}
	if _, err := Build("lenet5", Options{Init: "xavier"}); err == nil || !strings.Contains(err.Error(), `zoo: lenet5: unknown init "xavier"`) {
		t.Errorf("unknown init: %v", err)
	}
}
