package kernel

import (
	"testing"

	"idunno/kernel/onnx"
)

// planSteps is the number of steps of m's (whole, not split) plan, after a run.
func planSteps(t *testing.T, m *Model) int32 {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.plans {
		if e.p != nil {
			return idkPlanSteps(e.p.h)
		}
	}
	t.Fatal("no plan")
	return 0
}

// TestDepthwiseFollowsNHWC: in a network with dense 3x3 convolutions, whose 1x1
// convolutions past the Winograd sizes run brgemm on nhwc, a depthwise convolution
// reading an nhwc tensor stays on nhwc (oneDNN's brdgmm kernel) instead of nChw16c with a
// reorder on either side (EfficientNetV2-S's 14x14 stage; IDK_DW_FOLLOW=0 keeps the
// reorders). A dense 3x3 convolution at 24x24 (nhwc: under the Winograd minimum), a 3x3
// depthwise one and a 1x1 one, batch 1 on two threads: the outputs agree with the
// switch-off plan's to 1e-5 of the largest, the plan has two steps fewer (the reorders: the
// switch took effect), and a second run gives the same bytes.
func TestDepthwiseFollowsNHWC(t *testing.T) {
	const c, hw = 64, 24
	init := map[string]*onnx.Tensor{}
	weight := func(name string, dims []int64, seed uint64) { addWeight(init, name, dims, seed, 4) }
	weight("w1", []int64{c, 16, 3, 3}, 31)
	weight("wd", []int64{c, 1, 3, 3}, 32)
	weight("w2", []int64{16, c, 1, 1}, 33)
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	conv := func(name, in, w, out string, k, group int64) *onnx.Node {
		p := (k - 1) / 2
		attrs := map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", k, k), "pads": ints("pads", p, p, p, p)}
		if group > 1 {
			attrs["group"] = &onnx.Attribute{Name: "group", Type: onnx.AttrInt, I: group}
		}
		return &onnx.Node{Name: name, OpType: "Conv", Inputs: []string{in, w}, Outputs: []string{out}, Attrs: attrs}
	}
	g := &onnx.Graph{
		Initializers: init,
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{1, 16, hw, hw}, HasShape: true}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Nodes: []*onnx.Node{
			conv("dense", "x", "w1", "a", 3, 1),
			{Name: "relu", OpType: "Relu", Inputs: []string{"a"}, Outputs: []string{"b"}},
			conv("dw", "b", "wd", "d", 3, c),
			conv("pw", "d", "w2", "y", 1, 1),
		},
	}
	m := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: g}
	x := seededInput([]int64{1, 16, hw, hw}, 34)
	checkLayoutSwitch(t, "dense, depthwise and 1x1 convolutions", "IDK_DW_FOLLOW", m, x, 2, false)
}
