package kernel

import (
	"testing"

	"idunno/kernel/onnx"
)

// stemModel is a dense network's first layers at batch 1: a stem convolution from 3
// channels (kernel k, stride s, padding pad) to 16, a Relu, an optional 3x3 stride-2 max
// pool, and a dense convolution to 32 channels (kernel k2, padding (k2-1)/2) with a Relu.
func stemModel(size, k, s, pad int64, pool bool, k2 int64) (*onnx.Model, *onnx.Tensor) {
	init := map[string]*onnx.Tensor{}
	weight := func(name string, dims []int64, seed uint64) { addWeight(init, name, dims, seed, 8) }
	weight("w0", []int64{16, 3, k, k}, 61)
	weight("w1", []int64{32, 16, k2, k2}, 62)
	ints := func(name string, v ...int64) *onnx.Attribute {
		return &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
	}
	conv := func(name, in, w, out string, k, stride, p int64) *onnx.Node {
		return &onnx.Node{Name: name, OpType: "Conv", Inputs: []string{in, w}, Outputs: []string{out},
			Attrs: map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", k, k), "pads": ints("pads", p, p, p, p),
				"strides": ints("strides", stride, stride)}}
	}
	relu := func(in, out string) *onnx.Node {
		return &onnx.Node{Name: out, OpType: "Relu", Inputs: []string{in}, Outputs: []string{out}}
	}
	nodes := []*onnx.Node{conv("c0", "x", "w0", "a0", k, s, pad), relu("a0", "a")}
	in := "a"
	if pool {
		nodes = append(nodes, &onnx.Node{Name: "pool", OpType: "MaxPool", Inputs: []string{"a"}, Outputs: []string{"p"},
			Attrs: map[string]*onnx.Attribute{"kernel_shape": ints("kernel_shape", 3, 3), "strides": ints("strides", 2, 2)}})
		in = "p"
	}
	nodes = append(nodes, conv("c1", in, "w1", "b0", k2, 1, (k2-1)/2), relu("b0", "y"))
	g := &onnx.Graph{
		Initializers: init,
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{1, 3, size, size}, HasShape: true}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Nodes:        nodes,
	}
	m := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: g}
	return m, seededInput([]int64{1, 3, size, size}, 63)
}

// TestStemBlocked: a dense network's stride-1 stem (VGG's) and overlapping stride-4 stem
// (AlexNet's 11x11) read the nchw input straight into nChw16c (stem_blocked in ops.c;
// IDK_STEM_BLOCKED=0 keeps brgconv on nhwc). On two threads the output agrees with the
// switch-off plan's to 1e-5 of the largest (other kernels, another summation order) and a
// second run gives the same bytes. The VGG-like graph's Winograd 3x3 after the stem reads
// nChw16c, so its plan loses the input's and the stem output's reorders (2 steps), and so
// does an 11x11/4 stem's with one after it; AlexNet's, with its max pool and 5x5 convolution
// (brgconv, nhwc) after it, trades the input's reorder for one after the pool (as many). A
// ResNet's 7x7 stride-2 stem is left alone: the same bits and steps with the switch off.
func TestStemBlocked(t *testing.T) {
	for _, c := range []struct {
		name          string
		size, k, s, p int64
		pool          bool
		k2            int64
		fewer         int32
		same          bool
	}{
		{"vgg 3x3/1", 32, 3, 1, 1, false, 3, 2, false},
		{"alexnet 11x11/4", 67, 11, 4, 2, true, 5, 0, false},
		{"alexnet 11x11/4, Winograd after", 67, 11, 4, 2, false, 3, 2, false},
		{"resnet 7x7/2", 64, 7, 2, 3, true, 3, 0, true},
	} {
		m, x := stemModel(c.size, c.k, c.s, c.p, c.pool, c.k2)
		checkLayoutSwitch(t, c.name, "IDK_STEM_BLOCKED", m, x, c.fewer, c.same)
	}
}

// TestPoolIdentity: an AveragePool or MaxPool with a 1x1 window at stride 1 (AlexNet's and
// VGG's adaptive average pool at its input's size) adds no step: its output is its input
// (IDK_POOL_IDENT=0 runs the pooling primitive). The output has the same bits as the
// primitive's (an average over one value is that value), one step fewer for each pool.
func TestPoolIdentity(t *testing.T) {
	for _, op := range []string{"AveragePool", "MaxPool"} {
		m, x := stemModel(32, 3, 1, 1, false, 3)
		g := m.Graph
		g.Nodes[len(g.Nodes)-1].Outputs = []string{"r"}
		g.Nodes = append(g.Nodes, &onnx.Node{Name: "id", OpType: op, Inputs: []string{"r"}, Outputs: []string{"y0"},
			Attrs: map[string]*onnx.Attribute{"kernel_shape": {Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{1, 1}}}},
			&onnx.Node{Name: "flat", OpType: "Flatten", Inputs: []string{"y0"}, Outputs: []string{"y"}})
		setCEnv(t, "IDK_POOL_IDENT", "0")
		off, offSteps := runSteps(t, m, x)
		setCEnv(t, "IDK_POOL_IDENT", "")
		on, onSteps := runSteps(t, m, x)
		if offSteps-onSteps != 1 {
			t.Fatalf("%s: %d steps, %d with IDK_POOL_IDENT=0: want 1 fewer", op, onSteps, offSteps)
		}
		checkSameBits(t, op+": the output with the pooling primitive", off, on)
	}
}
