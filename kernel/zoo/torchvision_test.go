package zoo

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// python is Debian's interpreter, which has python3-torch and python3-torchvision.
const python = "/usr/bin/python3"

// genericInit are the architectures whose Init "torch" is the generic torch default,
// not torchvision's own code (see Options.Init): only shapes, BatchNormalization and
// Dropouts are compared with torchvision for them.
var genericInit = map[string]bool{"squeezenet": true, "inception_v3": true}

type torchStats struct {
	Shape                     []int64
	N                         int
	Mean, Std, Min, Max, Kurt float64
}

type torchModel struct {
	Params   map[string]torchStats
	Dropouts [][]any
}

// torchvisionReference runs testdata/torch_init.py: the statistics of the weights PyTorch
// 1.13 draws for freshly constructed torchvision 0.14 modules (at most the first 2^20 values
// of each tensor; the draws are independent, so a prefix is a fair sample). It returns a
// reason instead when Debian's python3-torch and python3-torchvision are not installed.
func torchvisionReference(t *testing.T, names []string) (map[string]torchModel, string) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		return nil, fmt.Sprintf("%s is needed with python3-torch and python3-torchvision (make test-deps installs them): %v", python, err)
	}
	if err := exec.Command(python, "-c", "import torch, torchvision").Run(); err != nil {
		return nil, fmt.Sprintf("python3-torch and python3-torchvision are needed (make test-deps installs them): %v", err)
	}
	cmd := exec.Command(python, append([]string{"testdata/torch_init.py", "1", "10"}, names...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("torch_init.py: %v", err)
	}
	var ref map[string]torchModel
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	return ref, ""
}

// compareWithTorch compares a torch-initialised model with torchvision's: the same
// state_dict keys and shapes, the same constants, and for every tensor of 1,000 values or
// more the same mean and standard deviation (within 6 standard errors of the difference of
// two samples) and, from 10,000 values, the same kurtosis (1.8 for a uniform, 3 for a
// normal distribution), which tells the two kinds apart.
func compareWithTorch(t *testing.T, name string, m *onnx.Model, ref torchModel) {
	ours := map[string]*onnx.Tensor{}
	for k, v := range m.Graph.Initializers {
		if !strings.HasPrefix(k, "dropout_ratio_") && !strings.HasPrefix(k, "clip_") {
			ours[k] = v
		}
	}
	if len(ours) != len(ref.Params) {
		t.Errorf("%d tensors, torchvision's state_dict has %d", len(ours), len(ref.Params))
	}
	bn := map[string]bool{}
	for _, n := range m.Graph.Nodes {
		if n.OpType == "BatchNormalization" {
			for _, in := range n.Inputs[1:] {
				bn[in] = true
			}
		}
	}
	for key, want := range ref.Params {
		w := ours[key]
		if w == nil {
			t.Errorf("torchvision's %s is missing", key)
			continue
		}
		if fmt.Sprint(w.Dims) != fmt.Sprint(want.Shape) {
			t.Errorf("%s: shape %v, torchvision's %v", key, w.Dims, want.Shape)
			continue
		}
		if genericInit[name] && !bn[key] {
			continue
		}
		if err := sameDist(w.F32[:want.N], want); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	var drops []string
	for _, d := range ref.Dropouts {
		drops = append(drops, fmt.Sprintf("%s %g -> %s", d[0], d[1], d[2]))
	}
	if got := dropouts(t, m); fmt.Sprint(got) != fmt.Sprint(drops) {
		t.Errorf("dropouts %q, torchvision's %q", got, drops)
	}
}

// sameDist tells whether data looks drawn from the distribution torch's sample came from.
func sameDist(data []float32, ref torchStats) error {
	if ref.Min == ref.Max {
		for i, v := range data {
			if float64(v) != ref.Min {
				return fmt.Errorf("value %d is %v, torchvision's are all %v", i, v, ref.Min)
			}
		}
		return nil
	}
	n := float64(len(data))
	var sum, maxAbs float64
	for _, v := range data {
		sum += float64(v)
		maxAbs = math.Max(maxAbs, math.Abs(float64(v)))
	}
	mean := sum / n
	var m2, m4 float64
	for _, v := range data {
		d := float64(v) - mean
		m2 += d * d
		m4 += d * d * d * d
	}
	m2, m4 = m2/n, m4/n
	std, kurt := math.Sqrt(m2), m4/(m2*m2)
	if n < 1000 {
		if refMax := math.Max(-ref.Min, ref.Max); maxAbs > 3*refMax {
			return fmt.Errorf("|value| up to %v, torchvision's up to %v", maxAbs, refMax)
		}
		return nil
	}
	if d := math.Abs(mean - ref.Mean); d > 6*ref.Std*math.Sqrt(2/n) {
		return fmt.Errorf("mean %v, torchvision's %v", mean, ref.Mean)
	}
	if math.Abs(std/ref.Std-1) > 6/math.Sqrt(n) {
		return fmt.Errorf("std %v, torchvision's %v", std, ref.Std)
	}
	if n >= 10000 && math.Abs(kurt-ref.Kurt) > 0.3 {
		return fmt.Errorf("kurtosis %.3f, torchvision's %.3f (1.8 is uniform, 3 normal)", kurt, ref.Kurt)
	}
	if ref.Kurt < 2.2 { // uniform: the bounds must agree too
		if refMax := math.Max(-ref.Min, ref.Max); math.Abs(maxAbs/refMax-1) > 0.02 {
			return fmt.Errorf("|value| up to %v, torchvision's up to %v", maxAbs, refMax)
		}
	}
	return nil
}
