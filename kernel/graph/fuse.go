package graph

import (
	"fmt"
	"math"

	"idunno/kernel/onnx"
)

// postOpsAttr is the attribute that carries fused post-ops on Conv, Gemm and MatMul.
const postOpsAttr = "idunno.post_ops"

// PostOpsAttr is the name of the fused post-op attribute (see the package comment).
const PostOpsAttr = postOpsAttr

// activation returns the post-op string of an activation node, or "" when the node is
// not a fusable activation.
func activation(x *nodeCtx) (string, error) {
	switch x.n.OpType {
	case "Relu":
		return "relu", nil
	case "Sigmoid":
		return "sigmoid", nil
	case "Tanh":
		return "tanh", nil
	case "HardSwish":
		return "hard_swish", nil
	case "LeakyRelu":
		a, err := x.attrFloat("alpha", 0.01)
		return "leaky_relu:" + fmtFloat(a), err
	case "Elu":
		a, err := x.attrFloat("alpha", 1)
		return "elu:" + fmtFloat(a), err
	case "HardSigmoid":
		a, err := x.attrFloat("alpha", 0.2)
		if err != nil {
			return "", err
		}
		b, err := x.attrFloat("beta", 0.5)
		return "hard_sigmoid:" + fmtFloat(a) + ":" + fmtFloat(b), err
	case "Clip":
		lo, hi, err := clipBounds(x)
		return "clip:" + fmtFloat(lo) + ":" + fmtFloat(hi), err
	case "Gelu": // the transformer fusion's (fuseGelu), or opset 20's
		if a, ok := x.n.Attrs["approximate"]; ok && a != nil && string(a.S) == "tanh" {
			return "gelu_tanh", nil
		}
		return "gelu_erf", nil
	}
	return "", nil
}

// foldBatchNorm folds BatchNormalization nodes whose input is the only use of a Conv's
// output into that Conv's weights and bias.
func (c *compiler) foldBatchNorm() error {
	ix := c.index()
	for _, bn := range c.nodes {
		if bn.OpType != "BatchNormalization" || ix.dead[bn] {
			continue
		}
		x := bn.Inputs[0]
		if ix.uses(x) != 1 || c.outputs[x] {
			continue
		}
		conv := ix.producer[x]
		if conv == nil || conv.OpType != "Conv" {
			continue
		}
		w := c.consts[conv.Inputs[1]]
		var bias *onnx.Tensor
		if len(conv.Inputs) > 2 && conv.Inputs[2] != "" {
			if bias = c.consts[conv.Inputs[2]]; bias == nil {
				continue
			}
		}
		params := make([]*onnx.Tensor, 4)
		ok := w != nil && w.DType == onnx.Float
		for j := range params {
			params[j] = c.consts[bn.Inputs[j+1]]
			ok = ok && params[j] != nil && params[j].DType == onnx.Float
		}
		if !ok {
			continue
		}
		eps := float32(1e-5)
		if a, ok := bn.Attrs["epsilon"]; ok {
			eps = a.F
		}
		nw, nb, err := foldBN(w, bias, params[0], params[1], params[2], params[3], eps)
		if err != nil {
			return fmt.Errorf("graph: node %s (%s): %w", bn.Name, bn.OpType, err)
		}
		wName, bName := c.fresh(conv.Name+".bn_w"), c.fresh(conv.Name+".bn_b")
		nw.Name, nb.Name = wName, bName
		c.consts[wName], c.consts[bName] = nw, nb
		c.vals[wName] = &onnx.ValueInfo{Name: wName, DType: onnx.Float, Dims: cloneDims(nw.Dims)}
		c.vals[bName] = &onnx.ValueInfo{Name: bName, DType: onnx.Float, Dims: cloneDims(nb.Dims)}
		conv.Inputs = []string{conv.Inputs[0], wName, bName} // constants: not indexed
		ix.kill(bn)
		delete(c.vals, x)
		conv.Outputs[0] = bn.Outputs[0]
		ix.producer[conv.Outputs[0]] = conv
	}
	c.compact(ix)
	return nil
}

// foldBN returns W' = W*s and b' = (b-mean)*s + beta with s = gamma/sqrt(var+eps).
func foldBN(w, b, gamma, beta, mean, variance *onnx.Tensor, eps float32) (*onnx.Tensor, *onnx.Tensor, error) {
	m := w.Dims[0]
	if m == 0 {
		return nil, nil, fmt.Errorf("empty weights")
	}
	per := int64(len(w.F32)) / m
	nw := &onnx.Tensor{DType: onnx.Float, Dims: cloneDims(w.Dims), F32: make([]float32, len(w.F32))}
	nb := &onnx.Tensor{DType: onnx.Float, Dims: []int64{m}, F32: make([]float32, m)}
	for o := int64(0); o < m; o++ {
		v := float64(variance.F32[o]) + float64(eps)
		if !(v > 0) {
			return nil, nil, fmt.Errorf("variance+epsilon %g is not positive for channel %d", v, o)
		}
		s := float64(gamma.F32[o]) / math.Sqrt(v)
		for j := o * per; j < (o+1)*per; j++ {
			nw.F32[j] = float32(float64(w.F32[j]) * s)
		}
		var bo float64
		if b != nil {
			bo = float64(b.F32[o])
		}
		nb.F32[o] = float32((bo-float64(mean.F32[o]))*s + float64(beta.F32[o]))
	}
	return nw, nb, nil
}

// fusePostOps moves residual Adds and activations after Conv and MatMul (activations only
// after Gemm) into the producer's post-op list; a MatMul by constant 2-D weights first takes
// the constant bias Add after it as a third input (fuseMatMulBias).
func (c *compiler) fusePostOps() {
	ix := c.index()
	for i, n := range c.nodes {
		if ix.dead[n] || (n.OpType != "Conv" && n.OpType != "Gemm" && n.OpType != "MatMul") {
			continue
		}
		if _, done := n.Attrs[postOpsAttr]; done {
			continue
		}
		var post []string
		c.fuseMatMulBias(ix, n)
		for {
			out := n.Outputs[0]
			if sig, mul, op := c.swishPair(ix, out); sig != nil && n.OpType == "Conv" {
				// x * Sigmoid(x) (SiLU, as PyTorch exports it): oneDNN's swish post-op;
				// x * HardSigmoid(x) (HardSwish before opset 14): its hard_swish one
				post = append(post, op)
				s := sig.Outputs[0]
				ix.kill(sig)
				ix.kill(mul)
				delete(c.vals, out)
				delete(c.vals, s)
				n.Outputs[0] = mul.Outputs[0]
				ix.producer[n.Outputs[0]] = n
				continue
			}
			if c.outputs[out] || ix.uses(out) != 1 {
				break
			}
			next := ix.onlyReader(out)
			op, sumOf := c.postOpFor(ix, i, n, next, len(post))
			if op == "" {
				break
			}
			post = append(post, op)
			ix.kill(next)
			if sumOf != "" {
				ix.addReader(sumOf, n)
			}
			delete(c.vals, out)
			n.Outputs[0] = next.Outputs[0]
			ix.producer[n.Outputs[0]] = n
		}
		if len(post) > 0 {
			n.Attrs[postOpsAttr] = &onnx.Attribute{Name: postOpsAttr, Type: onnx.AttrStrings, Strings: post}
		}
	}
	c.compact(ix)
}

// postOpFor returns the post-op that fuses next (the only reader of n's output) into n,
// the node at position i, or "" when it does not fuse; sumOf names a "sum:" operand.
func (c *compiler) postOpFor(ix *graphIndex, i int, n, next *onnx.Node, have int) (op, sumOf string) {
	out := n.Outputs[0]
	if next.OpType == "Add" && (n.OpType == "Conv" || n.OpType == "MatMul") && have == 0 {
		other := next.Inputs[0]
		if other == out {
			other = next.Inputs[1]
		}
		if other == out || c.consts[other] != nil {
			return "", ""
		}
		if p := ix.producer[other]; p != nil && ix.pos[p] >= i {
			return "", "" // computed after the conv
		}
		ov, nv := c.vals[other], c.vals[next.Outputs[0]]
		if ov == nil || nv == nil || !dimsEqual(ov.Dims, c.vals[out].Dims) || !dimsEqual(nv.Dims, ov.Dims) {
			return "", ""
		}
		return "sum:" + other, other
	}
	a, err := activation(&nodeCtx{c: c, n: next})
	if err != nil || a == "" || next.Inputs[0] != out {
		return "", ""
	}
	return a, ""
}

// swishPair finds x * Sigmoid(x) on value x: a Sigmoid reading x whose output only a Mul
// reads, that Mul reading x and the Sigmoid's output once each, and nothing else reading x;
// op is the post-op it becomes ("swish:1"). x * HardSigmoid(x) with alpha 1/6 and beta 0.5
// is HardSwish (as PyTorch exports it before opset 14): "hard_swish". Left apart, the
// HardSigmoid's linear step ran in oneDNN's reference kernel on channel counts that are
// not a multiple of 16 (MobileNetV3's 184 and 200: a padded blocked layout).
func (c *compiler) swishPair(ix *graphIndex, x string) (sig, mul *onnx.Node, op string) {
	if c.outputs[x] || ix.uses(x) != 2 || len(ix.readers[x]) != 2 {
		return nil, nil, ""
	}
	for r := range ix.readers[x] {
		if len(r.Inputs) != 1 || len(r.Outputs) != 1 {
			continue
		}
		if r.OpType == "Sigmoid" {
			sig, op = r, "swish:1"
		}
		if r.OpType == "HardSigmoid" {
			nx := &nodeCtx{c: c, n: r}
			a, errA := nx.attrFloat("alpha", 0.2)
			b, errB := nx.attrFloat("beta", 0.5)
			if errA == nil && errB == nil && math.Abs(float64(a)-1.0/6) < 1e-6 && b == 0.5 {
				sig, op = r, "hard_swish"
			}
		}
	}
	if sig == nil {
		return nil, nil, ""
	}
	s := sig.Outputs[0]
	mul = ix.onlyReader(s)
	if mul == nil || c.outputs[s] || mul.OpType != "Mul" || len(mul.Inputs) != 2 || len(mul.Outputs) != 1 ||
		ix.readers[x][mul] != 1 || !((mul.Inputs[0] == x && mul.Inputs[1] == s) || (mul.Inputs[0] == s && mul.Inputs[1] == x)) {
		return nil, nil, ""
	}
	if xv, mv := c.vals[x], c.vals[mul.Outputs[0]]; xv == nil || mv == nil || !dimsEqual(xv.Dims, mv.Dims) {
		return nil, nil, ""
	}
	return sig, mul, op
}

// fuseMatMulBias makes MatMul(A, W) + b, with W a constant (K, N) matrix, A of rank 2 or
// more and b a constant of N values along the last dim ((N), (1, N), ...), one MatMul with
// b as its third input (the kernel's matmul bias: a Linear layer as transformers export it),
// when the Add is the MatMul output's only reader. The Add's output keeps its name.
func (c *compiler) fuseMatMulBias(ix *graphIndex, n *onnx.Node) {
	if n.OpType != "MatMul" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return
	}
	out := n.Outputs[0]
	w := c.consts[n.Inputs[1]]
	av, ov := c.vals[n.Inputs[0]], c.vals[out]
	if w == nil || w.DType != onnx.Float || len(w.Dims) != 2 || av == nil || len(av.Dims) < 2 || ov == nil ||
		c.outputs[out] || ix.uses(out) != 1 {
		return
	}
	add := ix.onlyReader(out)
	if add == nil || add.OpType != "Add" || len(add.Inputs) != 2 || len(add.Outputs) != 1 {
		return
	}
	bias := other(add, out)
	bt := c.consts[bias]
	if bias == "" || bias == out || bt == nil || bt.DType != onnx.Float || len(bt.Dims) == 0 || len(bt.Dims) > len(ov.Dims) {
		return
	}
	nOut := w.Dims[1]
	if bt.Dims[len(bt.Dims)-1] != nOut || volumeOf(bt.Dims) != nOut {
		return
	}
	if yv := c.vals[add.Outputs[0]]; yv == nil || !dimsEqual(yv.Dims, ov.Dims) {
		return
	}
	ix.kill(add)
	ix.addReader(bias, n)
	delete(c.vals, out)
	n.Inputs = append(n.Inputs, bias)
	n.Outputs[0] = add.Outputs[0]
	ix.producer[n.Outputs[0]] = n
}

// dropExpands makes a float Add, Sub, Mul or Div read y instead of Expand(y, shape) when
// that Expand's output has no other reader and broadcasting y against the other operand
// gives the op the same output dims (F.normalize's x / Expand(norm): one copy fewer).
func (c *compiler) dropExpands() {
	ix := c.index()
	for _, n := range c.nodes {
		if ix.dead[n] || len(n.Inputs) != 2 || len(n.Outputs) != 1 ||
			(n.OpType != "Add" && n.OpType != "Sub" && n.OpType != "Mul" && n.OpType != "Div") {
			continue
		}
		yv := c.vals[n.Outputs[0]]
		if yv == nil || yv.DType != onnx.Float {
			continue
		}
		for k, in := range n.Inputs {
			e := ix.producer[in]
			if e == nil || e.OpType != "Expand" || len(e.Inputs) != 2 || ix.uses(in) != 1 || c.outputs[in] || n.Inputs[1-k] == in {
				continue
			}
			src, other := e.Inputs[0], n.Inputs[1-k]
			sd, od := c.dimsOf(src), c.dimsOf(other)
			if sd == nil || od == nil {
				continue
			}
			if bd, err := broadcast(sd, od); err != nil || !dimsEqual(bd, yv.Dims) {
				continue
			}
			ix.kill(e)
			ix.addReader(src, n)
			n.Inputs[k] = src
			delete(c.vals, in)
		}
	}
	c.compact(ix)
}

// dimsOf is the dims of a value or constant (nil: unknown).
func (c *compiler) dimsOf(name string) []int64 {
	if v := c.vals[name]; v != nil {
		return v.Dims
	}
	if t := c.consts[name]; t != nil {
		return t.Dims
	}
	return nil
}
