package graph

import (
	"fmt"
	"math"

	"idunno/kernel/onnx"
)

// ops is every operator the compiler accepts.
var ops map[string]*opSpec

func init() {
	unary := func(attrs ...string) *opSpec {
		return &opSpec{attrs: attrs, minIn: 1, maxIn: 1, infer: inferUnary}
	}
	binary := &opSpec{minIn: 2, maxIn: 2, infer: inferBinary, eval: evalBinary}
	ops = map[string]*opSpec{
		"Relu":        unary(),
		"Sigmoid":     unary(),
		"Tanh":        unary(),
		"HardSwish":   unary(),
		"LeakyRelu":   {attrs: []string{"alpha"}, minIn: 1, maxIn: 1, infer: inferActivation},
		"Elu":         {attrs: []string{"alpha"}, minIn: 1, maxIn: 1, infer: inferActivation},
		"HardSigmoid": {attrs: []string{"alpha", "beta"}, minIn: 1, maxIn: 1, infer: inferActivation},
		"Clip":        {attrs: []string{"min", "max"}, minIn: 1, maxIn: 3, infer: inferClip},
		"PRelu":       {minIn: 2, maxIn: 2, infer: inferPRelu},
		"Add":         binary,
		"Sub":         binary,
		"Mul":         binary,
		"Div":         binary,
		"Conv": {attrs: []string{"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"},
			minIn: 2, maxIn: 3, infer: inferConv},
		"MaxPool": {attrs: []string{"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"},
			minIn: 1, maxIn: 1, infer: inferPool},
		"AveragePool": {attrs: []string{"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"},
			minIn: 1, maxIn: 1, infer: inferPool},
		"GlobalAveragePool": {minIn: 1, maxIn: 1, infer: inferGlobalPool},
		"GlobalMaxPool":     {minIn: 1, maxIn: 1, infer: inferGlobalPool},
		"BatchNormalization": {attrs: []string{"epsilon", "momentum", "spatial", "training_mode"},
			minIn: 5, maxIn: 5, infer: inferBatchNorm},
		"Gemm":       {attrs: []string{"alpha", "beta", "transA", "transB"}, minIn: 2, maxIn: 3, infer: inferGemm},
		"MatMul":     {minIn: 2, maxIn: 2, infer: inferMatMul},
		"Concat":     {attrs: []string{"axis"}, minIn: 1, maxIn: 1 << 20, infer: inferConcat, eval: evalConcat},
		"Flatten":    {attrs: []string{"axis"}, minIn: 1, maxIn: 1, infer: inferFlatten, eval: evalReshapeLike(inferFlatten)},
		"Reshape":    {attrs: []string{"allowzero"}, minIn: 2, maxIn: 2, infer: inferReshape, eval: evalReshapeLike(inferReshape)},
		"Transpose":  {attrs: []string{"perm"}, minIn: 1, maxIn: 1, infer: inferTranspose, eval: evalTranspose},
		"Squeeze":    {attrs: []string{"axes"}, minIn: 1, maxIn: 2, infer: inferSqueeze, eval: evalReshapeLike(inferSqueeze)},
		"Unsqueeze":  {attrs: []string{"axes"}, minIn: 1, maxIn: 2, infer: inferUnsqueeze, eval: evalReshapeLike(inferUnsqueeze)},
		"Softmax":    {attrs: []string{"axis"}, minIn: 1, maxIn: 1, infer: inferSoftmax},
		"LogSoftmax": {attrs: []string{"axis"}, minIn: 1, maxIn: 1, infer: inferSoftmax},
		"LRN":        {attrs: []string{"alpha", "beta", "bias", "size"}, minIn: 1, maxIn: 1, infer: inferLRN},
		"Dropout":    {attrs: []string{"ratio", "seed", "is_test"}, minIn: 1, maxIn: 3, passThrough: dropoutThrough},
		"Identity":   {minIn: 1, maxIn: 1, passThrough: func(*nodeCtx) (bool, error) { return true, nil }},
		"Constant": {attrs: []string{"value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings", "sparse_value"},
			minIn: 0, maxIn: 0, eval: evalConstant, alwaysFold: true},
		"Pad":        {attrs: []string{"mode", "pads", "value"}, minIn: 1, maxIn: 3, infer: inferPad},
		"Shape":      {attrs: []string{"start", "end"}, minIn: 1, maxIn: 1, eval: evalShape, alwaysFold: true},
		"Gather":     {attrs: []string{"axis"}, minIn: 2, maxIn: 2, infer: inferGather, eval: evalGather},
		"Slice":      {attrs: []string{"starts", "ends", "axes"}, minIn: 1, maxIn: 5, infer: inferSlice, eval: evalSlice},
		"ReduceMean": {attrs: []string{"axes", "keepdims"}, minIn: 1, maxIn: 1, infer: inferReduce},
		"Cast":       {attrs: []string{"to", "saturate"}, minIn: 1, maxIn: 1, passThrough: castThrough, eval: evalCast, infer: inferCast},
	}
	registerFoldOnly()
	registerModern()
	registerQuant()
	registerFloatFolds()
	ops["Relu"].eval = evalUnaryFloat(func(v float32) float32 {
		if v > 0 {
			return v
		}
		return 0
	})
}

func inferUnary(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	return one(cloneDims(x.dims(0))), nil
}

func inferActivation(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if _, err := activation(x); err != nil {
		return nil, err
	}
	return inferUnary(x)
}

func inferClip(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if _, _, err := clipBounds(x); err != nil {
		return nil, err
	}
	return inferUnary(x)
}

// clipBounds returns Clip's bounds: attributes before opset 11, constant inputs after.
func clipBounds(x *nodeCtx) (float32, float32, error) {
	lo, hi := float32(-math.MaxFloat32), float32(math.MaxFloat32)
	if x.opset() < 11 {
		if x.has(1) {
			return 0, 0, x.errf("min/max inputs need opset 11")
		}
		var err error
		if lo, err = x.attrFloat("min", lo); err != nil {
			return 0, 0, err
		}
		if hi, err = x.attrFloat("max", hi); err != nil {
			return 0, 0, err
		}
	} else {
		if _, ok := x.n.Attrs["min"]; ok {
			return 0, 0, x.errf("attribute min not allowed at opset %d", x.opset())
		}
		if _, ok := x.n.Attrs["max"]; ok {
			return 0, 0, x.errf("attribute max not allowed at opset %d", x.opset())
		}
		if v, ok, err := x.constScalar(1, "min"); err != nil {
			return 0, 0, err
		} else if ok {
			lo = v
		}
		if v, ok, err := x.constScalar(2, "max"); err != nil {
			return 0, 0, err
		} else if ok {
			hi = v
		}
	}
	if math.IsNaN(float64(lo)) || math.IsNaN(float64(hi)) {
		return 0, 0, x.errf("min/max is NaN")
	}
	if lo > hi {
		return 0, 0, x.errf("min %g > max %g not supported", lo, hi)
	}
	return lo, hi, nil
}

func inferPRelu(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(1); err != nil {
		return nil, err
	}
	if !unidirectional(x.dims(0), x.dims(1)) {
		return nil, x.errf("slope dims %v do not broadcast to %v", x.dims(1), x.dims(0))
	}
	return inferUnary(x)
}

func inferBinary(x *nodeCtx) ([]onnx.ValueInfo, error) {
	a, b := x.in(0), x.in(1)
	if a.DType != b.DType {
		return nil, x.errf("input types differ: %s and %s", dtypeName(a.DType), dtypeName(b.DType))
	}
	out, err := broadcast(a.Dims, b.Dims)
	if err != nil {
		return nil, x.errf("%v", err)
	}
	return []onnx.ValueInfo{{DType: a.DType, Dims: out}}, nil
}

func inferGlobalPool(x *nodeCtx) ([]onnx.ValueInfo, error) {
	d := x.dims(0)
	if len(d) < 3 {
		return nil, x.errf("input rank %d; want at least 3", len(d))
	}
	out := cloneDims(d)
	for i := 2; i < len(out); i++ {
		out[i] = 1
	}
	return inferUnaryDims(x, out)
}

func inferUnaryDims(x *nodeCtx, out []int64) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	return one(out), nil
}

func inferBatchNorm(x *nodeCtx) ([]onnx.ValueInfo, error) {
	d := x.dims(0)
	if len(d) < 2 {
		return nil, x.errf("input rank %d; want at least 2", len(d))
	}
	if _, err := x.attrFloat("epsilon", 1e-5); err != nil {
		return nil, err
	}
	if _, err := x.attrFloat("momentum", 0.9); err != nil {
		return nil, err
	}
	if x.opset() < 9 {
		if sp, err := x.attrInt("spatial", 1); err != nil {
			return nil, err
		} else if sp != 1 {
			return nil, x.errf("spatial=%d not supported", sp)
		}
	} else if _, ok := x.n.Attrs["spatial"]; ok {
		return nil, x.errf("attribute spatial not allowed at opset %d", x.opset())
	}
	if tm, err := x.attrInt("training_mode", 0); err != nil {
		return nil, err
	} else if tm != 0 {
		return nil, x.errf("training_mode=%d not supported (inference only)", tm)
	}
	for i := 1; i <= 4; i++ {
		if err := x.floatIn(i); err != nil {
			return nil, err
		}
		if p := x.dims(i); len(p) != 1 || p[0] != d[1] {
			return nil, x.errf("input %d dims %v; want [%d]", i, p, d[1])
		}
	}
	return inferUnary(x)
}

func inferGemm(x *nodeCtx) ([]onnx.ValueInfo, error) {
	for i := 0; i < 3; i++ {
		if x.has(i) {
			if err := x.floatIn(i); err != nil {
				return nil, err
			}
		}
	}
	if x.opset() < 11 && !x.has(2) {
		return nil, x.errf("input C is required before opset 11")
	}
	if _, err := x.attrFloat("alpha", 1); err != nil {
		return nil, err
	}
	if _, err := x.attrFloat("beta", 1); err != nil {
		return nil, err
	}
	ta, err := x.bool01("transA", 0)
	if err != nil {
		return nil, err
	}
	tb, err := x.bool01("transB", 0)
	if err != nil {
		return nil, err
	}
	a, b := x.dims(0), x.dims(1)
	if len(a) != 2 || len(b) != 2 {
		return nil, x.errf("A %v and B %v must be 2-D", a, b)
	}
	m, k := a[0], a[1]
	if ta {
		m, k = k, m
	}
	k2, n := b[0], b[1]
	if tb {
		k2, n = n, k2
	}
	if k != k2 {
		return nil, x.errf("inner dims differ: A %v, B %v (transA=%v, transB=%v)", a, b, ta, tb)
	}
	out := []int64{m, n}
	if x.has(2) && !unidirectional(out, x.dims(2)) {
		return nil, x.errf("C dims %v do not broadcast to %v", x.dims(2), out)
	}
	return one(out), nil
}

func inferMatMul(x *nodeCtx) ([]onnx.ValueInfo, error) {
	for i := 0; i < 2; i++ {
		if err := x.floatIn(i); err != nil {
			return nil, err
		}
	}
	a, b := cloneDims(x.dims(0)), cloneDims(x.dims(1))
	if len(a) == 0 || len(b) == 0 {
		return nil, x.errf("MatMul of a scalar")
	}
	aVec, bVec := len(a) == 1, len(b) == 1
	if aVec {
		a = []int64{1, a[0]}
	}
	if bVec {
		b = []int64{b[0], 1}
	}
	if a[len(a)-1] != b[len(b)-2] {
		return nil, x.errf("inner dims differ: %v and %v", x.dims(0), x.dims(1))
	}
	batch, err := broadcast(a[:len(a)-2], b[:len(b)-2])
	if err != nil {
		return nil, x.errf("%v", err)
	}
	out := append(batch, a[len(a)-2], b[len(b)-1])
	if aVec {
		out = append(out[:len(out)-2], out[len(out)-1])
	}
	if bVec {
		out = out[:len(out)-1]
	}
	return one(out), nil
}

func inferConcat(x *nodeCtx) ([]onnx.ValueInfo, error) {
	a, err := x.attr("axis", onnx.AttrInt)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, x.errf("attribute axis is required")
	}
	first := x.in(0)
	for i := range x.n.Inputs {
		if !x.has(i) {
			return nil, x.errf("input %d is empty", i)
		}
	}
	axis, err := normAxis(a.I, len(first.Dims))
	if err != nil {
		return nil, x.errf("%v", err)
	}
	out := cloneDims(first.Dims)
	out[axis] = 0
	for i := range x.n.Inputs {
		v := x.in(i)
		if v.DType != first.DType {
			return nil, x.errf("input %d is %s, input 0 is %s", i, dtypeName(v.DType), dtypeName(first.DType))
		}
		if len(v.Dims) != len(out) {
			return nil, x.errf("input %d rank %d, input 0 rank %d", i, len(v.Dims), len(out))
		}
		for j, d := range v.Dims {
			if j == axis {
				out[axis] += d
				if out[axis] > maxElems {
					return nil, x.errf("concatenated axis too long")
				}
			} else if d != out[j] {
				return nil, x.errf("input %d dims %v do not match input 0 dims %v", i, v.Dims, first.Dims)
			}
		}
	}
	return []onnx.ValueInfo{{DType: first.DType, Dims: out}}, nil
}

func inferFlatten(x *nodeCtx) ([]onnx.ValueInfo, error) {
	d := x.dims(0)
	axis, err := x.attrInt("axis", 1)
	if err != nil {
		return nil, err
	}
	r := int64(len(d))
	if axis < -r || axis > r {
		return nil, x.errf("axis %d out of range for rank %d", axis, r)
	}
	if axis < 0 {
		axis += r
	}
	outer, err := numel(d[:axis])
	if err != nil {
		return nil, x.errf("%v", err)
	}
	inner, err := numel(d[axis:])
	if err != nil {
		return nil, x.errf("%v", err)
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: []int64{outer, inner}}}, nil
}

func inferReshape(x *nodeCtx) ([]onnx.ValueInfo, error) {
	d := x.dims(0)
	shape, err := x.constInts(1, "shape")
	if err != nil {
		return nil, err
	}
	allowZero, err := x.bool01("allowzero", 0)
	if err != nil {
		return nil, err
	}
	if allowZero && x.opset() < 14 {
		return nil, x.errf("allowzero needs opset 14")
	}
	total, err := numel(d)
	if err != nil {
		return nil, x.errf("%v", err)
	}
	if len(shape) > maxRank {
		return nil, x.errf("shape has rank %d", len(shape))
	}
	out := make([]int64, len(shape))
	infer := -1
	known := int64(1)
	for i, s := range shape {
		switch {
		case s == -1:
			if infer >= 0 {
				return nil, x.errf("shape %v has more than one -1", shape)
			}
			infer = i
			continue
		case s == 0 && !allowZero:
			if i >= len(d) {
				return nil, x.errf("shape %v copies dim %d of an input of rank %d", shape, i, len(d))
			}
			out[i] = d[i]
		case s < 0:
			return nil, x.errf("shape %v has a negative dim", shape)
		default:
			out[i] = s
		}
		if out[i] > maxElems {
			return nil, x.errf("shape %v too large", shape)
		}
		if out[i] != 0 {
			if known > maxElems/out[i] {
				return nil, x.errf("shape %v too large", shape)
			}
		}
		known *= out[i]
	}
	if infer >= 0 {
		if known == 0 {
			if total != 0 || allowZero {
				return nil, x.errf("cannot infer -1 in shape %v for %v", shape, d)
			}
			return nil, x.errf("cannot infer -1 in shape %v for empty input %v", shape, d)
		}
		if total%known != 0 {
			return nil, x.errf("cannot reshape %v to %v", d, shape)
		}
		out[infer] = total / known
	} else if known != total {
		return nil, x.errf("cannot reshape %v (%d elements) to %v", d, total, shape)
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

func transposePerm(x *nodeCtx) ([]int, error) {
	r := len(x.dims(0))
	p, ok, err := x.attrInts("perm")
	if err != nil {
		return nil, err
	}
	perm := make([]int, r)
	if !ok {
		for i := range perm {
			perm[i] = r - 1 - i
		}
		return perm, nil
	}
	if len(p) != r {
		return nil, x.errf("perm %v has %d entries for rank %d", p, len(p), r)
	}
	seen := make([]bool, r)
	for i, v := range p {
		if v < 0 || v >= int64(r) || seen[v] {
			return nil, x.errf("perm %v is not a permutation", p)
		}
		seen[v] = true
		perm[i] = int(v)
	}
	return perm, nil
}

func inferTranspose(x *nodeCtx) ([]onnx.ValueInfo, error) {
	perm, err := transposePerm(x)
	if err != nil {
		return nil, err
	}
	d := x.dims(0)
	out := make([]int64, len(d))
	for i, p := range perm {
		out[i] = d[p]
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

// axesParam reads Squeeze/Unsqueeze axes: an attribute before opset 13, an input after.
func axesParam(x *nodeCtx) ([]int64, bool, error) {
	if x.opset() < 13 {
		if x.has(1) {
			return nil, false, x.errf("axes input needs opset 13")
		}
		return x.attrInts("axes")
	}
	if _, ok := x.n.Attrs["axes"]; ok {
		return nil, false, x.errf("attribute axes not allowed at opset %d", x.opset())
	}
	if !x.has(1) {
		return nil, false, nil
	}
	v, err := x.constInts(1, "axes")
	return v, true, err
}

func inferSqueeze(x *nodeCtx) ([]onnx.ValueInfo, error) {
	d := x.dims(0)
	axes, ok, err := axesParam(x)
	if err != nil {
		return nil, err
	}
	drop := make([]bool, len(d))
	if !ok {
		for i, v := range d {
			drop[i] = v == 1
		}
	}
	for _, a := range axes {
		i, err := normAxis(a, len(d))
		if err != nil {
			return nil, x.errf("%v", err)
		}
		if d[i] != 1 {
			return nil, x.errf("cannot squeeze axis %d of dims %v", a, d)
		}
		if drop[i] {
			return nil, x.errf("axis %d repeated", a)
		}
		drop[i] = true
	}
	out := []int64{}
	for i, v := range d {
		if !drop[i] {
			out = append(out, v)
		}
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

func inferUnsqueeze(x *nodeCtx) ([]onnx.ValueInfo, error) {
	d := x.dims(0)
	axes, ok, err := axesParam(x)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, x.errf("axes are required")
	}
	r := len(d) + len(axes)
	if r > maxRank {
		return nil, x.errf("output rank %d too large", r)
	}
	ins := make([]bool, r)
	for _, a := range axes {
		i, err := normAxis(a, r)
		if err != nil {
			return nil, x.errf("%v", err)
		}
		if ins[i] {
			return nil, x.errf("axis %d repeated", a)
		}
		ins[i] = true
	}
	out := make([]int64, r)
	j := 0
	for i := range out {
		if ins[i] {
			out[i] = 1
		} else {
			out[i] = d[j]
			j++
		}
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

func inferSoftmax(x *nodeCtx) ([]onnx.ValueInfo, error) {
	def := int64(1)
	if x.opset() >= 13 {
		def = -1
	}
	axis, err := x.attrInt("axis", def)
	if err != nil {
		return nil, err
	}
	if _, err := normAxis(axis, len(x.dims(0))); err != nil {
		return nil, x.errf("%v", err)
	}
	return inferUnary(x)
}

func inferLRN(x *nodeCtx) ([]onnx.ValueInfo, error) {
	a, err := x.attr("size", onnx.AttrInt)
	if err != nil {
		return nil, err
	}
	if a == nil || a.I <= 0 || a.I > 1<<16 {
		return nil, x.errf("attribute size must be set and positive")
	}
	for _, name := range []string{"alpha", "beta", "bias"} {
		if _, err := x.attrFloat(name, 1); err != nil {
			return nil, err
		}
	}
	if len(x.dims(0)) < 3 {
		return nil, x.errf("input rank %d; want at least 3", len(x.dims(0)))
	}
	return inferUnary(x)
}

// padParams returns Pad's pads (begin values then end values) and constant value.
func padParams(x *nodeCtx) ([]int64, float32, error) {
	mode, err := x.attrString("mode", "constant")
	if err != nil {
		return nil, 0, err
	}
	if mode != "constant" {
		return nil, 0, x.errf("mode %q not supported (only constant)", mode)
	}
	var pads []int64
	var value float32
	if x.opset() < 11 {
		if x.has(1) {
			return nil, 0, x.errf("pads input needs opset 11")
		}
		p, ok, err := x.attrInts("pads")
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return nil, 0, x.errf("attribute pads is required")
		}
		pads = p
		if value, err = x.attrFloat("value", 0); err != nil {
			return nil, 0, err
		}
	} else {
		if _, ok := x.n.Attrs["pads"]; ok {
			return nil, 0, x.errf("attribute pads not allowed at opset %d", x.opset())
		}
		if _, ok := x.n.Attrs["value"]; ok {
			return nil, 0, x.errf("attribute value not allowed at opset %d", x.opset())
		}
		if !x.has(1) {
			return nil, 0, x.errf("input pads is required")
		}
		if pads, err = x.constInts(1, "pads"); err != nil {
			return nil, 0, err
		}
		v, _, err := x.constScalar(2, "constant_value")
		if err != nil {
			return nil, 0, err
		}
		if !finite(float64(v)) {
			return nil, 0, x.errf("constant_value is not finite")
		}
		value = v
	}
	if len(pads) != 2*len(x.dims(0)) {
		return nil, 0, x.errf("pads %v; want %d values for rank %d", pads, 2*len(x.dims(0)), len(x.dims(0)))
	}
	for _, p := range pads {
		if p < 0 || p > maxElems {
			return nil, 0, x.errf("pads %v: negative or absurd pads not supported", pads)
		}
	}
	return pads, value, nil
}

func inferPad(x *nodeCtx) ([]onnx.ValueInfo, error) {
	pads, _, err := padParams(x)
	if err != nil {
		return nil, err
	}
	d := x.dims(0)
	out := make([]int64, len(d))
	r := len(d)
	for i := range d {
		out[i] = d[i] + pads[i] + pads[i+r]
	}
	return inferUnaryDims(x, out)
}

func inferGather(x *nodeCtx) ([]onnx.ValueInfo, error) {
	d := x.dims(0)
	a, err := x.attrInt("axis", 0)
	if err != nil {
		return nil, err
	}
	axis, err := normAxis(a, len(d))
	if err != nil {
		return nil, x.errf("%v", err)
	}
	if it := x.in(1).DType; it != onnx.Int64 && it != onnx.Int32 {
		return nil, x.errf("indices are %s; want int32 or int64", dtypeName(it))
	}
	if !runtimeType(x.in(0).DType) {
		return nil, x.errf("data is %s", dtypeName(x.in(0).DType))
	}
	if idx := x.cst(1); idx != nil {
		for _, v := range idx.I64 {
			if v < -d[axis] || v >= d[axis] {
				return nil, x.errf("index %d out of range for axis of size %d", v, d[axis])
			}
		}
	} // run-time indices are checked by the kernel on every run
	out := append(append(cloneDims(d[:axis]), x.dims(1)...), d[axis+1:]...)
	if len(out) > maxRank {
		return nil, x.errf("output rank %d too large", len(out))
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

// sliceRange is one axis of a resolved Slice.
type sliceRange struct{ start, step, count int64 }

// sliceParams resolves Slice's parameters into a range for every axis of the input.
func sliceParams(x *nodeCtx) ([]sliceRange, error) {
	d := x.dims(0)
	var starts, ends, axes, steps []int64
	var err error
	if x.opset() < 10 {
		if x.has(1) {
			return nil, x.errf("starts/ends inputs need opset 10")
		}
		var ok bool
		if starts, ok, err = x.attrInts("starts"); err != nil || !ok {
			return nil, orRequired(x, err, "starts")
		}
		if ends, ok, err = x.attrInts("ends"); err != nil || !ok {
			return nil, orRequired(x, err, "ends")
		}
		if axes, _, err = x.attrInts("axes"); err != nil {
			return nil, err
		}
	} else {
		for _, name := range []string{"starts", "ends", "axes"} {
			if _, ok := x.n.Attrs[name]; ok {
				return nil, x.errf("attribute %s not allowed at opset %d", name, x.opset())
			}
		}
		if !x.has(1) || !x.has(2) {
			return nil, x.errf("inputs starts and ends are required")
		}
		if starts, err = x.constInts(1, "starts"); err != nil {
			return nil, err
		}
		if ends, err = x.constInts(2, "ends"); err != nil {
			return nil, err
		}
		if x.has(3) {
			if axes, err = x.constInts(3, "axes"); err != nil {
				return nil, err
			}
		}
		if x.has(4) {
			if steps, err = x.constInts(4, "steps"); err != nil {
				return nil, err
			}
		}
	}
	if len(ends) != len(starts) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return nil, x.errf("starts, ends, axes and steps differ in length")
	}
	r := make([]sliceRange, len(d))
	for i := range r {
		r[i] = sliceRange{0, 1, d[i]}
	}
	seen := make([]bool, len(d))
	for i := range starts {
		ax := int64(i)
		if axes != nil {
			ax = axes[i]
		}
		a, err := normAxis(ax, len(d))
		if err != nil {
			return nil, x.errf("%v", err)
		}
		if seen[a] {
			return nil, x.errf("axis %d repeated", ax)
		}
		seen[a] = true
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return nil, x.errf("step 0")
		}
		r[a] = resolveSlice(starts[i], ends[i], step, d[a])
	}
	return r, nil
}

func orRequired(x *nodeCtx, err error, name string) error {
	if err != nil {
		return err
	}
	return x.errf("attribute %s is required", name)
}

// resolveSlice clamps one axis the way ONNX Slice does.
func resolveSlice(start, end, step, dim int64) sliceRange {
	clamp := func(v, lo, hi int64) int64 {
		if v < lo {
			return lo
		}
		if v > hi {
			return hi
		}
		return v
	}
	if start < 0 {
		start = clampAdd(start, dim)
	}
	if end < 0 {
		end = clampAdd(end, dim)
	}
	var count int64
	if step > 0 {
		start = clamp(start, 0, dim)
		end = clamp(end, 0, dim)
		if end > start {
			count = (end-start-1)/step + 1 // no overflow for huge steps
		}
	} else {
		start = clamp(start, 0, dim-1)
		end = clamp(end, -1, dim-1)
		if start > end {
			if step == math.MinInt64 {
				count = 1
			} else {
				count = (start-end-1)/(-step) + 1
			}
		}
	}
	return sliceRange{start, step, count}
}

// clampAdd adds dim to a negative index without overflowing (math.MinInt64 stays very negative).
func clampAdd(v, dim int64) int64 {
	if v < -(1 << 62) {
		return -(1 << 62)
	}
	return v + dim
}

func inferSlice(x *nodeCtx) ([]onnx.ValueInfo, error) {
	r, err := sliceParams(x)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(r))
	for i, s := range r {
		out[i] = s.count
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

// reduceAxes returns which axes ReduceMean reduces.
// From opset 18 (ReduceSum: 13) the axes are a constant input; the compiler moves them
// into the axes attribute and drops the input, so the kernel reads one form.
func reduceAxes(x *nodeCtx) ([]bool, bool, error) {
	d := x.dims(0)
	axes, ok, err := x.attrInts("axes")
	if err != nil {
		return nil, false, err
	}
	inputAxes := x.opset() >= 18 || (x.n.OpType == "ReduceSum" && x.opset() >= 13)
	if inputAxes && ok {
		return nil, false, x.errf("attribute axes not allowed at opset %d", x.opset())
	}
	if !inputAxes && x.has(1) {
		return nil, false, x.errf("axes input needs opset %d", map[bool]int{true: 13, false: 18}[x.n.OpType == "ReduceSum"])
	}
	noop, err := x.bool01("noop_with_empty_axes", 0)
	if err != nil {
		return nil, false, err
	}
	if x.has(1) {
		if axes, err = x.constInts(1, "axes"); err != nil {
			return nil, false, err
		}
		ok = len(axes) > 0
		x.n.Inputs = x.n.Inputs[:1]
		delete(x.n.Attrs, "noop_with_empty_axes")
		if ok {
			x.setInts("axes", axes)
		}
	}
	keep, err := x.bool01("keepdims", 1)
	if err != nil {
		return nil, false, err
	}
	red := make([]bool, len(d))
	if !ok {
		if noop {
			// no axes with noop_with_empty_axes: the output is the input
			x.n.OpType, x.n.Attrs = "Identity", map[string]*onnx.Attribute{}
			return red, keep, nil
		}
		for i := range red {
			red[i] = true
		}
	}
	for _, a := range axes {
		i, err := normAxis(a, len(d))
		if err != nil {
			return nil, false, x.errf("%v", err)
		}
		if red[i] {
			return nil, false, x.errf("axis %d repeated", a)
		}
		red[i] = true
	}
	return red, keep, nil
}

func inferReduce(x *nodeCtx) ([]onnx.ValueInfo, error) {
	red, keep, err := reduceAxes(x)
	if err != nil {
		return nil, err
	}
	out := []int64{}
	for i, v := range x.dims(0) {
		switch {
		case !red[i]:
			out = append(out, v)
		case keep:
			out = append(out, 1)
		}
		if red[i] && v == 0 && x.n.OpType != "ReduceSum" {
			return nil, x.errf("%s over an empty axis", x.n.OpType)
		}
	}
	return inferUnaryDims(x, out)
}

func dropoutThrough(x *nodeCtx) (bool, error) {
	if t, err := x.attrInt("is_test", 1); err != nil {
		return false, err
	} else if t != 1 {
		return false, x.errf("is_test=%d (training) not supported", t)
	}
	if _, err := x.attrFloat("ratio", 0.5); err != nil {
		return false, err
	}
	if x.opset() >= 12 && x.has(2) {
		t := x.cst(2)
		if t == nil || !isIntType(t.DType) || len(t.I64) != 1 {
			return false, x.errf("training_mode must be a constant boolean")
		}
		if t.I64[0] != 0 {
			// training mode with ratio 0 (torch's F.dropout(x, p=0.0), which defaults to
			// training=True) is still the identity
			r, err := DropoutRatio(x.n, x.opset(), x.c.consts)
			if err != nil || r != 0 {
				return false, x.errf("training_mode=true not supported (inference only)")
			}
		}
	}
	if x.opset() >= 12 && x.has(1) && x.cst(1) == nil {
		return false, x.errf("ratio must be a constant")
	}
	return true, nil
}

// trainingDropout checks a Dropout kept for training: a constant ratio in [0, 1) and no
// mask output in use. Its training_mode input, if any, is ignored: a training plan always
// drops, an inference plan never does.
func trainingDropout(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	r, err := DropoutRatio(x.n, x.opset(), x.c.consts)
	if err != nil {
		return nil, err
	}
	if !(r >= 0 && r < 1) {
		return nil, x.errf("ratio %g not in [0, 1)", r)
	}
	return one(cloneDims(x.dims(0))), nil
}

// DropoutRatio returns a Dropout node's ratio: its attribute before opset 12, its constant
// input (in consts) from opset 12; 0.5 when absent.
func DropoutRatio(n *onnx.Node, opset int64, consts map[string]*onnx.Tensor) (float32, error) {
	r := float32(0.5)
	if a, ok := n.Attrs["ratio"]; ok && a != nil {
		r = a.F
	}
	if opset >= 12 && len(n.Inputs) > 1 && n.Inputs[1] != "" {
		t := consts[n.Inputs[1]]
		switch {
		case t == nil:
			return 0, fmt.Errorf("graph: node %s (Dropout): ratio must be a constant", n.Name)
		case len(t.F32) == 1:
			r = t.F32[0]
		case len(t.F64) == 1:
			r = float32(t.F64[0])
		default:
			return 0, fmt.Errorf("graph: node %s (Dropout): ratio must be a float scalar", n.Name)
		}
	}
	return r, nil
}

func castThrough(x *nodeCtx) (bool, error) {
	to, err := castTarget(x)
	if err != nil {
		return false, err
	}
	if x.cst(0) != nil {
		return false, nil
	}
	from := x.in(0).DType
	if to == from && runtimeType(to) {
		return true, nil
	}
	if !runtimeType(from) || !runtimeType(to) {
		return false, x.errf("Cast from %s to %s at run time is not supported (float32, integer and bool targets only)", dtypeName(from), dtypeName(to))
	}
	return false, nil
}

func inferCast(x *nodeCtx) ([]onnx.ValueInfo, error) {
	to, err := castTarget(x)
	if err != nil {
		return nil, err
	}
	return []onnx.ValueInfo{{DType: to, Dims: cloneDims(x.dims(0))}}, nil
}

func castTarget(x *nodeCtx) (onnx.DataType, error) {
	a, err := x.attr("to", onnx.AttrInt)
	if err != nil {
		return 0, err
	}
	if a == nil {
		return 0, x.errf("attribute to is required")
	}
	if _, ok := x.n.Attrs["saturate"]; ok {
		return 0, x.errf("attribute saturate not supported")
	}
	return onnx.DataType(a.I), nil
}
