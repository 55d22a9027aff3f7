package graph

import "idunno/kernel/onnx"

// foldPads merges a zero constant Pad of the spatial axes into the Conv or AveragePool
// that is its only reader, as explicit window pads. (PyTorch writes Pad before
// AveragePool for count_include_pad; TensorFlow converters write Pad before VALID convs.)
func (c *compiler) foldPads() {
	ix := c.index()
	for _, p := range c.nodes {
		if p.OpType != "Pad" || ix.dead[p] {
			continue
		}
		out := p.Outputs[0]
		if c.outputs[out] || ix.uses(out) != 1 {
			continue
		}
		next := ix.onlyReader(out)
		if len(next.Inputs) == 0 || next.Inputs[0] != out {
			continue
		}
		pads, value, err := padParams(&nodeCtx{c: c, n: p})
		if err != nil || value != 0 {
			continue
		}
		r := len(pads) / 2
		if r < 3 || pads[0] != 0 || pads[1] != 0 || pads[r] != 0 || pads[r+1] != 0 {
			continue
		}
		if !mergeWindowPads(next, pads[2:r], pads[r+2:]) {
			continue
		}
		ix.kill(p)
		ix.dropReader(out, next)
		next.Inputs[0] = p.Inputs[0]
		ix.addReader(p.Inputs[0], next)
	}
	c.compact(ix)
}

// mergeWindowPads adds begin/end pads to a Conv or AveragePool window when the result
// means the same; it reports whether it did.
func mergeWindowPads(n *onnx.Node, begin, end []int64) bool {
	ks, pa := n.Attrs["kernel_shape"], n.Attrs["pads"]
	if ks == nil || pa == nil || len(ks.Ints) != len(begin) || len(pa.Ints) != 2*len(begin) {
		return false
	}
	dil := make([]int64, len(begin))
	for i := range dil {
		dil[i] = 1
	}
	switch n.OpType {
	case "Conv":
		if d := n.Attrs["dilations"]; d != nil && len(d.Ints) == len(dil) {
			copy(dil, d.Ints)
		}
	case "AveragePool":
		if a := n.Attrs["ceil_mode"]; a != nil && a.I != 0 {
			return false
		}
		include := n.Attrs["count_include_pad"] != nil && n.Attrs["count_include_pad"].I == 1
		for _, v := range pa.Ints {
			if v != 0 && !include {
				return false // its own pads are not counted; the Pad's zeros are
			}
		}
	default:
		return false
	}
	s := len(begin)
	merged := make([]int64, 2*s)
	for i := 0; i < s; i++ {
		merged[i] = pa.Ints[i] + begin[i]
		merged[i+s] = pa.Ints[i+s] + end[i]
		ek := (ks.Ints[i]-1)*dil[i] + 1
		if merged[i] >= ek || merged[i+s] >= ek {
			return false // keep pads smaller than the window, as every backend expects
		}
	}
	n.Attrs["pads"] = &onnx.Attribute{Name: "pads", Type: onnx.AttrInts, Ints: merged}
	if n.OpType == "AveragePool" {
		n.Attrs["count_include_pad"] = &onnx.Attribute{Name: "count_include_pad", Type: onnx.AttrInt, I: 1}
	}
	return true
}
