package zoo

import (
	"bytes"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// torchvisionParams are the parameter counts of the torchvision models (0.14) at 1000
// classes (inception_v3 without its training-only auxiliary head; squeezenet is 1.0),
// and of the classic LeNet-5 at 10 classes.
var torchvisionParams = map[string]int64{
	"lenet5":       61706,
	"resnet18":     11689512,
	"resnet50":     25557032,
	"alexnet":      61100840,
	"vgg16":        138357544,
	"mobilenet_v2": 3504872,
	"squeezenet":   1248424,
	"inception_v3": 23834568,
}

func TestEveryModelDecodesValidatesAndMatchesParamCount(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			m, err := Build(name, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ParamCount(m), torchvisionParams[name]; got != want {
				t.Errorf("%s has %d parameters, torchvision's has %d", name, got, want)
			}
			enc := onnx.Encode(m)
			m = nil // vgg16 holds half a gigabyte of weights: keep one copy at a time
			back, err := onnx.Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if err := back.Validate(); err != nil {
				t.Fatal(err)
			}
			in, out := back.Graph.Inputs[0], back.Graph.Outputs[0]
			def, _ := DefaultInputShape(name)
			if in.Name != "input" || in.DimParams[0] != "N" || in.Dims[0] != -1 || in.Dims[1] != def[0] || in.Dims[2] != def[1] {
				t.Errorf("input %+v", in)
			}
			if out.Name != "output" || out.DimParams[0] != "N" || len(out.Dims) != 2 {
				t.Errorf("output %+v", out)
			}
			if back.Opset != Opset {
				t.Errorf("opset %d", back.Opset)
			}
		})
	}
}

func TestBatchNormAsExported(t *testing.T) {
	m, err := Build("resnet18", Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, n := range m.Graph.Nodes {
		ops[n.OpType]++
	}
	// 20 convolutions (17 in the blocks and stem, 3 downsample), each followed by BatchNormalization.
	if ops["Conv"] != 20 || ops["BatchNormalization"] != 20 || ops["Add"] != 8 || ops["Gemm"] != 1 {
		t.Errorf("resnet18 op counts %v", ops)
	}
	for name, t2 := range m.Graph.Initializers {
		if strings.HasSuffix(name, "running_var") {
			for _, v := range t2.F32 {
				if v <= 0 {
					t.Fatalf("%s holds a non-positive variance %v", name, v)
				}
			}
		}
	}
}

func TestSeedDeterminism(t *testing.T) {
	a, _ := Build("lenet5", Options{Seed: 7})
	b, _ := Build("lenet5", Options{Seed: 7})
	c, _ := Build("lenet5", Options{Seed: 8})
	if !bytes.Equal(onnx.Encode(a), onnx.Encode(b)) {
		t.Error("the same seed gave different models")
	}
	if bytes.Equal(onnx.Encode(a), onnx.Encode(c)) {
		t.Error("different seeds gave the same model")
	}
}

func TestOptions(t *testing.T) {
	m, err := Build("resnet18", Options{InputShape: []int64{3, 64, 64}, Classes: 7})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Graph.Inputs[0].Dims; d[2] != 64 || m.Graph.Outputs[0].Dims[1] != 7 {
		t.Errorf("input %v output %v", d, m.Graph.Outputs[0].Dims)
	}
	m, err = Build("lenet5", Options{InputShape: []int64{3, 32, 32}})
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Graph.Initializers["fc1.weight"]; w.Dims[1] != 16*6*6 {
		t.Errorf("lenet5 at 3x32x32: fc1 is %v", w.Dims)
	}
	if _, err := Build("inception_v3", Options{InputShape: []int64{3, 96, 96}}); err != nil {
		t.Errorf("inception_v3 at 96x96: %v", err)
	}
	bad := map[string]Options{
		"nosuch":       {},
		"resnet18":     {InputShape: []int64{3, 224}},
		"inception_v3": {InputShape: []int64{3, 64, 64}},
		"alexnet":      {InputShape: []int64{3, 100, 100}},
		"lenet5":       {Classes: -1},
	}
	for name, o := range bad {
		if _, err := Build(name, o); err == nil || !strings.HasPrefix(err.Error(), "zoo: ") {
			t.Errorf("%s %+v: got %v, want a zoo error", name, o, err)
		}
	}
}
