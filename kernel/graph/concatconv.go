package graph

import (
	"fmt"

	"idunno/kernel/onnx"
)

// Options select the passes of CompileWith that depend on more than the graph and shapes.
type Options struct {
	// ConcatConv removes channel concatenations read by one convolution (splitConcatConvs).
	// The kernel sets it for batches of 2 and more (Model.compileOptions), and compiles a
	// split batch's sub-batches with the whole batch's options, so their graphs match.
	ConcatConv bool
}

// CompileWith is Compile with the optional passes of opts.
func CompileWith(m *onnx.Model, shapes map[string][]int64, consts map[string]*onnx.Tensor, opts Options) (*onnx.Graph, error) {
	return compileOpts(m, shapes, consts, false, opts)
}

// splitConcatConvs rewrites Conv(Concat(x1, ..., xn on channels)) as the sum of n
// convolutions, conv k reading xk with its slice of the weights' input channels (the bias
// on the first), where the concatenation's only reader is the convolution, or a MaxPool
// (per channel, so it commutes with the concatenation: each xk is pooled on its own) whose
// only reader is. fusePostOps then makes each Add after the first convolution a sum
// post-op of the next one and takes the activation after the last Add, so the joined
// tensor is never written. At batch >= 2 oneDNN 2.6 cannot make a convolution write a
// channel range of a tensor (only its reference kernels take a sub-memory destination),
// so each concatenation copied every input: SqueezeNet's fire modules (a 1x1 and a 3x3
// expansion joined, read by the next squeeze convolution or a max pool before it) spent
// 6.2 ms of a 49.6 ms sub-batch of 4 on one thread copying (IDK_PROFILE=2). The sum is
// taken in another order than the single convolution's: not the same bits (within 1e-5
// relative). IDK_CONCAT_CONV=0 (in the kernel) leaves the concatenations alone.
func (c *compiler) splitConcatConvs() {
	ix := c.index()
	repl := map[*onnx.Node][]*onnx.Node{} // a reader of a removed concatenation -> its replacement
	for _, cat := range c.nodes {
		if ix.dead[cat] || cat.OpType != "Concat" || len(cat.Inputs) < 2 || len(cat.Outputs) != 1 {
			continue
		}
		y := cat.Outputs[0]
		yv := c.vals[y]
		if yv == nil || yv.DType != onnx.Float || len(yv.Dims) != 4 || c.outputs[y] || ix.uses(y) != 1 {
			continue
		}
		if a, ok := cat.Attrs["axis"]; !ok || (a.I != 1 && a.I != -3) {
			continue
		}
		ok := true
		var chans []int64
		for _, in := range cat.Inputs {
			v := c.vals[in]
			if in == "" || c.consts[in] != nil || v == nil || len(v.Dims) != 4 || v.Dims[1] <= 0 {
				ok = false
				break
			}
			chans = append(chans, v.Dims[1])
		}
		if !ok {
			continue
		}
		next := ix.onlyReader(y)
		var pool *onnx.Node
		if next != nil && next.OpType == "MaxPool" && len(next.Outputs) == 1 && next.Inputs[0] == y {
			p := next.Outputs[0]
			if c.outputs[p] || ix.uses(p) != 1 || c.vals[p] == nil {
				continue
			}
			pool, next = next, ix.onlyReader(p)
		}
		if next == nil || repl[next] != nil || !c.splittableConv(next, pool, y, yv.Dims[1]) {
			continue
		}
		// the pooled inputs, then the convolutions and the Adds, at the reader's place
		srcs := append([]string(nil), cat.Inputs...)
		var pools []*onnx.Node
		if pool != nil {
			pv := c.vals[pool.Outputs[0]]
			for k, in := range cat.Inputs {
				np := cloneNode(pool)
				np.Name = fmt.Sprintf("%s.part%d", pool.Name, k)
				np.Inputs = []string{in}
				o := c.fresh(pool.Outputs[0] + ".part")
				np.Outputs = []string{o}
				d := cloneDims(pv.Dims)
				d[1] = chans[k]
				c.vals[o] = &onnx.ValueInfo{Name: o, DType: onnx.Float, Dims: d}
				srcs[k] = o
				pools = append(pools, np)
			}
		}
		out := next.Outputs[0]
		ov := c.vals[out]
		w := c.consts[next.Inputs[1]]
		var nodes []*onnx.Node
		var sum string
		var at int64
		for k, src := range srcs {
			wk := sliceInChannels(w, at, chans[k])
			at += chans[k]
			wn := c.fresh(next.Inputs[1] + ".part")
			wk.Name = wn
			c.consts[wn] = wk
			c.vals[wn] = &onnx.ValueInfo{Name: wn, DType: onnx.Float, Dims: cloneDims(wk.Dims)}
			nc := cloneNode(next)
			nc.Inputs = []string{src, wn}
			if k == 0 && len(next.Inputs) > 2 {
				nc.Inputs = append(nc.Inputs, next.Inputs[2])
			}
			nc.Name = fmt.Sprintf("%s.part%d", next.Name, k)
			o := c.fresh(out + ".part")
			c.vals[o] = &onnx.ValueInfo{Name: o, DType: onnx.Float, Dims: cloneDims(ov.Dims)}
			nc.Outputs = []string{o}
			nodes = append(nodes, nc)
			if k == 0 {
				sum = o
				continue
			}
			s := out
			if k < len(srcs)-1 {
				s = c.fresh(out + ".sum")
				c.vals[s] = &onnx.ValueInfo{Name: s, DType: onnx.Float, Dims: cloneDims(ov.Dims)}
			}
			nodes = append(nodes, &onnx.Node{Name: next.Name + ".sum", OpType: "Add", Inputs: []string{sum, o},
				Outputs: []string{s}, Attrs: map[string]*onnx.Attribute{}})
			sum = s
		}
		if pool != nil {
			repl[pool] = pools
		}
		repl[cat] = []*onnx.Node{}
		repl[next] = nodes
		delete(c.vals, y)
		if pool != nil {
			delete(c.vals, pool.Outputs[0])
		}
	}
	if len(repl) == 0 {
		return
	}
	var kept []*onnx.Node
	for _, n := range c.nodes {
		if r, ok := repl[n]; ok {
			kept = append(kept, r...)
			continue
		}
		kept = append(kept, n)
	}
	c.nodes = kept
}

// splittableConv reports whether conv, reading y (the concatenation's output, or pool's
// when pool is not nil) of ch channels, is a plain 2-D convolution of one group with
// constant float weights and bias, with nothing fused into it yet.
func (c *compiler) splittableConv(conv, pool *onnx.Node, y string, ch int64) bool {
	in := y
	if pool != nil {
		in = pool.Outputs[0]
	}
	if conv.OpType != "Conv" || len(conv.Inputs) < 2 || conv.Inputs[0] != in || len(conv.Outputs) != 1 {
		return false
	}
	if _, fused := conv.Attrs[postOpsAttr]; fused {
		return false
	}
	if g, ok := conv.Attrs["group"]; ok && g.I != 1 {
		return false
	}
	w := c.consts[conv.Inputs[1]]
	if w == nil || w.DType != onnx.Float || len(w.Dims) != 4 || w.Dims[1] != ch || int64(len(w.F32)) != volumeOf(w.Dims) {
		return false
	}
	if len(conv.Inputs) > 2 && conv.Inputs[2] != "" && c.consts[conv.Inputs[2]] == nil {
		return false
	}
	for _, s := range conv.Inputs[1:] {
		if s == y || s == in {
			return false
		}
	}
	return c.vals[conv.Outputs[0]] != nil
}

// sliceInChannels returns weights w[:, at:at+n] of an (O, C, kh, kw) tensor.
func sliceInChannels(w *onnx.Tensor, at, n int64) *onnx.Tensor {
	o, ci, k := w.Dims[0], w.Dims[1], w.Dims[2]*w.Dims[3]
	t := &onnx.Tensor{DType: onnx.Float, Dims: []int64{o, n, w.Dims[2], w.Dims[3]}, F32: make([]float32, o*n*k)}
	for i := int64(0); i < o; i++ {
		copy(t.F32[i*n*k:(i+1)*n*k], w.F32[(i*ci+at)*k:(i*ci+at+n)*k])
	}
	return t
}
