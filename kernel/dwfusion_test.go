package kernel

import (
	"math"
	"testing"

	"github.com/ebitengine/purego"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// setCEnv sets (or with value "", unsets) a variable in the C environment, which the kernel
// library reads when it compiles a plan; os.Setenv does not reach it without cgo.
func setCEnv(t *testing.T, name, value string) {
	t.Helper()
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Skipf("libc: %v", err)
	}
	var setenv func(name, value string, overwrite int32) int32
	var unsetenv func(name string) int32
	purego.RegisterLibFunc(&setenv, libc, "setenv")
	purego.RegisterLibFunc(&unsetenv, libc, "unsetenv")
	if value == "" {
		unsetenv(name)
	} else {
		setenv(name, value, 1)
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
