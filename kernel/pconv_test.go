package kernel

import (
	"fmt"
	"math"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// pconvGraph builds an inverted-residual shaped graph at batch 1 on 72 channels, 14x14 (72
// pads to 80 on nChw16c): a depthwise 3x3 convolution with a ReLU (oneDNN's, on nChw16c,
// which puts the 1x1 convolutions after it on that layout), then the 1x1 convolutions
// lower_pconv takes: 72->120 with a Clip to [0, 6] (two panels of 4 blocks), 120->72 summed
// with the depthwise output (Add fused as a sum post-op; panels of 3 and 2 blocks), 72->40
// with a ReLU (one panel of 3), 72->200 without a bias or activation (panels of 3, 3, 3 and
// 4 blocks), and 40->16, which stays oneDNN's (fewer than 64 input channels).
func pconvGraph() (*catGraph, []string) {
	c := newCatGraph("x", 1, 72, 14, 14)
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	conv1 := func(out, in string, cin, cout int64, bias bool) string {
		args := []string{in, c.param(out+".w", cout, cin, 1, 1)}
		if bias {
			args = append(args, c.param(out+".b", cout))
		}
		return c.node("Conv", out, map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", 1, 1)}, args...)
	}
	dw := c.node("Relu", "dw.relu", nil, c.node("Conv", "dw", map[string]*onnx.Attribute{
		"kernel_shape": ints("kernel_shape", 3, 3),
		"pads":         ints("pads", 1, 1, 1, 1),
		"group":        {Name: "group", Type: onnx.AttrInt, I: 72},
	}, "x", c.param("dw.w", 72, 1, 3, 3), c.param("dw.b", 72)))
	lo, hi := c.param("clip.lo"), c.param("clip.hi")
	c.g.Initializers[lo].F32[0], c.g.Initializers[hi].F32[0] = 0, 6
	e := c.node("Clip", "e.clip", nil, conv1("e", dw, 72, 120, true), lo, hi)
	sum := c.node("Add", "s", nil, conv1("pr", e, 120, 72, true), dw)
	r := c.node("Relu", "r.relu", nil, conv1("r", sum, 72, 40, true))
	wide := conv1("wide", sum, 72, 200, false)
	small := conv1("small", r, 40, 16, true)
	outs := []string{e, sum, r, wide, small}
	c.outputs(outs...)
	return c, outs
}

// TestPointwiseConvNChw16c: the 1x1 convolutions of pconvGraph run fn_pconv (lower_pconv in
// ops.c): every output is within 1e-5 of the largest of oneDNN's (IDK_PCONV=0) and the same
// bytes on a second run, and some are not oneDNN's bits (the switch took effect; where both
// add the bias, then the input channels in order, as for the 72->120 one, the bits agree).
func TestPointwiseConvNChw16c(t *testing.T) {
	c, names := pconvGraph()
	x := seeded(31, 1, 72, 14, 14)
	setCEnv(t, "IDK_PCONV", "0")
	off := runCat(t, c, x)
	setCEnv(t, "IDK_PCONV", "")
	out, again := runCat(t, c, x), runCat(t, c, x)
	differ := 0
	for i := range off {
		what := fmt.Sprintf("output %s, fn_pconv against oneDNN's (IDK_PCONV=0)", names[i])
		checkClose(t, what, off[i], out[i], 1e-5)
		checkSameBits(t, what+", second run", out[i], again[i])
		for j := range off[i] {
			if math.Float32bits(off[i][j]) != math.Float32bits(out[i][j]) {
				differ++
				break
			}
		}
	}
	if differ == 0 {
		t.Fatal("every output has oneDNN's bits: did IDK_PCONV=0 take effect?")
	}
}

// TestPointwiseConvAcrossThreads: fn_pconv's pieces go to the threads from both ends (two
// threads) or in contiguous ranges (one, three), but every output is summed in one tile in
// one order, so 1, 2 and 3 threads give the same bits, twice each; so do pieces claimed in
// contiguous ranges on two threads (IDK_PCONV_DYN=0).
func TestPointwiseConvAcrossThreads(t *testing.T) {
	c, names := pconvGraph()
	x := seeded(37, 1, 72, 14, 14)
	run := func(threads int) [][]float32 {
		return runTwiceOn(t, c.g, x, threads, fmt.Sprintf("%d threads", threads))
	}
	want := run(1)
	for _, th := range []int{2, 3} {
		for i, o := range run(th) {
			if names[i] != "small" {
				checkSameBits(t, fmt.Sprintf("%d threads against 1, output %s", th, names[i]), want[i], o)
			}
		}
	}
	setCEnv(t, "IDK_PCONV_DYN", "0")
	defer setCEnv(t, "IDK_PCONV_DYN", "")
	for i, o := range run(2) {
		if names[i] != "small" {
			checkSameBits(t, "2 threads in contiguous ranges against 1, output "+names[i], want[i], o)
		}
	}
}

// TestPointwiseConvMobileNetV2: the zoo's MobileNetV2 at 224x224, batch 1, two threads, whose
// 1x1 convolutions from 64 input channels up run fn_pconv, gives the logits of IDK_PCONV=0
// to 1e-5 of the largest, not the same bits, and the same bytes on a second run.
func TestPointwiseConvMobileNetV2(t *testing.T) {
	src, err := zoo.Build("mobilenet_v2", zoo.Options{Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	x := seeded(41, 1, 3, 224, 224)
	setCEnv(t, "IDK_PCONV", "0")
	off := logits(t, src, x)
	setCEnv(t, "IDK_PCONV", "")
	out, again := logits(t, src, x), logits(t, src, x)
	checkSwitched(t, "mobilenet_v2 logits, fn_pconv against oneDNN's (IDK_PCONV=0)", off, out, again)
}
