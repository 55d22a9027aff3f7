package graph

import (
	"maps"
	"os"
	"sort"

	"idunno/kernel/onnx"
)

// A Linear layer whose output is only read by Slices along its last axis becomes one
// Linear per Slice, each with the weight columns (and bias values) its Slice keeps.
// nn.MultiheadAttention's fused in-projection is exported as one MatMul of N = 3 x D
// followed by three Slices taking Q, K and V: each Slice then copied its third of the
// product, and the attention read strided views of it. Now each of Q, K and V is written
// dense by its own product, and nothing is copied.

// SlicedLinearEnv names the environment variable that, set to 0, keeps such Linear layers
// whole (the Slices copy their parts).
const SlicedLinearEnv = "IDK_SLICED_LINEAR"

// splitSlicedLinears runs after fusePostOps: a MatMul (A, W[, b]) with W a constant (K, N)
// float matrix, b a constant of N values, no post-ops, and every reader of its output a
// Slice of input 0 along the last axis with step 1.
func (c *compiler) splitSlicedLinears() {
	if os.Getenv(SlicedLinearEnv) == "0" {
		return
	}
	ix := c.index()
	changed := false
	for _, n := range c.nodes {
		if ix.dead[n] || n.OpType != "MatMul" || len(n.Outputs) != 1 || (len(n.Inputs) != 2 && len(n.Inputs) != 3) {
			continue
		}
		if _, ok := n.Attrs[postOpsAttr]; ok || n.Attrs[qdqWeights] != nil {
			continue // fused activations, or an int8 product (its weights are in the attributes)
		}
		out := n.Outputs[0]
		w := c.consts[n.Inputs[1]]
		ov := c.vals[out]
		if w == nil || w.DType != onnx.Float || len(w.Dims) != 2 || int64(len(w.F32)) != w.Dims[0]*w.Dims[1] ||
			ov == nil || len(ov.Dims) < 2 || ov.Dims[len(ov.Dims)-1] != w.Dims[1] || c.outputs[out] {
			continue
		}
		var bias *onnx.Tensor
		if len(n.Inputs) == 3 {
			if bias = c.consts[n.Inputs[2]]; bias == nil || bias.DType != onnx.Float || int64(len(bias.F32)) != w.Dims[1] {
				continue
			}
		}
		readers := ix.readers[out]
		if len(readers) < 2 || ix.uses(out) != len(readers) {
			continue
		}
		type part struct {
			r *onnx.Node
			s int64
		}
		var parts []part
		for r := range readers {
			s, ok := c.lastAxisSlice(r, out, w.Dims[1])
			if !ok {
				break
			}
			parts = append(parts, part{r, s})
		}
		if len(parts) != len(readers) {
			continue
		}
		// in graph order, so the new constants' names are the same on every compile
		sort.Slice(parts, func(i, j int) bool { return ix.pos[parts[i].r] < ix.pos[parts[j].r] })
		for _, pt := range parts {
			r, s := pt.r, pt.s
			cols := c.vals[r.Outputs[0]].Dims[len(ov.Dims)-1]
			wd := make([]float32, w.Dims[0]*cols)
			for k := int64(0); k < w.Dims[0]; k++ {
				copy(wd[k*cols:(k+1)*cols], w.F32[k*w.Dims[1]+s:k*w.Dims[1]+s+cols])
			}
			ins := []string{n.Inputs[0], c.newConst(n.Inputs[1]+"_cols", &onnx.Tensor{DType: onnx.Float, Dims: []int64{w.Dims[0], cols}, F32: wd})}
			if bias != nil {
				bd := append([]float32(nil), bias.F32[s:s+cols]...)
				ins = append(ins, c.newConst(n.Inputs[2]+"_cols", &onnx.Tensor{DType: onnx.Float, Dims: []int64{cols}, F32: bd}))
			}
			ix.kill(r)
			r.OpType, r.Domain, r.Inputs, r.Attrs = "MatMul", n.Domain, ins, maps.Clone(n.Attrs)
			ix.dead[r] = false
			ix.producer[r.Outputs[0]] = r
			ix.addReader(n.Inputs[0], r)
		}
		ix.kill(n)
		delete(c.vals, out)
		changed = true
	}
	if changed {
		c.compact(ix)
	}
}

// lastAxisSlice returns the first column a Slice node r takes from value x of n columns on
// its last axis, when r is a step-1 Slice of x along that axis only, with constant bounds
// and a non-empty result.
func (c *compiler) lastAxisSlice(r *onnx.Node, x string, n int64) (int64, bool) {
	if r.OpType != "Slice" || len(r.Inputs) < 4 || len(r.Outputs) != 1 || r.Inputs[0] != x || c.outputs[r.Outputs[0]] {
		return 0, false
	}
	ints := func(i int) []int64 {
		if i >= len(r.Inputs) || r.Inputs[i] == "" {
			return nil
		}
		t := c.consts[r.Inputs[i]]
		if t == nil || !isIntType(t.DType) || len(t.I64) != 1 {
			return nil
		}
		return t.I64
	}
	st, en, ax := ints(1), ints(2), ints(3)
	xv, yv := c.vals[x], c.vals[r.Outputs[0]]
	if st == nil || en == nil || ax == nil || xv == nil || yv == nil || len(yv.Dims) != len(xv.Dims) {
		return 0, false
	}
	rank := int64(len(xv.Dims))
	if (ax[0] != rank-1 && ax[0] != -1) || (len(r.Inputs) > 4 && r.Inputs[4] != "" && !c.constIs(r.Inputs[4], 1)) {
		return 0, false
	}
	clamp := func(v int64) int64 {
		if v < 0 {
			v += n
		}
		return max(0, min(v, n))
	}
	s, e := clamp(st[0]), clamp(en[0])
	if e <= s || yv.Dims[rank-1] != e-s {
		return 0, false
	}
	for i := int64(0); i < rank-1; i++ {
		if yv.Dims[i] != xv.Dims[i] {
			return 0, false
		}
	}
	return s, true
}
