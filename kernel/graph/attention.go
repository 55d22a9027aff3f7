package graph

import (
	"math"
	"os"

	"idunno/kernel/onnx"
)

// Fusions for transformers (inference graphs only).
//
// GELU: exporters before opset 20 write GELU as element-wise ops,
//
//	erf form:  y = (x * (Erf(x / √2) + 1)) * 0.5   (x / √2 may be x * (1/√2); * 0.5 may come first)
//	tanh form: y = 0.5 * (x * (1 + Tanh(√(2/π) * (x + 0.044715 * (x * (x * x))))))
//
// and fuseGelu replaces each chain with one Gelu node (approximate "none" or "tanh").
//
// Attention: the scaled dot-product attention of nn.MultiheadAttention and BERT-style
// encoders,
//
//	O = MatMul(Softmax(MatMul(Q [* or / c], Kt) [* or / c'] [+ M], axis=-1), V)
//
// with Q (…, L, d), Kt (…, d, S), V (…, S, d) of equal batch dims, c and c' constant
// scalars and M a float mask broadcasting to (…, L, S), becomes one node
// AttentionOp(Q, Kt, V[, M]) with attribute "scale" (the product of the scalars): the
// kernel runs it row by row without writing the L x S scores out. Every intermediate must
// have no other reader and not be a graph output; otherwise the ops stay as they are.

// AttentionOp is the op type of a fused attention node (domain "", internal to IDunno).
const AttentionOp = "IdunnoAttention"

const (
	sqrt2     = 1.4142135623730951
	geluBeta  = 0.7978845608028654 // √(2/π)
	geluKappa = 0.044715
)

// near reports whether a float32 constant holds v to float32 precision.
func near(got float32, v float64) bool { return math.Abs(float64(got)-v) <= 1e-6*math.Abs(v)+1e-7 }

// other returns the input of a two-input node that is not name, or "".
func other(n *onnx.Node, name string) string {
	switch {
	case len(n.Inputs) != 2:
		return ""
	case n.Inputs[0] == name:
		return n.Inputs[1]
	case n.Inputs[1] == name:
		return n.Inputs[0]
	}
	return ""
}

// NoFusionEnv names the environment variable that, set to 1, turns the transformer
// fusions off (to measure what they gain: `IDUNNO_NO_TRANSFORMER_FUSION=1 idunno bench kernel`).
const NoFusionEnv = "IDUNNO_NO_TRANSFORMER_FUSION"

func (c *compiler) fuseTransformer() {
	if os.Getenv(NoFusionEnv) == "1" {
		return
	}
	c.fuseGelu()
	c.fuseAttention()
}

func (c *compiler) fuseGelu() {
	ix := c.index()
	only := func(v, op string) *onnx.Node {
		if c.outputs[v] {
			return nil
		}
		n := ix.onlyReader(v)
		if n == nil || n.OpType != op || ix.dead[n] {
			return nil
		}
		return n
	}
	isConst := func(name string, v float64) bool {
		f, ok := c.scalarConst(name)
		return ok && near(f, v)
	}
	// tail matches "(x * a) * 0.5" or "x * (a * 0.5)" or "(x * 0.5) * a" from a, the
	// (1 + erf/tanh) value, whose other readers are none; returns the last node.
	tail := func(x, a string, chain []*onnx.Node) (*onnx.Node, []*onnx.Node) {
		m := only(a, "Mul")
		if m == nil {
			return nil, nil
		}
		o := other(m, a)
		if o == x {
			h := only(m.Outputs[0], "Mul")
			if h == nil || !isConst(other(h, m.Outputs[0]), 0.5) {
				return nil, nil
			}
			return h, append(chain, m, h)
		}
		// o is 0.5 * x (read by x's chain only here)
		p := ix.producer[o]
		if p == nil || p.OpType != "Mul" || ix.uses(o) != 1 || c.outputs[o] || other(p, x) == "" ||
			!isConst(other(p, x), 0.5) {
			return nil, nil
		}
		return m, append(chain, p, m)
	}
	for _, n := range c.nodes {
		if ix.dead[n] {
			continue
		}
		var x string
		var chain []*onnx.Node
		var last *onnx.Node
		approx := "none"
		switch n.OpType {
		case "Erf":
			in := ix.producer[n.Inputs[0]]
			if in == nil || ix.uses(n.Inputs[0]) != 1 || c.outputs[n.Inputs[0]] || len(in.Inputs) != 2 {
				continue
			}
			switch {
			case in.OpType == "Div" && isConst(in.Inputs[1], sqrt2):
				x = in.Inputs[0]
			case in.OpType == "Mul" && isConst(in.Inputs[1], 1/sqrt2):
				x = in.Inputs[0]
			case in.OpType == "Mul" && isConst(in.Inputs[0], 1/sqrt2):
				x = in.Inputs[1]
			default:
				continue
			}
			add := only(n.Outputs[0], "Add")
			if add == nil || !isConst(other(add, n.Outputs[0]), 1) {
				continue
			}
			last, chain = tail(x, add.Outputs[0], []*onnx.Node{in, n, add})
		case "Tanh":
			// inner = beta * (x + kappa * (x * (x * x)))
			mb := ix.producer[n.Inputs[0]]
			if mb == nil || mb.OpType != "Mul" || ix.uses(n.Inputs[0]) != 1 || c.outputs[n.Inputs[0]] {
				continue
			}
			var sum string
			switch {
			case isConst(mb.Inputs[0], geluBeta):
				sum = mb.Inputs[1]
			case isConst(mb.Inputs[1], geluBeta):
				sum = mb.Inputs[0]
			default:
				continue
			}
			ad := ix.producer[sum]
			if ad == nil || ad.OpType != "Add" || ix.uses(sum) != 1 || c.outputs[sum] {
				continue
			}
			matched := false
			for k := 0; k < 2 && !matched; k++ {
				xx, mk := ad.Inputs[k], ad.Inputs[1-k]
				mkn := ix.producer[mk]
				if mkn == nil || mkn.OpType != "Mul" || ix.uses(mk) != 1 || c.outputs[mk] {
					continue
				}
				cube := ""
				for q := 0; q < 2; q++ {
					if isConst(mkn.Inputs[q], geluKappa) {
						cube = mkn.Inputs[1-q]
					}
				}
				cn := ix.producer[cube]
				if cube == "" || cn == nil || cn.OpType != "Mul" || ix.uses(cube) != 1 || c.outputs[cube] {
					continue
				}
				sq := other(cn, xx)
				sn := ix.producer[sq]
				if sq == "" || sn == nil || sn.OpType != "Mul" || sn.Inputs[0] != xx || sn.Inputs[1] != xx ||
					ix.uses(sq) != 1 || c.outputs[sq] {
					continue
				}
				x, matched = xx, true
				chain = []*onnx.Node{sn, cn, mkn, ad, mb, n}
			}
			if !matched {
				continue
			}
			add := only(n.Outputs[0], "Add")
			if add == nil || !isConst(other(add, n.Outputs[0]), 1) {
				continue
			}
			last, chain = tail(x, add.Outputs[0], append(chain, add))
			approx = "tanh"
		default:
			continue
		}
		xv := c.vals[x]
		if last == nil || xv == nil || xv.DType != onnx.Float || c.consts[x] != nil {
			continue
		}
		g := &onnx.Node{Name: c.fresh(n.Name + "_gelu"), OpType: "Gelu", Inputs: []string{x},
			Outputs: []string{last.Outputs[0]}, Attrs: map[string]*onnx.Attribute{
				"approximate": {Name: "approximate", Type: onnx.AttrString, S: approx}}}
		c.replaceChain(ix, chain, last, g)
	}
	c.compact(ix)
}

// replaceChain kills chain and puts fused in the place of last.
func (c *compiler) replaceChain(ix *graphIndex, chain []*onnx.Node, last, fused *onnx.Node) {
	for _, n := range chain {
		ix.kill(n)
	}
	for i, n := range c.nodes {
		if n == last {
			c.nodes[i] = fused
		}
	}
	ix.producer[fused.Outputs[0]] = fused
	for _, in := range fused.Inputs {
		if c.consts[in] == nil {
			ix.addReader(in, fused)
		}
	}
}

func (c *compiler) fuseAttention() {
	ix := c.index()
	only := func(v string) *onnx.Node {
		if c.outputs[v] {
			return nil
		}
		n := ix.onlyReader(v)
		if n == nil || ix.dead[n] {
			return nil
		}
		return n
	}
	// scaleOf reads a Mul or Div of v by a constant scalar: the factor.
	scaleOf := func(n *onnx.Node, v string) (float64, bool) {
		if n == nil || len(n.Inputs) != 2 {
			return 0, false
		}
		switch {
		case n.OpType == "Mul" && n.Inputs[0] == v:
			f, ok := c.scalarConst(n.Inputs[1])
			return float64(f), ok
		case n.OpType == "Mul" && n.Inputs[1] == v:
			f, ok := c.scalarConst(n.Inputs[0])
			return float64(f), ok
		case n.OpType == "Div" && n.Inputs[0] == v:
			f, ok := c.scalarConst(n.Inputs[1])
			return 1 / float64(f), ok && f != 0
		}
		return 0, false
	}
	for _, mm := range c.nodes {
		if mm.OpType != "MatMul" || ix.dead[mm] || len(mm.Attrs) != 0 {
			continue
		}
		q, kt := mm.Inputs[0], mm.Inputs[1]
		qv, kv := c.vals[q], c.vals[kt]
		if qv == nil || kv == nil || c.consts[q] != nil || c.consts[kt] != nil || len(qv.Dims) < 3 ||
			len(kv.Dims) != len(qv.Dims) || qv.DType != onnx.Float {
			continue
		}
		r := len(qv.Dims)
		if !dimsEqual(qv.Dims[:r-2], kv.Dims[:r-2]) || qv.Dims[r-1] != kv.Dims[r-2] {
			continue
		}
		chain := []*onnx.Node{mm}
		scale := 1.0
		// a scalar scale of Q read only here
		if p := ix.producer[q]; p != nil && ix.uses(q) == 1 && !c.outputs[q] && len(p.Inputs) == 2 {
			for _, in := range p.Inputs {
				if f, ok := scaleOf(p, in); ok && c.consts[in] == nil {
					scale *= f
					q = in
					chain = append(chain, p)
					break
				}
			}
		}
		cur := mm.Outputs[0]
		next := only(cur)
		if f, ok := scaleOf(next, cur); ok {
			scale *= f
			chain = append(chain, next)
			cur = next.Outputs[0]
			next = only(cur)
		}
		mask := ""
		if next != nil && next.OpType == "Add" && len(next.Inputs) == 2 {
			m := other(next, cur)
			mv := c.vals[m]
			if m == "" || m == cur || mv == nil || mv.DType != onnx.Float || len(mv.Dims) > r {
				continue
			}
			if out, err := broadcast(mv.Dims, c.vals[cur].Dims); err != nil || !dimsEqual(out, c.vals[cur].Dims) {
				continue
			}
			mask = m
			chain = append(chain, next)
			cur = next.Outputs[0]
			next = only(cur)
		}
		if next == nil || next.OpType != "Softmax" {
			continue
		}
		if a, ok := next.Attrs["axis"]; !ok && c.opset < 13 || ok && a.I != -1 && a.I != int64(r-1) {
			continue
		}
		chain = append(chain, next)
		cur = next.Outputs[0]
		pv := only(cur)
		if pv == nil || pv.OpType != "MatMul" || pv.Inputs[0] != cur || len(pv.Attrs) != 0 {
			continue
		}
		v := pv.Inputs[1]
		vv := c.vals[v]
		if vv == nil || c.consts[v] != nil || len(vv.Dims) != r || !dimsEqual(vv.Dims[:r-2], qv.Dims[:r-2]) ||
			vv.Dims[r-2] != kv.Dims[r-1] {
			continue
		}
		chain = append(chain, pv)
		ins := []string{q, kt, v}
		if mask != "" {
			ins = append(ins, mask)
		}
		at := &onnx.Node{Name: c.fresh(mm.Name + "_attention"), OpType: AttentionOp, Inputs: ins,
			Outputs: []string{pv.Outputs[0]}, Attrs: map[string]*onnx.Attribute{
				"scale": {Name: "scale", Type: onnx.AttrFloat, F: float32(scale)}}}
		c.replaceChain(ix, chain, pv, at)
	}
	c.compact(ix)
}
