package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

func lenet(t *testing.T, threads int) *Model {
	t.Helper()
	return lenetTB(t, threads)
}

func lenetB(b *testing.B) *Model { return lenetTB(b, 1) }

func lenetTB(t testing.TB, threads int) *Model {
	t.Helper()
	src, err := zoo.Build("lenet5", zoo.Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(src, Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func images(batch int, seed uint64) *onnx.Tensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	t := &onnx.Tensor{DType: onnx.Float, Dims: []int64{int64(batch), 1, 28, 28}, F32: make([]float32, batch*28*28)}
	for i := range t.F32 {
		t.F32[i] = rng.Float32()
	}
	return t
}

func TestInputsReportSymbolicBatch(t *testing.T) {
	m := lenet(t, 1)
	in := m.Inputs()
	if len(in) != 1 || len(in[0].Dims) != 4 || in[0].Dims[0] != -1 || in[0].Dims[1] != 1 {
		t.Fatalf("inputs %+v", in)
	}
	if out := m.Outputs(); len(out) != 1 {
		t.Fatalf("outputs %+v", out)
	}
}

// TestBatchSizesAgree: every image of a batch gets the answer it gets alone, and plans
// for several batch sizes live side by side.
func TestBatchSizesAgree(t *testing.T) {
	m := lenet(t, 2)
	x := images(5, 3)
	all, err := m.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	if got := all[0].Dims; len(got) != 2 || got[0] != 5 || got[1] != 10 {
		t.Fatalf("output dims %v", got)
	}
	for i := 0; i < 5; i++ {
		one := &onnx.Tensor{DType: onnx.Float, Dims: []int64{1, 1, 28, 28}, F32: x.F32[i*784 : (i+1)*784]}
		out, err := m.Run([]*onnx.Tensor{one})
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 10; k++ {
			a, b := out[0].F32[k], all[0].F32[i*10+k]
			if math.Abs(float64(a-b)) > 1e-4+1e-4*math.Abs(float64(b)) {
				t.Fatalf("image %d class %d: alone %v, in batch %v", i, k, a, b)
			}
		}
	}
}

// TestConcurrentModels runs two models with different thread counts from several
// goroutines at once; each answer must equal the sequential one.
func TestConcurrentModels(t *testing.T) {
	a, b := lenet(t, 1), lenet(t, 2)
	x := images(2, 9)
	want, err := a.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(m *Model) {
			defer wg.Done()
			for r := 0; r < 20; r++ {
				got, err := m.Run([]*onnx.Tensor{x})
				if err != nil {
					errs <- err.Error()
					return
				}
				for i := range want[0].F32 {
					if math.Abs(float64(got[0].F32[i]-want[0].F32[i])) > 1e-4 {
						errs <- "concurrent run differs"
						return
					}
				}
			}
		}([]*Model{a, b}[g%2])
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestBadInputsAreErrors(t *testing.T) {
	m := lenet(t, 1)
	cases := map[string][]*onnx.Tensor{
		"no inputs":   nil,
		"nil input":   {nil},
		"wrong rank":  {{DType: onnx.Float, Dims: []int64{1, 28, 28}, F32: make([]float32, 784)}},
		"wrong dims":  {{DType: onnx.Float, Dims: []int64{1, 1, 28, 27}, F32: make([]float32, 756)}},
		"short data":  {{DType: onnx.Float, Dims: []int64{1, 1, 28, 28}, F32: make([]float32, 783)}},
		"wrong type":  {{DType: onnx.Int64, Dims: []int64{1, 1, 28, 28}, I64: make([]int64, 784)}},
		"double type": {{DType: onnx.Double, Dims: []int64{1, 1, 28, 28}, F64: make([]float64, 784)}},
		"negative":    {{DType: onnx.Float, Dims: []int64{-1, 1, 28, 28}, F32: make([]float32, 784)}},
		"absurd":      {{DType: onnx.Float, Dims: []int64{1 << 40, 1, 28, 28}, F32: make([]float32, 784)}},
		"two inputs":  {images(1, 1), images(1, 1)},
	}
	for name, in := range cases {
		if _, err := m.Run(in); err == nil || !strings.HasPrefix(err.Error(), "kernel: ") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	// the model still works
	if _, err := m.Run([]*onnx.Tensor{images(1, 1)}); err != nil {
		t.Fatal(err)
	}
}

// TestNaNInputs: NaN inputs are not rejected and never crash; they stay inside their own
// image. (Whether a NaN survives ReLU and max pooling is oneDNN's choice: its max-based
// kernels may turn it into a number, so only containment is asserted.)
func TestNaNInputs(t *testing.T) {
	m := lenet(t, 1)
	x := images(2, 4)
	clean, err := m.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 784; i++ {
		x.F32[i] = float32(math.NaN())
	}
	out, err := m.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range out[0].F32[10:] {
		if v != clean[0].F32[10+i] {
			t.Fatalf("NaNs in image 0 changed image 1: %v vs %v", out[0].F32[10:], clean[0].F32[10:])
		}
	}
}

func TestClosedModelRefusesRuns(t *testing.T) {
	m := lenet(t, 1)
	m.Close()
	if _, err := m.Run([]*onnx.Tensor{images(1, 1)}); err == nil {
		t.Fatal("run after close succeeded")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUnsupportedOpIsLoadError: an operator outside the list fails at load, naming the node.
func TestUnsupportedOpIsLoadError(t *testing.T) {
	src, err := zoo.Build("lenet5", zoo.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := src.Graph.Nodes[len(src.Graph.Nodes)-1]
	n.OpType = "Hardmax"
	_, err = LoadModel(src, Options{Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "Hardmax") {
		t.Fatalf("err = %v", err)
	}
}

func TestMissingLibraryErrorSaysWhereAndHow(t *testing.T) {
	t.Setenv("IDUNNO_KERNEL_LIB", filepath.Join(t.TempDir(), "nope.so"))
	err := open()
	if err == nil {
		t.Fatal("open succeeded with no library")
	}
	exe, _ := os.Executable()
	for _, want := range []string{"nope.so", filepath.Dir(exe), "make", "IDUNNO_KERNEL_LIB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestFLOPs(t *testing.T) {
	m := lenet(t, 1)
	f1, f4 := m.FLOPs(1), m.FLOPs(4)
	if f1 <= 0 || math.Abs(f4-4*f1) > 1e-6*f4 {
		t.Fatalf("FLOPs(1)=%v FLOPs(4)=%v", f1, f4)
	}
}

// TestWideConcat: a Concat of many inputs (DenseNet concatenates dozens) after a conv, so
// the inputs arrive in blocked layouts.
func TestWideConcat(t *testing.T) {
	const n = 40
	g := &onnx.Graph{Initializers: map[string]*onnx.Tensor{}}
	g.Inputs = []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{-1, 16, 5, 5}}}
	var cat []string
	w := &onnx.Tensor{Name: "w", DType: onnx.Float, Dims: []int64{16, 16, 1, 1}, F32: make([]float32, 256)}
	for i := 0; i < 16; i++ {
		w.F32[i*16+i] = 1 // identity 1x1 conv
	}
	g.Initializers["w"] = w
	for i := 0; i < n; i++ {
		name := "c" + string(rune('A'+i))
		g.Nodes = append(g.Nodes, &onnx.Node{Name: name, OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{name},
			Attrs: map[string]*onnx.Attribute{"kernel_shape": {Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{1, 1}}}})
		cat = append(cat, name)
	}
	g.Nodes = append(g.Nodes, &onnx.Node{Name: "cat", OpType: "Concat", Inputs: cat, Outputs: []string{"y"},
		Attrs: map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: 1}}})
	g.Outputs = []onnx.ValueInfo{{Name: "y", DType: onnx.Float, Dims: []int64{-1, 16 * n, 5, 5}}}
	m, err := LoadModel(&onnx.Model{IRVersion: 8, Opset: 13, Graph: g}, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, batch := range []int{1, 4} {
		x := &onnx.Tensor{DType: onnx.Float, Dims: []int64{int64(batch), 16, 5, 5}, F32: make([]float32, batch*400)}
		for i := range x.F32 {
			x.F32[i] = float32(i)
		}
		out, err := m.Run([]*onnx.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		for b := 0; b < batch; b++ {
			for k := 0; k < n; k++ {
				for j := 0; j < 400; j++ {
					if got, want := out[0].F32[b*400*n+k*400+j], x.F32[b*400+j]; got != want {
						t.Fatalf("batch %d copy %d elem %d: %v want %v", batch, k, j, got, want)
					}
				}
			}
		}
	}
}

// TestOpenMPSpinCountSet: the kernel's libgomp sees the short spin count.
func TestOpenMPSpinCountSet(t *testing.T) {
	if userOpenMP() != "" {
		t.Skip("the user's OpenMP settings win")
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	var getenv func(name string) string
	purego.RegisterLibFunc(&getenv, libc, "getenv")
	if got := getenv("GOMP_SPINCOUNT"); got != spinCount {
		t.Fatalf("C getenv(GOMP_SPINCOUNT) = %q", got)
	}
}

// TestOwnMachineAfterLoad: once the library (and libgomp with it) is loaded, OwnMachine
// cannot change the spin count libgomp read, and says so.
func TestOwnMachineAfterLoad(t *testing.T) {
	if err := load(); err != nil {
		t.Skip(err)
	}
	before := spinCount
	if OwnMachine() {
		t.Fatal("OwnMachine after the library loaded reported that it took effect")
	}
	if spinCount != before {
		t.Fatalf("spin count %q after OwnMachine, want %q still", spinCount, before)
	}
}

// TestPlanCacheEviction: more batch sizes than the cache holds, from several goroutines;
// evicted plans are rebuilt, never reported as errors.
func TestPlanCacheEviction(t *testing.T) { runBatchesPastCache(t, lenet(t, 1), 1) }

// runBatchesPastCache runs batches of from..maxPlans+3 samples on m from three goroutines
// at once, more sizes than the plan cache holds, and fails on any error or an output
// whose batch is not the input's.
func runBatchesPastCache(t *testing.T, m *Model, from int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := from; b <= maxPlans+3; b++ {
				out, err := m.Run([]*onnx.Tensor{images(b, uint64(g))})
				if err == nil && out[0].Dims[0] != int64(b) {
					err = fmt.Errorf("batch %d gave dims %v", b, out[0].Dims)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestMalformedGraphsAreLoadErrors: cycles, dangling names and absurd declared dims are
// clean errors at load.
func TestMalformedGraphsAreLoadErrors(t *testing.T) {
	build := func() *onnx.Model {
		m, err := zoo.Build("lenet5", zoo.Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	cases := map[string]func(m *onnx.Model){
		"cycle": func(m *onnx.Model) {
			n := m.Graph.Nodes
			n[0].Inputs[0] = n[len(n)-1].Outputs[0]
		},
		"dangling": func(m *onnx.Model) { m.Graph.Nodes[2].Inputs[0] = "nowhere" },
		"absurd dims": func(m *onnx.Model) {
			m.Graph.Inputs[0].Dims = []int64{1, 1, 1 << 40, 1 << 40}
		},
		"huge activations": func(m *onnx.Model) {
			m.Graph.Inputs[0].Dims = []int64{1 << 12, 1, 1024, 1024}
		},
		"no graph": func(m *onnx.Model) { m.Graph = nil },
	}
	for name, mutate := range cases {
		m := build()
		mutate(m)
		md, err := LoadModel(m, Options{Threads: 1})
		if err == nil {
			md.Close()
			t.Errorf("%s: loaded", name)
			continue
		}
		t.Logf("%s: %v", name, err)
		if !strings.HasPrefix(err.Error(), "kernel: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
}

// TestArenaLimit: a plan whose activations exceed the arena limit (8 GiB) is a load error,
// not an allocation that the OOM killer answers.
func TestArenaLimit(t *testing.T) {
	w := &onnx.Tensor{Name: "w", DType: onnx.Float, Dims: []int64{16, 16, 1, 1}, F32: make([]float32, 256)}
	g := &onnx.Graph{
		Initializers: map[string]*onnx.Tensor{"w": w},
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{6, 16, 4096, 4096}}},
		Outputs:      []onnx.ValueInfo{{Name: "y", DType: onnx.Float, Dims: []int64{6, 16, 4096, 4096}}},
		Nodes: []*onnx.Node{{Name: "conv", OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
			Attrs: map[string]*onnx.Attribute{"kernel_shape": {Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{1, 1}}}}},
	}
	_, err := LoadModel(&onnx.Model{IRVersion: 8, Opset: 13, Graph: g}, Options{Threads: 1})
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("err = %v", err)
	}
}

// TestPrepareBuildsThePlanRunUses: Prepare builds the plan of a batch size once; the Run
// that follows reuses it (no new plan) and answers as without Prepare.
func TestPrepareBuildsThePlanRunUses(t *testing.T) {
	m, ref := lenet(t, 1), lenet(t, 1)
	if err := m.Prepare(0); err == nil {
		t.Fatal("batch 0 prepared")
	}
	plans := func() int { m.mu.Lock(); defer m.mu.Unlock(); return len(m.plans) }
	before := plans() // loading checked the model with a batch of 1
	if err := m.Prepare(6); err != nil {
		t.Fatal(err)
	}
	if plans() != before+1 {
		t.Fatalf("%d plans after Prepare, %d before", plans(), before)
	}
	x := images(6, 9)
	got, err := m.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Run([]*onnx.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	if plans() != before+1 || !slices.Equal(got[0].F32, want[0].F32) {
		t.Fatalf("after Run: %d plans; outputs equal: %v", plans(), slices.Equal(got[0].F32, want[0].F32))
	}
	m.Close()
	if err := m.Prepare(6); err == nil {
		t.Fatal("closed model prepared a plan")
	}
}
