package graph

import (
	"idunno/kernel/onnx"
)

// fuseLayerNorm replaces the decomposition exporters write for layer normalization
// before opset 17,
//
//	m = ReduceMean(x, trailing axes); d = Sub(x, m); v = ReduceMean(Pow(d, 2), same axes)
//	y = Div(d, Sqrt(Add(v, eps))) [; y = Mul(y, gamma)] [; y = Add(y, beta)]
//
// with one LayerNormalization node (oneDNN's primitive), when every intermediate has no
// other reader, eps is a constant scalar and gamma and beta are constants of the
// normalised dims (leading 1s allowed). Anything else is left as it is: the unfused ops
// compute the same values.
func (c *compiler) fuseLayerNorm() {
	ix := c.index()
	only := func(v string, op string) *onnx.Node {
		if c.outputs[v] {
			return nil
		}
		n := ix.onlyReader(v)
		if n == nil || n.OpType != op || ix.dead[n] {
			return nil
		}
		return n
	}
	for _, mean := range c.nodes {
		if mean.OpType != "ReduceMean" || ix.dead[mean] || len(mean.Inputs) != 1 {
			continue
		}
		x := mean.Inputs[0]
		xv := c.vals[x]
		if xv == nil || xv.DType != onnx.Float || c.consts[x] != nil {
			continue
		}
		axis, ok := c.trailingAxes(mean, len(xv.Dims))
		if !ok {
			continue
		}
		sub := only(mean.Outputs[0], "Sub")
		if sub == nil || sub.Inputs[0] != x || sub.Inputs[1] != mean.Outputs[0] {
			continue
		}
		d := sub.Outputs[0]
		if c.outputs[d] || ix.uses(d) != 2 {
			continue
		}
		var pow, div *onnx.Node
		for n := range ix.readers[d] {
			switch {
			case n.OpType == "Pow" && n.Inputs[0] == d:
				pow = n
			case n.OpType == "Div" && n.Inputs[0] == d:
				div = n
			}
		}
		if pow == nil || div == nil || !c.constIs(pow.Inputs[1], 2) {
			continue
		}
		mean2 := only(pow.Outputs[0], "ReduceMean")
		if mean2 == nil || len(mean2.Inputs) != 1 {
			continue
		}
		if a2, ok := c.trailingAxes(mean2, len(xv.Dims)); !ok || a2 != axis {
			continue
		}
		add := only(mean2.Outputs[0], "Add")
		if add == nil || add.Inputs[0] != mean2.Outputs[0] {
			continue
		}
		eps, ok := c.scalarConst(add.Inputs[1])
		if !ok || !(eps > 0) {
			continue
		}
		sqrt := only(add.Outputs[0], "Sqrt")
		if sqrt == nil || div.Inputs[1] != sqrt.Outputs[0] || ix.uses(sqrt.Outputs[0]) != 1 || c.outputs[sqrt.Outputs[0]] {
			continue
		}
		norm := xv.Dims[axis:]
		chain := []*onnx.Node{mean, sub, pow, mean2, add, sqrt, div}
		last := div
		gamma, beta := "", ""
		if mul := only(div.Outputs[0], "Mul"); mul != nil {
			if g := c.paramConst(mul.Inputs[1], norm); g != "" && mul.Inputs[0] == div.Outputs[0] {
				gamma, last = g, mul
				chain = append(chain, mul)
				if ad := only(mul.Outputs[0], "Add"); ad != nil && ad.Inputs[0] == mul.Outputs[0] {
					if b := c.paramConst(ad.Inputs[1], norm); b != "" {
						beta, last = b, ad
						chain = append(chain, ad)
					}
				}
			}
		}
		if gamma == "" {
			gamma = c.newConst("layernorm_ones", fill(norm, 1))
		}
		ins := []string{x, gamma}
		if beta != "" {
			ins = append(ins, beta)
		}
		ln := &onnx.Node{Name: c.fresh(mean.Name + "_layernorm"), OpType: "LayerNormalization", Inputs: ins,
			Outputs: []string{last.Outputs[0]}, Attrs: map[string]*onnx.Attribute{}}
		ln.Attrs["axis"] = &onnx.Attribute{Name: "axis", Type: onnx.AttrInt, I: int64(axis)}
		ln.Attrs["epsilon"] = &onnx.Attribute{Name: "epsilon", Type: onnx.AttrFloat, F: eps}
		for _, n := range chain {
			ix.kill(n)
		}
		// the fused node takes the place of the last node of the chain
		for i, n := range c.nodes {
			if n == last {
				c.nodes[i] = ln
			}
		}
		ix.producer[ln.Outputs[0]] = ln
		for _, in := range ins {
			if c.consts[in] == nil {
				ix.addReader(in, ln)
			}
		}
	}
	c.compact(ix)
}

// trailingAxes returns the first axis of a ReduceMean that reduces a run of trailing
// axes with keepdims=1.
func (c *compiler) trailingAxes(n *onnx.Node, rank int) (int, bool) {
	if k, ok := n.Attrs["keepdims"]; ok && k.I != 1 {
		return 0, false
	}
	a, ok := n.Attrs["axes"]
	if !ok || len(a.Ints) == 0 || rank == 0 {
		return 0, false
	}
	seen := make([]bool, rank)
	lo := rank
	for _, v := range a.Ints {
		i, err := normAxis(v, rank)
		if err != nil || seen[i] {
			return 0, false
		}
		seen[i] = true
		lo = min(lo, i)
	}
	for i := lo; i < rank; i++ {
		if !seen[i] {
			return 0, false
		}
	}
	return lo, true
}

func (c *compiler) scalarConst(name string) (float32, bool) {
	t := c.consts[name]
	if t == nil || t.DType != onnx.Float || len(t.F32) != 1 {
		return 0, false
	}
	return t.F32[0], true
}

func (c *compiler) constIs(name string, v float32) bool {
	t := c.consts[name]
	switch {
	case t == nil:
		return false
	case t.DType == onnx.Float && len(t.F32) == 1:
		return t.F32[0] == v
	case isIntType(t.DType) && len(t.I64) == 1:
		return float32(t.I64[0]) == v
	}
	return false
}

// paramConst returns the name of a float constant holding exactly the normalised dims'
// values (a copy without leading 1 dims if needed), or "".
func (c *compiler) paramConst(name string, norm []int64) string {
	t := c.consts[name]
	if t == nil || t.DType != onnx.Float {
		return ""
	}
	d := t.Dims
	for len(d) > len(norm) && d[0] == 1 {
		d = d[1:]
	}
	if !dimsEqual(d, norm) {
		return ""
	}
	if len(d) == len(t.Dims) {
		return name
	}
	return c.newConst(name+"_ln", &onnx.Tensor{DType: onnx.Float, Dims: cloneDims(norm), F32: t.F32})
}

func (c *compiler) newConst(base string, t *onnx.Tensor) string {
	name := c.fresh(base)
	t.Name = name
	c.consts[name] = t
	c.vals[name] = &onnx.ValueInfo{Name: name, DType: t.DType, Dims: cloneDims(t.Dims)}
	return name
}

func fill(dims []int64, v float32) *onnx.Tensor {
	n, _ := numel(dims)
	t := &onnx.Tensor{DType: onnx.Float, Dims: cloneDims(dims), F32: make([]float32, n)}
	for i := range t.F32 {
		t.F32[i] = v
	}
	return t
}
