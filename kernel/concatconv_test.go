package kernel

import (
	"fmt"
	"math"
	"testing"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// fireGraph is two SqueezeNet-like fire modules: a 1x1 and a 3x3 expansion concatenated
// and read by a 1x1 squeeze convolution, then three expansions concatenated and read by a
// max pool before a 3x3 convolution (graph.Options.ConcatConv rewrites both), and a
// concatenation with two readers, which it leaves alone.
func fireGraph() *catGraph {
	c := newCatGraph("x", -1, 16, 27, 27)
	relu := func(s string) string { return c.node("Relu", s+".r", nil, s) }
	a := relu(c.conv("a", "x", 16, 32, 1))
	b := relu(c.conv("b", "x", 16, 48, 3))
	s := relu(c.conv("s", c.concat("c1", 1, a, b), 80, 16, 1))
	a2 := relu(c.conv("a2", s, 16, 16, 1))
	b2 := relu(c.conv("b2", s, 16, 32, 3))
	e2 := c.conv("e2", s, 16, 8, 3)
	p := c.node("MaxPool", "p", map[string]*onnx.Attribute{
		"kernel_shape": {Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{3, 3}},
		"strides":      {Name: "strides", Type: onnx.AttrInts, Ints: []int64{2, 2}},
	}, c.concat("c2", -3, a2, b2, e2))
	y := relu(c.conv("y", p, 56, 24, 3))
	c3 := c.concat("c3", 1, y, y)
	z := c.conv("z", c3, 48, 8, 1)
	c.outputs(z, c3)
	return c
}

// TestConcatConv: at batch 2 and 3 on two threads (split into sub-batches of 1 and 2 for
// batch 3, so a sub-batch of 1 must take the whole batch's graph), the rewritten graph
// gives the outputs of the one with its concatenations (IDK_CONCAT_CONV=0) to 1e-5
// relative (the convolutions sum the input channels in another order: not the same bits),
// the same bytes on a second run (runCat), and at batch 1, where nothing is rewritten, the
// same bits.
func TestConcatConv(t *testing.T) {
	c := fireGraph()
	m := &onnx.Model{IRVersion: 8, Opset: 13, Graph: c.g}
	for _, n := range []int64{1, 2, 3} {
		t.Run(fmt.Sprintf("batch%d", n), func(t *testing.T) {
			g, err := graph.CompileWith(m, map[string][]int64{"x": {n, 16, 27, 27}}, nil, graph.Options{ConcatConv: n >= 2})
			if err != nil {
				t.Fatal(err)
			}
			cats := 0
			for _, nd := range g.Nodes {
				if nd.OpType == "Concat" {
					cats++
				}
			}
			if want := map[bool]int{true: 1, false: 3}[n >= 2]; cats != want {
				t.Fatalf("%d concatenations left, want %d", cats, want)
			}
			x := seeded(7, n, 16, 27, 27)
			t.Setenv(ConcatConvEnv, "0")
			ref := runCat(t, c, x)
			t.Setenv(ConcatConvEnv, "")
			got := runCat(t, c, x)
			for i, name := range []string{"z", "c3"} {
				if n == 1 {
					for j := range ref[i] {
						if math.Float32bits(ref[i][j]) != math.Float32bits(got[i][j]) {
							t.Fatalf("%s element %d: %v, %v with the switch off", name, j, got[i][j], ref[i][j])
						}
					}
					continue
				}
				checkClose(t, name, ref[i], got[i], 1e-5)
			}
		})
	}
	// the sub-batches of 2 and 1 passed the proof with the rewritten graph: batch 3 split
	md, err := LoadModel(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	if _, err := md.Run([]*onnx.Tensor{seeded(7, 3, 16, 27, 27)}); err != nil {
		t.Fatal(err)
	}
	if rows, ok := splitOf(md, 3); !ok || len(rows) != 2 {
		t.Fatalf("batch 3 runs as %v (%v), want two sub-batches", rows, ok)
	}
}

// TestConcatConvSqueezeNet: SqueezeNet at 224x224 and batch 2, every fire module's
// concatenation rewritten, gives the logits of the plan with them (IDK_CONCAT_CONV=0) to
// 1e-5 relative, and the same bytes on a second run.
func TestConcatConvSqueezeNet(t *testing.T) {
	if testing.Short() {
		t.Skip("SqueezeNet at 224x224")
	}
	m, err := zoo.Build("squeezenet", zoo.Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	in := seeded(13, 2, 3, 224, 224)
	t.Setenv(ConcatConvEnv, "0")
	ref := logits(t, m, in)
	t.Setenv(ConcatConvEnv, "")
	got := logits(t, m, in)
	again := logits(t, m, in)
	checkClose(t, "logits", ref, got, 1e-5)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(again[i]) {
			t.Fatalf("logit %d: %v, then %v", i, got[i], again[i])
		}
	}
}
