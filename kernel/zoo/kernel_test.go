package zoo_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"idunno/kernel"
	"idunno/kernel/graph"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// smallShapes keep the kernel checks quick; vgg16 (half a gigabyte of weights, and its
// Dropouts sit between Relu and Gemm as alexnet's second one does) is left out.
var smallShapes = map[string][]int64{
	"lenet5":       nil,
	"resnet18":     {3, 64, 64},
	"resnet50":     {3, 64, 64},
	"alexnet":      nil,
	"mobilenet_v2": {3, 64, 64},
	"squeezenet":   {3, 64, 64},
	"inception_v3": {3, 96, 96},
}

func needKernel(t *testing.T) {
	t.Helper()
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed (make; IDUNNO_KERNEL_LIB=bin/libidunno_kernel.so): %v", err)
	}
}

func randomInput(m *onnx.Model, batch int64, seed uint64) *onnx.Tensor {
	d := m.Graph.Inputs[0].Dims
	t := &onnx.Tensor{DType: onnx.Float, Dims: []int64{batch, d[1], d[2], d[3]}}
	t.F32 = make([]float32, batch*d[1]*d[2]*d[3])
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := range t.F32 {
		t.F32[i] = rng.Float32()
	}
	return t
}

func run(t *testing.T, src *onnx.Model, in *onnx.Tensor) []float32 {
	t.Helper()
	m, err := kernel.LoadModel(src, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Run([]*onnx.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].F32
}

// TestTorchInitLoadsInKernel: every torch-initialised model (Dropout nodes included)
// compiles without a Dropout left, loads in the inference kernel and gives finite logits.
func TestTorchInitLoadsInKernel(t *testing.T) {
	needKernel(t)
	for _, name := range zoo.Names() {
		shape, ok := smallShapes[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			if name == "alexnet" && testing.Short() {
				t.Skip("a quarter of a gigabyte of weights (-short)")
			}
			src, err := zoo.Build(name, zoo.Options{Seed: 4, Init: zoo.InitTorch, InputShape: shape, Classes: 10})
			if err != nil {
				t.Fatal(err)
			}
			in := randomInput(src, 2, 1)
			g, err := graph.Compile(src, map[string][]int64{"input": in.Dims}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range g.Nodes {
				if n.OpType == "Dropout" {
					t.Fatalf("graph.Compile kept Dropout %s", n.Name)
				}
			}
			out := run(t, src, in)
			if len(out) != 2*10 {
				t.Fatalf("%d outputs, want 2x10", len(out))
			}
			for i, v := range out {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("output %d is %v", i, v)
				}
			}
		})
	}
}

// TestTorchInitDropoutIsIdentityAtInference: a model with its Dropout nodes gives the
// same bits as the same model with them cut out by hand.
func TestTorchInitDropoutIsIdentityAtInference(t *testing.T) {
	needKernel(t)
	for _, name := range []string{"mobilenet_v2", "squeezenet"} {
		opt := zoo.Options{Seed: 8, Init: zoo.InitTorch, InputShape: smallShapes[name], Classes: 10}
		with, err := zoo.Build(name, opt)
		if err != nil {
			t.Fatal(err)
		}
		without, _ := zoo.Build(name, opt)
		rename := map[string]string{}
		var kept []*onnx.Node
		for _, n := range without.Graph.Nodes {
			for i, in := range n.Inputs {
				if r, ok := rename[in]; ok {
					n.Inputs[i] = r
				}
			}
			if n.OpType == "Dropout" {
				rename[n.Outputs[0]] = n.Inputs[0]
				delete(without.Graph.Initializers, n.Inputs[1])
				continue
			}
			kept = append(kept, n)
		}
		if len(kept) != len(without.Graph.Nodes)-1 {
			t.Fatalf("%s: cut %d Dropouts, want 1", name, len(without.Graph.Nodes)-len(kept))
		}
		without.Graph.Nodes = kept
		in := randomInput(with, 3, 2)
		a, b := run(t, with, in), run(t, without, in)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: output %d is %v with Dropout, %v without", name, i, a[i], b[i])
			}
		}
	}
}

// TestTorchInitTrains: every torch-initialised model (Dropout and BatchNormalization kept)
// compiles into a training plan, its first loss is finite and near ln(classes) per sample,
// and LeNet-5 learns a fixed batch with SGD.
func TestTorchInitTrains(t *testing.T) {
	needKernel(t)
	const batch, classes = 4, 10
	labels := []int64{3, 1, 4, 1}
	for _, name := range zoo.Names() {
		shape, ok := smallShapes[name]
		if !ok {
			continue
		}
		t.Run(name, func(t *testing.T) {
			if name == "alexnet" && testing.Short() {
				t.Skip("a quarter of a gigabyte of weights (-short)")
			}
			src, err := zoo.Build(name, zoo.Options{Seed: 6, Init: zoo.InitTorch, InputShape: shape, Classes: classes})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := kernel.NewTrainer(src, batch, kernel.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			x := randomInput(src, batch, 3).F32
			first, _, err := tr.Run(x, labels, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			if perSample := first / batch; math.IsNaN(perSample) || perSample < 0.5 || perSample > 6 {
				t.Fatalf("first loss %v per sample, want near ln(10) = 2.3", perSample)
			}
			if name != "lenet5" {
				return
			}
			loss := first
			for step := int64(1); step <= 30; step++ {
				if err := tr.Optimize(kernel.Optimizer{Kind: "sgd", Momentum: 0.9}, 0.05/batch, step); err != nil {
					t.Fatal(err)
				}
				if loss, _, err = tr.Run(x, labels, 1, uint64(step)+1); err != nil {
					t.Fatal(err)
				}
			}
			if !(loss < 0.7*first) { // 9.37 to 3.94 when written

				t.Errorf("30 SGD steps on one batch: loss %v, first %v", loss, first)
			}
		})
	}
}
