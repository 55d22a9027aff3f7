package torchcheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// python is Debian's interpreter, which has python3-torch, python3-torchvision and python3-onnx.
const python = "/usr/bin/python3"

// tolerance is the bound: max |kernel - torch| over the output, relative to the
// output's largest magnitude.
const tolerance = 1e-3

// zooCases are the zoo models checked against torchvision, at input sizes that keep the
// test quick. (alexnet and vgg16 are left out: half a gigabyte of weights each, and their
// layers are covered by the torchvision exports of alexnet and vgg11.)
var zooCases = []struct {
	name  string
	shape []int64 // C, H, W
	batch int64
}{
	{"lenet5", nil, 3},
	{"resnet18", []int64{3, 64, 64}, 1},
	{"resnet50", []int64{3, 64, 64}, 2},
	{"mobilenet_v2", []int64{3, 64, 64}, 1},
	{"squeezenet", []int64{3, 64, 64}, 1},
	{"inception_v3", []int64{3, 96, 96}, 1},
}

type manifestCase struct {
	Name         string  `json:"name"`
	Dir          string  `json:"dir"`
	Source       string  `json:"source"`
	Model        string  `json:"model"`
	Opset        int64   `json:"opset"`
	MaxAbsOutput float64 `json:"max_abs_output"`
}

// zooRoot holds this run's zoo models and torch's outputs for them; TestMain removes it.
var zooRoot string

func TestMain(m *testing.M) {
	if err := kernel.Available(); err != nil {
		fmt.Fprintln(os.Stderr, "FATAL:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "idunno-torchcheck-zoo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FATAL:", err)
		os.Exit(1)
	}
	zooRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestTorchvisionExports runs every model torch.onnx.export wrote through the kernel and
// compares with torch's output.
func TestTorchvisionExports(t *testing.T) {
	dir, _ := references(t)
	cases := readManifest(t, dir)
	if len(cases) < 29 {
		t.Fatalf("manifest lists %d exports, want 29", len(cases))
	}
	opsets := map[int64]bool{}
	for _, c := range cases {
		opsets[c.Opset] = true
		t.Run(c.Name, func(t *testing.T) { checkCase(t, filepath.Join(dir, c.Dir), c.MaxAbsOutput) })
	}
	for v := int64(11); v <= 17; v++ {
		if !opsets[v] {
			t.Errorf("no export at opset %d", v)
		}
	}
}

// TestZooAgainstTorchvision runs zoo models whose outputs torch computed with the same
// weights (export.py checks every state_dict key matches in name and shape).
func TestZooAgainstTorchvision(t *testing.T) {
	_, dir := references(t)
	cases := readManifest(t, dir)
	if len(cases) != len(zooCases) {
		t.Fatalf("torch ran %d zoo models, want %d", len(cases), len(zooCases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { checkCase(t, filepath.Join(dir, c.Dir), c.MaxAbsOutput) })
	}
}

var refs struct {
	once          sync.Once
	tvDir, zooDir string
	err           error
}

// references returns the directories of torch's exports and of the zoo cases, making
// both with one Python process on first use (exports come from the cache when present).
func references(t *testing.T) (tvDir, zooDir string) {
	t.Helper()
	refs.once.Do(func() { refs.tvDir, refs.zooDir, refs.err = makeReferences(t) })
	if refs.err != nil {
		t.Fatal(refs.err)
	}
	return refs.tvDir, refs.zooDir
}

func makeReferences(t *testing.T) (string, string, error) {
	zooDir := filepath.Join(zooRoot, "zoo")
	if err := writeZooCases(zooDir); err != nil {
		return "", "", err
	}
	script, err := os.ReadFile("export.py")
	if err != nil {
		return "", "", err
	}
	cached, tmp, err := exportCache(script)
	if err != nil {
		return "", "", err
	}
	if tmp == "" {
		t.Logf("using cached exports in %s", cached)
		return cached, zooDir, runPython(t, 10*time.Minute, "--zoo", zooDir)
	}
	defer os.RemoveAll(tmp) // gone after the rename; cleans up a failed export
	if err := runPython(t, 20*time.Minute, "--torchvision", tmp, "--zoo", zooDir); err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp, cached); err != nil {
		if _, statErr := os.Stat(filepath.Join(cached, "manifest.json")); statErr != nil {
			return "", "", err // not a concurrent run that finished first
		}
	}
	return cached, zooDir, nil
}

// writeZooCases writes each zoo case's model and a seeded random input under dir.
func writeZooCases(dir string) error {
	rng := rand.New(rand.NewPCG(42, 42))
	for _, zc := range zooCases {
		m, err := zoo.Build(zc.name, zoo.Options{InputShape: zc.shape, Seed: 5})
		if err != nil {
			return err
		}
		d := filepath.Join(dir, zc.name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := onnx.WriteFile(filepath.Join(d, "model.onnx"), m); err != nil {
			return err
		}
		dims := append([]int64{zc.batch}, m.Graph.Inputs[0].Dims[1:]...)
		in := &onnx.Tensor{Name: "input", DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
		for i := range in.F32 {
			in.F32[i] = float32(rng.NormFloat64())
		}
		if err := onnx.WriteTensorFile(filepath.Join(d, "input_0.pb"), in); err != nil {
			return err
		}
	}
	return nil
}

// checkCase loads dir/model.onnx in the kernel, runs dir/input_0.pb and compares with dir/output_0.pb.
func checkCase(t *testing.T, dir string, maxAbs float64) {
	start := time.Now()
	m, err := kernel.Load(filepath.Join(dir, "model.onnx"), kernel.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	var ins []*onnx.Tensor // input_0.pb, input_1.pb, ... in the model's input order
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("input_%d.pb", i))
		if _, err := os.Stat(p); err != nil && i > 0 {
			break
		}
		in, err := onnx.ReadTensorFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	want, err := onnx.ReadTensorFile(filepath.Join(dir, "output_0.pb"))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := m.Run(ins)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 {
		t.Fatalf("%d outputs, want 1", len(outs))
	}
	rel, err := relError(outs[0], want)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("max error %.2e of the largest output magnitude %.3g (load+run %v)", rel, maxAbs, time.Since(start).Round(time.Millisecond))
	if !(rel <= tolerance) {
		t.Errorf("max error %.3g of the largest output magnitude, over %g", rel, tolerance)
	}
	if err := sameTop1(outs[0], want); err != nil {
		t.Error(err)
	}
}

// relError is max |got - want| / max |want|; NaN or Inf anywhere is an error.
func relError(got, want *onnx.Tensor) (float64, error) {
	if fmt.Sprint(got.Dims) != fmt.Sprint(want.Dims) {
		return 0, fmt.Errorf("output shape %v, torch's is %v", got.Dims, want.Dims)
	}
	g, w := got.Floats(), want.Floats()
	if len(g) != len(w) || len(w) == 0 {
		return 0, fmt.Errorf("output holds %d values, torch's %d", len(g), len(w))
	}
	var maxDiff, maxRef float64
	for i := range w {
		if math.IsNaN(g[i]) || math.IsInf(g[i], 0) || math.IsNaN(w[i]) || math.IsInf(w[i], 0) {
			return 0, fmt.Errorf("non-finite value at %d: kernel %v, torch %v", i, g[i], w[i])
		}
		maxDiff = math.Max(maxDiff, math.Abs(g[i]-w[i]))
		maxRef = math.Max(maxRef, math.Abs(w[i]))
	}
	if maxRef == 0 {
		return 0, fmt.Errorf("torch's output is all zeros: the check would be empty")
	}
	return maxDiff / maxRef, nil
}

// sameTop1 checks that every row of a (batch, classes) output has torch's arg max.
func sameTop1(got, want *onnx.Tensor) error {
	if len(want.Dims) != 2 {
		return nil
	}
	g, w := got.Floats(), want.Floats()
	k := int(want.Dims[1])
	for r := 0; r < int(want.Dims[0]); r++ {
		gi, wi := 0, 0
		for c := 1; c < k; c++ {
			if g[r*k+c] > g[r*k+gi] {
				gi = c
			}
			if w[r*k+c] > w[r*k+wi] {
				wi = c
			}
		}
		if gi != wi {
			return fmt.Errorf("row %d: top-1 class %d, torch's is %d", r, gi, wi)
		}
	}
	return nil
}

func volume(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

func readManifest(t *testing.T, dir string) []manifestCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []manifestCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// runPython runs export.py with args under a deadline.
func runPython(t *testing.T, limit time.Duration, args ...string) error {
	if _, err := os.Stat(python); err != nil {
		return fmt.Errorf("%s missing: install Debian's python3-torch, python3-torchvision and python3-onnx (make test-deps)", python)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"export.py"}, args...)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("export.py %v: %v\n%s", args, err, out)
	}
	t.Logf("export.py %v took %v", args, time.Since(start).Round(time.Second))
	return nil
}

// exportCache returns the cache directory of torch's exports for this script, and a
// fresh temporary directory to export into (to be renamed to it) when it is not there
// yet. Exports are deterministic, so they are cached across runs under the user cache
// dir, keyed by the export script's hash.
func exportCache(script []byte) (dir, tmp string, err error) {
	sum := sha256.Sum256(script)
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	root := filepath.Join(base, "idunno", "torchcheck")
	dir = filepath.Join(root, hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err == nil {
		return dir, "", nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", "", err
	}
	// Older scripts' exports are stale, and so are temporary dirs of runs that died:
	// remove them so the cache holds one set.
	old, _ := os.ReadDir(root)
	for _, o := range old {
		info, err := o.Info()
		if err != nil || strings.HasPrefix(o.Name(), "tmp-") && time.Since(info.ModTime()) < time.Hour {
			continue // maybe a concurrent run's export in progress
		}
		os.RemoveAll(filepath.Join(root, o.Name()))
	}
	tmp, err = os.MkdirTemp(root, "tmp-")
	return dir, tmp, err
}
