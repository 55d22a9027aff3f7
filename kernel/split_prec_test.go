package kernel

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"idunno/kernel/onnx"
)

// splitAgainstWhole runs src at batch on two threads split (IDK_SPLIT=split) and whole
// (IDK_SPLIT=0) in precision prec: the split model must run the batch as sub-batches want,
// give the same bytes on three runs, and the whole model must run it as one plan. It
// returns both outputs.
func splitAgainstWhole(t *testing.T, name string, src *onnx.Model, prec Precision, in *onnx.Tensor, split string, want []int64) (got, ref []float32) {
	t.Helper()
	batch := in.Dims[0]
	t.Setenv(SplitEnv, split)
	s, err := LoadModel(src, Options{Threads: 2, Precision: prec})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for run := 0; run < 3; run++ {
		out, err := s.Run([]*onnx.Tensor{in})
		if err != nil {
			t.Fatalf("%s batch %d: %v", name, batch, err)
		}
		if run == 0 {
			got = out[0].F32
		} else if !sameBits(got, out[0].F32) {
			t.Fatalf("%s %v batch %d split: run %d gave other bytes than run 0", name, prec, batch, run)
		}
	}
	if rows, _ := splitOf(s, batch); !reflect.DeepEqual(rows, want) {
		t.Fatalf("%s %v batch %d: ran as %v, want sub-batches %v", name, prec, batch, rows, want)
	}
	t.Setenv(SplitEnv, "0")
	w, err := LoadModel(src, Options{Threads: 2, Precision: prec})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	out, err := w.Run([]*onnx.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	if rows, ok := splitOf(w, batch); !ok || rows != nil {
		t.Fatalf("%s %v batch %d: split with %s=0", name, prec, batch, SplitEnv)
	}
	return got, out[0].F32
}

// TestSplitBF16: in bf16, the default rule splits a batch on two threads; the split batch
// gives the same bytes run after run, and agrees with the whole batch on one two-thread
// bf16 plan within 1e-2 of the largest output: both round the same weights to bf16, and
// their activations (rounded to bf16 at every convolution) differ only through fp32
// accumulation order, which can move a value near a rounding boundary by one bf16 step
// (2^-8 relative) and carry it on. (On this VM's AMX kernels the difference was 0.)
func TestSplitBF16(t *testing.T) {
	if BF16Support() == "" {
		t.Skip("no AVX512_BF16 on this CPU")
	}
	for _, c := range []struct {
		name  string
		shape []int64
		batch int64
		want  []int64
	}{
		{"mobilenet_v2", []int64{3, 64, 64}, 8, []int64{4, 4}},
		{"squeezenet", []int64{3, 64, 64}, 5, []int64{3, 2}},
		{"resnet18", []int64{3, 32, 32}, 4, []int64{2, 2}},
	} {
		src := zooModel(t, c.name, c.shape)
		in := seededInput(append([]int64{c.batch}, c.shape...), uint64(c.batch)+21)
		got, ref := splitAgainstWhole(t, c.name, src, BF16, in, "", c.want)
		checkClose(t, fmt.Sprintf("%s bf16 batch %d, split against whole", c.name, c.batch), ref, got, 1e-2)
	}
}

// TestSplitInt8: by default, a QDQ model (int8 convolutions, chained 8-bit outputs, per-channel
// weights, a non-zero input zero point) runs a batch on two threads split; it gives the same bytes run after run and
// agrees with the whole batch on one two-thread int8 plan: the integer accumulations are
// exact in both, the float scaling around them may round differently, so a value within
// rounding of a quantization tie may land one step apart and move a few outputs by about a
// step times a weight (as in TestQDQChainInt8): 99% of the outputs within 1e-4 of the
// largest magnitude, all within 2% of it. (On this VM the difference was 0.)
func TestSplitInt8(t *testing.T) {
	for _, c := range []struct {
		zp    int64
		batch int64
		want  []int64
	}{{0, 4, []int64{2, 2}}, {128, 5, []int64{3, 2}}, {128, 8, []int64{4, 4}}} {
		rng := rand.New(rand.NewSource(c.zp + 31))
		m := qdqChainModel(c.zp, rng)
		m.Graph.Inputs[0].Dims = []int64{-1, 3, 9, 9}
		m.Graph.Inputs[0].DimParams = []string{"N", "", "", ""}
		in := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: []int64{c.batch, 3, 9, 9}, F32: make([]float32, c.batch*3*9*9)}
		for i := range in.F32 {
			in.F32[i] = float32(rng.NormFloat64())
		}
		name := fmt.Sprintf("qdq chain zp %d", c.zp)
		got, ref := splitAgainstWhole(t, name, m, INT8, in, "", c.want)
		checkInt8Near(t, fmt.Sprintf("%s batch %d: split", name, c.batch), got, "whole-batch", ref)
	}
}

// TestSplitStreamBoundPrec: the streamed-weights bound holds in bf16 and int8 as in fp32
// (TestSplitStreamBound): a classifier layer past maxSplitStreamBytes (counted at 4 bytes
// an element) read for a few rows runs whole at batch 8 by default.
func TestSplitStreamBoundPrec(t *testing.T) {
	const k, n = 16, maxSplitStreamBytes/4/16 + 1024
	rng := rand.New(rand.NewSource(3))
	ini := map[string]*onnx.Tensor{
		"xs": {Name: "xs", DType: onnx.Float, Dims: []int64{}, F32: []float32{0.02}},
		"xz": {Name: "xz", DType: onnx.Uint8, Dims: []int64{}, I64: []int64{128}},
		"ws": {Name: "ws", DType: onnx.Float, Dims: []int64{}, F32: []float32{0.01}},
		"wz": {Name: "wz", DType: onnx.Int8, Dims: []int64{}, I64: []int64{0}},
		"wq": {Name: "wq", DType: onnx.Int8, Dims: []int64{k, n}, I64: make([]int64, k*n)},
	}
	for i := range ini["wq"].I64 {
		ini["wq"].I64[i] = int64(rng.Intn(255) - 127)
	}
	node := func(op string, in []string, out string) *onnx.Node {
		return &onnx.Node{Name: out, OpType: op, Inputs: in, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
	}
	src := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: &onnx.Graph{
		Name: "qdq fc",
		Nodes: []*onnx.Node{
			node("QuantizeLinear", []string{"x", "xs", "xz"}, "xq"),
			node("DequantizeLinear", []string{"xq", "xs", "xz"}, "xd"),
			node("DequantizeLinear", []string{"wq", "ws", "wz"}, "wd"),
			node("Gemm", []string{"xd", "wd"}, "y"),
		},
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{-1, k}, DimParams: make([]string, 2), HasShape: true}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Initializers: ini,
	}}
	w := &onnx.Tensor{Name: "w", DType: onnx.Float, Dims: []int64{k, n}, F32: make([]float32, k*n)}
	fc := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: &onnx.Graph{
		Name:         "fc",
		Nodes:        []*onnx.Node{node("Gemm", []string{"x", "w"}, "y")},
		Inputs:       src.Graph.Inputs,
		Outputs:      src.Graph.Outputs,
		Initializers: map[string]*onnx.Tensor{"w": w},
	}}
	models := map[Precision]*onnx.Model{INT8: src}
	if BF16Support() != "" {
		models[BF16] = fc
	}
	for p, src := range models {
		m, err := LoadModel(src, Options{Threads: 2, Precision: p})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			batch int
			split bool
		}{{8, false}, {2 * streamRows, true}} {
			if err := m.Prepare(c.batch); err != nil {
				t.Fatal(err)
			}
			if rows, _ := splitOf(m, int64(c.batch)); (rows != nil) != c.split {
				t.Errorf("%v batch %d of a %d MB classifier: sub-batches %v, want split %v", p, c.batch, k*n*4>>20, rows, c.split)
			}
		}
		m.Close()
	}
}

// TestSplitWeightBoundPrec: the default rule leaves whole a batch of a model whose weights
// (counted at 4 bytes an element) pass maxSplitWeightBytesLow in bf16 and int8, but still
// splits it in fp32 under maxSplitWeightBytes. The weight count is set on a small model.
func TestSplitWeightBoundPrec(t *testing.T) {
	src := zooModel(t, "lenet5", []int64{1, 28, 28})
	for _, c := range []struct {
		prec  Precision
		bytes int64
		split bool
	}{
		{FP32, (maxSplitWeightBytesLow + maxSplitWeightBytes) / 2, true},
		{BF16, (maxSplitWeightBytesLow + maxSplitWeightBytes) / 2, false},
		{INT8, (maxSplitWeightBytesLow + maxSplitWeightBytes) / 2, false},
		{BF16, maxSplitWeightBytesLow - 1<<20, true},
		{INT8, maxSplitWeightBytesLow - 1<<20, true},
		{FP32, maxSplitWeightBytes + 1<<20, false},
	} {
		m, err := LoadModel(src, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		m.prec = c.prec // the rule only: no plan is built in this precision
		m.weightOnce.Do(func() {})
		m.weights = c.bytes
		shapes := map[string][]int64{m.inputs[0].Name: {8, 1, 28, 28}}
		if rows := m.splitRule(shapes); (rows != nil) != c.split {
			t.Errorf("%v, %d MB of weights: sub-batches %v, want split %v", c.prec, c.bytes>>20, rows, c.split)
		}
		m.Close()
	}
}
