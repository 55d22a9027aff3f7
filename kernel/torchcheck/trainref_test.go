package torchcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

// TorchTrainConfig is train_ref.py's cfg.json: the optimizer and its settings, as
// torch.optim.SGD (dampening 0), Adam or AdamW take them. Zero Betas and Eps mean torch's
// defaults (0.9, 0.999) and 1e-8; WeightDecay is 0 unless set, for every optimizer.
type TorchTrainConfig struct {
	Optimizer   string    `json:"optimizer"` // "sgd", "adam" or "adamw"
	LR          float64   `json:"lr"`
	Momentum    float64   `json:"momentum"`
	Nesterov    bool      `json:"nesterov"`
	WeightDecay float64   `json:"weight_decay"`
	Betas       []float64 `json:"betas,omitempty"`
	Eps         float64   `json:"eps,omitempty"`
	Steps       int       `json:"steps"`
}

// TorchTrainResult is what train_ref.py computed, tensors flattened in C order and keyed
// by ONNX initializer name.
type TorchTrainResult struct {
	Loss       []float64              // the loss of each step's forward, before its update
	Logits0    []float64              // the first (training-mode) forward's output
	LogitsEval []float64              // an eval-mode forward of the first batch before training
	Grad       map[string][]float64   // the first step's gradients (Grads[0])
	Grads      []map[string][]float64 // Grads[k]: step k+1's gradients, trainable parameters only
	After      []map[string][]float64 // After[k-1]: every float initializer after step k
	Dims       map[string][]int64     // each initializer's shape
	// Margins[k] is step k+1's forward's smallest decision margin (see margins.json in
	// train_ref.py): a ReLU or Clip input's distance from its threshold, or a MaxPool
	// window's gap to its runner-up, relative to the tensor's largest magnitude. Another
	// implementation whose rounding error reaches it may route a gradient elsewhere.
	Margins []TrainMargin
}

// TrainMargin is one forward's smallest decision margin and the node it is at; Value is
// +Inf when the forward made no such decision.
type TrainMargin struct {
	Value float64
	Where string
}

// trainRefTimeout bounds one train_ref.py run (ResNet-18 at 32x32, batch 8, float64,
// three steps takes about 6 s on an idle core).
const trainRefTimeout = 5 * time.Minute

var torchProbe struct {
	once sync.Once
	err  error
}

// requireTorch skips the test when Debian's python3 cannot import torch, onnx and numpy.
func requireTorch(t testing.TB) {
	t.Helper()
	torchProbe.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, python, "-c", "import torch, onnx, numpy").CombinedOutput()
		if err != nil {
			torchProbe.err = fmt.Errorf("%s cannot import torch, onnx and numpy (%v: %s): install python3-torch and python3-onnx (make test-deps)", python, err, out)
		}
	})
	if torchProbe.err != nil {
		t.Skip(torchProbe.err)
	}
}

// runTorchTrain trains the ONNX model at modelPath in PyTorch with train_ref.py: x holds
// one batch (xdims N,C,H,W) used for every step, or one batch per step (xdims
// STEPS,N,C,H,W); y holds the labels, N or STEPS x N of them. dtype is "float64" (the
// better reference for a float32 trainer) or "float32". extra goes to train_ref.py's
// command line ("--torchvision", "resnet18"). Skips the test without torch.
func runTorchTrain(t testing.TB, modelPath string, x []float32, xdims []int64, y []int64, cfg TorchTrainConfig, dtype string, extra ...string) *TorchTrainResult {
	t.Helper()
	requireTorch(t)
	res, err := torchTrain(t, modelPath, x, xdims, y, cfg, dtype, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// torchTrain is runTorchTrain returning its error; extra goes to train_ref.py's command line.
func torchTrain(t testing.TB, modelPath string, x []float32, xdims []int64, y []int64, cfg TorchTrainConfig, dtype string, extra ...string) (*TorchTrainResult, error) {
	if int64(len(x)) != volume(xdims) {
		return nil, fmt.Errorf("torchcheck: x holds %d values, shape %v needs %d", len(x), xdims, volume(xdims))
	}
	ydims := xdims[:1]
	if len(xdims) == 5 {
		ydims = xdims[:2]
	}
	if int64(len(y)) != volume(ydims) {
		return nil, fmt.Errorf("torchcheck: %d labels for x of shape %v", len(y), xdims)
	}
	script, err := filepath.Abs("train_ref.py")
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	for _, w := range []error{
		writeNPY(filepath.Join(dir, "x.npy"), xdims, x),
		writeNPY(filepath.Join(dir, "y.npy"), ydims, y),
		os.WriteFile(filepath.Join(dir, "cfg.json"), cfgJSON, 0o644),
	} {
		if w != nil {
			return nil, w
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), trainRefTimeout)
	defer cancel()
	args := []string{script, "--model", modelPath, "--x", filepath.Join(dir, "x.npy"), "--y", filepath.Join(dir, "y.npy"),
		"--config", filepath.Join(dir, "cfg.json"), "--out", out, "--dtype", dtype}
	args = append(args, extra...)
	start := time.Now()
	if msg, err := exec.CommandContext(ctx, python, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("torchcheck: train_ref.py %s %s: %w\n%s", filepath.Base(modelPath), cfgJSON, err, msg)
	}
	t.Logf("train_ref.py %s %s --dtype %s %v took %v", filepath.Base(modelPath), cfgJSON, dtype, extra, time.Since(start).Round(10*time.Millisecond))
	return readTrainRef(out, cfg.Steps)
}

// readTrainRef reads the files train_ref.py wrote into dir for a run of steps steps.
func readTrainRef(dir string, steps int) (*TorchTrainResult, error) {
	b, err := os.ReadFile(filepath.Join(dir, "names.json"))
	if err != nil {
		return nil, err
	}
	var names map[string]string // file -> initializer name
	if err := json.Unmarshal(b, &names); err != nil {
		return nil, fmt.Errorf("torchcheck: names.json: %w", err)
	}
	res := &TorchTrainResult{Dims: map[string][]int64{}}
	for _, f := range []struct {
		name string
		dst  *[]float64
	}{{"loss.npy", &res.Loss}, {"logits_0.npy", &res.Logits0}, {"logits_eval.npy", &res.LogitsEval}} {
		if *f.dst, _, err = readNPYFloat64(filepath.Join(dir, f.name)); err != nil {
			return nil, err
		}
	}
	if len(res.Loss) != steps {
		return nil, fmt.Errorf("torchcheck: loss.npy holds %d losses for %d steps", len(res.Loss), steps)
	}
	readDir := func(sub string, all bool) (map[string][]float64, error) {
		m := map[string][]float64{}
		for file, name := range names {
			p := filepath.Join(dir, sub, file)
			if _, err := os.Stat(p); err != nil && !all {
				continue // grad_K holds trainable parameters only
			}
			v, dims, err := readNPYFloat64(p)
			if err != nil {
				return nil, err
			}
			m[name], res.Dims[name] = v, dims
		}
		return m, nil
	}
	for k := 0; k < steps; k++ {
		g, err := readDir(fmt.Sprintf("grad_%d", k), false)
		if err != nil {
			return nil, err
		}
		a, err := readDir(fmt.Sprintf("after_%d", k+1), true)
		if err != nil {
			return nil, err
		}
		res.Grads, res.After = append(res.Grads, g), append(res.After, a)
	}
	res.Grad = res.Grads[0]
	if b, err = os.ReadFile(filepath.Join(dir, "margins.json")); err != nil {
		return nil, err
	}
	var margins []struct {
		Margin *float64 `json:"margin"`
		Where  string   `json:"where"`
	}
	if err := json.Unmarshal(b, &margins); err != nil || len(margins) != steps {
		return nil, fmt.Errorf("torchcheck: margins.json: %d entries for %d steps (%v)", len(margins), steps, err)
	}
	for _, m := range margins {
		v := math.Inf(1)
		if m.Margin != nil {
			v = *m.Margin
		}
		res.Margins = append(res.Margins, TrainMargin{v, m.Where})
	}
	return res, nil
}

// relDiff is max |got - want| / max |want| over the elements keep allows (all when keep
// is nil); 0 when want is all zeros and so is got. NaN when the lengths differ or a value
// is not finite, so that every comparison with a bound fails.
func relDiff(got, want []float64, keep []bool) float64 {
	if len(got) != len(want) || keep != nil && len(keep) != len(want) {
		return math.NaN()
	}
	var maxDiff, maxRef float64
	for i := range want {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) || math.IsNaN(want[i]) || math.IsInf(want[i], 0) {
			return math.NaN()
		}
		maxRef = math.Max(maxRef, math.Abs(want[i]))
		if keep == nil || keep[i] {
			maxDiff = math.Max(maxDiff, math.Abs(got[i]-want[i]))
		}
	}
	if maxRef == 0 {
		return maxDiff
	}
	return maxDiff / maxRef
}

// adamStableMask marks the elements of parameter name whose reference gradient, in every
// step up to and including step k (1-based), is either exactly zero or at least tau times
// that step's largest gradient magnitude in the tensor. Adam divides each gradient by
// its own magnitude, so an element whose gradient is at rounding-noise level moves by
// about ±lr with an arbitrary sign in any implementation: two float32 trainers (or a
// float32 and a float64 one) agree on Adam's weights only where this mask holds.
// It returns the mask and how many elements it leaves out.
func adamStableMask(ref *TorchTrainResult, name string, k int, tau float64) ([]bool, int) {
	keep := make([]bool, len(ref.Grads[0][name]))
	for i := range keep {
		keep[i] = true
	}
	for s := 0; s < k; s++ {
		g := ref.Grads[s][name]
		var maxG float64
		for _, v := range g {
			maxG = math.Max(maxG, math.Abs(v))
		}
		for i, v := range g {
			if v != 0 && math.Abs(v) < tau*maxG {
				keep[i] = false
			}
		}
	}
	dropped := 0
	for _, ok := range keep {
		if !ok {
			dropped++
		}
	}
	return keep, dropped
}

// compareTrainRuns checks that got agrees with want within tol relative to each tensor's
// largest magnitude: losses, first logits, every gradient and every initializer after
// every step. keep, when not nil, gives a mask per (step, name) for the After tensors.
func compareTrainRuns(t *testing.T, got, want *TorchTrainResult, tol float64, keep func(step int, name string) []bool) {
	t.Helper()
	worst, where := 0.0, ""
	check := func(what string, g, w []float64, mask []bool) {
		d := relDiff(g, w, mask)
		if !(d <= tol) {
			t.Errorf("%s: relative difference %.3g, over %g", what, d, tol)
		}
		if d > worst || math.IsNaN(d) {
			worst, where = d, what
		}
	}
	check("loss", got.Loss, want.Loss, nil)
	check("logits_0", got.Logits0, want.Logits0, nil)
	check("logits_eval", got.LogitsEval, want.LogitsEval, nil)
	for k := range want.Grads {
		for _, name := range sortedNames(want.Grads[k]) {
			check(fmt.Sprintf("grad_%d/%s", k, name), got.Grads[k][name], want.Grads[k][name], nil)
		}
	}
	for k := range want.After {
		for _, name := range sortedNames(want.After[k]) {
			var mask []bool
			if keep != nil {
				mask = keep(k+1, name)
			}
			check(fmt.Sprintf("after_%d/%s", k+1, name), got.After[k][name], want.After[k][name], mask)
		}
	}
	t.Logf("losses %.6g; largest relative difference %.3g (%s)", want.Loss, worst, where)
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
