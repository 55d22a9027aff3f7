package kernel

import (
	"math"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// TestWinoTilesPoor: a dense 3x3 convolution with 32 input channels and 147x147 outputs
// (Inception-v3's stem), at batch 4 on two threads (two sub-batches of 2), runs brgconv
// instead of oneDNN's F(4x4,3x3) Winograd kernel, whose tile blocking is poor there
// (wino_tiles_poor in ops.c; IDK_WINO_TILES=0 keeps Winograd). The two differ in rounding
// only (Winograd transforms its inputs and weights, a direct convolution does not), so
// the outputs agree to 1e-5 of the largest and differ in some bits (the switch took
// effect); each gives the same bytes on a second run.
func TestWinoTilesPoor(t *testing.T) {
	const n, c, hw = 4, 32, 147
	m := conv3x3Model(c, c, hw, 1, 21)
	x := seededInput([]int64{n, c, hw, hw}, 22)
	wino, direct, again := switchedRuns(t, "IDK_WINO_TILES", func() []float32 { return logits(t, m, x) })
	checkSwitched(t, "147x147 3x3 convolution, brgconv against Winograd (IDK_WINO_TILES=0)", wino, direct, again)
}

// TestWinoF2BlocksPoorly: at batch 1 on two threads, Inception-v3's two unpadded stem
// convolutions, where oneDNN's F(2x2,3x3) Winograd kernel blocks its GEMMs poorly
// (wino_f2_blocks_poorly in ops.c; IDK_WINO_F2CHECK=0 keeps it), run the F(4x4)
// kernel (80->192 channels at 71x71 outputs) and brgconv (32->32 at 147x147, where the
// F(4x4) kernel's tiles block badly). Each is within 1e-5 of the largest of the F(2x2)
// run, not the same bits (the switch took effect), and the same bytes on a second run.
func TestWinoF2BlocksPoorly(t *testing.T) {
	for _, c := range []struct {
		name          string
		in, out, size int64
	}{
		{"80->192 at 73x73, F(4x4)", 80, 192, 73},
		{"32->32 at 149x149, brgconv", 32, 32, 149},
	} {
		m := conv3x3Model(c.in, c.out, c.size, 0, 24)
		x := seededInput([]int64{1, c.in, c.size, c.size}, 25)
		f2, out, again := switchedRuns(t, "IDK_WINO_F2CHECK", func() []float32 { return logits(t, m, x) })
		checkSwitched(t, c.name+" against F(2x2) Winograd (IDK_WINO_F2CHECK=0)", f2, out, again)
	}
}

// conv3x3Model is one 3x3 stride-1 convolution from in to out channels on size x size
// inputs (any batch), padded by pad on every side, with seeded weights in [-0.05, 0.05).
func conv3x3Model(in, out, size, pad int64, seed uint64) *onnx.Model {
	w := seededInput([]int64{out, in, 3, 3}, seed)
	for i := range w.F32 {
		w.F32[i] = (w.F32[i] - 0.5) / 10
	}
	w.Name = "w"
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	g := &onnx.Graph{
		Initializers: map[string]*onnx.Tensor{"w": w},
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{-1, in, size, size}, DimParams: make([]string, 4), HasShape: true}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Nodes: []*onnx.Node{{Name: "conv", OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
			Attrs: map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", 3, 3), "pads": ints("pads", pad, pad, pad, pad)}}},
	}
	return &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: g}
}

// switchedRuns runs run with the switch name set to 0 (off), then unset (on), then again.
func switchedRuns(t *testing.T, name string, run func() []float32) (off, on, again []float32) {
	t.Helper()
	setCEnv(t, name, "0")
	off = run()
	setCEnv(t, name, "")
	return off, run(), run()
}

// checkSwitched: out (a default run, and again a second run of it) is within 1e-5 of the
// largest of off (the same with an IDK_ switch turning a change off), not the same bits
// (the switch took effect: Winograd rounds its transforms differently), and again is
// the same bytes as out.
func checkSwitched(t *testing.T, what string, off, out, again []float32) {
	t.Helper()
	checkClose(t, what, off, out, 1e-5)
	differ := false
	for i := range out {
		differ = differ || math.Float32bits(off[i]) != math.Float32bits(out[i])
		if math.Float32bits(out[i]) != math.Float32bits(again[i]) {
			t.Fatalf("%s: output %d: %v, then %v on the same input", what, i, out[i], again[i])
		}
	}
	if !differ {
		t.Fatalf("%s: the same bits with the switch off: did it take effect?", what)
	}
}

// TestWinoSmallAtBatch: at batch >= 2 the dense 3x3 convolutions from 4x4 outputs up run
// Winograd (oneDNN's F(4x4,3x3) kernel; wino_min_pixels in ops.c), not only from 28x28 up
// as at batch 1: ResNet-18 at 64x64 (3x3 convolutions at 16x16 to 2x2), batch 4 on two
// threads (two sub-batches of 2), gives the logits of IDK_WINO_BATCH=0 (brgconv there) to
// 1e-5 of the largest (Winograd rounds its transforms differently), not the same bits
// (the switch took effect), and the same bytes on a second run.
func TestWinoSmallAtBatch(t *testing.T) {
	m, err := zoo.Build("resnet18", zoo.Options{Seed: 9, InputShape: []int64{3, 64, 64}})
	if err != nil {
		t.Fatal(err)
	}
	x := seededInput([]int64{4, 3, 64, 64}, 23)
	direct, wino, again := switchedRuns(t, "IDK_WINO_BATCH", func() []float32 { return logits(t, m, x) })
	checkSwitched(t, "resnet18 batch 4, Winograd at every size against 28x28 up (IDK_WINO_BATCH=0)", direct, wino, again)
}

// TestWinoNotUnderOneTile: at batch >= 2 a dense 3x3 convolution runs Winograd from one
// 4x4 output tile up (wino_min_pixels in ops.c), not under it: at 2x2 outputs, batch 4, it
// gives the same bits as with IDK_WINO_BATCH=0 (brgconv), while IDK_WINO_MIN=1 (Winograd
// at every size) changes them; at 4x4 the default is Winograd. Winograd down to 1x1 had
// made ResNet-18 at 32x32 input (3x3 convolutions at 8x8 to 1x1) three times slower at
// batch 8.
func TestWinoNotUnderOneTile(t *testing.T) {
	for _, hw := range []int64{2, 4} {
		m := conv3x3Model(64, 64, hw, 1, 21)
		x := seededInput([]int64{4, 64, hw, hw}, 24)
		direct, out, again := switchedRuns(t, "IDK_WINO_BATCH", func() []float32 { return logits(t, m, x) })
		if hw == 4 {
			checkSwitched(t, "4x4 outputs at batch 4, Winograd against brgconv (IDK_WINO_BATCH=0)", direct, out, again)
			continue
		}
		for i := range out {
			if math.Float32bits(out[i]) != math.Float32bits(direct[i]) {
				t.Fatalf("2x2 outputs: output %d: %v, and %v with IDK_WINO_BATCH=0: Winograd under one tile", i, out[i], direct[i])
			}
		}
		setCEnv(t, "IDK_WINO_MIN", "1")
		wino, wagain := logits(t, m, x), logits(t, m, x)
		setCEnv(t, "IDK_WINO_MIN", "")
		checkSwitched(t, "2x2 outputs at batch 4, Winograd (IDK_WINO_MIN=1) against the default", out, wino, wagain)
	}
}

// TestWinoSmallAtBatch1: at batch 1, in a network without depthwise convolutions, the
// dense 3x3 convolutions from 7x7 outputs up run Winograd (wino_min_pixels in ops.c), not
// only from 28x28 up: ResNet-18 at 112x112 (3x3 convolutions at 28x28 to 4x4) on two
// threads gives the logits of IDK_WINO_B1=0 to 1e-5 of the largest (Winograd rounds its
// transforms differently), not the same bits (the switch took effect), and the same bytes
// on a second run. A network with a depthwise convolution keeps its plan: the same bits.
func TestWinoSmallAtBatch1(t *testing.T) {
	m, err := zoo.Build("resnet18", zoo.Options{Seed: 9, InputShape: []int64{3, 112, 112}})
	if err != nil {
		t.Fatal(err)
	}
	x := seededInput([]int64{1, 3, 112, 112}, 23)
	direct, wino, again := switchedRuns(t, "IDK_WINO_B1", func() []float32 { return logits(t, m, x) })
	checkSwitched(t, "resnet18 batch 1, Winograd from 7x7 against 28x28 up (IDK_WINO_B1=0)", direct, wino, again)

	// a dense 3x3 convolution at 14x14 in a network with a depthwise one: brgconv as before
	c := newCatGraph("x", -1, 32, 14, 14)
	d := c.conv("d", "x", 32, 32, 3)
	dw := c.param("dw.w", 32, 1, 3, 3)
	c.node("Conv", "dw", map[string]*onnx.Attribute{
		"kernel_shape": {Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{3, 3}},
		"pads":         {Name: "pads", Type: onnx.AttrInts, Ints: []int64{1, 1, 1, 1}},
		"group":        {Name: "group", Type: onnx.AttrInt, I: 32},
	}, d, dw)
	c.outputs("dw")
	xd := seeded(4, 1, 32, 14, 14)
	off, on, _ := switchedRuns(t, "IDK_WINO_B1", func() []float32 { return runCat(t, c, xd)[0] })
	for i := range on {
		if math.Float32bits(on[i]) != math.Float32bits(off[i]) {
			t.Fatalf("with a depthwise convolution: output %d: %v, and %v with IDK_WINO_B1=0", i, on[i], off[i])
		}
	}
}
