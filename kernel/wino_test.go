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
	m := conv3x3Model(c, hw)
	x := seededInput([]int64{n, c, hw, hw}, 22)
	setCEnv(t, "IDK_WINO_TILES", "0")
	wino := logits(t, m, x)
	setCEnv(t, "IDK_WINO_TILES", "")
	direct := logits(t, m, x)
	again := logits(t, m, x)
	checkSwitched(t, "147x147 3x3 convolution, brgconv against Winograd (IDK_WINO_TILES=0)", wino, direct, again)
}

// conv3x3Model is one dense 3x3 convolution, c channels to c, padded to keep hw x hw, with
// seeded weights and a symbolic batch.
func conv3x3Model(c, hw int64) *onnx.Model {
	w := seededInput([]int64{c, c, 3, 3}, 21)
	for i := range w.F32 {
		w.F32[i] = (w.F32[i] - 0.5) / 10
	}
	w.Name = "w"
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	g := &onnx.Graph{
		Initializers: map[string]*onnx.Tensor{"w": w},
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{-1, c, hw, hw}, DimParams: make([]string, 4), HasShape: true}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Nodes: []*onnx.Node{{Name: "conv", OpType: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
			Attrs: map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", 3, 3), "pads": ints("pads", 1, 1, 1, 1)}}},
	}
	return &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: g}
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

// TestWinoSmallAtBatch: at batch >= 2 the dense 3x3 convolutions of every size run
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
	setCEnv(t, "IDK_WINO_BATCH", "0")
	direct := logits(t, m, x)
	setCEnv(t, "IDK_WINO_BATCH", "")
	wino := logits(t, m, x)
	again := logits(t, m, x)
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
		m := conv3x3Model(64, hw)
		x := seededInput([]int64{4, 64, hw, hw}, 24)
		setCEnv(t, "IDK_WINO_BATCH", "0")
		direct := logits(t, m, x)
		setCEnv(t, "IDK_WINO_BATCH", "")
		out := logits(t, m, x)
		again := logits(t, m, x)
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
