package kernel

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"idunno/kernel/onnx"
)

func TestParsePrecision(t *testing.T) {
	for in, want := range map[string]Precision{"": FP32, "fp32": FP32, "FP32": FP32, "bf16": BF16, "bfloat16": BF16, "int8": INT8} {
		got, err := ParsePrecision(in)
		if err != nil || got != want {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"fp16", "int4", "bf"} {
		if _, err := ParsePrecision(bad); err == nil {
			t.Errorf("ParsePrecision(%q) accepted", bad)
		}
	}
}

func TestInt8NeedsQuantizedModel(t *testing.T) {
	_, err := LoadModel(zooModel(t, "lenet5", []int64{1, 28, 28}), Options{Threads: 1, Precision: INT8})
	if !errors.Is(err, ErrNotQuantized) {
		t.Fatalf("int8 on a float model: %v, want ErrNotQuantized", err)
	}
}

// templateData draws n images of 10 classes: each class is a fixed random 28x28 pattern
// plus noise, so a LeNet-5 learns it in a few dozen steps.
func templateData(seed uint64, n int) ([]float32, []int64) {
	r := rand.New(rand.NewPCG(42, 0))
	tmpl := make([]float32, 10*28*28)
	for i := range tmpl {
		tmpl[i] = float32(r.NormFloat64())
	}
	r = rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n*28*28)
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(r.IntN(10))
		for j := 0; j < 28*28; j++ {
			x[i*28*28+j] = tmpl[int(y[i])*28*28+j] + float32(r.NormFloat64())
		}
	}
	return x, y
}

func top1(out []float32, classes int) []int {
	var r []int
	for i := 0; i+classes <= len(out); i += classes {
		best := 0
		for j := 1; j < classes; j++ {
			if out[i+j] > out[i+best] {
				best = j
			}
		}
		r = append(r, best)
	}
	return r
}

func runOnce(t *testing.T, m *Model, dims []int64, x []float32) []float32 {
	t.Helper()
	out, err := m.Run([]*onnx.Tensor{{Name: m.Inputs()[0].Name, DType: onnx.Float, Dims: dims, F32: x}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].F32
}

// TestBF16AgreesWithFP32 trains a small LeNet-5 with the kernel, then checks that the bf16
// plan answers like the fp32 one (top-1 agreement >= 99%, logits within bf16's rounding) and
// that bf16 runs are deterministic. ResNet-18 covers BatchNorm, residual sums and pooling
// in bf16.
func TestBF16AgreesWithFP32(t *testing.T) {
	if BF16Support() == "" {
		_, err := LoadModel(zooModel(t, "lenet5", []int64{1, 28, 28}), Options{Threads: 1, Precision: BF16})
		if !errors.Is(err, ErrNoBF16) {
			t.Fatalf("bf16 on a CPU without it: %v, want ErrNoBF16", err)
		}
		t.Skip("no AVX512_BF16 on this CPU: checked the error instead")
	}
	const batch = 32
	tr, err := NewTrainer(zooModel(t, "lenet5", []int64{1, 28, 28}), batch, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for step := int64(1); step <= 60; step++ {
		x, y := templateData(uint64(step), batch)
		loss, corr, err := tr.Run(x, y, 1.0/batch, 1)
		if err != nil {
			t.Fatal(err)
		}
		if step%20 == 0 {
			t.Logf("step %d: loss %.4f correct %d", step, loss/batch, corr)
		}
		if err := tr.Optimize(Optimizer{Kind: "adam"}, 1e-3, step); err != nil {
			t.Fatal(err)
		}
	}
	trained, err := tr.Model(true)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	x, y := templateData(1000, n)
	dims := []int64{n, 1, 28, 28}
	f32, err := LoadModel(trained, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	b16, err := LoadModel(trained, Options{Threads: 2, Precision: BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer b16.Close()
	if b16.Precision() != BF16 {
		t.Fatalf("precision %v", b16.Precision())
	}
	ref := runOnce(t, f32, dims, x)
	got := runOnce(t, b16, dims, x)
	if again := runOnce(t, b16, dims, x); !slices.Equal(got, again) {
		t.Fatal("bf16: two runs of the same input differ")
	}
	pr, pb := top1(ref, 10), top1(got, 10)
	same, right := 0, 0
	for i := range pr {
		if pr[i] == pb[i] {
			same++
		}
		if int64(pr[i]) == y[i] {
			right++
		}
	}
	t.Logf("lenet5: fp32 accuracy %.1f%%, bf16 top-1 agreement %.2f%%", 100*float64(right)/n, 100*float64(same)/n)
	if right < n*8/10 {
		t.Fatalf("the trained model is right on only %d of %d: not a useful check", right, n)
	}
	if same < n*99/100 {
		t.Errorf("bf16 agrees with fp32 on %d of %d (want >= 99%%)", same, n)
	}
	checkClose(t, "lenet5", ref, got, 0.05)

	// ResNet-18 (BatchNorm folded, residual sum post-ops, max and global pooling) at batch 4
	rm := zooModel(t, "resnet18", []int64{3, 32, 32})
	rf, err := LoadModel(rm, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	rb, err := LoadModel(rm, Options{Threads: 2, Precision: BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	rx, _ := randBatch(5, 4, []int64{4, 3, 32, 32}, 10)
	rd := []int64{4, 3, 32, 32}
	rref, rgot := runOnce(t, rf, rd, rx), runOnce(t, rb, rd, rx)
	if again := runOnce(t, rb, rd, rx); !slices.Equal(rgot, again) {
		t.Fatal("resnet18 bf16: two runs differ")
	}
	checkClose(t, "resnet18", rref, rgot, 0.1)
}

// checkClose compares outputs with reference ones (bf16 with fp32, which keeps 8
// significant bits; a fused plan with the unfused one): the largest difference relative
// to the largest reference magnitude must stay under tol.
func checkClose(t *testing.T, name string, ref, got []float32, tol float64) {
	t.Helper()
	if len(got) != len(ref) {
		t.Fatalf("%s: %d outputs, the reference has %d", name, len(got), len(ref))
	}
	var scale, diff float64
	for i := range ref {
		scale = max(scale, math.Abs(float64(ref[i])))
		diff = max(diff, math.Abs(float64(ref[i]-got[i])))
	}
	t.Logf("%s: max |got - ref| = %.4g, max |ref| = %.4g", name, diff, scale)
	if scale == 0 || diff/scale > tol || math.IsNaN(diff) {
		t.Errorf("%s: differs from the reference by %.4g at scale %.4g (tolerance %.2g relative)", name, diff, scale, tol)
	}
}
