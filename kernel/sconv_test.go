package kernel

import (
	"fmt"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// sconvGraph builds a ResNet last-stage shaped graph on an input of 32 channels, h x w
// (w = 14): a 1x1 convolution to 64 channels (oneDNN's, on nChw16c, which puts the rest on
// that layout), then the convolutions lower_sconv takes (7 output columns): a 3x3 stride-2
// one with a ReLU, a 1x1, a 1x1 stride-2 projection summed with it and a ReLU (Add + Relu
// fused as sum and ReLU post-ops), a 3x3 with a ReLU and a 3x3 without a bias.
func sconvGraph(h, w int64) (*catGraph, []string) {
	c := newCatGraph("x", 1, 32, h, w)
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	conv := func(out, in string, cin, cout, k, stride int64, bias bool) string {
		args := []string{in, c.param(out+".w", cout, cin, k, k)}
		if bias {
			args = append(args, c.param(out+".b", cout))
		}
		return c.node("Conv", out, map[string]*onnx.Attribute{
			"kernel_shape": ints("kernel_shape", k, k),
			"pads":         ints("pads", k/2, k/2, k/2, k/2),
			"strides":      ints("strides", stride, stride),
		}, args...)
	}
	a := conv("a", "x", 32, 64, 1, 1, true)
	b := c.node("Relu", "b.relu", nil, conv("b", a, 64, 64, 3, 2, true))
	e := conv("e", b, 64, 128, 1, 1, true)
	sum := c.node("Relu", "s.relu", nil, c.node("Add", "s", nil, e, conv("p", a, 64, 128, 1, 2, true)))
	f := c.node("Relu", "f.relu", nil, conv("f", sum, 128, 64, 3, 1, true))
	g := conv("g", f, 64, 64, 3, 1, false)
	outs := []string{b, e, sum, f, g}
	c.outputs(outs...)
	return c, outs
}

// TestSmallConvNChw16c: the convolutions with 7-pixel-wide outputs at batch 1 (fn_sconv,
// lower_sconv in ops.c): 1x1 and 3x3, stride 1 and 2, with and without bias, ReLU and a
// residual sum, on 7 output rows and on 5. Every output is within 1e-5 of the largest of
// oneDNN's (IDK_SCONV=0), not the same bits (the switch took effect), and the same bytes on
// a second run. (At 10x14 the first 1x1 convolution would go to nhwc, under the Winograd
// threshold's 14x14, and the rest with it; IDK_WINO_MIN=1 keeps it on nChw16c.)
func TestSmallConvNChw16c(t *testing.T) {
	for _, h := range []int64{14, 10} {
		c, names := sconvGraph(h, 14)
		x := seeded(21, 1, 32, h, 14)
		if h < 14 {
			setCEnv(t, "IDK_WINO_MIN", "1")
			defer setCEnv(t, "IDK_WINO_MIN", "")
		}
		setCEnv(t, "IDK_SCONV", "0")
		off := runCat(t, c, x)
		setCEnv(t, "IDK_SCONV", "")
		out, again := runCat(t, c, x), runCat(t, c, x)
		for i := range off {
			checkSwitched(t, fmt.Sprintf("%dx14 input, output %s, fn_sconv against oneDNN's (IDK_SCONV=0)", h, names[i]),
				off[i], out[i], again[i])
		}
	}
}

// TestSmallConvSplitAcrossThreads: fn_sconv splits its 64-channel panels across the threads
// and sums every output in one order, so 1, 2 and 3 threads (8 panels of the 128-channel
// convolutions split 4/4 and 2/3/3, the 64-channel ones' single panel on one thread) give
// the same bits, twice each. Only oneDNN's first 1x1 convolution runs before them.
func TestSmallConvSplitAcrossThreads(t *testing.T) {
	c, names := sconvGraph(14, 14)
	x := seeded(23, 1, 32, 14, 14)
	run := func(threads int) [][]float32 {
		return runTwiceOn(t, c.g, x, threads, fmt.Sprintf("%d threads", threads))
	}
	want := run(1)
	for _, th := range []int{2, 3} {
		for i, o := range run(th) {
			checkSameBits(t, fmt.Sprintf("%d threads against 1, output %s", th, names[i]), want[i], o)
		}
	}
}

// TestSmallConvResNet18: the zoo's ResNet-18 at 224x224, batch 1, two threads, whose last
// stage (7x7) runs fn_sconv, gives the logits of IDK_SCONV=0 (oneDNN's kernels there) to
// 1e-5 of the largest, not the same bits (the switch took effect), and the same bytes on a
// second run. (The zoo's ResNet-50 lowers its last stage on nhwc, where lower_sconv does not
// apply: its blocks emit the projection before the expansion, unlike torchvision's export.)
func TestSmallConvResNet18(t *testing.T) {
	src, err := zoo.Build("resnet18", zoo.Options{Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	x := seeded(29, 1, 3, 224, 224)
	setCEnv(t, "IDK_SCONV", "0")
	off := logits(t, src, x)
	setCEnv(t, "IDK_SCONV", "")
	out, again := logits(t, src, x), logits(t, src, x)
	checkSwitched(t, "resnet18 logits, fn_sconv against oneDNN's (IDK_SCONV=0)", off, out, again)
}
