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

// zooText is the zoo's transformer_encoder checked against export.py's TextEncoder
// (torch.nn.TransformerEncoder) holding the same weights; zooTextBatch rows of ids, some
// padded.
var zooText = zoo.TextOptions{Vocab: 200, Length: 12, Layers: 2, Heads: 4, Width: 32, Classes: 5, Seed: 6}

const zooTextBatch = 3

// onlyEnv names the export cases to make (comma-separated substrings of their names;
// empty: all). A filtered set is cached apart from the full one, and the tests that count
// cases or opsets skip those checks.
const onlyEnv = "TORCHCHECK_ONLY"

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
	only := os.Getenv(onlyEnv)
	if only != "" {
		t.Logf("%s=%q: %d exports; the count and opset checks are skipped", onlyEnv, only, len(cases))
		if len(cases) == 0 {
			t.Fatalf("no export case matches %s=%q", onlyEnv, only)
		}
	} else if len(cases) < 32 {
		t.Fatalf("manifest lists %d exports, want 32", len(cases))
	}
	opsets := map[int64]bool{}
	for _, c := range cases {
		opsets[c.Opset] = true
		t.Run(c.Name, func(t *testing.T) { checkCase(t, filepath.Join(dir, c.Dir), c.MaxAbsOutput) })
	}
	for v := int64(11); v <= 17 && only == ""; v++ {
		if !opsets[v] {
			t.Errorf("no export at opset %d", v)
		}
	}
}

// newerOpsetCases are exports rewritten to opsets 18 to 21 by TestTorchExportsAtNewerOpsets:
// a layer-norm decomposition with ReduceMean axes (ViT at 14), LayerNormalization,
// attention and int64 inputs (the text encoder at 17), ReduceL2 and shifted windows (Swin
// v2 at 17).
var newerOpsetCases = []string{"vit_small_op14", "text_encoder_op17", "swin_v2_t_op17"}

// TestTorchExportsAtNewerOpsets rewrites torch's exports as opsets 18 to 21 write them
// (torch 1.13 exports up to 17): Reduce* axes move from the attribute to an input, and
// Split without sizes names its output count. What the operators compute did not change,
// so each must still give torch's output.
func TestTorchExportsAtNewerOpsets(t *testing.T) {
	dir, _ := references(t)
	byName := map[string]manifestCase{}
	for _, c := range readManifest(t, dir) {
		byName[c.Name] = c
	}
	ran := 0
	for _, name := range newerOpsetCases {
		c, ok := byName[name]
		if !ok {
			if os.Getenv(onlyEnv) != "" {
				continue
			}
			t.Fatalf("export %s missing from the manifest", name)
		}
		for v := int64(18); v <= 21; v++ {
			t.Run(fmt.Sprintf("%s_as_op%d", name, v), func(t *testing.T) {
				m, err := onnx.ReadFile(filepath.Join(dir, c.Dir, "model.onnx"))
				if err != nil {
					t.Fatal(err)
				}
				moved := upgradeOpset(m, v)
				t.Logf("%d Reduce*/Split nodes rewritten", moved)
				checkModel(t, m, filepath.Join(dir, c.Dir), c.MaxAbsOutput)
			})
			ran++
		}
	}
	if ran == 0 {
		t.Fatalf("none of %v exported (%s=%q)", newerOpsetCases, onlyEnv, os.Getenv(onlyEnv))
	}
}

// upgradeOpset rewrites m (opset 13 to 17) as opset v >= 18 writes it and returns how many
// nodes changed: every Reduce* takes its axes as an int64 input instead of an attribute,
// and a Split without a sizes input gets num_outputs.
func upgradeOpset(m *onnx.Model, v int64) int {
	changed := 0
	g := m.Graph
	for i, n := range g.Nodes {
		switch {
		case strings.HasPrefix(n.OpType, "Reduce") && n.OpType != "ReduceSum":
			a, ok := n.Attrs["axes"]
			if !ok {
				continue
			}
			name := fmt.Sprintf("upgrade_axes_%d", i)
			g.Initializers[name] = &onnx.Tensor{Name: name, DType: onnx.Int64, Dims: []int64{int64(len(a.Ints))}, I64: a.Ints}
			n.Inputs = append(n.Inputs[:1], name)
			delete(n.Attrs, "axes")
			changed++
		case n.OpType == "Split" && (len(n.Inputs) < 2 || n.Inputs[1] == ""):
			if _, ok := n.Attrs["split"]; ok {
				continue // opset < 13 form: not an export this test takes
			}
			n.Attrs["num_outputs"] = &onnx.Attribute{Name: "num_outputs", Type: onnx.AttrInt, I: int64(len(n.Outputs))}
			changed++
		}
	}
	m.Opset = v
	m.Opsets[""] = v
	return changed
}

// TestZooAgainstTorchvision runs zoo models whose outputs torch computed with the same
// weights (export.py checks every state_dict key matches in name and shape).
func TestZooAgainstTorchvision(t *testing.T) {
	_, dir := references(t)
	cases := readManifest(t, dir)
	if len(cases) != len(zooCases)+1 {
		t.Fatalf("torch ran %d zoo models, want %d (and %s)", len(cases), len(zooCases), zoo.TransformerEncoder)
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
	cached, tmp, err := exportCache(script, os.Getenv(onlyEnv))
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
	m, err := zoo.BuildText(zooText)
	if err != nil {
		return err
	}
	d := filepath.Join(dir, zoo.TransformerEncoder)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := onnx.WriteFile(filepath.Join(d, "model.onnx"), m); err != nil {
		return err
	}
	dims := []int64{zooTextBatch, zooText.Length}
	ids := &onnx.Tensor{Name: "ids", DType: onnx.Int64, Dims: dims, I64: make([]int64, volume(dims))}
	mask := &onnx.Tensor{Name: "mask", DType: onnx.Int64, Dims: dims, I64: make([]int64, volume(dims))}
	for i := range ids.I64 {
		ids.I64[i] = rng.Int64N(zooText.Vocab)
		row, col := int64(i)/zooText.Length, int64(i)%zooText.Length
		if col < zooText.Length-3*row { // row r ends in 3r padding tokens
			mask.I64[i] = 1
		}
	}
	if err := onnx.WriteTensorFile(filepath.Join(d, "input_0.pb"), ids); err != nil {
		return err
	}
	return onnx.WriteTensorFile(filepath.Join(d, "input_1.pb"), mask)
}

// checkCase loads dir/model.onnx in the kernel, runs dir/input_0.pb and compares with dir/output_0.pb.
func checkCase(t *testing.T, dir string, maxAbs float64) {
	src, err := onnx.ReadFile(filepath.Join(dir, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	checkModel(t, src, dir, maxAbs)
}

// checkModel loads src in the kernel, runs dir/input_*.pb and compares with dir/output_0.pb.
func checkModel(t *testing.T, src *onnx.Model, dir string, maxAbs float64) {
	start := time.Now()
	m, err := kernel.LoadModel(src, kernel.Options{Threads: 2})
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

// exportCache returns the cache directory of torch's exports for this script (and case
// filter), and a fresh temporary directory to export into (to be renamed to it) when it
// is not there yet. Exports are deterministic, so they are cached across runs under the
// user cache dir, keyed by the export script's hash; a filtered set gets its own
// directory, so it never stands in for the full one.
func exportCache(script []byte, only string) (dir, tmp string, err error) {
	sum := sha256.Sum256(script)
	key := hex.EncodeToString(sum[:8])
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	root := filepath.Join(base, "idunno", "torchcheck")
	name := key
	if only != "" {
		f := sha256.Sum256([]byte(only))
		name += "-only-" + hex.EncodeToString(f[:4])
	}
	dir = filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err == nil {
		return dir, "", nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", "", err
	}
	// Older scripts' exports are stale, and so are temporary dirs of runs that died:
	// remove them so the cache holds one script's sets.
	old, _ := os.ReadDir(root)
	for _, o := range old {
		info, err := o.Info()
		if err != nil || strings.HasPrefix(o.Name(), "tmp-") && time.Since(info.ModTime()) < time.Hour ||
			strings.HasPrefix(o.Name(), key) {
			continue // maybe a concurrent run's export in progress, or this script's
		}
		os.RemoveAll(filepath.Join(root, o.Name()))
	}
	tmp, err = os.MkdirTemp(root, "tmp-")
	return dir, tmp, err
}
