package graph

import (
	"math"
	"math/rand"
	"testing"
)

// geluErf builds (x * (Erf(x / √2) + 1)) * 0.5 on x (2, 8); halfFirst writes
// (x * 0.5) * (Erf(x * (1/√2)) + 1) instead.
func geluErf(b *builder, halfFirst, leak bool) *builder {
	b.input("x", 2, 8).init("sqrt2", scalarF(math.Sqrt2)).init("isqrt2", scalarF(1/math.Sqrt2)).
		init("one", scalarF(1)).init("half", scalarF(0.5))
	if halfFirst {
		b.node("Mul", ss("x", "isqrt2"), ss("s")).
			node("Erf", ss("s"), ss("e")).node("Add", ss("one", "e"), ss("a")).
			node("Mul", ss("x", "half"), ss("h")).node("Mul", ss("h", "a"), ss("y"))
	} else {
		b.node("Div", ss("x", "sqrt2"), ss("s")).
			node("Erf", ss("s"), ss("e")).node("Add", ss("e", "one"), ss("a")).
			node("Mul", ss("x", "a"), ss("m")).node("Mul", ss("m", "half"), ss("y"))
	}
	if leak {
		b.node("Relu", ss("e"), ss("r")).output("r")
	}
	return b.output("y")
}

// geluTanh builds torch's tanh-approximation export on x (2, 8).
func geluTanh(b *builder) *builder {
	return b.input("x", 2, 8).init("beta", scalarF(geluBeta)).init("kappa", scalarF(geluKappa)).
		init("one", scalarF(1)).init("half", scalarF(0.5)).
		node("Mul", ss("x", "x"), ss("x2")).node("Mul", ss("x", "x2"), ss("x3")).
		node("Mul", ss("kappa", "x3"), ss("k")).node("Add", ss("x", "k"), ss("s")).
		node("Mul", ss("beta", "s"), ss("in")).node("Tanh", ss("in"), ss("t")).
		node("Add", ss("one", "t"), ss("a")).node("Mul", ss("x", "a"), ss("m")).
		node("Mul", ss("half", "m"), ss("y")).output("y")
}

func TestFuseGelu(t *testing.T) {
	for name, b := range map[string]*builder{
		"erf":            geluErf(newBuilder(13), false, false),
		"erf half first": geluErf(newBuilder(13), true, false),
		"tanh":           geluTanh(newBuilder(13)),
	} {
		ops := countOps(t, b)
		if ops["Gelu"] != 1 || len(ops) != 1 {
			t.Errorf("%s: fused graph has %v; want one Gelu", name, ops)
		}
	}
	g, err := geluTanh(newBuilder(13)).compile()
	if err != nil {
		t.Fatal(err)
	}
	if a := g.Nodes[0].Attrs["approximate"]; a == nil || a.S != "tanh" {
		t.Errorf("tanh form fused with approximate %v", a)
	}
	// Erf's output read elsewhere: nothing fused
	if ops := countOps(t, geluErf(newBuilder(13), false, true)); ops["Gelu"] != 0 || ops["Erf"] != 1 {
		t.Errorf("with another reader of Erf: %v; want the chain kept", ops)
	}
}

// attention builds softmax(Q Kt * scale [+ mask]) V with Q, V (2, 3, 5, 4) and Kt
// (2, 3, 4, 5), Q divided by a constant first.
func attention(b *builder, mask, leak bool) *builder {
	r := rand.New(rand.NewSource(2))
	b.input("q", 2, 3, 5, 4).input("kt", 2, 3, 4, 5).input("v", 2, 3, 5, 4).
		init("c", scalarF(2)).init("s", scalarF(0.5)).init("m", randTensor(r, 2, 1, 1, 5)).
		node("Div", ss("q", "c"), ss("qs")).
		node("MatMul", ss("qs", "kt"), ss("sc")).
		node("Mul", ss("sc", "s"), ss("sc2"))
	in := "sc2"
	if mask {
		b.node("Add", ss("sc2", "m"), ss("sm"))
		in = "sm"
	}
	b.node("Softmax", ss(in), ss("p"), aInt("axis", -1)).node("MatMul", ss("p", "v"), ss("y"))
	if leak {
		b.output("p")
	}
	return b.output("y")
}

func TestFuseAttention(t *testing.T) {
	for _, mask := range []bool{false, true} {
		b := attention(newBuilder(13), mask, false)
		g, err := b.compile()
		if err != nil {
			t.Fatal(err)
		}
		checkComplete(t, g)
		if len(g.Nodes) != 1 || g.Nodes[0].OpType != AttentionOp {
			t.Fatalf("mask %v: fused graph has %d nodes, first %s; want one %s", mask, len(g.Nodes), g.Nodes[0].OpType, AttentionOp)
		}
		n := g.Nodes[0]
		if want := 3 + btoi(mask); len(n.Inputs) != want || n.Attrs["scale"].F != 0.25 {
			t.Errorf("mask %v: inputs %v scale %v; want %d inputs, scale 0.25", mask, n.Inputs, n.Attrs["scale"].F, want)
		}
	}
	// the probabilities are an output too: nothing fused
	if ops := countOps(t, attention(newBuilder(13), true, true)); ops[AttentionOp] != 0 || ops["Softmax"] != 1 {
		t.Errorf("with the softmax read elsewhere: %v; want the ops kept", ops)
	}
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}
