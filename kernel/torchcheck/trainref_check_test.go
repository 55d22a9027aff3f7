package torchcheck

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// Self-tests of train_ref.py: invariants that hold without IDunno's trainer. The module
// built from the graph must train exactly as torchvision's hand-written one with the same
// weights (float64), the first forward must equal the inference kernel's output, one
// optimizer step must equal its closed form, BatchNormalization's running statistics must
// follow ONNX's momentum, graph rewrites that change nothing (Dropout, a trailing Softmax)
// must change nothing, and a float32 run must agree with the float64 one where rounding
// cannot flip a decision (see TorchTrainResult.Margins and adamStableMask).

// trainTol is the bound for whole-model training checks, relative to each
// tensor's largest magnitude.
const trainTol = 1e-4

// trainBatch is the batch every self-test trains on.
const trainBatch = 8

// builderTol bounds the difference between the graph builder's module and torchvision's
// in float64: the same arithmetic, in places in another order.
const builderTol = 1e-12

// adamNoise is the gradient magnitude, relative to its tensor's largest, under which
// float32 rounding can flip the sign of Adam's first update (see adamStableMask).
const adamNoise = 1e-5

// trainModel builds a zoo model for 1x32x32 inputs and 10 classes and writes it to a
// temporary file.
func trainModel(t *testing.T, name string) (*onnx.Model, string) {
	t.Helper()
	m, err := zoo.Build(name, zoo.Options{InputShape: []int64{1, 32, 32}, Classes: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".onnx")
	if err := onnx.WriteFile(path, m); err != nil {
		t.Fatal(err)
	}
	return m, path
}

// randomBatch returns a seeded (trainBatch, 1, 32, 32) input and labels in 0..9.
func randomBatch(seed uint64) ([]float32, []int64, []int64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	dims := []int64{trainBatch, 1, 32, 32}
	x := make([]float32, volume(dims))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int64, trainBatch)
	for i := range y {
		y[i] = rng.Int64N(10)
	}
	return x, dims, y
}

// kernelOutput runs m on x in IDunno's inference kernel and returns its first output.
func kernelOutput(t *testing.T, m *onnx.Model, x []float32, dims []int64) []float64 {
	t.Helper()
	km, err := kernel.LoadModel(m, kernel.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer km.Close()
	outs, err := km.Run([]*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: dims, F32: x}})
	if err != nil {
		t.Fatal(err)
	}
	return outs[0].Floats()
}

func initial(m *onnx.Model, name string) []float64 { return m.Graph.Initializers[name].Floats() }

func TestTrainRefLeNet5(t *testing.T) {
	requireTorch(t)
	m, path := trainModel(t, "lenet5")
	x, dims, y := randomBatch(1)
	sgd := TorchTrainConfig{Optimizer: "sgd", LR: 0.01, Momentum: 0.9, Steps: 3}
	r64 := runTorchTrain(t, path, x, dims, y, sgd, "float64")

	t.Run("the graph trains as torchvision's module", func(t *testing.T) {
		compareTrainRuns(t, runTorchTrain(t, path, x, dims, y, sgd, "float64", "--torchvision", "lenet5"), r64, builderTol, nil)
	})
	t.Run("float32 agrees with float64", func(t *testing.T) {
		r32 := runTorchTrain(t, path, x, dims, y, sgd, "float32")
		t.Logf("float64 margins %v", r64.Margins)
		compareTrainRuns(t, r32, r64, trainTol, nil)
		adam := TorchTrainConfig{Optimizer: "adam", LR: 0.001, Steps: 3}
		a64 := runTorchTrain(t, path, x, dims, y, adam, "float64")
		compareTrainRuns(t, runTorchTrain(t, path, x, dims, y, adam, "float32"), a64, trainTol,
			func(step int, name string) []bool { mask, _ := adamStableMask(a64, name, step, adamNoise); return mask })
	})
	t.Run("logits equal the inference kernel's", func(t *testing.T) {
		want := kernelOutput(t, m, x, dims)
		// LeNet-5 has no BatchNormalization: training and eval forwards are the same.
		if d := relDiff(r64.Logits0, want, nil); !(d <= trainTol) {
			t.Errorf("logits_0 differs from the kernel's output by %.3g", d)
		}
		if d := relDiff(r64.LogitsEval, r64.Logits0, nil); d != 0 {
			t.Errorf("logits_eval differs from logits_0 by %.3g in a model without BatchNormalization", d)
		}
	})
	t.Run("one step has the closed form", func(t *testing.T) { checkClosedForms(t, m, path, x, dims, y) })
	t.Run("Dropout and a trailing Softmax change nothing", func(t *testing.T) {
		variant := filepath.Join(t.TempDir(), "lenet5_dropout_softmax.onnx")
		if err := onnx.WriteFile(variant, withDropoutAndSoftmax(t, m)); err != nil {
			t.Fatal(err)
		}
		compareTrainRuns(t, runTorchTrain(t, variant, x, dims, y, sgd, "float64"), r64, 0, nil)
	})
	t.Run("a batch per step", func(t *testing.T) {
		// Steps 1 and 3 see the batch r64 trained on, step 2 another one.
		x2, _, y2 := randomBatch(9)
		xs := append(append(append([]float32(nil), x...), x2...), x...)
		ys := append(append(append([]int64(nil), y...), y2...), y...)
		r := runTorchTrain(t, path, xs, append([]int64{3}, dims...), ys, sgd, "float64")
		if r.Loss[0] != r64.Loss[0] || r.Loss[1] == r64.Loss[1] {
			t.Errorf("losses %v with a batch per step, %v with one batch: want the first equal and the second not", r.Loss, r64.Loss)
		}
	})
	t.Run("an unknown op exits 2 naming the node", func(t *testing.T) { checkUnknownOp(t, m) })
}

// checkClosedForms runs one step of SGD without momentum, Adam and AdamW (each with
// weight decay) and checks every parameter against the update computed here from the
// initial weights and the step's gradient.
func checkClosedForms(t *testing.T, m *onnx.Model, path string, x []float32, dims []int64, y []int64) {
	const lr, wd, eps = 0.1, 0.01, 1e-8
	cases := []struct {
		cfg  TorchTrainConfig
		step func(w, g float64) float64
	}{
		{TorchTrainConfig{Optimizer: "sgd", LR: lr, WeightDecay: wd, Steps: 1},
			func(w, g float64) float64 { return w - lr*(g+wd*w) }},
		// Adam's first bias-corrected step is lr*g/(|g|+eps) for every element.
		{TorchTrainConfig{Optimizer: "adam", LR: lr, WeightDecay: wd, Steps: 1},
			func(w, g float64) float64 { g += wd * w; return w - lr*g/(math.Abs(g)+eps) }},
		{TorchTrainConfig{Optimizer: "adamw", LR: lr, WeightDecay: wd, Steps: 1},
			func(w, g float64) float64 { return w*(1-lr*wd) - lr*g/(math.Abs(g)+eps) }},
	}
	for _, c := range cases {
		r := runTorchTrain(t, path, x, dims, y, c.cfg, "float64")
		if len(r.Grad) != len(m.Graph.Initializers) {
			t.Errorf("%s: gradients for %d parameters, the model has %d", c.cfg.Optimizer, len(r.Grad), len(m.Graph.Initializers))
		}
		for _, name := range sortedNames(r.Grad) {
			w0, g := initial(m, name), r.Grad[name]
			want := make([]float64, len(w0))
			for i := range w0 {
				want[i] = c.step(w0[i], g[i])
			}
			if d := relDiff(r.After[0][name], want, nil); !(d <= 1e-12) {
				t.Errorf("%s: %s after one step differs from the closed form by %.3g", c.cfg.Optimizer, name, d)
			}
		}
	}
}

// withDropoutAndSoftmax returns a copy of LeNet-5 with a Dropout (opset 13, ratio 0.5)
// before fc3 and a Softmax after it: train_ref.py must treat both as absent.
func withDropoutAndSoftmax(t *testing.T, m *onnx.Model) *onnx.Model {
	t.Helper()
	g := *m.Graph
	g.Initializers = map[string]*onnx.Tensor{"dropout_ratio": {Name: "dropout_ratio", DType: onnx.Float, F32: []float32{0.5}}}
	for k, v := range m.Graph.Initializers {
		g.Initializers[k] = v
	}
	last := *g.Nodes[len(g.Nodes)-1]
	if last.OpType != "Gemm" || last.Outputs[0] != "output" {
		t.Fatalf("LeNet-5 ends in %s -> %v, want Gemm -> output", last.OpType, last.Outputs)
	}
	drop := &onnx.Node{Name: "dropout", OpType: "Dropout", Inputs: []string{last.Inputs[0], "dropout_ratio"},
		Outputs: []string{"dropped"}, Attrs: map[string]*onnx.Attribute{}}
	last.Inputs = append([]string{"dropped"}, last.Inputs[1:]...)
	last.Outputs = []string{"logits"}
	soft := &onnx.Node{Name: "softmax", OpType: "Softmax", Inputs: []string{"logits"}, Outputs: []string{"output"},
		Attrs: map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: 1}}}
	g.Nodes = append(append(append([]*onnx.Node(nil), g.Nodes[:len(g.Nodes)-1]...), drop, &last), soft)
	out := *m
	out.Graph = &g
	return &out
}

// checkUnknownOp replaces LeNet-5's first Relu with Elu, which training does not support.
func checkUnknownOp(t *testing.T, m *onnx.Model) {
	g := *m.Graph
	g.Nodes = append([]*onnx.Node(nil), g.Nodes...)
	for i, n := range g.Nodes {
		if n.OpType == "Relu" {
			elu := *n
			elu.OpType, elu.Name = "Elu", "the_elu_node"
			g.Nodes[i] = &elu
			break
		}
	}
	bad := *m
	bad.Graph = &g
	path := filepath.Join(t.TempDir(), "elu.onnx")
	if err := onnx.WriteFile(path, &bad); err != nil {
		t.Fatal(err)
	}
	x, dims, y := randomBatch(1)
	_, err := torchTrain(t, path, x, dims, y, TorchTrainConfig{Optimizer: "sgd", LR: 0.1, Steps: 1}, "float64")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(err.Error(), "the_elu_node") {
		t.Errorf("train_ref.py on a model with Elu: %v; want exit status 2 naming the_elu_node", err)
	}
}

func TestTrainRefResNet18(t *testing.T) {
	requireTorch(t)
	m, path := trainModel(t, "resnet18")
	x, dims, y := randomBatch(2)
	sgd := TorchTrainConfig{Optimizer: "sgd", LR: 0.01, Momentum: 0.9, Steps: 3}
	r64 := runTorchTrain(t, path, x, dims, y, sgd, "float64")

	t.Run("the graph trains as torchvision's module", func(t *testing.T) {
		compareTrainRuns(t, runTorchTrain(t, path, x, dims, y, sgd, "float64", "--torchvision", "resnet18"), r64, builderTol, nil)
	})
	t.Run("eval logits equal the inference kernel's", func(t *testing.T) {
		if d := relDiff(r64.LogitsEval, kernelOutput(t, m, x, dims), nil); !(d <= trainTol) {
			t.Errorf("logits_eval differs from the kernel's output by %.3g", d)
		}
	})
	t.Run("bn1's running statistics follow ONNX momentum", func(t *testing.T) { checkRunningStats(t, m, r64, x, dims) })
	t.Run("float32 agrees with float64 in the forward", func(t *testing.T) {
		// Only the first forward is checked: ResNet-18's ReLU inputs come within 1e-7 of
		// zero (relative), so float32 rounding can flip a ReLU, and at 32x32 layer4's maps
		// are 1x1, where one flipped element moves a whole gradient by percents. The full
		// comparison is logged, not checked.
		r32 := runTorchTrain(t, path, x, dims, y, sgd, "float32")
		for _, c := range []struct {
			what      string
			got, want []float64
		}{{"loss", r32.Loss[:1], r64.Loss[:1]}, {"logits_0", r32.Logits0, r64.Logits0}, {"logits_eval", r32.LogitsEval, r64.LogitsEval}} {
			if d := relDiff(c.got, c.want, nil); !(d <= trainTol) {
				t.Errorf("%s: float32 and float64 differ by %.3g", c.what, d)
			}
		}
		t.Logf("float64 margins %v", r64.Margins)
		t.Logf("largest difference of the full float32 run: %s", largestDiff(r32, r64))
	})
}

// largestDiff names the tensor where two runs differ most (relative to its largest magnitude).
func largestDiff(got, want *TorchTrainResult) string {
	worst, where := 0.0, ""
	for k := range want.Grads {
		for name, w := range want.Grads[k] {
			if d := relDiff(got.Grads[k][name], w, nil); d > worst || math.IsNaN(d) {
				worst, where = d, fmt.Sprintf("grad_%d/%s", k, name)
			}
		}
	}
	for k := range want.After {
		for name, w := range want.After[k] {
			if d := relDiff(got.After[k][name], w, nil); d > worst || math.IsNaN(d) {
				worst, where = d, fmt.Sprintf("after_%d/%s", k+1, name)
			}
		}
	}
	return fmt.Sprintf("%.3g at %s", worst, where)
}

// checkRunningStats computes conv1's output for the batch with the inference kernel (a
// copy of the model cut after its first node), takes each channel's batch mean and
// unbiased variance, and checks bn1's statistics after the first step are
// running*momentum + batch*(1-momentum), ONNX's convention.
func checkRunningStats(t *testing.T, m *onnx.Model, r *TorchTrainResult, x []float32, dims []int64) {
	conv := m.Graph.Nodes[0]
	bn := m.Graph.Nodes[1]
	if conv.OpType != "Conv" || bn.OpType != "BatchNormalization" || bn.Inputs[0] != conv.Outputs[0] {
		t.Fatalf("ResNet-18 starts with %s, %s; want Conv, BatchNormalization", conv.OpType, bn.OpType)
	}
	momentum := float64(bn.Attrs["momentum"].F)
	g := onnx.Graph{Name: "conv1", Nodes: []*onnx.Node{conv}, Inputs: m.Graph.Inputs,
		Outputs:      []onnx.ValueInfo{{Name: conv.Outputs[0], DType: onnx.Float}},
		Initializers: map[string]*onnx.Tensor{conv.Inputs[1]: m.Graph.Initializers[conv.Inputs[1]]}}
	cut := *m
	cut.Graph = &g
	act := kernelOutput(t, &cut, x, dims)
	channels := int(m.Graph.Initializers[conv.Inputs[1]].Dims[0])
	per := len(act) / (int(dims[0]) * channels) // H*W
	count := float64(int(dims[0]) * per)
	mean, variance := make([]float64, channels), make([]float64, channels)
	for c := 0; c < channels; c++ {
		var s, s2 float64
		for n := 0; n < int(dims[0]); n++ {
			for _, v := range act[(n*channels+c)*per : (n*channels+c+1)*per] {
				s += v
			}
		}
		mean[c] = s / count
		for n := 0; n < int(dims[0]); n++ {
			for _, v := range act[(n*channels+c)*per : (n*channels+c+1)*per] {
				s2 += (v - mean[c]) * (v - mean[c])
			}
		}
		variance[c] = s2 / (count - 1)
	}
	for i, batch := range [][]float64{mean, variance} {
		name := bn.Inputs[3+i]
		r0 := initial(m, name)
		want := make([]float64, channels)
		for c := range want {
			want[c] = r0[c]*momentum + batch[c]*(1-momentum)
		}
		if d := relDiff(r.After[0][name], want, nil); !(d <= trainTol) {
			t.Errorf("%s after one step differs from running*%g + batch*%g by %.3g", name, momentum, 1-momentum, d)
		}
	}
}

func volumeAll(m map[string][]float64) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}
