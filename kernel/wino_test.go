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
	m := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: g}
	x := seededInput([]int64{n, c, hw, hw}, 22)
	setCEnv(t, "IDK_WINO_TILES", "0")
	wino := logits(t, m, x)
	setCEnv(t, "IDK_WINO_TILES", "")
	direct := logits(t, m, x)
	again := logits(t, m, x)
	checkClose(t, "147x147 3x3 convolution, brgconv against Winograd", wino, direct, 1e-5)
	differ := false
	for i := range direct {
		differ = differ || math.Float32bits(direct[i]) != math.Float32bits(wino[i])
		if math.Float32bits(direct[i]) != math.Float32bits(again[i]) {
			t.Fatalf("output %d: %v, then %v on the same input", i, direct[i], again[i])
		}
	}
	if !differ {
		t.Fatal("the same bits with and without IDK_WINO_TILES=0: Winograd still chosen?")
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
	checkClose(t, "resnet18 batch 4, Winograd at every size against 28x28 up", direct, wino, 1e-5)
	differ := false
	for i := range wino {
		differ = differ || math.Float32bits(direct[i]) != math.Float32bits(wino[i])
		if math.Float32bits(wino[i]) != math.Float32bits(again[i]) {
			t.Fatalf("logit %d: %v, then %v on the same input", i, wino[i], again[i])
		}
	}
	if !differ {
		t.Fatal("the same bits with and without IDK_WINO_BATCH=0: Winograd not taken at small sizes?")
	}
}
