package graph

import (
	"math/rand"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// compileAt compiles b with every run-time input's dim 0 set to batch.
func compileAt(t *testing.T, b *builder, batch int64) *onnx.Graph {
	t.Helper()
	for i, in := range b.m.Graph.Inputs {
		d := cloneDims(in.Dims)
		d[0] = -1 // a symbolic batch, as exporters write it
		b.m.Graph.Inputs[i].Dims = d
	}
	shapes := map[string][]int64{}
	for n, d := range b.shapes {
		d = cloneDims(d)
		d[0] = batch
		shapes[n] = d
	}
	g, err := Compile(b.m, shapes, b.consts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// splittable runs the whole proof: BatchAxes at batch, SameUpToBatch against each of subs.
func splittable(t *testing.T, b *builder, batch int64, subs ...int64) error {
	t.Helper()
	g := compileAt(t, b, batch)
	axes, err := BatchAxes(g, b.m.Opset, batch)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if err := SameUpToBatch(g, compileAt(t, b, s), axes, batch, s); err != nil {
			return err
		}
	}
	return nil
}

// TestBatchAxesAccepts: per-sample CNN and transformer-style graphs, including a
// view(x.size(0), ...) Reshape whose shape constant spells out the batch size and a
// batch that moves off axis 0 and back.
func TestBatchAxesAccepts(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	cases := map[string]*builder{
		"conv classifier": newBuilder(13).input("x", 1, 3, 8, 8).
			init("w", randTensor(r, 4, 3, 3, 3)).init("fw", randTensor(r, 5, 4)).init("fb", randTensor(r, 5)).
			node("Conv", ss("x", "w"), ss("c"), aInts("pads", 1, 1, 1, 1)).
			node("Relu", ss("c"), ss("r")).
			node("Add", ss("r", "c"), ss("s")).
			node("MaxPool", ss("s"), ss("p"), aInts("kernel_shape", 2, 2)).
			node("GlobalAveragePool", ss("p"), ss("g")).
			node("Flatten", ss("g"), ss("f")).
			node("Gemm", ss("f", "fw", "fb"), ss("y"), aInt("transB", 1)).
			node("Softmax", ss("y"), ss("z"), aInt("axis", 1)).
			output("z"),
		"view by size(0)": newBuilder(13).input("x", 1, 4, 2, 2).
			node("Shape", ss("x"), ss("sh")).
			init("zero", ints(0)).
			node("Gather", ss("sh", "zero"), ss("n")).
			init("rest", ints(2, 2, 4)).
			node("Concat", ss("n", "rest"), ss("shape"), aInt("axis", 0)).
			node("Reshape", ss("x", "shape"), ss("v")).
			node("Transpose", ss("v"), ss("tr"), aInts("perm", 0, 2, 1, 3)).
			init("flat", ints(0, -1)).
			node("Reshape", ss("tr", "flat"), ss("y")).
			output("y"),
		"batch off axis 0 and back": newBuilder(17).input("x", 1, 6, 4).
			init("w", randTensor(r, 4, 3)).
			node("Transpose", ss("x"), ss("t"), aInts("perm", 1, 0, 2)).
			node("MatMul", ss("t", "w"), ss("m")).
			node("ReduceMean", ss("m"), ss("rm"), aInts("axes", 0), aInt("keepdims", 0)).
			node("LayerNormalization", ss("m", "g"), ss("ln"), aInt("axis", -1)).
			init("g", randTensor(r, 3)).
			node("Transpose", ss("ln"), ss("y"), aInts("perm", 1, 0, 2)).
			output("y", "rm"),
		"attention-like": newBuilder(13).input("x", 1, 5, 4).
			node("Transpose", ss("x"), ss("xt"), aInts("perm", 0, 2, 1)).
			node("MatMul", ss("x", "xt"), ss("s")).
			node("Softmax", ss("s"), ss("p"), aInt("axis", -1)).
			node("MatMul", ss("p", "x"), ss("y")).
			output("y"),
		"split and slice": newBuilder(13).input("x", 1, 4, 6).
			node("Split", ss("x"), ss("a", "b"), aInt("axis", 1)).
			init("st", ints(1)).init("en", ints(5)).init("ax", ints(2)).
			node("Slice", ss("a", "st", "en", "ax"), ss("sa")).
			node("Slice", ss("b", "st", "en", "ax"), ss("sb")).
			node("Concat", ss("sa", "sb"), ss("y"), aInt("axis", 2)).
			output("y"),
	}
	for name, b := range cases {
		if err := splittable(t, b, 4, 2, 1, 3); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestBatchAxesRefuses: graphs that mix samples, or compute them differently at another
// batch size, are not split; the error names the reason.
func TestBatchAxesRefuses(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	cases := []struct {
		name, want string
		b          *builder
	}{
		{"reshape folding the batch into features", "mixes the batch", newBuilder(13).input("x", 1, 3, 4).
			init("shape", ints(2, -1)).
			node("Reshape", ss("x", "shape"), ss("y")).output("y")},
		{"ReduceMean over axis 0", "reduces over the batch", newBuilder(13).input("x", 1, 3).
			node("ReduceMean", ss("x"), ss("m"), aInts("axes", 0)).
			node("Sub", ss("x", "m"), ss("y")).output("y")},
		{"Concat on axis 0", "concatenates along the batch", newBuilder(13).input("x", 1, 3).
			node("Concat", ss("x", "x"), ss("c"), aInt("axis", 0)).
			init("st", ints(0)).init("en", ints(1)).init("ax", ints(0)).
			node("Slice", ss("c", "st", "en", "ax"), ss("y")).output("y")},
		{"MatMul with the batch on B", "matrix axis", newBuilder(13).input("x", 1, 3).
			init("w", randTensor(r, 5, 4)).
			node("MatMul", ss("w", "x"), ss("m")).
			node("Transpose", ss("m"), ss("y")).output("y")},
		{"Gemm reducing over the batch", "reduction axis", newBuilder(13).input("x", 1, 3).
			init("w", randTensor(r, 4, 2)).
			node("Gemm", ss("x", "w"), ss("y"), aInt("transA", 1)).output("y")},
		{"constant with the batch's extent", "differs along the batch axis", newBuilder(13).input("x", 1, 3).
			init("c", randTensor(r, 4, 3)).
			node("Add", ss("x", "c"), ss("y")).output("y")},
		{"Softmax over the batch", "normalizes across the batch", newBuilder(13).input("x", 1, 3).
			node("Softmax", ss("x"), ss("y"), aInt("axis", 0)).output("y")},
		{"old Softmax flattening the batch in", "normalizes across the batch", newBuilder(11).input("x", 1, 3).
			node("Softmax", ss("x"), ss("y"), aInt("axis", 0)).output("y")},
		{"output with the batch on axis 1", "axis 0", newBuilder(13).input("x", 1, 3).
			node("Transpose", ss("x"), ss("y")).output("y")},
		{"CumSum along the batch", "runs along the batch", newBuilder(13).input("x", 1, 3).
			init("axis", &onnx.Tensor{DType: onnx.Int64, Dims: []int64{}, I64: []int64{0}}).
			node("CumSum", ss("x", "axis"), ss("y")).output("y")},
		{"Gather along the batch", "gathers along the batch", newBuilder(13).input("x", 1, 3).
			init("i", ints(1, 0, 3, 2)).
			node("Gather", ss("x", "i"), ss("y")).output("y")},
		{"Pad on the batch axis", "may touch the batch", newBuilder(13).input("x", 1, 3).
			init("pads", ints(1, 0, 0, 0)).
			node("Pad", ss("x", "pads"), ss("y")).output("y")},
		{"unknown op", "not known", newBuilder(13).input("x", 1, 3).
			node("Einsum", ss("x"), ss("y"), aString("equation", "ij->ji")).
			node("Transpose", ss("y"), ss("z")).output("z")},
		{"divided by the batch size", "constant", newBuilder(13).input("x", 1, 3).
			node("Shape", ss("x"), ss("sh")).
			init("zero", ints(0)).
			node("Gather", ss("sh", "zero"), ss("n")).
			node("Cast", ss("n"), ss("nf"), aInt("to", int64(onnx.Float))).
			node("Div", ss("x", "nf"), ss("y")).output("y")},
		{"batch-sized Expand", "carry the batch differently", newBuilder(13).input("x", 1, 1, 3).
			node("Shape", ss("x"), ss("sh")).
			init("c", randTensor(r, 1, 2, 1)).
			node("Expand", ss("c", "sh"), ss("e")).
			node("Concat", ss("e", "x"), ss("y"), aInt("axis", 1)).output("y")},
	}
	for _, c := range cases {
		err := splittable(t, c.b, 4, 2, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestBatchAxesNeedsTwo: with a batch of one, a dim of 1 cannot be told from the batch.
func TestBatchAxesNeedsTwo(t *testing.T) {
	g := compileAt(t, newBuilder(13).input("x", 1, 3).node("Relu", ss("x"), ss("y")).output("y"), 1)
	if _, err := BatchAxes(g, 13, 1); err == nil {
		t.Fatal("batch 1 accepted")
	}
}
