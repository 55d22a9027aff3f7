package graph

import (
	"fmt"
	"math"
	"reflect"
	"strings"

	"idunno/kernel/onnx"
)

// Batch independence: the proof the kernel needs before it runs one batch as several
// smaller ones (kernel/split.go) and concatenates their outputs.
//
// BatchAxes walks a compiled graph from its run-time inputs, each of which must carry the
// batch on axis 0, and finds for every value computed from them the one axis that carries
// the batch ("batched" values); every other value is "shared" (computed from constants
// only, the same for every sample). A node is accepted only when it is known to compute
// each sample from that sample alone, by a rule for its op type; any other op, attribute
// or shape is an error, and the caller does not split. SameUpToBatch then checks that
// the graph compiled for a smaller batch computes the same function of each sample: the
// same nodes, the same constants, the same dims except the batch's extent. Together they
// prove run(x[0:B]) = concat(run(x[0:b]), run(x[b:B])) up to the kernel's rounding.

// BatchAxes returns the batch axis of every batched value of g, compiled for a batch of
// size batch (>= 2, so that the batch's extent can be told from a dim of 1), or an error
// naming the first node it cannot prove batch-independent. opset is the model's.
func BatchAxes(g *onnx.Graph, opset int64, batch int64) (map[string]int, error) {
	if batch < 2 {
		return nil, fmt.Errorf("batch %d: need at least 2", batch)
	}
	a := &batchAnalysis{g: g, opset: opset, batch: batch, axes: map[string]int{}}
	if len(g.Inputs) == 0 {
		return nil, fmt.Errorf("no run-time inputs")
	}
	for _, in := range g.Inputs {
		d := a.dims(in.Name)
		if len(d) == 0 || d[0] != batch {
			return nil, fmt.Errorf("input %s: dims %v do not start with the batch %d", in.Name, d, batch)
		}
		a.axes[in.Name] = 0
	}
	for _, n := range g.Nodes {
		if err := a.node(n); err != nil {
			return nil, fmt.Errorf("node %s (%s): %w", n.Name, n.OpType, err)
		}
	}
	for _, out := range g.Outputs {
		if ax, ok := a.axes[out.Name]; !ok || ax != 0 {
			return nil, fmt.Errorf("output %s does not carry the batch on axis 0", out.Name)
		}
	}
	return a.axes, nil
}

type batchAnalysis struct {
	g     *onnx.Graph
	opset int64
	batch int64
	axes  map[string]int
}

func (a *batchAnalysis) dims(name string) []int64 {
	if v, ok := a.g.Values[name]; ok && v != nil {
		return v.Dims
	}
	if t, ok := a.g.Initializers[name]; ok && t != nil {
		return t.Dims
	}
	return nil
}

// axis returns the batch axis of a value, or -1 for a shared one (or an omitted input).
func (a *batchAnalysis) axis(name string) int {
	if ax, ok := a.axes[name]; ok {
		return ax
	}
	return -1
}

// set marks a node output as batched on axis ax, after checking that this axis has the
// batch's extent; ax < 0 leaves it shared.
func (a *batchAnalysis) set(name string, ax int) error {
	if ax < 0 {
		return nil
	}
	d := a.dims(name)
	if ax >= len(d) || d[ax] != a.batch {
		return fmt.Errorf("output %s: dims %v do not have the batch %d on axis %d", name, d, a.batch, ax)
	}
	a.axes[name] = ax
	return nil
}

// setAll marks every output of n as batched on axis ax.
func (a *batchAnalysis) setAll(n *onnx.Node, ax int) error {
	for _, o := range n.Outputs {
		if o == "" {
			continue
		}
		if err := a.set(o, ax); err != nil {
			return err
		}
	}
	return nil
}

// anyBatched reports whether any input (or "sum:" operand) of n is batched.
func (a *batchAnalysis) anyBatched(n *onnx.Node) bool {
	for _, in := range append(append([]string(nil), n.Inputs...), sumOperands(n)...) {
		if a.axis(in) >= 0 {
			return true
		}
	}
	return false
}

// sumOperands lists the "sum:" post-op operands of a fused Conv or MatMul.
func sumOperands(n *onnx.Node) []string {
	var out []string
	if at, ok := n.Attrs[postOpsAttr]; ok && at != nil {
		for _, s := range at.Strings {
			if v, ok := strings.CutPrefix(s, "sum:"); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// broadcast checks operands that broadcast numpy-style to a result of rank rank: the
// batched ones must land on one result axis, and the shared ones must have extent 1 there
// (or not reach it), so that every sample sees the same shared values. It returns that
// axis, or -1 when every operand is shared.
func (a *batchAnalysis) broadcast(rank int, names []string) (int, error) {
	out := -1
	for _, nm := range names {
		if ax := a.axis(nm); ax >= 0 {
			o := rank - len(a.dims(nm)) + ax
			if o < 0 || (out >= 0 && o != out) {
				return 0, fmt.Errorf("operands carry the batch on different axes")
			}
			out = o
		}
	}
	if out < 0 {
		return -1, nil
	}
	for _, nm := range names {
		if nm == "" || a.axis(nm) >= 0 {
			continue
		}
		d := a.dims(nm)
		if p := out - (rank - len(d)); p >= 0 && d[p] != 1 {
			return 0, fmt.Errorf("shared operand %s (dims %v) differs along the batch axis", nm, d)
		}
	}
	return out, nil
}

// elementwise lists the ops whose output element depends only on the input elements at
// the same (broadcast) position.
var elementwise = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Max": true, "Min": true,
	"Mean": true, "Sum": true, "Where": true, "Equal": true, "Less": true, "Greater": true,
	"LessOrEqual": true, "GreaterOrEqual": true, "And": true, "Or": true, "Xor": true, "Not": true,
	"Mod": true, "PRelu": true, "Clip": true, "Relu": true, "Sigmoid": true, "Tanh": true,
	"Erf": true, "Exp": true, "Log": true, "Sqrt": true, "Neg": true, "Abs": true,
	"Reciprocal": true, "Floor": true, "Ceil": true, "Round": true, "Sign": true,
	"Softplus": true, "Softsign": true, "HardSigmoid": true, "HardSwish": true,
	"LeakyRelu": true, "Elu": true, "Selu": true, "Celu": true, "Gelu": true, "Mish": true,
	"ThresholdedRelu": true, "Cast": true, "Identity": true, "Sin": true, "Cos": true,
	"IsNaN": true, "IsInf": true, "Shrink": true,
}

// perSampleNCHW lists the ops that read a batch of samples on axis 0 of their first input
// (N of NCHW) and compute each sample from that sample alone, all other inputs being
// parameters.
var perSampleNCHW = map[string]bool{
	"Conv": true, "ConvTranspose": true, "MaxPool": true, "AveragePool": true,
	"GlobalAveragePool": true, "GlobalMaxPool": true, "LpPool": true, "GlobalLpPool": true,
	"LRN": true, "InstanceNormalization": true, "BatchNormalization": true,
	"DepthToSpace": true, "SpaceToDepth": true,
}

func (a *batchAnalysis) node(n *onnx.Node) error {
	if !a.anyBatched(n) {
		return nil // computed from constants: the same for every sample
	}
	if len(n.Outputs) == 0 {
		return fmt.Errorf("no outputs")
	}
	out := n.Outputs[0]
	rank := len(a.dims(out))
	in0 := ""
	if len(n.Inputs) > 0 {
		in0 = n.Inputs[0]
	}
	ax0 := a.axis(in0)
	// onlyFirst: every input but the first is shared.
	onlyFirst := func() error {
		for _, in := range n.Inputs[1:] {
			if a.axis(in) >= 0 {
				return fmt.Errorf("input %s is batched (only the first input may be)", in)
			}
		}
		if ax0 < 0 {
			return fmt.Errorf("first input %s is not batched", in0)
		}
		return nil
	}
	switch {
	case elementwise[n.OpType]:
		if len(n.Outputs) != 1 {
			return fmt.Errorf("%d outputs", len(n.Outputs))
		}
		o, err := a.broadcast(rank, n.Inputs)
		if err != nil {
			return err
		}
		return a.set(out, o)

	case perSampleNCHW[n.OpType]:
		if err := onlyFirst(); err != nil {
			return err
		}
		if ax0 != 0 {
			return fmt.Errorf("batch on axis %d, not N", ax0)
		}
		if len(n.Outputs) != 1 {
			// MaxPool's Indices count across the whole batch; BatchNormalization's
			// training outputs are batch statistics
			return fmt.Errorf("%d outputs", len(n.Outputs))
		}
		if n.OpType == "BatchNormalization" && attrIntOr(n, "training_mode", 0) != 0 {
			return fmt.Errorf("training mode uses batch statistics")
		}
		if err := a.set(out, 0); err != nil {
			return err
		}
		return a.sumOperandsAligned(n)

	case n.OpType == "Gemm":
		if err := onlyFirst(); err != nil {
			return err
		}
		want := 0
		if attrIntOr(n, "transA", 0) != 0 {
			want = 1
		}
		if ax0 != want {
			return fmt.Errorf("batch on A's axis %d, its reduction axis", ax0)
		}
		if len(n.Inputs) > 2 {
			if d := a.dims(n.Inputs[2]); len(d) == 2 && d[0] != 1 {
				return fmt.Errorf("C (dims %v) differs along the batch axis", d)
			}
		}
		return a.set(out, 0)

	case n.OpType == "MatMul" || n.OpType == AttentionOp:
		return a.matmulLike(n, rank)

	case n.OpType == "Reshape" || n.OpType == "Flatten" || n.OpType == "Squeeze" || n.OpType == "Unsqueeze":
		if err := onlyFirst(); err != nil {
			return err
		}
		o, err := reshapedAxis(a.dims(in0), a.dims(out), ax0, a.batch)
		if err != nil {
			return err
		}
		return a.set(out, o)

	case n.OpType == "Transpose":
		perm := attrInts(n, "perm")
		if perm == nil {
			for i := rank - 1; i >= 0; i-- {
				perm = append(perm, int64(i))
			}
		}
		for o, p := range perm {
			if int(p) == ax0 {
				return a.set(out, o)
			}
		}
		return fmt.Errorf("perm %v drops axis %d", perm, ax0)

	case n.OpType == "Concat":
		axis, err := normAxis(attrIntOr(n, "axis", 0), rank)
		if err != nil {
			return err
		}
		for _, in := range n.Inputs {
			// a shared input would have the batch's extent on the batch axis: the same
			// constant block would not be given to every sample
			if ax := a.axis(in); ax != ax0 {
				return fmt.Errorf("inputs %s and %s carry the batch differently", in0, in)
			}
		}
		if axis == ax0 {
			return fmt.Errorf("concatenates along the batch")
		}
		return a.set(out, ax0)

	case n.OpType == "Split":
		if err := onlyFirst(); err != nil {
			return err
		}
		axis, err := normAxis(attrIntOr(n, "axis", 0), rank)
		if err != nil {
			return err
		}
		if axis == ax0 {
			return fmt.Errorf("splits along the batch")
		}
		return a.setAll(n, ax0)

	case n.OpType == "Slice":
		if err := onlyFirst(); err != nil {
			return err
		}
		if err := a.sliceKeepsBatch(n, ax0, rank); err != nil {
			return err
		}
		return a.set(out, ax0)

	case n.OpType == "Pad":
		if err := onlyFirst(); err != nil {
			return err
		}
		pads := attrInts(n, "pads")
		if len(n.Inputs) > 1 && n.Inputs[1] != "" {
			pads = a.constInts(n.Inputs[1])
		}
		if len(n.Inputs) > 3 && n.Inputs[3] != "" {
			return fmt.Errorf("axes input not handled")
		}
		if len(pads) != 2*rank || pads[ax0] != 0 || pads[ax0+rank] != 0 {
			return fmt.Errorf("pads %v may touch the batch axis %d", pads, ax0)
		}
		return a.set(out, ax0)

	case n.OpType == "Expand" || n.OpType == "Tile":
		if err := onlyFirst(); err != nil {
			return err
		}
		// Expand broadcasts (the input's axes align right); Tile keeps the rank. Either way
		// the batch's extent must stay B, so that axis is neither broadcast nor repeated.
		return a.set(out, rank-len(a.dims(in0))+ax0)

	case n.OpType == "Gather":
		data, idx := a.axis(n.Inputs[0]), a.axis(n.Inputs[1])
		axis, err := normAxis(attrIntOr(n, "axis", 0), len(a.dims(n.Inputs[0])))
		if err != nil {
			return err
		}
		switch {
		case data >= 0 && idx >= 0:
			return fmt.Errorf("data and indices both batched")
		case idx >= 0: // a lookup into a shared table: out = data[..., idx, ...]
			return a.set(out, axis+idx)
		case data == axis:
			return fmt.Errorf("gathers along the batch")
		case data < axis:
			return a.set(out, data)
		default:
			return a.set(out, data-1+len(a.dims(n.Inputs[1])))
		}

	case n.OpType == "Softmax" || n.OpType == "LogSoftmax" || n.OpType == "Hardmax":
		if err := onlyFirst(); err != nil {
			return err
		}
		def := int64(-1)
		if a.opset < 13 {
			def = 1
		}
		axis, err := normAxis(attrIntOr(n, "axis", def), rank)
		if err != nil {
			return err
		}
		// before opset 13 the op flattens the input to 2-D at axis: the batch must be
		// in the rows
		if axis == ax0 || (a.opset < 13 && axis < ax0) {
			return fmt.Errorf("normalizes across the batch axis %d (axis %d)", ax0, axis)
		}
		return a.set(out, ax0)

	case n.OpType == "LayerNormalization":
		if err := onlyFirst(); err != nil {
			return err
		}
		axis, err := normAxis(attrIntOr(n, "axis", -1), rank)
		if err != nil {
			return err
		}
		if ax0 >= axis {
			return fmt.Errorf("normalizes across the batch axis %d (axis %d)", ax0, axis)
		}
		return a.setAll(n, ax0) // Mean and InvStdDev keep the leading axes

	case strings.HasPrefix(n.OpType, "Reduce") || n.OpType == "ArgMax" || n.OpType == "ArgMin":
		if err := onlyFirst(); err != nil {
			return err
		}
		var axes []int64
		if n.OpType == "ArgMax" || n.OpType == "ArgMin" {
			axes = []int64{attrIntOr(n, "axis", 0)}
		} else {
			axes = attrInts(n, "axes")
			if len(n.Inputs) > 1 && n.Inputs[1] != "" {
				return fmt.Errorf("axes input not folded into the attribute")
			}
			if len(axes) == 0 {
				if attrIntOr(n, "noop_with_empty_axes", 0) != 0 {
					return a.set(out, ax0)
				}
				return fmt.Errorf("reduces over every axis")
			}
		}
		inRank := len(a.dims(in0))
		o := ax0
		for _, x := range axes {
			ax, err := normAxis(x, inRank)
			if err != nil {
				return err
			}
			if ax == ax0 {
				return fmt.Errorf("reduces over the batch axis %d", ax0)
			}
			if ax < ax0 && attrIntOr(n, "keepdims", 1) == 0 {
				o--
			}
		}
		return a.set(out, o)

	case n.OpType == "TopK" || n.OpType == "CumSum":
		if err := onlyFirst(); err != nil {
			return err
		}
		var axis int64
		if n.OpType == "TopK" {
			axis = attrIntOr(n, "axis", -1)
		} else {
			v := a.constInts(n.Inputs[1])
			if len(v) != 1 {
				return fmt.Errorf("axis is not a constant")
			}
			axis = v[0]
		}
		ax, err := normAxis(axis, rank)
		if err != nil {
			return err
		}
		if ax == ax0 {
			return fmt.Errorf("runs along the batch axis")
		}
		return a.setAll(n, ax0)

	case n.OpType == "Resize" || n.OpType == "Upsample":
		if err := onlyFirst(); err != nil {
			return err
		}
		mode, _ := attrString(n, "coordinate_transformation_mode")
		if mode == "tf_crop_and_resize" || n.Attrs["axes"] != nil {
			return fmt.Errorf("crop or axes not handled")
		}
		// an extent kept with a scale other than 1 (say 4 rows at scale 1.2) would still
		// mix samples: the scale on the batch axis must be exactly 1
		si := 2
		if n.OpType == "Upsample" {
			si = 1
		}
		if len(n.Inputs) > si && n.Inputs[si] != "" {
			t := a.g.Initializers[n.Inputs[si]]
			if t == nil {
				return fmt.Errorf("scales are not constant")
			}
			if len(t.F32) > 0 && (ax0 >= len(t.F32) || t.F32[ax0] != 1) {
				return fmt.Errorf("scales %v resize the batch axis", t.F32)
			}
		}
		return a.set(out, ax0)
	}
	return fmt.Errorf("op not known to treat samples independently")
}

// sumOperandsAligned checks the "sum:" operands of a fused Conv or MatMul, which have its
// output's dims: they must carry the batch as the output does (a shared one would add the
// same constant block to every sample only with a batch of one).
func (a *batchAnalysis) sumOperandsAligned(n *onnx.Node) error {
	for _, s := range sumOperands(n) {
		if a.axis(s) != a.axis(n.Outputs[0]) {
			return fmt.Errorf("sum operand %s does not carry the batch as the output does", s)
		}
	}
	return nil
}

// matmulLike handles MatMul (with its fused bias and post-ops) and the fused attention
// node, whose operands are stacks of matrices (..., rows, cols): the batch must be one of
// the stacking axes (numpy broadcast, aligned right) or, for MatMul, the rows of A.
func (a *batchAnalysis) matmulLike(n *onnx.Node, rank int) error {
	out := n.Outputs[0]
	if len(n.Outputs) != 1 {
		return fmt.Errorf("%d outputs", len(n.Outputs))
	}
	ops := n.Inputs
	if n.OpType == "MatMul" {
		ops = n.Inputs[:2]
		if len(n.Inputs) > 2 && a.axis(n.Inputs[2]) >= 0 {
			return fmt.Errorf("bias is batched")
		}
	}
	o := -1
	for i, in := range ops {
		if in == "" {
			continue
		}
		r := len(a.dims(in))
		if r < 2 || rank < 2 {
			return fmt.Errorf("operand %s is not a stack of matrices", in)
		}
		ax := a.axis(in)
		if ax < 0 {
			continue
		}
		var to int
		switch {
		case ax < r-2:
			to = rank - r + ax
		case n.OpType == "MatMul" && i == 0 && ax == r-2:
			to = rank - 2
		default:
			return fmt.Errorf("operand %s carries the batch on matrix axis %d", in, ax)
		}
		if o >= 0 && to != o {
			return fmt.Errorf("operands carry the batch on different axes")
		}
		o = to
	}
	if o < 0 {
		return fmt.Errorf("no batched operand")
	}
	if o == rank-2 && a.axis(n.Inputs[1]) >= 0 {
		return fmt.Errorf("batch on the rows of A and on B")
	}
	for _, in := range ops {
		if in == "" || a.axis(in) >= 0 || o >= rank-2 {
			continue
		}
		d := a.dims(in)
		if p := o - (rank - len(d)); p >= 0 && d[p] != 1 {
			return fmt.Errorf("shared operand %s (dims %v) differs along the batch axis", in, d)
		}
	}
	if err := a.set(out, o); err != nil {
		return err
	}
	return a.sumOperandsAligned(n)
}

// reshapedAxis finds where a reshape (Reshape, Flatten, Squeeze, Unsqueeze: row-major, the
// data unchanged) puts the batch axis ax of in: the axis of out with the batch's extent
// and, before and after it, as many elements as in has before and after ax. Sample i is
// then the same elements, in the same order, before and after.
func reshapedAxis(in, out []int64, ax int, batch int64) (int, error) {
	if ax < 0 || ax >= len(in) {
		return 0, fmt.Errorf("batch axis %d outside dims %v", ax, in)
	}
	before := prod(in[:ax])
	after := prod(in[ax+1:])
	p := int64(1)
	for o, d := range out {
		if p == before && d == batch && prod(out[o+1:]) == after {
			return o, nil
		}
		p *= d
	}
	return 0, fmt.Errorf("reshape %v -> %v mixes the batch with other axes", in, out)
}

func prod(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

// sliceKeepsBatch accepts a Slice that leaves the batch axis whole: not sliced, or sliced
// with step 1 to its full extent.
func (a *batchAnalysis) sliceKeepsBatch(n *onnx.Node, ax, rank int) error {
	var starts, axes, steps []int64
	if a.opset < 10 {
		starts, axes = attrInts(n, "starts"), attrInts(n, "axes")
	} else {
		starts = a.constInts(n.Inputs[1])
		if len(n.Inputs) > 3 && n.Inputs[3] != "" {
			axes = a.constInts(n.Inputs[3])
			if axes == nil {
				return fmt.Errorf("axes are not constant")
			}
		}
		if len(n.Inputs) > 4 && n.Inputs[4] != "" {
			steps = a.constInts(n.Inputs[4])
			if steps == nil {
				return fmt.Errorf("steps are not constant")
			}
		}
	}
	if starts == nil {
		return fmt.Errorf("starts are not constant")
	}
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	for i, x := range axes {
		s, err := normAxis(x, rank)
		if err != nil {
			return err
		}
		if s != ax {
			continue
		}
		if (steps != nil && (i >= len(steps) || steps[i] != 1)) || a.dims(n.Outputs[0])[ax] != a.batch {
			return fmt.Errorf("slices the batch axis")
		}
	}
	return nil
}

// constInts returns an integer initializer's values, or nil.
func (a *batchAnalysis) constInts(name string) []int64 {
	if t, ok := a.g.Initializers[name]; ok && t != nil && t.DType != onnx.Float {
		if t.I64 == nil {
			return []int64{}
		}
		return t.I64
	}
	return nil
}

func attrInts(n *onnx.Node, name string) []int64 {
	if at, ok := n.Attrs[name]; ok && at != nil && at.Type == onnx.AttrInts {
		return at.Ints
	}
	return nil
}

func attrString(n *onnx.Node, name string) (string, bool) {
	if at, ok := n.Attrs[name]; ok && at != nil && at.Type == onnx.AttrString {
		return at.S, true
	}
	return "", false
}

// SameUpToBatch checks that sub, the graph compiled for batches of subBatch, computes each
// sample as full (compiled for batch, with batch axes from BatchAxes) does: the same nodes
// with the same attributes, the same values with the same dims except the batch's extent
// on the batch axis, and the same constants, bit for bit. The one exception is a Reshape's
// shape, which may spell out the batch size (a view(x.size(0), ...)): the dims of the
// Reshape's input and output, checked above, then say all it does. Anything a constant
// derived from the batch size (x / x.size(0)) is a difference, and an error.
func SameUpToBatch(full, sub *onnx.Graph, axes map[string]int, batch, subBatch int64) error {
	if len(full.Nodes) != len(sub.Nodes) || len(full.Inputs) != len(sub.Inputs) || len(full.Outputs) != len(sub.Outputs) {
		return fmt.Errorf("graphs differ in size")
	}
	for i, n := range full.Nodes {
		s := sub.Nodes[i]
		if n.OpType != s.OpType || n.Domain != s.Domain || !reflect.DeepEqual(n.Inputs, s.Inputs) ||
			!reflect.DeepEqual(n.Outputs, s.Outputs) || !reflect.DeepEqual(n.Attrs, s.Attrs) {
			return fmt.Errorf("node %d (%s %s) differs", i, n.Name, n.OpType)
		}
	}
	for i := range full.Inputs {
		if full.Inputs[i].Name != sub.Inputs[i].Name {
			return fmt.Errorf("input %d differs", i)
		}
	}
	for i := range full.Outputs {
		if full.Outputs[i].Name != sub.Outputs[i].Name {
			return fmt.Errorf("output %d differs", i)
		}
	}
	if len(full.Values) != len(sub.Values) {
		return fmt.Errorf("graphs differ in values")
	}
	for name, v := range full.Values {
		w := sub.Values[name]
		if v == nil || w == nil || v.DType != w.DType || len(v.Dims) != len(w.Dims) {
			return fmt.Errorf("value %s differs", name)
		}
		ax, batched := axes[name]
		for j, d := range v.Dims {
			want := d
			if batched && j == ax {
				want = subBatch
			}
			if w.Dims[j] != want {
				return fmt.Errorf("value %s: dims %v for batch %d, %v for %d", name, v.Dims, batch, w.Dims, subBatch)
			}
		}
	}
	shapeOnly := reshapeShapes(full)
	if len(full.Initializers) != len(sub.Initializers) {
		return fmt.Errorf("graphs differ in constants")
	}
	for name, t := range full.Initializers {
		u := sub.Initializers[name]
		if u == nil {
			return fmt.Errorf("constant %s differs", name)
		}
		if shapeOnly[name] {
			continue
		}
		if !sameTensor(t, u) {
			return fmt.Errorf("constant %s differs between batch %d and %d", name, batch, subBatch)
		}
	}
	return nil
}

// reshapeShapes lists the constants read only as a Reshape's shape.
func reshapeShapes(g *onnx.Graph) map[string]bool {
	only := map[string]bool{}
	other := map[string]bool{}
	for _, n := range g.Nodes {
		for i, in := range n.Inputs {
			if n.OpType == "Reshape" && i == 1 {
				only[in] = true
			} else {
				other[in] = true
			}
		}
		for _, s := range sumOperands(n) {
			other[s] = true
		}
	}
	for _, o := range g.Outputs {
		other[o.Name] = true
	}
	for n := range other {
		delete(only, n)
	}
	return only
}

// sameTensor compares two constants bit for bit (NaNs included).
func sameTensor(t, u *onnx.Tensor) bool {
	if t.DType != u.DType || !dimsEqual(t.Dims, u.Dims) || len(t.F32) != len(u.F32) ||
		!reflect.DeepEqual(t.I64, u.I64) || len(t.F64) != len(u.F64) ||
		string(t.Raw) != string(u.Raw) || !reflect.DeepEqual(t.Strings, u.Strings) {
		return false
	}
	if len(t.F32) > 0 && &t.F32[0] != &u.F32[0] {
		for i, v := range t.F32 {
			if math.Float32bits(v) != math.Float32bits(u.F32[i]) {
				return false
			}
		}
	}
	for i, v := range t.F64 {
		if math.Float64bits(v) != math.Float64bits(u.F64[i]) {
			return false
		}
	}
	return true
}
