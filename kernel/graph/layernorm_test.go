package graph

import (
	"math/rand"
	"testing"
)

// lnDecomposition builds torch's pre-opset-17 layer norm of x (2, 5, 8) over the last
// axis, with extra readers where asked.
func lnDecomposition(b *builder, gammaDims []int64, leakD bool) *builder {
	r := rand.New(rand.NewSource(1))
	b.input("x", 2, 5, 8).init("two", scalarF(2)).init("eps", scalarF(1e-5)).
		init("g", randTensor(r, gammaDims...)).init("b", randTensor(r, 8)).
		node("ReduceMean", ss("x"), ss("m"), aInts("axes", -1)).
		node("Sub", ss("x", "m"), ss("d")).
		node("Pow", ss("d", "two"), ss("p")).
		node("ReduceMean", ss("p"), ss("v"), aInts("axes", -1)).
		node("Add", ss("v", "eps"), ss("ve")).
		node("Sqrt", ss("ve"), ss("s")).
		node("Div", ss("d", "s"), ss("n")).
		node("Mul", ss("n", "g"), ss("gn")).
		node("Add", ss("gn", "b"), ss("y"))
	if leakD {
		b.node("Relu", ss("d"), ss("r")).output("r")
	}
	return b.output("y")
}

func countOps(t *testing.T, b *builder) map[string]int {
	t.Helper()
	g, err := b.compile()
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, g)
	ops := map[string]int{}
	for _, n := range g.Nodes {
		ops[n.OpType]++
	}
	return ops
}

func TestFuseLayerNorm(t *testing.T) {
	ops := countOps(t, lnDecomposition(newBuilder(13), []int64{8}, false))
	if ops["LayerNormalization"] != 1 || len(ops) != 1 {
		t.Errorf("fused graph has %v; want one LayerNormalization", ops)
	}
	ops = countOps(t, lnDecomposition(newBuilder(13), []int64{1, 1, 8}, false))
	if ops["LayerNormalization"] != 1 || len(ops) != 1 {
		t.Errorf("gamma with leading 1s: %v; want one LayerNormalization", ops)
	}
	// d read by a third node: nothing may be fused away
	ops = countOps(t, lnDecomposition(newBuilder(13), []int64{8}, true))
	if ops["LayerNormalization"] != 0 || ops["ReduceMean"] != 2 {
		t.Errorf("with another reader of x - mean: %v; want the decomposition kept", ops)
	}
	// gamma over two axes while the mean is over one: Mul stays, the rest fuses
	ops = countOps(t, lnDecomposition(newBuilder(13), []int64{5, 8}, false))
	if ops["LayerNormalization"] != 1 || ops["Mul"] != 1 || ops["Add"] != 1 {
		t.Errorf("gamma of other dims: %v; want LayerNormalization, Mul, Add", ops)
	}
}
