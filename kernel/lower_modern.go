package kernel

import (
	"fmt"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// Lowering of the operators of modern models (see graph/modern.go): integer and boolean
// tensors at run time, comparisons, selection, element-wise float functions, layer
// normalization, reductions, ArgMax and Split.

// lowerModern lowers n if it is one of these operators; handled reports whether it was.
func (b *builder) lowerModern(n *onnx.Node) (handled bool, err error) {
	elt := func(alg int64, alpha, beta float32) error {
		return b.unary(opEltwise, n, []int64{alg}, []float32{alpha, beta})
	}
	switch n.OpType {
	case "Cast":
		to := onnx.DataType(attrInt(n, "to", 0))
		code, narrow := castCode(to)
		if !narrow && to != onnx.Float && to != onnx.Int64 && to != onnx.Bool {
			return true, b.errf("Cast to %v at run time is not supported", to)
		}
		return true, b.unary(opCast, n, []int64{code}, nil)
	case "Equal":
		return true, b.nary(opCompare, n, []int64{cmpEq})
	case "Less":
		return true, b.nary(opCompare, n, []int64{cmpLt})
	case "Greater":
		return true, b.nary(opCompare, n, []int64{cmpGt})
	case "LessOrEqual":
		return true, b.nary(opCompare, n, []int64{cmpLe})
	case "GreaterOrEqual":
		return true, b.nary(opCompare, n, []int64{cmpGe})
	case "And":
		return true, b.nary(opCompare, n, []int64{cmpAnd})
	case "Or":
		return true, b.nary(opCompare, n, []int64{cmpOr})
	case "Xor":
		return true, b.nary(opCompare, n, []int64{cmpXor})
	case "Where":
		return true, b.nary(opWhere, n, nil)
	case "Expand":
		return true, b.unary(opExpand, n, nil, nil)
	case "Not":
		return true, b.unary(opUnary, n, []int64{unNot}, nil)
	case "Neg":
		return true, b.unary(opUnary, n, []int64{unNeg}, nil)
	case "Abs":
		return true, b.unary(opUnary, n, []int64{unAbs}, nil)
	case "Sign":
		return true, b.unary(opUnary, n, []int64{unSign}, nil)
	case "Erf":
		return true, b.unary(opUnary, n, []int64{unErf}, nil)
	case "Floor":
		return true, b.unary(opUnary, n, []int64{unFloor}, nil)
	case "Ceil":
		return true, b.unary(opUnary, n, []int64{unCeil}, nil)
	case "Sqrt":
		return true, elt(eltSqrt, 0, 0)
	case "Exp":
		return true, elt(eltExp, 0, 0)
	case "Log":
		return true, elt(eltLog, 0, 0)
	case "Reciprocal":
		return true, elt(eltPow, 1, -1)
	case "Softplus":
		return true, elt(eltSoftplus, 0, 0)
	case "Mish":
		return true, elt(eltMish, 0, 0)
	case "Round":
		return true, elt(eltRound, 0, 0)
	case "Gelu":
		if attrString(n, "approximate", "none") == "tanh" {
			return true, elt(eltGeluTanh, 0, 0)
		}
		return true, elt(eltGeluErf, 0, 0)
	case "Pow":
		if e, ok := b.g.Initializers[n.Inputs[1]]; ok && e != nil && volume(e.Dims) == 1 {
			v, _, err := b.constScalar(1)
			if err != nil {
				return true, err
			}
			return true, elt(eltPow, 1, v)
		}
		return true, b.lowerPow(n)
	case "Max", "Min":
		return true, b.lowerMaxMin(n)
	case "Mod":
		if attrInt(n, "fmod", 0) != 0 {
			return true, b.binary(n, binFmod)
		}
		return true, b.binary(n, binMod)
	case "CumSum":
		xd, err := b.dims(n.Inputs[0])
		if err != nil {
			return true, err
		}
		ax, _, err := b.constInts(1)
		if err != nil || len(ax) != 1 {
			return true, b.errf("axis must be one constant value")
		}
		a, ok := normAxis(ax[0], len(xd))
		if !ok {
			return true, b.errf("axis out of range")
		}
		return true, b.unary(opCumSum, n, []int64{a, attrInt(n, "exclusive", 0), attrInt(n, "reverse", 0)}, nil)
	case "Tile":
		return true, b.lowerTile(n)
	case "LayerNormalization":
		return true, b.lowerLayerNorm(n)
	case "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd":
		alg := map[string]int64{"ReduceMean": redMean, "ReduceSum": redSum, "ReduceMax": redMax, "ReduceMin": redMin,
			"ReduceL1": redL1, "ReduceL2": redL2, "ReduceSumSquare": redSumSquare, "ReduceProd": redProd}[n.OpType]
		return true, b.lowerReduce(n, alg)
	case "ArgMax", "ArgMin":
		return true, b.lowerArgMax(n)
	case "Split":
		return true, b.lowerSplit(n)
	case "TopK":
		return true, b.lowerTopK(n)
	case "Resize":
		return true, b.lowerResize(n)
	case "Einsum":
		return true, b.lowerEinsum(n)
	case graph.AttentionOp:
		return true, b.lowerAttention(n)
	}
	return false, nil
}

// nary lowers a node whose inputs all go to one kernel op.
func (b *builder) nary(kind int32, n *onnx.Node, ia []int64) error {
	ins := make([]int32, len(n.Inputs))
	for i, name := range n.Inputs {
		id, err := b.in(name)
		if err != nil {
			return err
		}
		ins[i] = id
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(kind, ins, []int32{y}, ia, nil)
}

// typedTemp declares an unnamed intermediate tensor of the kernel dtype of value name.
func (b *builder) typedTemp(name string, dims []int64) (int32, error) {
	dt := int32(dtF32)
	if v, ok := b.g.Values[name]; ok && v != nil {
		if k, ok := kernelDType(v.DType); ok {
			dt = k
		}
	} else if t, ok := b.g.Initializers[name]; ok && t != nil {
		if k, ok := kernelDType(t.DType); ok {
			dt = k
		}
	}
	return b.addTensor(dt, dims, nil, nil)
}

// lowerTile views x as (1, d0, 1, d1, ...) (a 1 only where the repeat is not 1 and the
// dim is not 1), expands that to (r0, d0, r1, d1, ...) and views the result with the
// output's dims.
func (b *builder) lowerTile(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	reps, ok, err := b.constInts(1)
	if err != nil || !ok || len(reps) != len(xd) {
		return b.errf("repeats must be a constant with one value per dim")
	}
	var in, ex []int64
	for i, d := range xd {
		switch {
		case reps[i] == 1:
			in, ex = append(in, d), append(ex, d)
		case d == 1:
			in, ex = append(in, 1), append(ex, reps[i])
		default:
			in, ex = append(in, 1, d), append(ex, reps[i], d)
		}
	}
	if len(ex) > 8 {
		return b.errf("tile needs rank %d inside the kernel", len(ex))
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	xv, err := b.typedTemp(n.Inputs[0], in)
	if err != nil {
		return err
	}
	if err := b.op(opReshape, []int32{x}, []int32{xv}, nil, nil); err != nil {
		return err
	}
	e, err := b.typedTemp(n.Inputs[0], ex)
	if err != nil {
		return err
	}
	if err := b.op(opExpand, []int32{xv}, []int32{e}, nil, nil); err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opReshape, []int32{e}, []int32{y}, nil, nil)
}

func (b *builder) lowerLayerNorm(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	ax, ok := normAxis(attrInt(n, "axis", -1), len(xd))
	if !ok {
		return b.errf("axis out of range")
	}
	ins := []int32{}
	for _, name := range n.Inputs {
		if name == "" {
			continue
		}
		id, err := b.in(name)
		if err != nil {
			return err
		}
		ins = append(ins, id)
	}
	outs := []int32{}
	for i, name := range n.Outputs {
		if name == "" {
			// an unused statistic before a used one: computed into a temporary
			st := append([]int64(nil), xd...)
			for k := ax; k < int64(len(st)); k++ {
				st[k] = 1
			}
			id, err := b.temp(st)
			if err != nil {
				return err
			}
			outs = append(outs, id)
			continue
		}
		_ = i
		id, err := b.out(name)
		if err != nil {
			return err
		}
		outs = append(outs, id)
	}
	return b.op(opLayerNorm, ins, outs, []int64{ax}, []float32{attrFloat(n, "epsilon", 1e-5)})
}

// reduceKeepDims returns x's dims with the reduced axes set to 1.
func (b *builder) reduceKeepDims(n *onnx.Node, xd []int64) ([]int64, error) {
	axes, ok := attrInts(n, "axes")
	red := make([]bool, len(xd))
	if !ok || len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
	}
	for _, a := range axes {
		a, ok := normAxis(a, len(xd))
		if !ok {
			return nil, b.errf("axis out of range")
		}
		red[a] = true
	}
	kd := make([]int64, len(xd))
	for i := range xd {
		kd[i] = xd[i]
		if red[i] {
			kd[i] = 1
		}
	}
	return kd, nil
}

// viaKeepDims runs one op into a tensor of dims kd and views it as the node's output.
func (b *builder) viaKeepDims(n *onnx.Node, kind int32, x int32, kd []int64, ia []int64, dt int32) error {
	return b.viaKeepDimsF(n, kind, x, kd, ia, nil, dt)
}

// viaKeepDimsF is viaKeepDims with float attributes.
func (b *builder) viaKeepDimsF(n *onnx.Node, kind int32, x int32, kd []int64, ia []int64, fa []float32, dt int32) error {
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return err
	}
	if volume(kd) != volume(yd) {
		return b.errf("output dims %v do not match the reduction %v", yd, kd)
	}
	if equalDims(kd, yd) {
		y, err := b.out(n.Outputs[0])
		if err != nil {
			return err
		}
		return b.op(kind, []int32{x}, []int32{y}, ia, fa)
	}
	t, err := b.addTensor(dt, kd, nil, nil)
	if err != nil {
		return err
	}
	if err := b.op(kind, []int32{x}, []int32{t}, ia, fa); err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opReshape, []int32{t}, []int32{y}, nil, nil)
}

func (b *builder) lowerReduce(n *onnx.Node, alg int64) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	kd, err := b.reduceKeepDims(n, xd)
	if err != nil {
		return err
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	if alg == redMean {
		return b.viaKeepDims(n, opReduceMean, x, kd, nil, dtF32)
	}
	if (alg == redL1 || alg == redL2 || alg == redSumSquare) && equalDims(kd, xd) && volume(xd) > 0 {
		// nothing reduced (every reduced dim has size 1): |x|, or x^2, element-wise
		if alg == redSumSquare {
			return b.viaKeepDimsF(n, opEltwise, x, kd, []int64{eltPow}, []float32{1, 2}, dtF32)
		}
		return b.viaKeepDims(n, opUnary, x, kd, []int64{unAbs}, dtF32)
	}
	return b.viaKeepDims(n, opReduce, x, kd, []int64{alg}, dtF32)
}

func (b *builder) lowerArgMax(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	ax, ok := normAxis(attrInt(n, "axis", 0), len(xd))
	if !ok {
		return b.errf("axis out of range")
	}
	kd := append([]int64(nil), xd...)
	kd[ax] = 1
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	isMin := int64(0)
	if n.OpType == "ArgMin" {
		isMin = 1
	}
	return b.viaKeepDims(n, opArgMax, x, kd, []int64{ax, attrInt(n, "select_last_index", 0), isMin}, dtI64)
}

// lowerSplit lowers each output as a Slice of the input.
func (b *builder) lowerSplit(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	ax, ok := normAxis(attrInt(n, "axis", 0), len(xd))
	if !ok {
		return b.errf("axis out of range")
	}
	sizes, ok := attrInts(n, "split")
	if !ok || len(sizes) < len(n.Outputs) {
		return b.errf("split sizes missing")
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	off := int64(0)
	for i, o := range n.Outputs {
		if o != "" {
			y, err := b.out(o)
			if err != nil {
				return err
			}
			ia := make([]int64, 2*len(xd))
			for k := range xd {
				ia[len(xd)+k] = 1
			}
			if sizes[i] > 0 {
				ia[ax] = off
			}
			if err := b.op(opSlice, []int32{x}, []int32{y}, ia, nil); err != nil {
				return err
			}
		}
		off += sizes[i]
	}
	return nil
}

// lowerPow uses oneDNN's eltwise pow for a constant scalar exponent, else the C loop
// (an integer exponent is cast to float32 first).
func (b *builder) lowerPow(n *onnx.Node) error {
	if e, ok := b.g.Initializers[n.Inputs[1]]; ok && e != nil && volume(e.Dims) == 1 {
		v, _, err := b.constScalar(1)
		if err != nil {
			return err
		}
		return b.unary(opEltwise, n, []int64{eltPow}, []float32{1, v})
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	e, err := b.in(n.Inputs[1])
	if err != nil {
		return err
	}
	if v := b.g.Values[n.Inputs[1]]; v != nil && v.DType != onnx.Float {
		f, err := b.temp(v.Dims)
		if err != nil {
			return err
		}
		if err := b.op(opCast, []int32{e}, []int32{f}, []int64{castPlain}, nil); err != nil {
			return err
		}
		e = f
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opBinary, []int32{x, e}, []int32{y}, []int64{binPow}, nil)
}

// lowerMaxMin chains binary max/min over the inputs (one input: a copy).
func (b *builder) lowerMaxMin(n *onnx.Node) error {
	alg := int64(binMax)
	if n.OpType == "Min" {
		alg = binMin
	}
	acc, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	if len(n.Inputs) == 1 {
		y, err := b.out(n.Outputs[0])
		if err != nil {
			return err
		}
		return b.op(opCopy, []int32{acc}, []int32{y}, nil, nil)
	}
	accDims, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	for i := 1; i < len(n.Inputs); i++ {
		w, err := b.in(n.Inputs[i])
		if err != nil {
			return err
		}
		var y int32
		if i == len(n.Inputs)-1 {
			if y, err = b.out(n.Outputs[0]); err != nil {
				return err
			}
		} else {
			wd, err := b.dims(n.Inputs[i])
			if err != nil {
				return err
			}
			if accDims, err = broadcastDims(accDims, wd); err != nil {
				return b.errf("%v", err)
			}
			if y, err = b.typedTemp(n.Inputs[0], accDims); err != nil {
				return err
			}
		}
		if err := b.op(opBinary, []int32{acc, w}, []int32{y}, []int64{alg}, nil); err != nil {
			return err
		}
		acc = y
	}
	return nil
}

// broadcastDims returns the numpy broadcast of two shapes.
func broadcastDims(a, c []int64) ([]int64, error) {
	r := max(len(a), len(c))
	out := make([]int64, r)
	for i := 0; i < r; i++ {
		x, y := int64(1), int64(1)
		if j := len(a) - r + i; j >= 0 {
			x = a[j]
		}
		if j := len(c) - r + i; j >= 0 {
			y = c[j]
		}
		switch {
		case x == y || y == 1:
			out[i] = x
		case x == 1:
			out[i] = y
		default:
			return nil, fmt.Errorf("dims %v and %v do not broadcast", a, c)
		}
	}
	return out, nil
}

// castCode is IDK_OP_CAST's target code for an ONNX type; narrow reports an integer type
// narrower than int64 (whose values the kernel carries as int64 and must wrap).
func castCode(t onnx.DataType) (code int64, narrow bool) {
	switch t {
	case onnx.Bool:
		return castBool, false
	case onnx.Int32:
		return castI32, true
	case onnx.Int16:
		return castI16, true
	case onnx.Int8:
		return castI8, true
	case onnx.Uint8:
		return castU8, true
	}
	return castPlain, false
}

// wrapsNarrow reports whether n is integer arithmetic whose exact int64 result can leave
// the range of its narrower integer output type: Add, Sub, Mul, Div (min / -1), Neg, Abs
// and CumSum. The others (Max, Min, Mod, Sign, comparisons, data movement) stay in range.
func (b *builder) wrapsNarrow(n *onnx.Node) (int64, bool) {
	switch n.OpType {
	case "Add", "Sub", "Mul", "Div", "Neg", "Abs", "CumSum":
	default:
		return 0, false
	}
	if len(n.Outputs) != 1 {
		return 0, false
	}
	v, ok := b.g.Values[n.Outputs[0]]
	if !ok || v == nil {
		return 0, false
	}
	code, narrow := castCode(v.DType)
	return code, narrow
}

// lowerWrapped lowers integer arithmetic on a type narrower than int64 into an int64
// intermediate, then wraps it into the output (IDK_OP_CAST to the narrow type), so the
// run gives what ONNX's two's-complement arithmetic gives (the graph compiler's constant
// folding wraps the same way).
func (b *builder) lowerWrapped(n *onnx.Node, code int64) error {
	out := n.Outputs[0]
	v := b.g.Values[out]
	wide := out
	for i := 0; ; i++ {
		wide = fmt.Sprintf("%s#wide%d", out, i)
		if _, taken := b.g.Values[wide]; !taken {
			break
		}
	}
	b.g.Values[wide] = &onnx.ValueInfo{Name: wide, DType: onnx.Int64, Dims: v.Dims}
	n.Outputs[0] = wide
	err := b.lowerNode(n)
	n.Outputs[0] = out
	if err != nil {
		return err
	}
	x, err := b.in(wide)
	if err != nil {
		return err
	}
	y, err := b.out(out)
	if err != nil {
		return err
	}
	return b.op(opCast, []int32{x}, []int32{y}, []int64{code}, nil)
}
