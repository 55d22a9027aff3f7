package kernel

import (
	"math"
	"testing"

	"idunno/kernel/onnx"
)

// TestChannelsLastTranspose: ConvNeXt's block at batch 1 and 2 (two one-thread sub-batches):
// a 7x7 depthwise convolution (nChw16c), Transpose to channels-last, a Linear layer (MatMul
// and Add), Transpose back, a per-channel Mul (the layer scale) and the residual Add; the
// stem's pattern besides, a 4x4 stride-4 convolution then Transpose, Softmax over the
// channels, Transpose back. The transposes lower without copies of their own
// (channels_last_transpose in ops.c): the outputs are the same bits as with IDK_CL_TRANSPOSE=0
// (every step left is the same arithmetic; only copies went), the plan has fewer steps (the
// switch took effect), and a second run gives the same bytes.
func TestChannelsLastTranspose(t *testing.T) {
	const ch, hw = 32, 12
	c := newCatGraph("x", -1, 3, 4*hw, 4*hw)
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	perm := func(v ...int64) map[string]*onnx.Attribute {
		return map[string]*onnx.Attribute{"perm": ints("perm", v...)}
	}
	stem := c.node("Conv", "stem", map[string]*onnx.Attribute{
		"kernel_shape": ints("kernel_shape", 4, 4), "strides": ints("strides", 4, 4),
	}, "x", c.param("stem.w", ch, 3, 4, 4), c.param("stem.b", ch))
	sm := c.node("Softmax", "sm", map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: -1}},
		c.node("Transpose", "stem.t", perm(0, 2, 3, 1), stem))
	s := c.node("Transpose", "stem.back", perm(0, 3, 1, 2), sm)
	dw := c.node("Conv", "dw", map[string]*onnx.Attribute{
		"kernel_shape": ints("kernel_shape", 7, 7), "pads": ints("pads", 3, 3, 3, 3),
		"group": {Name: "group", Type: onnx.AttrInt, I: ch},
	}, s, c.param("dw.w", ch, 1, 7, 7), c.param("dw.b", ch))
	tl := c.node("Transpose", "t1", perm(0, 2, 3, 1), dw)
	lin := c.node("Add", "lin", nil, c.node("MatMul", "mm", nil, tl, c.param("mm.w", ch, ch)), c.param("mm.b", ch))
	back := c.node("Transpose", "t2", perm(0, 3, 1, 2), lin)
	scaled := c.node("Mul", "scale", nil, back, c.param("gamma", ch, 1, 1))
	y := c.node("Add", "res", nil, scaled, s)
	c.outputs(y, back)
	m := &onnx.Model{IRVersion: 8, Opset: 13, Graph: c.g}
	for _, n := range []int64{1, 2} {
		x := seeded(21, n, 3, 4*hw, 4*hw)
		run := func() ([][]float32, int32) {
			md, err := LoadModel(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer md.Close()
			out, err := md.Run([]*onnx.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			var r [][]float32
			for _, o := range out {
				r = append(r, o.F32)
			}
			steps := int32(0)
			if n == 1 {
				steps = planSteps(t, md)
			}
			return r, steps
		}
		setCEnv(t, "IDK_CL_TRANSPOSE", "0")
		off, offSteps := run()
		setCEnv(t, "IDK_CL_TRANSPOSE", "")
		out, steps := run()
		again, _ := run()
		for i := range off {
			for j := range off[i] {
				if math.Float32bits(out[i][j]) != math.Float32bits(off[i][j]) ||
					math.Float32bits(again[i][j]) != math.Float32bits(out[i][j]) {
					t.Fatalf("batch %d output %d element %d: %v, then %v; with the copies %v", n, i, j, out[i][j],
						again[i][j], off[i][j])
				}
			}
		}
		if n == 1 && steps >= offSteps {
			t.Fatalf("%d steps, %d with IDK_CL_TRANSPOSE=0: did the switch take effect?", steps, offSteps)
		}
		if n == 1 {
			t.Logf("batch 1: %d steps, %d with the copies", steps, offSteps)
		}
	}
}
