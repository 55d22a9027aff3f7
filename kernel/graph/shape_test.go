package graph

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

var noAxes = ""

// TestShapeInference checks the output dims of one node per case, or the error it gives.
func TestShapeInference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	w := func(dims ...int64) *onnx.Tensor { return randTensor(r, dims...) }
	cases := []struct {
		name    string
		opset   int64
		build   func(b *builder)
		want    []int64
		wantErr string
	}{
		{"relu", 13, func(b *builder) { b.input("x", 2, 3).node("Relu", ss("x"), ss("y")) }, []int64{2, 3}, ""},
		{"leaky", 13, func(b *builder) { b.input("x", 4).node("LeakyRelu", ss("x"), ss("y"), aFloat("alpha", 0.2)) }, []int64{4}, ""},
		{"prelu", 13, func(b *builder) {
			b.input("x", 1, 3, 4, 4).init("s", w(3, 1, 1)).node("PRelu", ss("x", "s"), ss("y"))
		}, []int64{1, 3, 4, 4}, ""},
		{"prelu bad slope", 13, func(b *builder) {
			b.input("x", 1, 3, 4, 4).init("s", w(5)).node("PRelu", ss("x", "s"), ss("y"))
		}, nil, "do not broadcast"},
		{"clip attrs", 9, func(b *builder) {
			b.input("x", 5).node("Clip", ss("x"), ss("y"), aFloat("min", 0), aFloat("max", 6))
		}, []int64{5}, ""},
		{"clip inputs", 13, func(b *builder) {
			b.input("x", 5).init("lo", scalarF(0)).init("hi", scalarF(6)).node("Clip", ss("x", "lo", "hi"), ss("y"))
		}, []int64{5}, ""},
		{"clip runtime bound", 13, func(b *builder) {
			b.input("x", 5).input("lo").node("Clip", ss("x", "lo"), ss("y"))
		}, nil, "min (input 1) must be a constant"},
		{"add broadcast", 13, func(b *builder) { b.input("a", 2, 1, 4).input("b", 3, 1).node("Add", ss("a", "b"), ss("y")) }, []int64{2, 3, 4}, ""},
		{"mul no broadcast", 13, func(b *builder) { b.input("a", 2, 3).input("b", 4).node("Mul", ss("a", "b"), ss("y")) }, nil, "do not broadcast"},
		{"conv basic", 13, func(b *builder) {
			b.input("x", 1, 3, 32, 32).init("w", w(8, 3, 3, 3)).node("Conv", ss("x", "w"), ss("y"))
		}, []int64{1, 8, 30, 30}, ""},
		{"conv pads strides", 13, func(b *builder) {
			b.input("x", 2, 3, 224, 224).init("w", w(64, 3, 7, 7)).
				node("Conv", ss("x", "w"), ss("y"), aInts("pads", 3, 3, 3, 3), aInts("strides", 2, 2))
		}, []int64{2, 64, 112, 112}, ""},
		{"conv depthwise", 13, func(b *builder) {
			b.input("x", 1, 32, 10, 10).init("w", w(32, 1, 3, 3)).init("b", w(32)).
				node("Conv", ss("x", "w", "b"), ss("y"), aInt("group", 32), aInts("pads", 1, 1, 1, 1))
		}, []int64{1, 32, 10, 10}, ""},
		{"conv dilated", 13, func(b *builder) {
			b.input("x", 1, 1, 10, 10).init("w", w(1, 1, 3, 3)).node("Conv", ss("x", "w"), ss("y"), aInts("dilations", 2, 2))
		}, []int64{1, 1, 6, 6}, ""},
		{"conv same upper", 13, func(b *builder) {
			b.input("x", 1, 1, 7, 5).init("w", w(1, 1, 3, 3)).
				node("Conv", ss("x", "w"), ss("y"), aString("auto_pad", "SAME_UPPER"), aInts("strides", 2, 2))
		}, []int64{1, 1, 4, 3}, ""},
		{"conv valid", 13, func(b *builder) {
			b.input("x", 1, 1, 7, 5).init("w", w(1, 1, 3, 3)).
				node("Conv", ss("x", "w"), ss("y"), aString("auto_pad", "VALID"), aInts("strides", 2, 2))
		}, []int64{1, 1, 3, 2}, ""},
		{"conv bad group", 13, func(b *builder) {
			b.input("x", 1, 6, 5, 5).init("w", w(4, 3, 3, 3)).node("Conv", ss("x", "w"), ss("y"), aInt("group", 3))
		}, nil, "group 3 does not fit"},
		{"conv runtime weights", 13, func(b *builder) {
			b.input("x", 1, 3, 5, 5).input("w", 2, 3, 3, 3).node("Conv", ss("x", "w"), ss("y"))
		}, []int64{1, 2, 3, 3}, ""},
		{"conv kernel too big", 13, func(b *builder) {
			b.input("x", 1, 1, 2, 2).init("w", w(1, 1, 3, 3)).node("Conv", ss("x", "w"), ss("y"))
		}, nil, "exceeds padded input"},
		{"maxpool ceil", 13, func(b *builder) {
			b.input("x", 1, 3, 112, 112).node("MaxPool", ss("x"), ss("y"), aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInt("ceil_mode", 1))
		}, []int64{1, 3, 56, 56}, ""},
		{"maxpool floor", 13, func(b *builder) {
			b.input("x", 1, 3, 112, 112).node("MaxPool", ss("x"), ss("y"), aInts("kernel_shape", 3, 3), aInts("strides", 2, 2))
		}, []int64{1, 3, 55, 55}, ""},
		{"maxpool dilations", 13, func(b *builder) {
			b.input("x", 1, 1, 4, 4).node("MaxPool", ss("x"), ss("y"), aInts("kernel_shape", 2, 2), aInts("dilations", 2, 2))
		}, []int64{1, 1, 2, 2}, ""},
		{"maxpool storage order", 13, func(b *builder) {
			b.input("x", 1, 1, 4, 4).node("MaxPool", ss("x"), ss("y"), aInts("kernel_shape", 2, 2), aInt("storage_order", 1))
		}, nil, "storage_order=1 not supported"},
		{"avgpool same lower", 13, func(b *builder) {
			b.input("x", 1, 1, 5, 5).node("AveragePool", ss("x"), ss("y"), aInts("kernel_shape", 2, 2), aString("auto_pad", "SAME_LOWER"))
		}, []int64{1, 1, 5, 5}, ""},
		{"avgpool no kernel", 13, func(b *builder) { b.input("x", 1, 1, 5, 5).node("AveragePool", ss("x"), ss("y")) }, nil, "kernel_shape is required"},
		{"global avg", 13, func(b *builder) { b.input("x", 2, 7, 5, 3).node("GlobalAveragePool", ss("x"), ss("y")) }, []int64{2, 7, 1, 1}, ""},
		{"global max 3d", 13, func(b *builder) { b.input("x", 2, 7, 5).node("GlobalMaxPool", ss("x"), ss("y")) }, []int64{2, 7, 1}, ""},
		{"batchnorm", 15, func(b *builder) {
			b.input("x", 2, 3, 4, 4).init("s", w(3)).init("b", w(3)).init("m", w(3)).init("v", w(3)).
				node("BatchNormalization", ss("x", "s", "b", "m", "v"), ss("y"))
		}, []int64{2, 3, 4, 4}, ""},
		{"batchnorm training", 15, func(b *builder) {
			b.input("x", 2, 3).init("s", w(3)).init("b", w(3)).init("m", w(3)).init("v", w(3)).
				node("BatchNormalization", ss("x", "s", "b", "m", "v"), ss("y"), aInt("training_mode", 1))
		}, nil, "training_mode=1"},
		{"gemm trans", 13, func(b *builder) {
			b.input("a", 4, 3).init("w", w(5, 4)).init("c", w(5)).
				node("Gemm", ss("a", "w", "c"), ss("y"), aInt("transA", 1), aInt("transB", 1))
		}, []int64{3, 5}, ""},
		{"gemm bad C", 13, func(b *builder) {
			b.input("a", 3, 4).init("w", w(4, 5)).init("c", w(3)).node("Gemm", ss("a", "w", "c"), ss("y"))
		}, nil, "C dims"},
		{"matmul batched", 13, func(b *builder) { b.input("a", 2, 1, 3, 4).input("b", 5, 4, 6).node("MatMul", ss("a", "b"), ss("y")) }, []int64{2, 5, 3, 6}, ""},
		{"matmul vec mat", 13, func(b *builder) { b.input("a", 4).input("b", 2, 4, 6).node("MatMul", ss("a", "b"), ss("y")) }, []int64{2, 6}, ""},
		{"matmul mat vec", 13, func(b *builder) { b.input("a", 3, 4).input("b", 4).node("MatMul", ss("a", "b"), ss("y")) }, []int64{3}, ""},
		{"matmul vec vec", 13, func(b *builder) { b.input("a", 4).input("b", 4).node("MatMul", ss("a", "b"), ss("y")) }, []int64{}, ""},
		{"concat", 13, func(b *builder) {
			b.input("a", 1, 2, 3).input("b", 1, 5, 3).node("Concat", ss("a", "b"), ss("y"), aInt("axis", -2))
		}, []int64{1, 7, 3}, ""},
		{"concat mismatch", 13, func(b *builder) {
			b.input("a", 1, 2, 3).input("b", 1, 5, 4).node("Concat", ss("a", "b"), ss("y"), aInt("axis", 1))
		}, nil, "do not match"},
		{"flatten", 13, func(b *builder) { b.input("x", 2, 3, 4, 5).node("Flatten", ss("x"), ss("y"), aInt("axis", 2)) }, []int64{6, 20}, ""},
		{"flatten 0", 13, func(b *builder) { b.input("x", 2, 3, 4).node("Flatten", ss("x"), ss("y"), aInt("axis", 0)) }, []int64{1, 24}, ""},
		{"reshape 0 -1", 13, func(b *builder) {
			b.input("x", 2, 3, 4).init("s", ints(0, -1)).node("Reshape", ss("x", "s"), ss("y"))
		}, []int64{2, 12}, ""},
		{"reshape allowzero", 14, func(b *builder) {
			b.input("x", 0, 3, 4).init("s", ints(3, 4, 0)).node("Reshape", ss("x", "s"), ss("y"), aInt("allowzero", 1))
		}, []int64{3, 4, 0}, ""},
		{"reshape bad", 13, func(b *builder) {
			b.input("x", 2, 3).init("s", ints(4, -1)).node("Reshape", ss("x", "s"), ss("y"))
		}, nil, "cannot reshape"},
		{"reshape two -1", 13, func(b *builder) {
			b.input("x", 2, 3).init("s", ints(-1, -1)).node("Reshape", ss("x", "s"), ss("y"))
		}, nil, "more than one -1"},
		{"transpose", 13, func(b *builder) { b.input("x", 2, 3, 4).node("Transpose", ss("x"), ss("y"), aInts("perm", 1, 2, 0)) }, []int64{3, 4, 2}, ""},
		{"transpose default", 13, func(b *builder) { b.input("x", 2, 3, 4).node("Transpose", ss("x"), ss("y")) }, []int64{4, 3, 2}, ""},
		{"transpose bad", 13, func(b *builder) { b.input("x", 2, 3).node("Transpose", ss("x"), ss("y"), aInts("perm", 0, 0)) }, nil, "not a permutation"},
		{"squeeze attr", 11, func(b *builder) { b.input("x", 1, 3, 1, 2).node("Squeeze", ss("x"), ss("y"), aInts("axes", 0, -2)) }, []int64{3, 2}, ""},
		{"squeeze input", 13, func(b *builder) { b.input("x", 1, 3, 1).init("a", ints(2)).node("Squeeze", ss("x", "a"), ss("y")) }, []int64{1, 3}, ""},
		{"squeeze all", 13, func(b *builder) { b.input("x", 1, 3, 1).node("Squeeze", ss("x"), ss("y")) }, []int64{3}, ""},
		{"squeeze not one", 13, func(b *builder) { b.input("x", 1, 3).init("a", ints(1)).node("Squeeze", ss("x", "a"), ss("y")) }, nil, "cannot squeeze"},
		{"squeeze attr at 13", 13, func(b *builder) { b.input("x", 1, 3).node("Squeeze", ss("x"), ss("y"), aInts("axes", 0)) }, nil, "not allowed at opset 13"},
		{"unsqueeze attr", 11, func(b *builder) { b.input("x", 3, 4).node("Unsqueeze", ss("x"), ss("y"), aInts("axes", 0, 3)) }, []int64{1, 3, 4, 1}, ""},
		{"unsqueeze input neg", 13, func(b *builder) { b.input("x", 3, 4).init("a", ints(-1)).node("Unsqueeze", ss("x", "a"), ss("y")) }, []int64{3, 4, 1}, ""},
		{"softmax", 11, func(b *builder) { b.input("x", 2, 3, 4).node("Softmax", ss("x"), ss("y")) }, []int64{2, 3, 4}, ""},
		{"logsoftmax bad axis", 13, func(b *builder) { b.input("x", 2, 3).node("LogSoftmax", ss("x"), ss("y"), aInt("axis", 2)) }, nil, "out of range"},
		{"lrn", 13, func(b *builder) { b.input("x", 1, 8, 4, 4).node("LRN", ss("x"), ss("y"), aInt("size", 5)) }, []int64{1, 8, 4, 4}, ""},
		{"lrn no size", 13, func(b *builder) { b.input("x", 1, 8, 4, 4).node("LRN", ss("x"), ss("y")) }, nil, "size must be set"},
		{"pad attr", 10, func(b *builder) {
			b.input("x", 1, 2, 3, 3).node("Pad", ss("x"), ss("y"), aInts("pads", 0, 0, 1, 2, 0, 0, 3, 4))
		}, []int64{1, 2, 7, 9}, ""},
		{"pad input", 13, func(b *builder) {
			b.input("x", 2, 3).init("p", ints(1, 0, 1, 2)).init("v", scalarF(1.5)).node("Pad", ss("x", "p", "v"), ss("y"))
		}, []int64{4, 5}, ""},
		{"pad reflect", 13, func(b *builder) {
			b.input("x", 2, 3).init("p", ints(1, 0, 1, 2)).node("Pad", ss("x", "p"), ss("y"), aString("mode", "reflect"))
		}, nil, `mode "reflect" not supported`},
		{"gather", 13, func(b *builder) {
			b.input("x", 5, 4, 3).constInput("i", 0, 4, -1).node("Gather", ss("x", "i"), ss("y"), aInt("axis", 0))
		}, []int64{3, 4, 3}, ""},
		{"gather out of range", 13, func(b *builder) {
			b.input("x", 5, 4).constInput("i", 4).node("Gather", ss("x", "i"), ss("y"), aInt("axis", 1))
		}, nil, "out of range"},
		{"slice inputs", 13, func(b *builder) {
			b.input("x", 20, 10, 5).init("s", ints(0, 1)).init("e", ints(3, 10)).init("a", ints(0, 1)).init("st", ints(1, 2)).
				node("Slice", ss("x", "s", "e", "a", "st"), ss("y"))
		}, []int64{3, 5, 5}, ""},
		{"slice negative clamped", 13, func(b *builder) {
			b.input("x", 20, 10, 5).init("s", ints(-1000, 1)).init("e", ints(1000, -1)).
				node("Slice", ss("x", "s", "e"), ss("y"))
		}, []int64{20, 8, 5}, ""},
		{"slice reverse", 13, func(b *builder) {
			b.input("x", 20, 10).init("s", ints(-1)).init("e", ints(-9223372036854775807)).init("a", ints(1)).init("st", ints(-1)).
				node("Slice", ss("x", "s", "e", "a", "st"), ss("y"))
		}, []int64{20, 10}, ""},
		{"slice attrs", 9, func(b *builder) {
			b.input("x", 20, 10).node("Slice", ss("x"), ss("y"), aInts("starts", 2), aInts("ends", 5), aInts("axes", 1))
		}, []int64{20, 3}, ""},
		{"slice huge steps", 13, func(b *builder) {
			b.input("x", 20, 10).init("s", ints(1, -2)).init("e", ints(20, math.MinInt64)).init("st", ints(math.MaxInt64, math.MinInt64)).
				node("Slice", ss("x", "s", "e", noAxes, "st"), ss("y"))
		}, []int64{1, 1}, ""},
		{"slice step 0", 13, func(b *builder) {
			b.input("x", 20).init("s", ints(0)).init("e", ints(3)).init("a", ints(0)).init("st", ints(0)).
				node("Slice", ss("x", "s", "e", "a", "st"), ss("y"))
		}, nil, "step 0"},
		{"reducemean", 13, func(b *builder) { b.input("x", 2, 3, 4).node("ReduceMean", ss("x"), ss("y"), aInts("axes", -1, 1)) }, []int64{2, 1, 1}, ""},
		{"reducemean nokeep", 13, func(b *builder) {
			b.input("x", 2, 3, 4).node("ReduceMean", ss("x"), ss("y"), aInts("axes", 1), aInt("keepdims", 0))
		}, []int64{2, 4}, ""},
		{"reducemean all", 13, func(b *builder) { b.input("x", 2, 3, 4).node("ReduceMean", ss("x"), ss("y"), aInt("keepdims", 0)) }, []int64{}, ""},
		{"dropout mask unused", 13, func(b *builder) {
			b.input("x", 2, 3).node("Dropout", ss("x"), ss("y0", "mask")).node("Relu", ss("y0"), ss("y"))
		}, []int64{2, 3}, ""},
		{"dropout mask used", 13, func(b *builder) {
			b.input("x", 2, 3).node("Dropout", ss("x"), ss("y0", "mask")).node("Cast", ss("mask"), ss("y"), aInt("to", 1))
		}, nil, "output \"mask\" is not supported"},
		{"unsupported op", 13, func(b *builder) { b.input("x", 2).node("NonZero", ss("x"), ss("y")) }, nil, "(NonZero): operator not supported"},
		{"unknown attribute", 13, func(b *builder) { b.input("x", 2).node("Relu", ss("x"), ss("y"), aInt("bogus", 1)) }, nil, `attribute "bogus" not supported`},
		{"cast at runtime", 13, func(b *builder) {
			b.input("x", 2).node("Cast", ss("x"), ss("c"), aInt("to", 7)).node("Cast", ss("c"), ss("y"), aInt("to", 1))
		}, []int64{2}, ""},
		{"cast to float16 at runtime", 13, func(b *builder) { b.input("x", 2).node("Cast", ss("x"), ss("y"), aInt("to", 10)) }, nil, "Cast from float32 to float16 at run time is not supported"},
		{"cast float at runtime", 13, func(b *builder) { b.input("x", 2).node("Cast", ss("x"), ss("y"), aInt("to", 1)) }, []int64{2}, ""},
		{"fold-only op at run time", 13, func(b *builder) { b.input("x", 1).node("Range", ss("x", "x", "x"), ss("y")) }, nil, "supported only on constant inputs"},
		{"neg at run time", 13, func(b *builder) { b.input("x", 2).node("Neg", ss("x"), ss("y")) }, []int64{2}, ""},
		{"fold-only chain", 13, func(b *builder) {
			b.input("x", 2, 3, 4).init("one", &onnx.Tensor{DType: onnx.Int64, Dims: []int64{1}, I64: []int64{1}}).
				node("ConstantOfShape", ss("one"), ss("z"), aTensor("value", &onnx.Tensor{DType: onnx.Int64, Dims: []int64{1}, I64: []int64{-2}})).
				node("Neg", ss("z"), ss("p")).node("Expand", ss("p", "one"), ss("e")).
				node("Shape", ss("x"), ss("s")).node("Slice", ss("s", "one", "e"), ss("tail")).
				node("Neg", ss("one"), ss("m1")).node("Concat", ss("m1", "tail"), ss("shape"), aInt("axis", 0)).
				node("Reshape", ss("x", "shape"), ss("y"))
		}, []int64{8, 3}, ""},
		{"custom domain", 13, func(b *builder) {
			b.input("x", 2).node("Relu", ss("x"), ss("y"))
			b.m.Graph.Nodes[0].Domain = "com.microsoft"
		}, nil, `domain "com.microsoft" not supported`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(tc.opset)
			tc.build(b)
			b.output("y")
			g, err := b.compile()
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("want error containing %q, got none", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "graph: ") {
					t.Fatalf("error %q; want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := g.Values["y"]
			if got == nil || !dimsEqual(got.Dims, tc.want) || got.DType != onnx.Float {
				t.Fatalf("y = %+v; want float32 %v", got, tc.want)
			}
			if !dimsEqual(g.Outputs[0].Dims, tc.want) {
				t.Fatalf("graph output dims %v; want %v", g.Outputs[0].Dims, tc.want)
			}
			checkComplete(t, g)
		})
	}
}

// checkComplete asserts the compiled graph's invariants: every value named by a node
// has exact dims, and nodes come in topological order.
func checkComplete(t *testing.T, g *onnx.Graph) {
	t.Helper()
	avail := map[string]bool{}
	for _, in := range g.Inputs {
		avail[in.Name] = true
	}
	for name := range g.Initializers {
		avail[name] = true
	}
	for name, v := range g.Values {
		if v == nil || v.Name != name || checkDims(v.Dims) != nil {
			t.Fatalf("bad value info for %q: %+v", name, v)
		}
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in == "" {
				continue
			}
			if !avail[in] {
				t.Fatalf("node %s reads %q before it is computed", n.Name, in)
			}
			if g.Values[in] == nil {
				t.Fatalf("node %s input %q has no value info", n.Name, in)
			}
		}
		for _, o := range n.Outputs {
			if g.Values[o] == nil || !runtimeType(g.Values[o].DType) {
				t.Fatalf("node %s output %q: %+v", n.Name, o, g.Values[o])
			}
			avail[o] = true
		}
	}
	for _, o := range g.Outputs {
		if !avail[o.Name] {
			t.Fatalf("graph output %q never computed", o.Name)
		}
	}
}
