package kernel

import (
	"math"
	"os"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// setCEnv sets (or with value "", unsets) a variable the kernel library reads with C's getenv
// when it compiles a plan. Without cgo, purego's runtime shim forwards os.Setenv and
// os.Unsetenv to libc, so the C side sees the change (TestOpenMPSpinCountSet checks that
// path). Unlike t.Setenv it can unset, which the switches' defaults need.
func setCEnv(t *testing.T, name, value string) {
	t.Helper()
	var err error
	if value == "" {
		err = os.Unsetenv(name)
	} else {
		err = os.Setenv(name, value)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// runMobileNet runs m at batch 8 on two threads (seeded input) and returns its logits.
func runMobileNet(t *testing.T, m *onnx.Model) []float32 {
	t.Helper()
	dims := append([]int64{8}, m.Graph.Inputs[0].Dims[1:]...)
	in := &onnx.Tensor{DType: onnx.Float, Dims: dims, F32: make([]float32, 8*3*224*224)}
	for i := range in.F32 {
		in.F32[i] = float32((i*7919)%1000)/500 - 1
	}
	return logits(t, m, in)
}

// TestDepthwiseFusionMatchesUnfused: MobileNetV2 at 224x224, batch 8, two threads, where
// oneDNN 2.6 runs its 112x112 and 56x56 expansion 1x1 convolutions with the 3x3 depthwise
// convolutions after them as one primitive (three pairs; IDK_DW_FUSE=0 lowers every pair
// separately), gives the unfused plan's logits to 1e-5 of the largest, and the same bytes
// on a second run.
func TestDepthwiseFusionMatchesUnfused(t *testing.T) {
	if testing.Short() {
		t.Skip("MobileNetV2 at batch 8")
	}
	m, err := zoo.Build("mobilenet_v2", zoo.Options{Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	setCEnv(t, "IDK_DW_FUSE", "0")
	plain := runMobileNet(t, m)
	setCEnv(t, "IDK_DW_FUSE", "")
	fused := runMobileNet(t, m)
	again := runMobileNet(t, m)
	checkClose(t, "mobilenet_v2, fused against unfused", plain, fused, 1e-5)
	for i := range fused {
		if math.Float32bits(fused[i]) != math.Float32bits(again[i]) {
			t.Fatalf("logit %d: %v, then %v on the same input", i, fused[i], again[i])
		}
	}
}
