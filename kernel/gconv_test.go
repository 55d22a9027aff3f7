package kernel

import (
	"fmt"
	"testing"

	"idunno/kernel/onnx"
)

// TestGroupedConvNChw16c: grouped 3x3 convolutions of 4 and 8 channels a group between 1x1
// ones, as in ResNeXt-50's first two stages, run fn_gconv on nChw16c (lower_gconv in ops.c):
// stride 1 and 2, with and without a ReLU and a bias, widths whose rows end in a narrower
// register block (20 and 10 output columns) and one that fills them (16), at batch 1 and 3
// (two one-thread sub-batches). Every output is within 1e-5 of the largest of oneDNN's
// (IDK_GCONV=0: nChw4c and nChw8c kernels with reorders around them), not the same bits
// (the switch took effect: the sums run in another order), and the same bytes on a second
// run.
func TestGroupedConvNChw16c(t *testing.T) {
	for _, hw := range []int64{20, 16} {
		c := newCatGraph("x", -1, 16, hw, hw)
		ints := func(name string, v ...int64) *onnx.Attribute {
			return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
		}
		gconv := func(out, in string, ch, width, stride int64, bias bool) string {
			args := []string{in, c.param(out+".w", ch, width, 3, 3)}
			if bias {
				args = append(args, c.param(out+".b", ch))
			}
			return c.node("Conv", out, map[string]*onnx.Attribute{
				"kernel_shape": ints("kernel_shape", 3, 3),
				"pads":         ints("pads", 1, 1, 1, 1),
				"strides":      ints("strides", stride, stride),
				"group":        {Name: "group", Type: onnx.AttrInt, I: ch / width},
			}, args...)
		}
		a := c.conv("a", "x", 16, 48, 1)
		g4 := c.node("Relu", "g4.relu", nil, gconv("g4", a, 48, 4, 1, true))
		b := c.conv("b", g4, 48, 32, 1)
		g8s := c.node("Relu", "g8s.relu", nil, gconv("g8s", b, 32, 8, 2, true))
		g8 := gconv("g8", g8s, 32, 8, 1, false)
		g4s := gconv("g4s", g8, 32, 4, 2, true)
		y := c.conv("y", g4s, 32, 24, 1)
		c.outputs(y, g4, g8s, g8)
		for _, n := range []int64{1, 3} {
			x := seeded(13, n, 16, hw, hw)
			var off, out, again [][]float32
			setCEnv(t, "IDK_GCONV", "0")
			off = runCat(t, c, x)
			setCEnv(t, "IDK_GCONV", "")
			out, again = runCat(t, c, x), runCat(t, c, x)
			for i := range off {
				checkSwitched(t, fmt.Sprintf("%dx%d batch %d output %d, fn_gconv against oneDNN's (IDK_GCONV=0)", hw, hw, n, i),
					off[i], out[i], again[i])
			}
		}
	}
}

// TestGroupedConvSplitAcrossThreads: fn_gconv splits its output rows across the threads,
// and every row sums in one order whatever thread computes it, so the thread count must not
// change the bytes. Three grouped convolutions straight after the input (only reorders
// before them, no oneDNN convolution whose sums could depend on the thread count) on 1, 2
// and 3 threads give the same bits, twice each, at 23x23 (rows ending in a narrow register
// block, a row count that 2 and 3 do not divide) and 64x64.
func TestGroupedConvSplitAcrossThreads(t *testing.T) {
	for _, hw := range []int64{23, 64} {
		c := newCatGraph("x", -1, 32, hw, hw)
		ints := func(name string, v ...int64) *onnx.Attribute {
			return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
		}
		gconv := func(out, in string, width, stride int64, bias bool) string {
			args := []string{in, c.param(out+".w", 32, width, 3, 3)}
			if bias {
				args = append(args, c.param(out+".b", 32))
			}
			return c.node("Conv", out, map[string]*onnx.Attribute{
				"kernel_shape": ints("kernel_shape", 3, 3),
				"pads":         ints("pads", 1, 1, 1, 1),
				"strides":      ints("strides", stride, stride),
				"group":        {Name: "group", Type: onnx.AttrInt, I: 32 / width},
			}, args...)
		}
		g4 := c.node("Relu", "g4.relu", nil, gconv("g4", "x", 4, 1, true))
		g8s := gconv("g8s", g4, 8, 2, true)
		g8 := gconv("g8", g8s, 8, 1, false)
		c.outputs(g4, g8s, g8)
		x := seeded(17, 1, 32, hw, hw)
		run := func(threads int) [][]float32 {
			return runTwiceOn(t, c.g, x, threads, fmt.Sprintf("%dx%d, %d threads", hw, hw, threads))
		}
		want := run(1)
		for _, th := range []int{2, 3} {
			for i, o := range run(th) {
				checkSameBits(t, fmt.Sprintf("%dx%d, %d threads against 1, output %d", hw, hw, th, i), want[i], o)
			}
		}
	}
}
