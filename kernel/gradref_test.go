package kernel

// gradref_test.go: a float64 reference interpreter for the operators a training plan
// accepts, written from the ONNX operator definitions (not from the kernel), with softmax
// cross-entropy and PyTorch's optimizer formulas. The gradient checks in gradcheck_test.go
// differentiate it by central finite differences.

import (
	"fmt"
	"math"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// refTensor is a plain row-major float64 tensor.
type refTensor struct {
	dims []int64
	v    []float64
}

func newRef(dims ...int64) *refTensor {
	return &refTensor{dims: append([]int64(nil), dims...), v: make([]float64, volume(dims))}
}

// refNet evaluates one ONNX model in float64. params holds every float initializer as
// float64; the finite-difference checks perturb it in place.
type refNet struct {
	m      *onnx.Model
	params map[string][]float64
	// dropOp is the kernel op index of each Dropout node: the kernel draws a Dropout's mask
	// from (seed, op index, element), so the reference needs the same index.
	dropOp map[string]int
	// bnStats holds, after a forward, each BatchNormalization's batch mean and biased
	// variance, keyed by node name.
	bnStats  map[string][2][]float64
	bnCounts map[string]int64   // values each BatchNormalization's statistics average over
	ints     map[string][]int64 // int64 values (shapes, axes) from initializers and Constant nodes
	logits   *refTensor         // the last loss's logits
	// inference evaluates as a trained model runs: BatchNormalization with its running
	// statistics, Dropout as the identity.
	inference bool
}

func newRefNet(m *onnx.Model) *refNet {
	r := &refNet{m: m, params: map[string][]float64{}, dropOp: map[string]int{}}
	for name, t := range m.Graph.Initializers {
		if t.DType == onnx.Float {
			v := make([]float64, len(t.F32))
			for i, f := range t.F32 {
				v[i] = float64(f)
			}
			r.params[name] = v
		}
	}
	return r
}

// setDropoutOps finds each Dropout node's kernel op index: its place among the compiled
// training graph's nodes that lower to an op (all but Constant and Shape, which fold away).
func (r *refNet) setDropoutOps(inDims []int64) error {
	g, err := graph.CompileTraining(r.m, map[string][]int64{r.m.Graph.Inputs[0].Name: inDims})
	if err != nil {
		return err
	}
	op := 0
	for _, n := range g.Nodes {
		if n.OpType == "Constant" || n.OpType == "Shape" {
			continue
		}
		if n.OpType == "Dropout" {
			r.dropOp[n.Name] = op
		}
		op++
	}
	for _, n := range r.m.Graph.Nodes {
		if _, ok := r.dropOp[n.Name]; n.OpType == "Dropout" && !ok {
			return fmt.Errorf("dropout node %s not found in the compiled graph", n.Name)
		}
	}
	return nil
}

// forward evaluates every node on input x (dims given) with dropout seed and returns all
// values by name.
func (r *refNet) forward(x []float64, dims []int64, seed uint64) (map[string]*refTensor, error) {
	vals := map[string]*refTensor{r.m.Graph.Inputs[0].Name: {dims: dims, v: x}}
	r.bnStats = map[string][2][]float64{}
	r.bnCounts = map[string]int64{}
	r.ints = map[string][]int64{}
	for name, t := range r.m.Graph.Initializers {
		if t.DType == onnx.Int64 {
			r.ints[name] = t.I64
		}
	}
	get := func(name string) (*refTensor, error) {
		if v, ok := vals[name]; ok {
			return v, nil
		}
		if p, ok := r.params[name]; ok {
			return &refTensor{dims: r.m.Graph.Initializers[name].Dims, v: p}, nil
		}
		return nil, fmt.Errorf("value %s undefined", name)
	}
	for _, n := range r.m.Graph.Nodes {
		if n.OpType == "Constant" {
			v := n.Attrs["value"]
			switch {
			case v == nil || v.T == nil:
				return nil, fmt.Errorf("node %s: Constant without a tensor value", n.Name)
			case v.T.DType == onnx.Int64:
				r.ints[n.Outputs[0]] = v.T.I64
			default:
				vals[n.Outputs[0]] = &refTensor{dims: v.T.Dims, v: f64s(v.T.F32)}
			}
			continue
		}
		var in []*refTensor
		for _, name := range n.Inputs {
			if _, isInt := r.ints[name]; name == "" || isInt {
				in = append(in, nil) // absent, or int64 (shapes, axes): read from r.ints
				continue
			}
			t, err := get(name)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", n.Name, err)
			}
			in = append(in, t)
		}
		y, err := r.eval(n, in, seed)
		if err != nil {
			return nil, fmt.Errorf("node %s (%s): %w", n.Name, n.OpType, err)
		}
		vals[n.Outputs[0]] = y
	}
	return vals, nil
}

// loss is the summed softmax cross-entropy of the model's output logits for labels.
func (r *refNet) loss(x []float64, dims []int64, labels []int64, seed uint64) (float64, error) {
	vals, err := r.forward(x, dims, seed)
	if err != nil {
		return 0, err
	}
	out := r.m.Graph.Outputs[0].Name
	// a trailing Softmax/LogSoftmax is not part of the trained function
	if nodes := r.m.Graph.Nodes; len(nodes) > 0 {
		if last := nodes[len(nodes)-1]; (last.OpType == "Softmax" || last.OpType == "LogSoftmax") && last.Outputs[0] == out {
			out = last.Inputs[0]
		}
	}
	z := vals[out]
	if len(z.dims) != 2 || z.dims[0] != int64(len(labels)) {
		return 0, fmt.Errorf("logits dims %v for %d labels", z.dims, len(labels))
	}
	r.logits = z
	return refCrossEntropy(z, labels), nil
}

// correct counts the last loss's rows whose largest logit (the first, on ties) is the label.
func (r *refNet) correct(labels []int64) int64 {
	K := int(r.logits.dims[1])
	var n int64
	for i, y := range labels {
		row := r.logits.v[i*K : (i+1)*K]
		best := 0
		for k := range row {
			if row[k] > row[best] {
				best = k
			}
		}
		if int64(best) == y {
			n++
		}
	}
	return n
}

func refCrossEntropy(z *refTensor, labels []int64) float64 {
	K := int(z.dims[1])
	var sum float64
	for n, y := range labels {
		row := z.v[n*K : (n+1)*K]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - mx)
		}
		sum += mx + math.Log(s) - row[y]
	}
	return sum
}

func rAttrInts(n *onnx.Node, name string, def int64, count int) []int64 {
	if a, ok := n.Attrs[name]; ok && a != nil {
		return a.Ints
	}
	v := make([]int64, count)
	for i := range v {
		v[i] = def
	}
	return v
}

func rAttrInt(n *onnx.Node, name string, def int64) int64 {
	if a, ok := n.Attrs[name]; ok && a != nil {
		return a.I
	}
	return def
}

// rAttrFloat reads a float attribute as the float32 ONNX stores, widened.
func rAttrFloat(n *onnx.Node, name string, def float32) float64 {
	if a, ok := n.Attrs[name]; ok && a != nil {
		return float64(a.F)
	}
	return float64(def)
}

func (r *refNet) eval(n *onnx.Node, in []*refTensor, seed uint64) (*refTensor, error) {
	x := in[0]
	switch n.OpType {
	case "Conv":
		var b []float64
		if len(in) > 2 && in[2] != nil {
			b = in[2].v
		}
		if len(x.dims) == 3 { // 1-D: a 2-D convolution of height 1
			y, err := refConv(as2D(x), as2D(in[1]), b, append([]int64{1}, rAttrInts(n, "strides", 1, 1)...),
				pads2D(rAttrInts(n, "pads", 0, 2)), append([]int64{1}, rAttrInts(n, "dilations", 1, 1)...), rAttrInt(n, "group", 1))
			return from2D(y), err
		}
		return refConv(x, in[1], b, rAttrInts(n, "strides", 1, 2), rAttrInts(n, "pads", 0, 4),
			rAttrInts(n, "dilations", 1, 2), rAttrInt(n, "group", 1))
	case "Gemm":
		if rAttrInt(n, "transA", 0) != 0 || rAttrFloat(n, "alpha", 1) != 1 || rAttrFloat(n, "beta", 1) != 1 {
			return nil, fmt.Errorf("reference Gemm: transA/alpha/beta not implemented")
		}
		var c []float64
		if len(in) > 2 && in[2] != nil {
			c = in[2].v
		}
		return refMatMul(x, in[1], c, rAttrInt(n, "transB", 0) != 0)
	case "MatMul":
		return refMatMul(x, in[1], nil, false)
	case "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "Elu", "HardSwish":
		f, err := r.activation(n, in)
		if err != nil {
			return nil, err
		}
		y := newRef(x.dims...)
		for i, v := range x.v {
			y.v[i] = f(v)
		}
		return y, nil
	case "MaxPool", "AveragePool":
		S := len(x.dims) - 2
		k := rAttrInts(n, "kernel_shape", 1, S)
		max := n.OpType == "MaxPool"
		dil := rAttrInts(n, "dilations", 1, S)
		if !max {
			dil = onesDims(S) // AveragePool has no dilations before opset 19
		}
		st, pads := rAttrInts(n, "strides", 1, S), rAttrInts(n, "pads", 0, 2*S)
		incl, ceil := rAttrInt(n, "count_include_pad", 0) != 0, rAttrInt(n, "ceil_mode", 0) != 0
		if S == 1 {
			y, err := refPool(as2D(x), max, incl, append([]int64{1}, k...), append([]int64{1}, st...), pads2D(pads),
				append([]int64{1}, dil...), ceil)
			return from2D(y), err
		}
		return refPool(x, max, incl, k, st, pads, dil, ceil)
	case "GlobalAveragePool":
		N, C := x.dims[0], x.dims[1]
		S := volume(x.dims[2:])
		y := newRef(append([]int64{N, C}, onesDims(len(x.dims)-2)...)...)
		for i := int64(0); i < N*C; i++ {
			var s float64
			for _, v := range x.v[i*S : (i+1)*S] {
				s += v
			}
			y.v[i] = s / float64(S)
		}
		return y, nil
	case "BatchNormalization":
		if rAttrInt(n, "training_mode", 0) != 0 {
			return nil, fmt.Errorf("training_mode attribute not expected")
		}
		if r.inference {
			return refBatchNormInfer(x, in[1].v, in[2].v, in[3].v, in[4].v, rAttrFloat(n, "epsilon", 1e-5)), nil
		}
		y, mean, variance := refBatchNormTrain(x, in[1].v, in[2].v, rAttrFloat(n, "epsilon", 1e-5))
		r.bnStats[n.Name] = [2][]float64{mean, variance}
		r.bnCounts[n.Name] = x.dims[0] * volume(x.dims[2:])
		return y, nil
	case "Add":
		if !equalDims(x.dims, in[1].dims) {
			return nil, fmt.Errorf("reference Add: only same shapes")
		}
		y := newRef(x.dims...)
		for i := range y.v {
			y.v[i] = x.v[i] + in[1].v[i]
		}
		return y, nil
	case "Flatten":
		ax := rAttrInt(n, "axis", 1)
		if ax < 0 {
			ax += int64(len(x.dims))
		}
		return &refTensor{dims: []int64{volume(x.dims[:ax]), volume(x.dims[ax:])}, v: x.v}, nil
	case "Reshape":
		shape, ok := r.ints[n.Inputs[1]]
		if !ok {
			return nil, fmt.Errorf("reference Reshape: shape must be a constant")
		}
		dims := append([]int64(nil), shape...)
		infer := -1
		for i, d := range dims {
			switch {
			case d == 0:
				dims[i] = x.dims[i]
			case d == -1:
				infer = i
			}
		}
		if infer >= 0 {
			dims[infer] = 1
			dims[infer] = volume(x.dims) / volume(dims)
		}
		if volume(dims) != volume(x.dims) {
			return nil, fmt.Errorf("reshape %v to %v", x.dims, shape)
		}
		return &refTensor{dims: dims, v: x.v}, nil
	case "Identity":
		return x, nil
	case "Squeeze", "Unsqueeze":
		if len(n.Inputs) < 2 {
			return nil, fmt.Errorf("reference %s: axes must be an input (opset 13)", n.OpType)
		}
		axes, ok := r.ints[n.Inputs[1]]
		if !ok {
			return nil, fmt.Errorf("reference %s: axes must be a constant input", n.OpType)
		}
		rank := len(x.dims)
		if n.OpType == "Unsqueeze" {
			rank += len(axes)
		}
		at := map[int]bool{}
		for _, a := range axes {
			if a < 0 {
				a += int64(rank)
			}
			at[int(a)] = true
		}
		var dims []int64
		if n.OpType == "Squeeze" {
			for i, d := range x.dims {
				if !at[i] {
					dims = append(dims, d)
				} else if d != 1 {
					return nil, fmt.Errorf("squeeze of dim %d (%d)", i, d)
				}
			}
		} else {
			k := 0
			for i := 0; i < rank; i++ {
				if at[i] {
					dims = append(dims, 1)
				} else {
					dims = append(dims, x.dims[k])
					k++
				}
			}
		}
		return &refTensor{dims: dims, v: x.v}, nil
	case "Concat":
		return refConcat(in, rAttrInt(n, "axis", 0))
	case "Dropout":
		ratio := float32(rAttrFloat(n, "ratio", 0.5))
		if len(n.Inputs) > 1 && n.Inputs[1] != "" {
			ratio = float32(in[1].v[0])
		}
		if r.inference {
			return x, nil
		}
		op, ok := r.dropOp[n.Name]
		if !ok {
			return nil, fmt.Errorf("dropout op index unknown (call setDropoutOps)")
		}
		mask := refDropoutMask(seed, op, ratio, len(x.v))
		y := newRef(x.dims...)
		for i, v := range x.v {
			y.v[i] = v * mask[i]
		}
		return y, nil
	case "Softmax", "LogSoftmax":
		// only as the last node, where loss() reads its input; compute it anyway
		K := int(x.dims[len(x.dims)-1])
		y := newRef(x.dims...)
		for o := 0; o < len(x.v)/K; o++ {
			row := x.v[o*K : (o+1)*K]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, v)
			}
			var s float64
			for _, v := range row {
				s += math.Exp(v - mx)
			}
			for k, v := range row {
				if n.OpType == "Softmax" {
					y.v[o*K+k] = math.Exp(v-mx) / s
				} else {
					y.v[o*K+k] = v - mx - math.Log(s)
				}
			}
		}
		return y, nil
	}
	return nil, fmt.Errorf("no reference for %s", n.OpType)
}

// as2D views a rank-3 tensor (N, C, L) as (N, C, 1, L); from2D undoes it.
func as2D(t *refTensor) *refTensor {
	return &refTensor{dims: []int64{t.dims[0], t.dims[1], 1, t.dims[2]}, v: t.v}
}

func from2D(t *refTensor) *refTensor {
	if t == nil {
		return nil
	}
	return &refTensor{dims: []int64{t.dims[0], t.dims[1], t.dims[3]}, v: t.v}
}

// pads2D turns 1-D pads (begin, end) into 2-D ones (top, left, bottom, right).
func pads2D(p []int64) []int64 { return []int64{0, p[0], 0, p[1]} }

func onesDims(k int) []int64 {
	d := make([]int64, k)
	for i := range d {
		d[i] = 1
	}
	return d
}

// activation returns the elementwise function of an activation node (attributes are
// float32 in ONNX, so they are widened from float32).
func (r *refNet) activation(n *onnx.Node, in []*refTensor) (func(float64) float64, error) {
	switch n.OpType {
	case "Relu":
		return func(v float64) float64 { return math.Max(v, 0) }, nil
	case "LeakyRelu":
		a := rAttrFloat(n, "alpha", 0.01)
		return func(v float64) float64 {
			if v >= 0 {
				return v
			}
			return a * v
		}, nil
	case "Sigmoid":
		return func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }, nil
	case "Tanh":
		return math.Tanh, nil
	case "Elu":
		a := rAttrFloat(n, "alpha", 1)
		return func(v float64) float64 {
			if v > 0 {
				return v
			}
			return a * (math.Exp(v) - 1)
		}, nil
	case "HardSwish":
		return func(v float64) float64 { return v * math.Max(0, math.Min(1, v/6+0.5)) }, nil
	case "Clip":
		lo, hi := math.Inf(-1), math.Inf(1)
		if r.m.Opset < 11 {
			lo, hi = rAttrFloat(n, "min", -math.MaxFloat32), rAttrFloat(n, "max", math.MaxFloat32)
		} else {
			if len(in) > 1 && in[1] != nil {
				lo = float64(float32(in[1].v[0]))
			}
			if len(in) > 2 && in[2] != nil {
				hi = float64(float32(in[2].v[0]))
			}
		}
		return func(v float64) float64 { return math.Min(hi, math.Max(lo, v)) }, nil
	}
	return nil, fmt.Errorf("not an activation")
}

// refConv is ONNX Conv on (N, C, H, W): pads are (top, left, bottom, right).
func refConv(x, w *refTensor, b []float64, st, pads, dil []int64, group int64) (*refTensor, error) {
	if len(x.dims) != 4 || len(w.dims) != 4 {
		return nil, fmt.Errorf("reference Conv is 2-D only")
	}
	N, C, H, W := x.dims[0], x.dims[1], x.dims[2], x.dims[3]
	M, Cg, KH, KW := w.dims[0], w.dims[1], w.dims[2], w.dims[3]
	if Cg*group != C || M%group != 0 {
		return nil, fmt.Errorf("conv channels %d, weight %v, group %d", C, w.dims, group)
	}
	OH := (H+pads[0]+pads[2]-((KH-1)*dil[0]+1))/st[0] + 1
	OW := (W+pads[1]+pads[3]-((KW-1)*dil[1]+1))/st[1] + 1
	y := newRef(N, M, OH, OW)
	Mg := M / group
	for n := int64(0); n < N; n++ {
		for m := int64(0); m < M; m++ {
			g := m / Mg
			for oh := int64(0); oh < OH; oh++ {
				for ow := int64(0); ow < OW; ow++ {
					var s float64
					if b != nil {
						s = b[m]
					}
					for c := int64(0); c < Cg; c++ {
						xc := x.v[((n*C+g*Cg+c)*H)*W:]
						wc := w.v[((m*Cg+c)*KH)*KW:]
						for kh := int64(0); kh < KH; kh++ {
							ih := oh*st[0] - pads[0] + kh*dil[0]
							if ih < 0 || ih >= H {
								continue
							}
							for kw := int64(0); kw < KW; kw++ {
								iw := ow*st[1] - pads[1] + kw*dil[1]
								if iw < 0 || iw >= W {
									continue
								}
								s += xc[ih*W+iw] * wc[kh*KW+kw]
							}
						}
					}
					y.v[((n*M+m)*OH+oh)*OW+ow] = s
				}
			}
		}
	}
	return y, nil
}

// refPoolOut is a pooled axis's length: floor, or with ceil_mode ceil as long as the last
// window starts inside the input or its begin padding (PyTorch's rule, which ONNX adopted).
func refPoolOut(in, k, s, d, pb, pe int64, ceil bool) int64 {
	span := in + pb + pe - ((k-1)*d + 1)
	o := span/s + 1
	if ceil && span%s != 0 {
		o++
		if (o-1)*s >= in+pb {
			o--
		}
	}
	return o
}

// refPool is ONNX MaxPool/AveragePool on (N, C, H, W). Average pooling divides by the
// window's positions inside the input (count_include_pad 0) or inside the padded input
// (count_include_pad 1).
func refPool(x *refTensor, isMax, includePad bool, k, st, pads, dil []int64, ceil bool) (*refTensor, error) {
	if len(x.dims) != 4 {
		return nil, fmt.Errorf("reference pool is 2-D only")
	}
	N, C, H, W := x.dims[0], x.dims[1], x.dims[2], x.dims[3]
	OH := refPoolOut(H, k[0], st[0], dil[0], pads[0], pads[2], ceil)
	OW := refPoolOut(W, k[1], st[1], dil[1], pads[1], pads[3], ceil)
	y := newRef(N, C, OH, OW)
	for nc := int64(0); nc < N*C; nc++ {
		xc := x.v[nc*H*W:]
		for oh := int64(0); oh < OH; oh++ {
			for ow := int64(0); ow < OW; ow++ {
				best, sum := math.Inf(-1), 0.0
				var inside, padded int64
				for kh := int64(0); kh < k[0]; kh++ {
					ih := oh*st[0] - pads[0] + kh*dil[0]
					for kw := int64(0); kw < k[1]; kw++ {
						iw := ow*st[1] - pads[1] + kw*dil[1]
						if ih >= -pads[0] && ih < H+pads[2] && iw >= -pads[1] && iw < W+pads[3] {
							padded++
						}
						if ih < 0 || ih >= H || iw < 0 || iw >= W {
							continue
						}
						v := xc[ih*W+iw]
						inside++
						sum += v
						best = math.Max(best, v)
					}
				}
				o := (nc*OH+oh)*OW + ow
				switch {
				case isMax:
					y.v[o] = best
				case includePad:
					y.v[o] = sum / float64(padded)
				default:
					y.v[o] = sum / float64(inside)
				}
			}
		}
	}
	return y, nil
}

// refBatchNormTrain normalises with the batch's statistics over N and the spatial dims
// (biased variance), as BatchNormalization does in training; it returns the mean and the
// biased variance too.
func refBatchNormTrain(x *refTensor, scale, bias []float64, eps float64) (*refTensor, []float64, []float64) {
	N, C := x.dims[0], x.dims[1]
	S := volume(x.dims[2:])
	cnt := float64(N * S)
	mean, variance := make([]float64, C), make([]float64, C)
	y := newRef(x.dims...)
	for c := int64(0); c < C; c++ {
		var s float64
		for n := int64(0); n < N; n++ {
			for _, v := range x.v[(n*C+c)*S : (n*C+c+1)*S] {
				s += v
			}
		}
		mu := s / cnt
		var q float64
		for n := int64(0); n < N; n++ {
			for _, v := range x.v[(n*C+c)*S : (n*C+c+1)*S] {
				q += (v - mu) * (v - mu)
			}
		}
		va := q / cnt
		mean[c], variance[c] = mu, va
		k := scale[c] / math.Sqrt(va+eps)
		for n := int64(0); n < N; n++ {
			for i := (n*C + c) * S; i < (n*C+c+1)*S; i++ {
				y.v[i] = (x.v[i]-mu)*k + bias[c]
			}
		}
	}
	return y, mean, variance
}

// refBatchNormInfer normalises with running statistics.
func refBatchNormInfer(x *refTensor, scale, bias, mean, variance []float64, eps float64) *refTensor {
	C, S := x.dims[1], volume(x.dims[2:])
	y := newRef(x.dims...)
	for i := range y.v {
		c := int64(i) / S % C
		y.v[i] = (x.v[i]-mean[c])*scale[c]/math.Sqrt(variance[c]+eps) + bias[c]
	}
	return y
}

// refMatMul is a (M, K) times w (K, N), or w (N, K) transposed, plus bias (N).
func refMatMul(a, w *refTensor, bias []float64, transB bool) (*refTensor, error) {
	if len(a.dims) != 2 || len(w.dims) != 2 {
		return nil, fmt.Errorf("reference MatMul is 2-D only")
	}
	M, K := a.dims[0], a.dims[1]
	N := w.dims[1]
	if transB {
		N = w.dims[0]
		if w.dims[1] != K {
			return nil, fmt.Errorf("matmul %v x %vT", a.dims, w.dims)
		}
	} else if w.dims[0] != K {
		return nil, fmt.Errorf("matmul %v x %v", a.dims, w.dims)
	}
	y := newRef(M, N)
	for i := int64(0); i < M; i++ {
		for j := int64(0); j < N; j++ {
			var s float64
			if bias != nil {
				s = bias[j]
			}
			for k := int64(0); k < K; k++ {
				if transB {
					s += a.v[i*K+k] * w.v[j*K+k]
				} else {
					s += a.v[i*K+k] * w.v[k*N+j]
				}
			}
			y.v[i*N+j] = s
		}
	}
	return y, nil
}

func refConcat(in []*refTensor, axis int64) (*refTensor, error) {
	rank := int64(len(in[0].dims))
	if axis < 0 {
		axis += rank
	}
	dims := append([]int64(nil), in[0].dims...)
	dims[axis] = 0
	for _, t := range in {
		dims[axis] += t.dims[axis]
	}
	y := newRef(dims...)
	outer, inner := volume(dims[:axis]), volume(dims[axis+1:])
	off := int64(0)
	for _, t := range in {
		w := t.dims[axis] * inner
		for o := int64(0); o < outer; o++ {
			copy(y.v[o*dims[axis]*inner+off:], t.v[o*w:(o+1)*w])
		}
		off += w
	}
	return y, nil
}

// refMix64 is SplitMix64's finaliser, as the kernel's mix64 (train.c).
func refMix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// refDropoutMask is the kernel's documented mask: element i of Dropout op `op` is kept with
// scale 1/(1-ratio) (computed in float32) when a uniform draw from (seed, op, i) is at
// least ratio, else zeroed.
func refDropoutMask(seed uint64, op int, ratio float32, n int) []float64 {
	base := refMix64(seed ^ refMix64(uint64(op)+1))
	keep := float64(float32(1) / (float32(1) - ratio))
	m := make([]float64, n)
	for i := range m {
		u := float64(refMix64(base+uint64(i))>>11) * (1.0 / 9007199254740992.0)
		if u >= float64(ratio) {
			m[i] = keep
		}
	}
	return m
}

// refOptimizer applies PyTorch's SGD (dampening 0), Adam and AdamW update rules in float64.
type refOptimizer struct {
	o      Optimizer
	m1, m2 []float64
}

func (r *refOptimizer) step(w, g []float64, lr float64, step int64) {
	o := r.o
	if r.m1 == nil {
		r.m1, r.m2 = make([]float64, len(w)), make([]float64, len(w))
	}
	b1, b2, eps := o.Beta1, o.Beta2, o.Eps
	if b1 == 0 {
		b1 = 0.9
	}
	if b2 == 0 {
		b2 = 0.999
	}
	if eps == 0 {
		eps = 1e-8
	}
	for i := range w {
		d := g[i]
		switch o.Kind {
		case "sgd":
			d += o.WeightDecay * w[i]
			if o.Momentum != 0 {
				if step == 1 {
					r.m1[i] = d
				} else {
					r.m1[i] = o.Momentum*r.m1[i] + d
				}
				if o.Nesterov {
					d += o.Momentum * r.m1[i]
				} else {
					d = r.m1[i]
				}
			}
			w[i] -= lr * d
		case "adam", "adamw":
			if o.Kind == "adamw" {
				w[i] *= 1 - lr*o.WeightDecay
			} else {
				d += o.WeightDecay * w[i]
			}
			r.m1[i] = b1*r.m1[i] + (1-b1)*d
			r.m2[i] = b2*r.m2[i] + (1-b2)*d*d
			bc1 := 1 - math.Pow(b1, float64(step))
			bc2 := 1 - math.Pow(b2, float64(step))
			denom := math.Sqrt(r.m2[i])/math.Sqrt(bc2) + eps
			w[i] -= lr / bc1 * r.m1[i] / denom
		}
	}
}
