package kernel

import (
	"slices"
	"testing"

	"idunno/kernel/onnx"
)

// TestBF16PoolChannelsLast: in bf16, a global average pooling of a grouped convolution's
// output in 8-channel blocks (RegNetY's squeeze-excitation mean after its convolutions of
// 8-channel groups) has only oneDNN's reference kernel; the plan pools a channels-last copy
// instead. A grouped 3x3 convolution of 8-channel groups, ReLU and GlobalAveragePool, batch
// 2 on two threads: the bf16 output agrees with fp32 within 0.05 of the largest (bf16's
// tolerance in TestBF16AgreesWithFP32) with and without the switch (IDK_POOL_NHWC=0), the
// plan has one step more with it (the reorder: the switch took effect), and a second run
// gives the same bytes.
func TestBF16PoolChannelsLast(t *testing.T) {
	if BF16Support() == "" {
		t.Skip("no bf16 on this CPU")
	}
	const c, hw = 48, 28
	init := map[string]*onnx.Tensor{}
	for i, name := range []string{"w1", "wg"} {
		dims := []int64{c, 16, 1, 1}
		if name == "wg" {
			dims = []int64{c, 8, 3, 3}
		}
		w := seededInput(dims, uint64(40+i))
		for k := range w.F32 {
			w.F32[k] = (w.F32[k] - 0.5) / 4
		}
		w.Name = name
		init[name] = w
	}
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	g := &onnx.Graph{
		Initializers: init,
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{2, 16, hw, hw}, HasShape: true}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Nodes: []*onnx.Node{
			{Name: "pw", OpType: "Conv", Inputs: []string{"x", "w1"}, Outputs: []string{"a"},
				Attrs: map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", 1, 1)}},
			{Name: "grouped", OpType: "Conv", Inputs: []string{"a", "wg"}, Outputs: []string{"b"},
				Attrs: map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", 3, 3), "pads": ints("pads", 1, 1, 1, 1),
					"group": {Name: "group", Type: onnx.AttrInt, I: c / 8}}},
			{Name: "relu", OpType: "Relu", Inputs: []string{"b"}, Outputs: []string{"r"}},
			{Name: "gap", OpType: "GlobalAveragePool", Inputs: []string{"r"}, Outputs: []string{"y"}},
		},
	}
	m := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: g}
	x := seededInput([]int64{2, 16, hw, hw}, 44)
	run := func(prec Precision) ([]float32, int32) {
		md, err := LoadModel(m, Options{Threads: 2, Precision: prec})
		if err != nil {
			t.Fatal(err)
		}
		defer md.Close()
		var first []float32
		for i := 0; i < 2; i++ {
			out, err := md.Run([]*onnx.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 && !slices.Equal(first, out[0].F32) {
				t.Fatalf("%v: two runs differ", prec)
			}
			first = out[0].F32
		}
		return first, planSteps(t, md)
	}
	ref, _ := run(FP32)
	got, steps := run(BF16)
	t.Setenv("IDK_POOL_NHWC", "0")
	off, stepsOff := run(BF16)
	checkClose(t, "bf16 pooled channels-last", ref, got, 0.05)
	checkClose(t, "bf16 pooled in blocks (IDK_POOL_NHWC=0)", ref, off, 0.05)
	if steps != stepsOff+1 {
		t.Errorf("plan has %d steps, %d with IDK_POOL_NHWC=0: want one more (the reorder to channels-last)", steps, stepsOff)
	}
}
