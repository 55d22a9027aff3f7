package kernel

import (
	"fmt"
	"math"
	"testing"

	"idunno/kernel/onnx"
)

// groupConv adds a 3x3 convolution (padding 1) of groups of width channels, with bias.
func (c *catGraph) groupConv(out, in string, ch, width int64) string {
	w := c.param(out+".w", ch, width, 3, 3)
	b := c.param(out+".b", ch)
	return c.node("Conv", out, map[string]*onnx.Attribute{
		"kernel_shape": {Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{3, 3}},
		"pads":         {Name: "pads", Type: onnx.AttrInts, Ints: []int64{1, 1, 1, 1}},
		"group":        {Name: "group", Type: onnx.AttrInt, I: ch / width},
	}, in, w, b)
}

// TestBlockReorderMatchesOneDNN: RegNet's and ResNeXt's patterns, grouped convolutions of 8
// and 4 channels a group (oneDNN runs them on nChw8c and nChw4c) between 1x1 ones (nChw16c),
// with channel counts that are not multiples of 16 (the nChw16c padding), at batch 1 and 3:
// the C reorders between the layouts give oneDNN's reorders' output bit for bit
// (IDK_BLOCK_REORDER=0).
func TestBlockReorderMatchesOneDNN(t *testing.T) {
	c := newCatGraph("x", -1, 16, 20, 20)
	a := c.conv("a", "x", 16, 104, 1)
	g := c.groupConv("g", a, 104, 8)
	b := c.conv("b", g, 104, 24, 1)
	h := c.groupConv("h", b, 24, 8)
	f := c.conv("f", h, 24, 36, 1)
	q := c.groupConv("q", f, 36, 4)
	y := c.conv("y", q, 36, 40, 1)
	c.outputs(y, g, q)
	for _, n := range []int64{1, 3} {
		t.Run(fmt.Sprintf("batch%d", n), func(t *testing.T) {
			x := seeded(7, n, 16, 20, 20)
			setCEnv(t, "IDK_BLOCK_REORDER", "0")
			ref := runCat(t, c, x)
			setCEnv(t, "IDK_BLOCK_REORDER", "")
			got := runCat(t, c, x)
			for i := range ref {
				for j := range ref[i] {
					if math.Float32bits(ref[i][j]) != math.Float32bits(got[i][j]) {
						t.Fatalf("output %d element %d: %v, oneDNN's reorders give %v", i, j, got[i][j], ref[i][j])
					}
				}
			}
		})
	}
}

// TestTinyOpsOneThread: a squeeze-and-excitation block at batch 1, whose 1x1 convolutions on
// 1x1 pixels and small ops run on one thread (idk_op_tiny), matches the plan that splits
// every op across both threads (IDK_TINY_KFLOP=0) to 1e-5, and repeats its bytes.
func TestTinyOpsOneThread(t *testing.T) {
	c := newCatGraph("x", -1, 48, 14, 14)
	a := c.conv("a", "x", 48, 96, 3)
	p := c.node("GlobalAveragePool", "p", nil, a)
	s1 := c.node("Relu", "s1", nil, c.conv("sq", p, 96, 24, 1))
	s2 := c.node("Sigmoid", "s2", nil, c.conv("ex", s1, 24, 96, 1))
	m := c.node("Mul", "m", nil, a, s2)
	y := c.conv("y", m, 96, 32, 1)
	c.outputs(y, s2)
	x := seeded(11, 1, 48, 14, 14)
	setCEnv(t, "IDK_TINY_KFLOP", "0")
	ref := runCat(t, c, x)
	setCEnv(t, "IDK_TINY_KFLOP", "")
	got := runCat(t, c, x)
	checkClose(t, "y, tiny ops on one thread", ref[0], got[0], 1e-5)
	checkClose(t, "the excitation, tiny ops on one thread", ref[1], got[1], 1e-5)
}

// TestStemNHWC: ResNeXt's pattern at batch 1 and 2, a 7x7 stride-2 stem, a max pool, then 1x1
// and grouped 3x3 convolutions only (no dense kxk convolution): the stem runs on nhwc
// (brgconv) and the 1x1 convolutions after the pool on nChw16c (from_nhwc_stem in ops.c;
// ONEDNN_VERBOSE=1 shows the stem's kernel and the one reorder after the pool). Both stem
// kernels sum each output in the same order, so the output is the same bytes as with the
// stem on nChw16c (IDK_STEM_NHWC=0), and again on a second run.
func TestStemNHWC(t *testing.T) {
	c := newCatGraph("x", -1, 7, 64, 64)
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	s := c.node("Conv", "stem", map[string]*onnx.Attribute{
		"kernel_shape": ints("kernel_shape", 7, 7), "strides": ints("strides", 2, 2), "pads": ints("pads", 3, 3, 3, 3),
	}, "x", c.param("stem.w", 32, 7, 7, 7), c.param("stem.b", 32))
	r := c.node("Relu", "stem.relu", nil, s)
	p := c.node("MaxPool", "pool", map[string]*onnx.Attribute{
		"kernel_shape": ints("kernel_shape", 3, 3), "strides": ints("strides", 2, 2), "pads": ints("pads", 1, 1, 1, 1),
	}, r)
	a := c.conv("a", p, 32, 64, 1)
	g := c.groupConv("g", a, 64, 4)
	y := c.conv("y", g, 64, 48, 1)
	c.outputs(y)
	for _, n := range []int64{1, 2} {
		x := seeded(8, n, 7, 64, 64)
		off, out, again := switchedRuns(t, "IDK_STEM_NHWC", func() []float32 { return runCat(t, c, x)[0] })
		for i := range off {
			if math.Float32bits(out[i]) != math.Float32bits(off[i]) || math.Float32bits(again[i]) != math.Float32bits(out[i]) {
				t.Fatalf("batch %d output %d: %v, then %v; the stem on nChw16c gives %v", n, i, out[i], again[i], off[i])
			}
		}
	}
}

// TestGemvClassifier: a classifier at batch 1, Gemm (transB=1, bias) then ReLU then Gemm,
// with K not a multiple of 16 and N not of 4 (the tails of fn_gemv), runs on fn_gemv
// (lower_gemv in ops.c): within 1e-5 of the largest of oneDNN's matmul (IDK_GEMV=0), not the
// same bits (the switch took effect: the two sum in different orders), and the same bytes
// on a second run.
func TestGemvClassifier(t *testing.T) {
	const k, h, n = 1000, 515, 77
	c := newCatGraph("x", -1, k)
	gemm := func(out, in string, cin, cout int64) string {
		return c.node("Gemm", out, map[string]*onnx.Attribute{"transB": {Name: "transB", Type: onnx.AttrInt, I: 1}},
			in, c.param(out+".w", cout, cin), c.param(out+".b", cout))
	}
	r := c.node("Relu", "fc1.relu", nil, gemm("fc1", "x", k, h))
	y := gemm("fc2", r, h, n)
	c.outputs(y)
	x := seeded(9, 1, k)
	off, out, again := switchedRuns(t, "IDK_GEMV", func() []float32 { return runCat(t, c, x)[0] })
	checkSwitched(t, "batch 1 classifier, fn_gemv against oneDNN's matmul (IDK_GEMV=0)", off, out, again)
}

// TestGemvSkipsZeroInputs: a batch-1 classifier whose inputs are half zeros (a ReLU before
// it) runs fn_gemv leaving out the zero inputs' rows of weights: the same bits as with
// IDK_GEMV_SKIP=0 (the full sum in the same order: the left-out products are +-0), within
// 1e-5 of the largest of oneDNN's matmul (IDK_GEMV=0), the same bytes on a second run. And
// a weight that is not finite against a zero input turns the skipping off: 0 * Inf is NaN,
// as in oneDNN's matmul.
func TestGemvSkipsZeroInputs(t *testing.T) {
	const k, h, n = 1000, 515, 77
	c := newCatGraph("x", -1, k)
	gemm := func(out, in string, cin, cout int64) string {
		return c.node("Gemm", out, map[string]*onnx.Attribute{"transB": {Name: "transB", Type: onnx.AttrInt, I: 1}},
			in, c.param(out+".w", cout, cin), c.param(out+".b", cout))
	}
	r := c.node("Relu", "x.relu", nil, "x")
	y := gemm("fc2", c.node("Relu", "fc1.relu", nil, gemm("fc1", r, k, h)), h, n)
	c.outputs(y)
	x := seeded(10, 1, k)
	zeros := 0
	for _, v := range x.F32 {
		if v <= 0 {
			zeros++
		}
	}
	if zeros < k/3 {
		t.Fatalf("only %d of %d inputs are zero after the ReLU", zeros, k)
	}
	run := func() []float32 { return runCat(t, c, x)[0] }
	full, skip, again := switchedRuns(t, "IDK_GEMV_SKIP", run)
	for i := range skip {
		if math.Float32bits(full[i]) != math.Float32bits(skip[i]) || math.Float32bits(skip[i]) != math.Float32bits(again[i]) {
			t.Fatalf("output %d: %v with every input, %v then %v leaving out the zeros", i, full[i], skip[i], again[i])
		}
	}
	setCEnv(t, "IDK_GEMV", "0")
	dnnl := run()
	setCEnv(t, "IDK_GEMV", "")
	checkClose(t, "fn_gemv leaving out zero inputs against oneDNN's matmul (IDK_GEMV=0)", dnnl, skip, 1e-5)
	// the generic code (for a CPU without AVX-512) gives the same bytes, skipping or not
	generic, _, _ := switchedRuns(t, "IDK_GEMV_AVX512", run)
	setCEnv(t, "IDK_GEMV_SKIP", "0")
	genericFull, _, _ := switchedRuns(t, "IDK_GEMV_AVX512", run)
	setCEnv(t, "IDK_GEMV_SKIP", "")
	for i := range skip {
		if math.Float32bits(generic[i]) != math.Float32bits(skip[i]) || math.Float32bits(genericFull[i]) != math.Float32bits(skip[i]) {
			t.Fatalf("output %d: AVX-512 %v, generic code %v (every input: %v)", i, skip[i], generic[i], genericFull[i])
		}
	}

	// fc1's first output, weight 1 at an input the ReLU zeroes, made infinite
	at := -1
	for i, v := range x.F32 {
		if v <= 0 {
			at = i
			break
		}
	}
	c.g.Initializers["fc1.w"].F32[at] = float32(math.Inf(1))
	c.g.Outputs = nil
	c.outputs("fc1")
	for _, gemv := range []string{"", "0"} {
		setCEnv(t, "IDK_GEMV", gemv)
		if out := runCat(t, c, x)[0]; !math.IsNaN(float64(out[0])) || math.IsNaN(float64(out[1])) {
			t.Fatalf("IDK_GEMV=%q: 0 * Inf in output 0 gave %v (want NaN), output 1 %v", gemv, out[0], out[1])
		}
	}
	setCEnv(t, "IDK_GEMV", "")
}
