package graph

import (
	"math"
	"os"
	"strings"

	"idunno/kernel/onnx"
)

// Quantized models (issue 12). QuantizeLinear and DequantizeLinear run as nodes (the
// reference path: 8-bit values are integers at run time, carried as int64 by the kernel)
// and fold on constants (weights). QLinearConv, QLinearMatMul, ConvInteger and
// MatMulInteger are rewritten before compilation into DequantizeLinear (scale 1: exact
// integers in float32), Conv or MatMul, and QuantizeLinear (or a saturating one to int32).
// fuseQDQ then turns the standard QDQ pattern around a Conv into one int8 convolution
// (attributes qdq*; see doc.go).

// Attributes fuseQDQ puts on a Conv that the kernel runs with int8 weights and 8-bit input.
const (
	qdqWeights = "idunno.qdq_w"        // AttrTensor: the int8 weights (dims of the Conv's weights)
	qdqWScales = "idunno.qdq_w_scales" // AttrFloats: one scale per output channel
	qdqXScale  = "idunno.qdq_x_scale"  // AttrFloat: the input's scale
	qdqXZero   = "idunno.qdq_x_zero"   // AttrInt: the input's zero point
	qdqXSigned = "idunno.qdq_x_signed" // AttrInt: 1 when the input quantizes to int8, 0 for uint8
	// set by chainQDQ on an int8 Conv whose every reader is an int8 Conv quantizing its
	// output the same way: the Conv writes its output already quantized with these
	qdqYScale  = "idunno.qdq_y_scale"  // AttrFloat
	qdqYZero   = "idunno.qdq_y_zero"   // AttrInt
	qdqYSigned = "idunno.qdq_y_signed" // AttrInt
	// set by fuseQDQAdd on an int8 Conv whose output went through Q/DQ into a residual Add
	// now fused as its "sum:" post-op (its first): the output is rounded through that
	// quantization (o), and the summand is read through its own (s)
	qdqOScale  = "idunno.qdq_o_scale"  // AttrFloat
	qdqOZero   = "idunno.qdq_o_zero"   // AttrInt
	qdqOSigned = "idunno.qdq_o_signed" // AttrInt
	qdqSScale  = "idunno.qdq_s_scale"  // AttrFloat
	qdqSZero   = "idunno.qdq_s_zero"   // AttrInt
	qdqSSigned = "idunno.qdq_s_signed" // AttrInt
)

// QDQAttrs lists the attributes fuseQDQ and chainQDQ set (for the kernel's lowering).
var QDQAttrs = struct {
	Weights, WScales, XScale, XZero, XSigned, YScale, YZero, YSigned string
	OScale, OZero, OSigned, SScale, SZero, SSigned                   string
}{qdqWeights, qdqWScales, qdqXScale, qdqXZero, qdqXSigned, qdqYScale, qdqYZero, qdqYSigned,
	qdqOScale, qdqOZero, qdqOSigned, qdqSScale, qdqSZero, qdqSSigned}

// dqSource remembers the integer tensor behind a folded DequantizeLinear of a constant.
type dqSource struct {
	q      *onnx.Tensor // int8 or uint8 values
	scales []float32    // 1 (per tensor) or one per index of axis
	zeros  []int64      // same length as scales
	axis   int
}

func registerQuant() {
	ops["QuantizeLinear"] = &opSpec{attrs: []string{"axis", "saturate", "block_size", "output_dtype"},
		minIn: 2, maxIn: 3, infer: inferQuantize, eval: evalQuantize}
	ops["DequantizeLinear"] = &opSpec{attrs: []string{"axis", "block_size"},
		minIn: 2, maxIn: 3, infer: inferDequantize, eval: evalDequantize}
	// expanded by expandQuantOps before any node is visited
	for name, in := range map[string][2]int{"QLinearConv": {8, 9}, "QLinearMatMul": {8, 8}, "ConvInteger": {2, 4}, "MatMulInteger": {2, 4}} {
		ops[name] = &opSpec{minIn: in[0], maxIn: in[1], infer: func(x *nodeCtx) ([]onnx.ValueInfo, error) {
			return nil, x.errf("internal: not expanded")
		}}
	}
}

// qparams checks a QuantizeLinear/DequantizeLinear node's scale and zero point (inputs 1
// and 2) against x (input 0) and returns the axis the parameters run along (-1: per tensor)
// and the quantized type.
func qparams(x *nodeCtx, quantize bool) (axis int, qt onnx.DataType, err error) {
	if bs, err := x.attrInt("block_size", 0); err != nil {
		return 0, 0, err
	} else if bs != 0 {
		return 0, 0, x.errf("block_size=%d (blocked quantization) not supported", bs)
	}
	if x.in(1).DType != onnx.Float {
		return 0, 0, x.errf("scale is %s; want float32", dtypeName(x.in(1).DType))
	}
	xd := x.dims(0)
	sd := x.dims(1)
	ax, err := x.attrInt("axis", 1)
	if err != nil {
		return 0, 0, err
	}
	axis = -1
	switch {
	case len(sd) == 0 || (len(sd) == 1 && sd[0] == 1):
	case len(sd) == 1:
		a, err := normAxis(ax, len(xd))
		if err != nil {
			return 0, 0, x.errf("axis %d: %v", ax, err)
		}
		if sd[0] != xd[a] {
			return 0, 0, x.errf("scale has %d values; axis %d of the input has %d", sd[0], a, xd[a])
		}
		axis = a
	default:
		return 0, 0, x.errf("scale dims %v: want a scalar or 1-D (blocked scales not supported)", sd)
	}
	qt = onnx.Uint8
	if x.has(2) {
		zd := x.in(2)
		if !dimsEqual(zd.Dims, sd) && !(volumeOf(zd.Dims) == 1 && volumeOf(sd) == 1) {
			return 0, 0, x.errf("zero point dims %v differ from scale dims %v", zd.Dims, sd)
		}
		qt = zd.DType
	}
	if quantize {
		if od, err := x.attrInt("output_dtype", 0); err != nil {
			return 0, 0, err
		} else if od != 0 {
			if x.has(2) && onnx.DataType(od) != qt {
				return 0, 0, x.errf("output_dtype %d differs from the zero point's type %s", od, dtypeName(qt))
			}
			qt = onnx.DataType(od)
		}
		if qt != onnx.Uint8 && qt != onnx.Int8 && qt != onnx.Int32 && qt != onnx.Int16 {
			return 0, 0, x.errf("quantized type %s not supported (uint8, int8, int16)", dtypeName(qt))
		}
	} else {
		if t := x.in(0).DType; t != onnx.Uint8 && t != onnx.Int8 && t != onnx.Int32 && t != onnx.Int16 {
			return 0, 0, x.errf("input is %s; want uint8, int8, int16 or int32", dtypeName(t))
		}
		if x.has(2) && qt != x.in(0).DType {
			return 0, 0, x.errf("zero point is %s, input is %s", dtypeName(qt), dtypeName(x.in(0).DType))
		}
		qt = x.in(0).DType
	}
	return axis, qt, nil
}

func volumeOf(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

// QuantRange returns the values of a quantized type.
func QuantRange(t onnx.DataType) (lo, hi int64) {
	switch t {
	case onnx.Uint8:
		return 0, 255
	case onnx.Int8:
		return -128, 127
	case onnx.Int16:
		return -32768, 32767
	case onnx.Int32:
		return math.MinInt32, math.MaxInt32
	}
	return 0, 0
}

func inferQuantize(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	if sat, err := x.attrInt("saturate", 1); err != nil {
		return nil, err
	} else if sat != 1 {
		return nil, x.errf("saturate=%d applies to float8 only", sat)
	}
	_, qt, err := qparams(x, true)
	if err != nil {
		return nil, err
	}
	return []onnx.ValueInfo{{DType: qt, Dims: cloneDims(x.dims(0))}}, nil
}

func inferDequantize(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if _, _, err := qparams(x, false); err != nil {
		return nil, err
	}
	return one(cloneDims(x.dims(0))), nil
}

// paramsAt returns scale and zero point for each index of axis (one pair when per tensor).
func paramsAt(x *nodeCtx) ([]float32, []int64) {
	s := x.cst(1).F32
	z := make([]int64, len(s))
	if zt := x.cst(2); zt != nil {
		for i := range z {
			z[i] = zt.I64[i%len(zt.I64)]
		}
	}
	return s, z
}

// layout splits dims around axis into (outer, count, inner); axis -1 is per tensor.
func layout(dims []int64, axis int) (outer, count, inner int64) {
	outer, count, inner = 1, 1, 1
	if axis < 0 {
		return 1, 1, volumeOf(dims)
	}
	for i, d := range dims {
		switch {
		case i < axis:
			outer *= d
		case i == axis:
			count = d
		default:
			inner *= d
		}
	}
	return
}

func evalQuantize(x *nodeCtx) ([]*onnx.Tensor, error) {
	infos, err := inferQuantize(x)
	if err != nil {
		return nil, err
	}
	axis, qt, _ := qparams(x, true)
	in := x.cst(0)
	s, z := paramsAt(x)
	lo, hi := QuantRange(qt)
	out := &onnx.Tensor{DType: qt, Dims: cloneDims(infos[0].Dims), I64: make([]int64, len(in.F32))}
	outer, count, inner := layout(in.Dims, axis)
	for a := int64(0); a < outer; a++ {
		for c := int64(0); c < count; c++ {
			for i := int64(0); i < inner; i++ {
				k := (a*count+c)*inner + i
				out.I64[k] = QuantizeValue(in.F32[k], s[c], z[c], lo, hi)
			}
		}
	}
	return []*onnx.Tensor{out}, nil
}

// QuantizeValue is ONNX QuantizeLinear of one value, in float32 as the kernel computes it.
func QuantizeValue(v, scale float32, zero, lo, hi int64) int64 {
	q := float32(math.RoundToEven(float64(v/scale))) + float32(zero)
	switch {
	case math.IsNaN(float64(q)):
		return zero
	case q < float32(lo):
		return lo
	case q > float32(hi):
		return hi
	}
	return int64(q)
}

func evalDequantize(x *nodeCtx) ([]*onnx.Tensor, error) {
	if _, err := inferDequantize(x); err != nil {
		return nil, err
	}
	axis, qt, _ := qparams(x, false)
	in := x.cst(0)
	s, z := paramsAt(x)
	out := &onnx.Tensor{DType: onnx.Float, Dims: cloneDims(in.Dims), F32: make([]float32, len(in.I64))}
	outer, count, inner := layout(in.Dims, axis)
	for a := int64(0); a < outer; a++ {
		for c := int64(0); c < count; c++ {
			for i := int64(0); i < inner; i++ {
				k := (a*count+c)*inner + i
				out.F32[k] = float32(in.I64[k]-z[c]) * s[c]
			}
		}
	}
	if qt == onnx.Int8 || qt == onnx.Uint8 {
		x.c.dq[x.n.Outputs[0]] = &dqSource{q: in, scales: s, zeros: z, axis: axis}
	}
	return []*onnx.Tensor{out}, nil
}

// ---- QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger ----

// expandQuantOps returns the nodes with every QLinear*/ *Integer node replaced by
// DequantizeLinear, Conv/MatMul and QuantizeLinear nodes computing the same values.
func (c *compiler) expandQuantOps(nodes []*onnx.Node) ([]*onnx.Node, error) {
	var out []*onnx.Node
	for _, n := range nodes {
		var rep []*onnx.Node
		var err error
		switch n.OpType {
		case "QLinearConv", "QLinearMatMul":
			rep, err = c.expandQLinear(n)
		case "ConvInteger", "MatMulInteger":
			rep, err = c.expandInteger(n)
		default:
			out = append(out, n)
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, r := range rep {
			for _, in := range r.Inputs {
				c.usedNames[in] = true
			}
		}
		out = append(out, rep...)
	}
	return out, nil
}

func (c *compiler) qerr(n *onnx.Node, format string, args ...any) error {
	x := &nodeCtx{c: c, n: n}
	return x.errf(format, args...)
}

func (c *compiler) constF32(base string, dims []int64, v []float32) (string, error) {
	name := c.fresh(base)
	return name, c.addConst(name, &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v})
}

// integerDQ makes x - zero_point as float32: DequantizeLinear with scale 1 along axis.
func (c *compiler) integerDQ(n *onnx.Node, x, zero string, count int64, axis int64) (*onnx.Node, string, error) {
	ones := make([]float32, count)
	for i := range ones {
		ones[i] = 1
	}
	dims := []int64{}
	if count > 1 {
		dims = []int64{count}
	}
	s, err := c.constF32(n.Name+"_one", dims, ones)
	if err != nil {
		return nil, "", err
	}
	ins := []string{x, s}
	if zero != "" {
		ins = append(ins, zero)
	}
	o := c.fresh(x + "_f")
	dq := &onnx.Node{Name: c.fresh(n.Name + "_dq"), OpType: "DequantizeLinear", Inputs: ins, Outputs: []string{o},
		Attrs: map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: axis}}}
	return dq, o, nil
}

// zeroCount returns how many values a zero-point input holds (1 when absent).
func (c *compiler) zeroCount(name string) int64 {
	if name == "" {
		return 1
	}
	if v := c.vals[c.resolve(name)]; v != nil {
		return volumeOf(v.Dims)
	}
	return 1
}

func input(n *onnx.Node, i int) string {
	if i < len(n.Inputs) {
		return n.Inputs[i]
	}
	return ""
}

func convAttrs(n *onnx.Node) map[string]*onnx.Attribute {
	a := map[string]*onnx.Attribute{}
	for k, v := range n.Attrs {
		a[k] = v
	}
	return a
}

// expandInteger: ConvInteger(x, w, [xz], [wz]) and MatMulInteger(a, b, [az], [bz]) give
// int32 (x - xz) conv/matmul (w - wz): exact in float32 while sums stay below 2^24.
func (c *compiler) expandInteger(n *onnx.Node) ([]*onnx.Node, error) {
	conv := n.OpType == "ConvInteger"
	if len(n.Inputs) < 2 || len(n.Outputs) != 1 {
		return nil, c.qerr(n, "want 2 to 4 inputs and one output")
	}
	xz, wz := input(n, 2), input(n, 3)
	// per-row a zero point (MatMulInteger) runs along axis 0, per-column b along axis 1,
	// per-output-channel w (ConvInteger) along axis 0
	dx, fx, err := c.integerDQ(n, n.Inputs[0], xz, c.zeroCount(xz), 0)
	if err != nil {
		return nil, err
	}
	waxis := int64(0)
	if !conv {
		waxis = -1
	}
	dw, fw, err := c.integerDQ(n, n.Inputs[1], wz, c.zeroCount(wz), waxis)
	if err != nil {
		return nil, err
	}
	acc := c.fresh(n.Outputs[0] + "_acc")
	op := &onnx.Node{Name: c.fresh(n.Name + "_f"), Inputs: []string{fx, fw}, Outputs: []string{acc}}
	if conv {
		op.OpType, op.Attrs = "Conv", convAttrs(n)
	} else {
		op.OpType, op.Attrs = "MatMul", map[string]*onnx.Attribute{}
	}
	zero := c.fresh(n.Name + "_zero32")
	if err := c.addConst(zero, &onnx.Tensor{Name: zero, DType: onnx.Int32, Dims: []int64{}, I64: []int64{0}}); err != nil {
		return nil, err
	}
	one, err := c.constF32(n.Name+"_one32", []int64{}, []float32{1})
	if err != nil {
		return nil, err
	}
	q := &onnx.Node{Name: c.fresh(n.Name + "_q"), OpType: "QuantizeLinear", Inputs: []string{acc, one, zero},
		Outputs: []string{n.Outputs[0]}, Attrs: map[string]*onnx.Attribute{}}
	return []*onnx.Node{dx, dw, op, q}, nil
}

// expandQLinear: QLinearConv(x, xs, xz, w, ws, wz, ys, yz, [B]) and QLinearMatMul(a, as, az,
// b, bs, bz, ys, yz) compute the integer accumulator exactly in float32 (values minus zero
// points, scale 1), add B, and quantize with scale ys / (xs * ws) per output channel.
func (c *compiler) expandQLinear(n *onnx.Node) ([]*onnx.Node, error) {
	conv := n.OpType == "QLinearConv"
	if len(n.Inputs) < 8 || len(n.Outputs) != 1 {
		return nil, c.qerr(n, "want 8 or 9 inputs and one output")
	}
	scalar := func(i int) ([]float32, error) {
		t := c.consts[c.resolve(n.Inputs[i])]
		if t == nil || t.DType != onnx.Float || len(t.F32) == 0 {
			return nil, c.qerr(n, "input %d (a scale) must be a float32 constant", i)
		}
		return t.F32, nil
	}
	xs, err := scalar(1)
	if err != nil {
		return nil, err
	}
	ws, err := scalar(4)
	if err != nil {
		return nil, err
	}
	ys, err := scalar(6)
	if err != nil {
		return nil, err
	}
	if len(xs) != 1 || len(ys) != 1 {
		return nil, c.qerr(n, "input and output scales must be per tensor")
	}
	dx, fx, err := c.integerDQ(n, n.Inputs[0], n.Inputs[2], 1, 1)
	if err != nil {
		return nil, err
	}
	waxis := int64(0)
	if !conv {
		waxis = -1
	}
	dw, fw, err := c.integerDQ(n, n.Inputs[3], n.Inputs[5], int64(len(ws)), waxis)
	if err != nil {
		return nil, err
	}
	nodes := []*onnx.Node{dx, dw}
	acc := c.fresh(n.Outputs[0] + "_acc")
	op := &onnx.Node{Name: c.fresh(n.Name + "_f"), Inputs: []string{fx, fw}, Outputs: []string{acc}}
	if conv {
		op.OpType, op.Attrs = "Conv", convAttrs(n)
		if b := input(n, 8); b != "" {
			db, fb, err := c.integerDQ(n, b, "", 1, 0)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, db)
			op.Inputs = append(op.Inputs, fb)
		}
	} else {
		op.OpType, op.Attrs = "MatMul", map[string]*onnx.Attribute{}
	}
	nodes = append(nodes, op)
	scales := make([]float32, len(ws))
	for i, w := range ws {
		scales[i] = float32(float64(ys[0]) / (float64(xs[0]) * float64(w)))
	}
	dims := []int64{}
	axis := int64(1)
	if len(scales) > 1 {
		dims = []int64{int64(len(scales))}
		if !conv {
			axis = -1
		}
	}
	s, err := c.constF32(n.Name+"_requant", dims, scales)
	if err != nil {
		return nil, err
	}
	q := &onnx.Node{Name: c.fresh(n.Name + "_q"), OpType: "QuantizeLinear", Inputs: []string{acc, s, n.Inputs[7]},
		Outputs: []string{n.Outputs[0]}, Attrs: map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: axis}}}
	return append(nodes, q), nil
}

// ---- the int8 fast path ----

// fuseQDQ rewrites Conv(DequantizeLinear(QuantizeLinear(x)), DequantizeLinear(Wq)) with a
// per-tensor 8-bit input and symmetric per-output-channel (or per-tensor) int8 weights
// into a Conv reading x with the qdq* attributes: the kernel quantizes x itself and runs an
// int8 convolution. The result equals the reference path's up to float rounding of the
// accumulation (the s32 sum is exact; the reference sums dequantized floats). A Conv whose
// pattern does not fit keeps the reference path.
//
// MatMul by 2-D weights (K, N) quantized along axis 1, and Gemm (transA 0, alpha 1, beta 1)
// by weights quantized along their N axis, fuse the same way: the kernel runs oneDNN's int8
// matmul on the input flattened to 2-D.
func (c *compiler) fuseQDQ() {
	ix := c.index()
	for _, n := range c.nodes {
		if ix.dead[n] || n.Attrs[qdqWeights] != nil || len(n.Inputs) < 2 {
			continue
		}
		src := c.dq[n.Inputs[1]]
		if src == nil || src.q.DType != onnx.Int8 {
			continue
		}
		nAxis, ok := 0, false // the weights' output-channel axis
		switch n.OpType {
		case "Conv":
			ok = true
		case "MatMul":
			nAxis = 1
			av := c.vals[n.Inputs[0]]
			ok = len(src.q.Dims) == 2 && av != nil && len(av.Dims) >= 2
		case "Gemm":
			x := &nodeCtx{c: c, n: n}
			ta, e1 := x.attrInt("transA", 0)
			tb, e2 := x.attrInt("transB", 0)
			alpha, e3 := x.attrFloat("alpha", 1)
			beta, e4 := x.attrFloat("beta", 1)
			if tb == 0 {
				nAxis = 1
			}
			ok = e1 == nil && e2 == nil && e3 == nil && e4 == nil && ta == 0 && alpha == 1 && beta == 1 && len(src.q.Dims) == 2
			if ok && len(n.Inputs) > 2 && n.Inputs[2] != "" {
				// a constant bias of N values (broadcast over the rows)
				b := c.consts[n.Inputs[2]]
				ok = b != nil && b.DType == onnx.Float && volumeOf(b.Dims) == src.q.Dims[nAxis] &&
					(len(b.Dims) == 1 || len(b.Dims) == 2 && b.Dims[0] == 1)
			}
		}
		if !ok || (src.axis != nAxis && src.axis != -1) {
			continue
		}
		if !allZero(src.zeros) {
			continue // asymmetric weights: the reference path
		}
		if len(n.Inputs) > 2 && n.Inputs[2] != "" && c.consts[n.Inputs[2]] == nil {
			continue // the kernel folds the bias into the accumulator's units: it must be constant
		}
		dq := ix.producer[n.Inputs[0]]
		if dq == nil || dq.OpType != "DequantizeLinear" {
			continue
		}
		q := ix.producer[dq.Inputs[0]]
		if q == nil || q.OpType != "QuantizeLinear" {
			continue
		}
		xs, xz, signed, ok := c.sameTensorParams(q, dq)
		if !ok {
			continue
		}
		wsc := make([]float32, src.q.Dims[nAxis])
		for i := range wsc {
			wsc[i] = src.scales[i%len(src.scales)]
		}
		ix.dropReader(n.Inputs[0], n)
		n.Inputs[0] = q.Inputs[0]
		ix.addReader(n.Inputs[0], n)
		n.Attrs[qdqWeights] = &onnx.Attribute{Name: qdqWeights, Type: onnx.AttrTensor, T: src.q}
		n.Attrs[qdqWScales] = &onnx.Attribute{Name: qdqWScales, Type: onnx.AttrFloats, Floats: wsc}
		n.Attrs[qdqXScale] = &onnx.Attribute{Name: qdqXScale, Type: onnx.AttrFloat, F: xs}
		n.Attrs[qdqXZero] = &onnx.Attribute{Name: qdqXZero, Type: onnx.AttrInt, I: xz}
		n.Attrs[qdqXSigned] = &onnx.Attribute{Name: qdqXSigned, Type: onnx.AttrInt, I: signed}
	}
	c.pruneDead()
}

// Int8ChainEnv names the environment variable that, set to 0, turns chainQDQ off (A/B).
const Int8ChainEnv = "IDK_INT8_CHAIN"

// chainQDQ lets an int8 Conv write its output as 8-bit values when every reader of that
// output is an int8 Conv (input 0 only) with the same input scale, zero point and type, or
// a MaxPool read only by such Convs (the kernel then pools the 8-bit values), and its
// post-ops are activations only (no residual sum): the kernel then requantizes in the
// convolution's output scales (or a last linear post-op) and the readers skip their
// quantizing reorder. The values equal the reference path's up to float rounding of the
// accumulation (a rounding tie can move a value by one step).
func (c *compiler) chainQDQ() {
	if os.Getenv(Int8ChainEnv) == "0" {
		return
	}
	ix := c.index()
	for _, n := range c.nodes {
		if ix.dead[n] || n.OpType != "Conv" || n.Attrs[qdqWeights] == nil || n.Attrs[qdqYScale] != nil || len(n.Outputs) != 1 {
			continue
		}
		if a := n.Attrs[postOpsAttr]; a != nil && !activationsOnly(a.Strings) && n.Attrs[qdqSScale] == nil {
			continue
		}
		if len(postOpsOf(n)) >= 7 || hasPrefix(postOpsOf(n), "hard_sigmoid") {
			// no room for the requantizing linear post-op, or a linear one before it (oneDNN
			// runs HardSigmoid as linear + clip; 2.6 applies a second linear post-op with
			// the first one's scale)
			continue
		}
		y := n.Outputs[0]
		if c.outputs[y] || len(ix.readers[y]) == 0 {
			continue
		}
		qs, ok := c.int8Readers(ix, y, true)
		for _, q := range qs {
			ok = ok && q == qs[0]
		}
		if !ok || len(qs) == 0 || (n.Attrs[qdqSSigned] != nil && n.Attrs[qdqSSigned].I != qs[0].signed) {
			continue // (an 8-bit summand is overwritten with the output: the same type)
		}
		n.Attrs[qdqYScale] = &onnx.Attribute{Name: qdqYScale, Type: onnx.AttrFloat, F: qs[0].scale}
		n.Attrs[qdqYZero] = &onnx.Attribute{Name: qdqYZero, Type: onnx.AttrInt, I: qs[0].zero}
		n.Attrs[qdqYSigned] = &onnx.Attribute{Name: qdqYSigned, Type: onnx.AttrInt, I: qs[0].signed}
	}
}

// qparam is one per-tensor 8-bit quantization of a value.
type qparam struct {
	scale        float32
	zero, signed int64
}

func hasPrefix(posts []string, p string) bool {
	for _, s := range posts {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func postOpsOf(n *onnx.Node) []string {
	if a := n.Attrs[postOpsAttr]; a != nil {
		return a.Strings
	}
	return nil
}

// int8Readers returns how the nodes reading y quantize it when every one is an int8 Conv
// reading it as its input 0 only, or an int8 Conv reading it only as its quantized summand
// (fuseQDQAdd); with throughPool, a MaxPool reading y (one output, not a graph output) may
// stand for its own readers, which must then be such Convs: max pooling commutes with
// quantization (monotone), so the kernel pools the 8-bit values.
func (c *compiler) int8Readers(ix *graphIndex, y string, throughPool bool) ([]qparam, bool) {
	var out []qparam
	for r, slots := range ix.readers[y] {
		if throughPool && r.OpType == "MaxPool" && slots == 1 && (len(r.Outputs) == 1 || r.Outputs[1] == "") &&
			!c.outputs[r.Outputs[0]] && os.Getenv(Int8PoolEnv) != "0" {
			more, ok := c.int8Readers(ix, r.Outputs[0], false)
			if !ok || len(more) == 0 {
				return nil, false
			}
			out = append(out, more...)
			continue
		}
		if slots != 1 || r.OpType != "Conv" || r.Attrs[qdqWeights] == nil {
			return nil, false
		}
		if r.Inputs[0] == y {
			out = append(out, qparam{r.Attrs[qdqXScale].F, r.Attrs[qdqXZero].I, r.Attrs[qdqXSigned].I})
			continue
		}
		if r.Attrs[qdqSScale] == nil || !hasSum(r, y) {
			return nil, false
		}
		out = append(out, qparam{r.Attrs[qdqSScale].F, r.Attrs[qdqSZero].I, r.Attrs[qdqSSigned].I})
	}
	return out, true
}

func hasSum(n *onnx.Node, y string) bool {
	for _, p := range postOpsOf(n) {
		if p == "sum:"+y {
			return true
		}
	}
	return false
}

// Int8AddEnv names the environment variable that, set to 0, turns fuseQDQAdd off (A/B):
// the Q/DQ around residual Adds then run on the reference path.
const Int8AddEnv = "IDK_INT8_ADD"

// fuseQDQAdd fuses Add(DQ(Q(a)), DQ(Q(b))), with a the output of an int8 Conv without
// post-ops read only through that Q/DQ and b computed before the Conv (same dims), into the
// Conv: its output is rounded through a's quantization (qdq_o_*: round and saturate as
// oneDNN post-ops), then b is added as its "sum:" post-op read through b's quantization
// (qdq_s_*: the kernel adds b's 8-bit values with their scale and zero point), and a ReLU
// after the Add follows (it commutes with the kernel's scaling, as other activations would
// not; oneDNN 2.6 also mixes up two linear post-ops in one convolution). When both inputs are such Convs the later one takes the Add (the
// other's output is then its summand: ResNet's downsampling blocks). chainQDQ may then let
// the Conv write 8 bits, so that a residual stream stays 8-bit between blocks. The values
// equal the reference path's up to float rounding (a tie may round one step apart).
func (c *compiler) fuseQDQAdd() {
	if os.Getenv(Int8AddEnv) == "0" {
		return
	}
	ix := c.index()
	type side struct {
		v     string
		q, dq *onnx.Node
		p     qparam
		conv  *onnx.Node // the int8 Conv producing v, read only through q and dq by the Add
	}
	for _, add := range c.nodes {
		if ix.dead[add] || add.OpType != "Add" || len(add.Inputs) != 2 || len(add.Outputs) != 1 || add.Inputs[0] == add.Inputs[1] {
			continue
		}
		var sides [2]side
		ok := true
		for i, in := range add.Inputs {
			dq := ix.producer[in]
			if dq == nil || dq.OpType != "DequantizeLinear" || c.consts[in] != nil {
				ok = false
				break
			}
			q := ix.producer[dq.Inputs[0]]
			if q == nil || q.OpType != "QuantizeLinear" {
				ok = false
				break
			}
			s, z, sg, good := c.sameTensorParams(q, dq)
			if !good {
				ok = false
				break
			}
			sd := side{v: q.Inputs[0], q: q, dq: dq, p: qparam{s, z, sg}}
			p := ix.producer[sd.v]
			if p != nil && p.OpType == "Conv" && p.Attrs[qdqWeights] != nil && p.Attrs[qdqOScale] == nil && len(p.Outputs) == 1 &&
				len(postOpsOf(p)) == 0 && !c.outputs[sd.v] && ix.onlyReader(sd.v) == q &&
				!c.outputs[in] && !c.outputs[dq.Inputs[0]] && ix.onlyReader(dq.Inputs[0]) == dq && ix.onlyReader(in) == add {
				sd.conv = p
			}
			sides[i] = sd
		}
		if !ok {
			continue
		}
		m := -1 // the side whose Conv takes the Add
		for i, sd := range sides {
			o := sides[1-i]
			if sd.conv == nil || o.v == sd.v || c.consts[o.v] != nil {
				continue
			}
			if p := ix.producer[o.v]; p != nil && ix.pos[p] >= ix.pos[sd.conv] {
				continue
			}
			vd, od, ad := c.vals[sd.v], c.vals[o.v], c.vals[add.Outputs[0]]
			if vd == nil || od == nil || ad == nil || od.DType != onnx.Float || !dimsEqual(vd.Dims, od.Dims) || !dimsEqual(vd.Dims, ad.Dims) {
				continue
			}
			if m < 0 || ix.pos[sd.conv] > ix.pos[sides[m].conv] {
				m = i
			}
		}
		if m < 0 {
			continue
		}
		main, other, conv := sides[m], sides[1-m], sides[m].conv
		posts := []string{"sum:" + other.v}
		set := func(name string, f float32, i int64, isInt bool) {
			if isInt {
				conv.Attrs[name] = &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: i}
			} else {
				conv.Attrs[name] = &onnx.Attribute{Name: name, Type: onnx.AttrFloat, F: f}
			}
		}
		set(qdqOScale, main.p.scale, 0, false)
		set(qdqOZero, 0, main.p.zero, true)
		set(qdqOSigned, 0, main.p.signed, true)
		set(qdqSScale, other.p.scale, 0, false)
		set(qdqSZero, 0, other.p.zero, true)
		set(qdqSSigned, 0, other.p.signed, true)
		ix.kill(main.q)
		ix.kill(main.dq)
		ix.kill(add)
		// the summand's Q/DQ served the Add alone unless a reader of x kept its own
		if o := other.dq.Outputs[0]; ix.uses(o) == 0 && !c.outputs[o] {
			ix.kill(other.dq)
			if o := other.q.Outputs[0]; ix.uses(o) == 0 && !c.outputs[o] {
				ix.kill(other.q)
			}
		}
		ix.addReader(other.v, conv)
		for _, v := range []string{main.v, main.q.Outputs[0], main.dq.Outputs[0]} {
			delete(c.vals, v)
		}
		conv.Outputs[0] = add.Outputs[0]
		ix.producer[conv.Outputs[0]] = conv
		if out, next := conv.Outputs[0], ix.onlyReader(conv.Outputs[0]); !c.outputs[out] && next != nil && next.OpType == "Relu" {
			posts = append(posts, "relu")
			ix.kill(next)
			delete(c.vals, out)
			conv.Outputs[0] = next.Outputs[0]
			ix.producer[conv.Outputs[0]] = conv
		}
		conv.Attrs[postOpsAttr] = &onnx.Attribute{Name: postOpsAttr, Type: onnx.AttrStrings, Strings: posts}
	}
	c.compact(ix)
}

// Int8PoolEnv names the environment variable that, set to 0, stops chainQDQ from chaining
// through a MaxPool (A/B).
const Int8PoolEnv = "IDK_INT8_POOL"

// activationsOnly reports whether post-ops are activations (no "sum:"), leaving room for the
// kernel's requantizing one.
func activationsOnly(posts []string) bool {
	for _, p := range posts {
		if strings.HasPrefix(p, "sum:") {
			return false
		}
	}
	return len(posts) < 7
}

func allZero(v []int64) bool {
	for _, z := range v {
		if z != 0 {
			return false
		}
	}
	return true
}

// sameTensorParams reports the per-tensor scale, zero point and signedness shared by a
// QuantizeLinear q and the DequantizeLinear dq reading it (8-bit only).
func (c *compiler) sameTensorParams(q, dq *onnx.Node) (scale float32, zero, signed int64, ok bool) {
	get := func(n *onnx.Node) (float32, int64, onnx.DataType, bool) {
		s := c.consts[n.Inputs[1]]
		if s == nil || len(s.F32) != 1 {
			return 0, 0, 0, false
		}
		if len(n.Inputs) < 3 || n.Inputs[2] == "" {
			return s.F32[0], 0, onnx.Uint8, true
		}
		z := c.consts[n.Inputs[2]]
		if z == nil || len(z.I64) != 1 {
			return 0, 0, 0, false
		}
		return s.F32[0], z.I64[0], z.DType, true
	}
	s1, z1, t1, ok1 := get(q)
	s2, z2, t2, ok2 := get(dq)
	if !ok1 || !ok2 || s1 != s2 || z1 != z2 || t1 != t2 || (t1 != onnx.Uint8 && t1 != onnx.Int8) || !(s1 > 0) {
		return 0, 0, 0, false
	}
	if v := c.vals[q.Outputs[0]]; v == nil || v.DType != t1 {
		return 0, 0, 0, false
	}
	if t1 == onnx.Int8 {
		signed = 1
	}
	return s1, z1, signed, true
}
