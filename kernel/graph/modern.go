package graph

import (
	"idunno/kernel/onnx"
)

// The operators of modern models (transformers, ConvNeXt, EfficientNet): integer and
// boolean tensors computed at run time (token ids, masks, positions), comparisons and
// selection, more element-wise float functions, layer normalization, reductions, ArgMax
// and Split. Integer and boolean values at run time keep their ONNX dtype in Values; the
// kernel carries all of them as int64 (booleans as 0/1).

func registerModern() {
	cmp := func() *opSpec { return &opSpec{minIn: 2, maxIn: 2, infer: inferCompare} }
	logic := func() *opSpec { return &opSpec{minIn: 2, maxIn: 2, infer: inferLogic} }
	funary := func(attrs ...string) *opSpec {
		return &opSpec{attrs: attrs, minIn: 1, maxIn: 1, infer: inferUnary}
	}
	for name, s := range map[string]*opSpec{
		"Less":               cmp(),
		"Greater":            cmp(),
		"LessOrEqual":        cmp(),
		"GreaterOrEqual":     cmp(),
		"And":                logic(),
		"Or":                 logic(),
		"Xor":                logic(),
		"Not":                {minIn: 1, maxIn: 1, infer: inferNot, eval: evalNot},
		"Tile":               {minIn: 2, maxIn: 2, infer: inferTile},
		"CumSum":             {attrs: []string{"exclusive", "reverse"}, minIn: 2, maxIn: 2, infer: inferCumSum},
		"Sqrt":               funary(),
		"Exp":                funary(),
		"Log":                funary(),
		"Erf":                funary(),
		"Reciprocal":         funary(),
		"Floor":              funary(),
		"Ceil":               funary(),
		"Round":              funary(),
		"Softplus":           funary(),
		"Mish":               funary(),
		"Gelu":               {attrs: []string{"approximate"}, minIn: 1, maxIn: 1, infer: inferGelu},
		"Abs":                {minIn: 1, maxIn: 1, infer: inferSameType},
		"Sign":               {minIn: 1, maxIn: 1, infer: inferSameType},
		"Pow":                {minIn: 2, maxIn: 2, infer: inferPow},
		"Max":                {minIn: 1, maxIn: 1 << 10, infer: inferMaxMin},
		"Min":                {minIn: 1, maxIn: 1 << 10, infer: inferMaxMin},
		"LayerNormalization": {attrs: []string{"axis", "epsilon", "stash_type"}, minIn: 2, maxIn: 3, infer: inferLayerNorm},
		"ReduceSum":          {attrs: []string{"axes", "keepdims", "noop_with_empty_axes"}, minIn: 1, maxIn: 2, infer: inferReduce},
		"ReduceMax":          {attrs: []string{"axes", "keepdims", "noop_with_empty_axes"}, minIn: 1, maxIn: 2, infer: inferReduce},
		"ReduceMin":          {attrs: []string{"axes", "keepdims", "noop_with_empty_axes"}, minIn: 1, maxIn: 2, infer: inferReduce},
		"ReduceL1":           {attrs: []string{"axes", "keepdims", "noop_with_empty_axes"}, minIn: 1, maxIn: 2, infer: inferReduce},
		"ReduceL2":           {attrs: []string{"axes", "keepdims", "noop_with_empty_axes"}, minIn: 1, maxIn: 2, infer: inferReduce},
		"ReduceSumSquare":    {attrs: []string{"axes", "keepdims", "noop_with_empty_axes"}, minIn: 1, maxIn: 2, infer: inferReduce},
		"ReduceProd":         {attrs: []string{"axes", "keepdims", "noop_with_empty_axes"}, minIn: 1, maxIn: 2, infer: inferReduce},
		"ArgMax":             {attrs: []string{"axis", "keepdims", "select_last_index"}, minIn: 1, maxIn: 1, infer: inferArgMax},
		"ArgMin":             {attrs: []string{"axis", "keepdims", "select_last_index"}, minIn: 1, maxIn: 1, infer: inferArgMax},
		"Mod":                {attrs: []string{"fmod"}, minIn: 2, maxIn: 2, infer: inferMod, eval: evalMod},
		"Split":              {attrs: []string{"axis", "split", "num_outputs"}, minIn: 1, maxIn: 2, infer: inferSplit},
	} {
		ops[name] = s
	}
	registerResize()
	ops["ReduceMean"].attrs = []string{"axes", "keepdims", "noop_with_empty_axes"}
	ops["ReduceMean"].maxIn = 2
	// Shape-computing operators that may also run on run-time values.
	ops["Equal"].infer = inferCompare
	ops["Where"].infer = inferWhere
	ops["Expand"].infer = inferExpand
	ops["Neg"].infer = inferSameType
	for _, name := range []string{"Equal", "Where", "Expand", "Neg"} {
		ops[name].foldOnly = false
	}
}

// runtimeType reports whether the kernel can hold a value of type t at run time.
func runtimeType(t onnx.DataType) bool { return t == onnx.Float || isIntType(t) }

func inferSameType(x *nodeCtx) ([]onnx.ValueInfo, error) {
	t := x.in(0).DType
	if !runtimeType(t) || t == onnx.Bool {
		return nil, x.errf("input is %s; want float32 or an integer type", dtypeName(t))
	}
	return []onnx.ValueInfo{{DType: t, Dims: cloneDims(x.dims(0))}}, nil
}

func inferCompare(x *nodeCtx) ([]onnx.ValueInfo, error) {
	a, b := x.in(0), x.in(1)
	if a.DType != b.DType {
		return nil, x.errf("input types differ: %s and %s", dtypeName(a.DType), dtypeName(b.DType))
	}
	if !runtimeType(a.DType) {
		return nil, x.errf("inputs are %s; want float32 or an integer type", dtypeName(a.DType))
	}
	out, err := broadcast(a.Dims, b.Dims)
	if err != nil {
		return nil, x.errf("%v", err)
	}
	return []onnx.ValueInfo{{DType: onnx.Bool, Dims: out}}, nil
}

func inferLogic(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if x.in(0).DType != onnx.Bool || x.in(1).DType != onnx.Bool {
		return nil, x.errf("inputs must be bool")
	}
	return inferCompare(x)
}

func inferNot(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if x.in(0).DType != onnx.Bool {
		return nil, x.errf("input must be bool")
	}
	return []onnx.ValueInfo{{DType: onnx.Bool, Dims: cloneDims(x.dims(0))}}, nil
}

// evalNot folds Not of a constant (Swin's shifted-window mask is Where(Not(...)) of
// constants: it ran on every batch).
func evalNot(x *nodeCtx) ([]*onnx.Tensor, error) {
	t, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	if t.DType != onnx.Bool {
		return nil, x.errf("input must be bool")
	}
	out := &onnx.Tensor{DType: onnx.Bool, Dims: cloneDims(t.Dims), I64: make([]int64, len(t.I64))}
	for i, v := range t.I64 {
		if v == 0 {
			out.I64[i] = 1
		}
	}
	return []*onnx.Tensor{out}, nil
}

func inferWhere(x *nodeCtx) ([]onnx.ValueInfo, error) {
	c, a, b := x.in(0), x.in(1), x.in(2)
	if c.DType != onnx.Bool {
		return nil, x.errf("condition is %s; want bool", dtypeName(c.DType))
	}
	if a.DType != b.DType || !runtimeType(a.DType) {
		return nil, x.errf("X and Y must have one type the kernel holds (have %s and %s)", dtypeName(a.DType), dtypeName(b.DType))
	}
	out, err := broadcast(c.Dims, a.Dims)
	if err == nil {
		out, err = broadcast(out, b.Dims)
	}
	if err != nil {
		return nil, x.errf("%v", err)
	}
	return []onnx.ValueInfo{{DType: a.DType, Dims: out}}, nil
}

func inferExpand(x *nodeCtx) ([]onnx.ValueInfo, error) {
	shape, err := x.constInts(1, "shape")
	if err != nil {
		return nil, err
	}
	if err := checkDims(shape); err != nil {
		return nil, x.errf("%v", err)
	}
	out, err := broadcast(x.dims(0), shape)
	if err != nil {
		return nil, x.errf("%v", err)
	}
	if !runtimeType(x.in(0).DType) {
		return nil, x.errf("input is %s", dtypeName(x.in(0).DType))
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

// TileRepeats returns Tile's constant repeats (one per input dim, each >= 0).
func tileRepeats(x *nodeCtx) ([]int64, error) {
	r, err := x.constInts(1, "repeats")
	if err != nil {
		return nil, err
	}
	if len(r) != len(x.dims(0)) {
		return nil, x.errf("repeats %v for rank %d", r, len(x.dims(0)))
	}
	for _, v := range r {
		if v < 0 || v > maxElems {
			return nil, x.errf("repeats %v: negative or absurd", r)
		}
	}
	return r, nil
}

func inferTile(x *nodeCtx) ([]onnx.ValueInfo, error) {
	r, err := tileRepeats(x)
	if err != nil {
		return nil, err
	}
	d := x.dims(0)
	out := make([]int64, len(d))
	kept := 0
	for i := range d {
		if d[i] != 0 && r[i] > maxElems/d[i] {
			return nil, x.errf("output too large")
		}
		out[i] = d[i] * r[i]
		if r[i] != 1 && d[i] != 1 {
			kept += 2
		} else {
			kept++
		}
	}
	if kept > maxRank {
		return nil, x.errf("repeats %v of dims %v need rank %d inside the kernel (limit %d)", r, d, kept, maxRank)
	}
	if err := checkDims(out); err != nil {
		return nil, x.errf("%v", err)
	}
	if !runtimeType(x.in(0).DType) {
		return nil, x.errf("input is %s", dtypeName(x.in(0).DType))
	}
	return []onnx.ValueInfo{{DType: x.in(0).DType, Dims: out}}, nil
}

func inferCumSum(x *nodeCtx) ([]onnx.ValueInfo, error) {
	ax, err := x.constInts(1, "axis")
	if err != nil {
		return nil, err
	}
	if len(ax) != 1 {
		return nil, x.errf("axis must be one value")
	}
	if _, err := normAxis(ax[0], len(x.dims(0))); err != nil {
		return nil, x.errf("%v", err)
	}
	for _, a := range []string{"exclusive", "reverse"} {
		if _, err := x.bool01(a, 0); err != nil {
			return nil, err
		}
	}
	t := x.in(0).DType
	if t != onnx.Float && t != onnx.Int64 && t != onnx.Int32 {
		return nil, x.errf("input is %s; want float32, int32 or int64", dtypeName(t))
	}
	return []onnx.ValueInfo{{DType: t, Dims: cloneDims(x.dims(0))}}, nil
}

func inferGelu(x *nodeCtx) ([]onnx.ValueInfo, error) {
	a, err := x.attrString("approximate", "none")
	if err != nil {
		return nil, err
	}
	if a != "none" && a != "tanh" {
		return nil, x.errf("approximate=%q; want none or tanh", a)
	}
	return inferUnary(x)
}

func inferPow(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	e := x.in(1)
	if e.DType != onnx.Float && (!isIntType(e.DType) || e.DType == onnx.Bool) {
		return nil, x.errf("exponent is %s; want float32 or an integer type", dtypeName(e.DType))
	}
	out, err := broadcast(x.dims(0), e.Dims)
	if err != nil {
		return nil, x.errf("%v", err)
	}
	return one(out), nil
}

// Max and Min take one or more inputs of one type (float32 or an integer type; all
// integers are int64 inside the kernel, where the maximum of in-range values is exact).
func inferMaxMin(x *nodeCtx) ([]onnx.ValueInfo, error) {
	t := x.in(0).DType
	if !runtimeType(t) || t == onnx.Bool {
		return nil, x.errf("input is %s; want float32 or an integer type", dtypeName(t))
	}
	out := []int64{}
	for i := range x.n.Inputs {
		if !x.has(i) {
			return nil, x.errf("input %d is empty", i)
		}
		if x.in(i).DType != t {
			return nil, x.errf("input %d is %s, input 0 is %s", i, dtypeName(x.in(i).DType), dtypeName(t))
		}
		var err error
		if out, err = broadcast(out, x.dims(i)); err != nil {
			return nil, x.errf("%v", err)
		}
	}
	return []onnx.ValueInfo{{DType: t, Dims: out}}, nil
}

// LayerNormAxis returns LayerNormalization's normalised axis (non-negative) and epsilon.
func layerNormParams(x *nodeCtx) (int, float32, error) {
	a, err := x.attrInt("axis", -1)
	if err != nil {
		return 0, 0, err
	}
	ax, err := normAxis(a, len(x.dims(0)))
	if err != nil {
		return 0, 0, x.errf("%v", err)
	}
	eps, err := x.attrFloat("epsilon", 1e-5)
	if err != nil {
		return 0, 0, err
	}
	if st, err := x.attrInt("stash_type", 1); err != nil {
		return 0, 0, err
	} else if st != 1 {
		return 0, 0, x.errf("stash_type=%d not supported (float32 only)", st)
	}
	return ax, eps, nil
}

func inferLayerNorm(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if x.opset() < 17 {
		return nil, x.errf("needs opset 17")
	}
	ax, _, err := layerNormParams(x)
	if err != nil {
		return nil, err
	}
	d := x.dims(0)
	for i := 1; i < 3; i++ {
		if !x.has(i) {
			continue
		}
		if err := x.floatIn(i); err != nil {
			return nil, err
		}
		if !dimsEqual(x.dims(i), d[ax:]) {
			// the kernel wants the scale and bias with exactly the normalised dims
			return nil, x.errf("input %d dims %v; want %v (other broadcasts not supported)", i, x.dims(i), d[ax:])
		}
	}
	stat := cloneDims(d)
	for i := ax; i < len(stat); i++ {
		stat[i] = 1
	}
	return []onnx.ValueInfo{{DType: onnx.Float, Dims: cloneDims(d)}, {DType: onnx.Float, Dims: stat}, {DType: onnx.Float, Dims: cloneDims(stat)}}, nil
}

func inferArgMax(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	d := x.dims(0)
	a, err := x.attrInt("axis", 0)
	if err != nil {
		return nil, err
	}
	ax, err := normAxis(a, len(d))
	if err != nil {
		return nil, x.errf("%v", err)
	}
	if d[ax] == 0 {
		return nil, x.errf("empty axis")
	}
	keep, err := x.bool01("keepdims", 1)
	if err != nil {
		return nil, err
	}
	if _, err := x.bool01("select_last_index", 0); err != nil {
		return nil, err
	}
	out := []int64{}
	for i, v := range d {
		switch {
		case i != ax:
			out = append(out, v)
		case keep:
			out = append(out, 1)
		}
	}
	return []onnx.ValueInfo{{DType: onnx.Int64, Dims: out}}, nil
}

// SplitSizes returns Split's axis and the size of each output.
func splitSizes(x *nodeCtx) (int, []int64, error) {
	d := x.dims(0)
	a, err := x.attrInt("axis", 0)
	if err != nil {
		return 0, nil, err
	}
	ax, err := normAxis(a, len(d))
	if err != nil {
		return 0, nil, x.errf("%v", err)
	}
	var sizes []int64
	if x.opset() < 13 {
		if x.has(1) {
			return 0, nil, x.errf("split input needs opset 13")
		}
		sizes, _, err = x.attrInts("split")
		if err != nil {
			return 0, nil, err
		}
	} else {
		if _, ok := x.n.Attrs["split"]; ok {
			return 0, nil, x.errf("attribute split not allowed at opset %d", x.opset())
		}
		if x.has(1) {
			if sizes, err = x.constInts(1, "split"); err != nil {
				return 0, nil, err
			}
		}
	}
	nout := int64(len(x.n.Outputs))
	if no, err := x.attrInt("num_outputs", 0); err != nil {
		return 0, nil, err
	} else if _, ok := x.n.Attrs["num_outputs"]; ok {
		if x.opset() < 18 {
			return 0, nil, x.errf("num_outputs needs opset 18")
		}
		if sizes != nil || no < 1 || no != nout {
			return 0, nil, x.errf("num_outputs=%d with %d outputs", no, nout)
		}
		// opset 18: ceil(dim/n) each, the last smaller
		c := (d[ax] + no - 1) / no
		for i := int64(0); i < no; i++ {
			sizes = append(sizes, max(0, min(c, d[ax]-i*c)))
		}
	}
	if sizes == nil {
		if d[ax]%nout != 0 {
			return 0, nil, x.errf("axis of size %d does not split evenly into %d", d[ax], nout)
		}
		for i := int64(0); i < nout; i++ {
			sizes = append(sizes, d[ax]/nout)
		}
	}
	if int64(len(sizes)) != nout {
		return 0, nil, x.errf("split %v for %d outputs", sizes, nout)
	}
	sum := int64(0)
	for _, s := range sizes {
		if s < 0 || s > maxElems {
			return 0, nil, x.errf("split %v has a bad size", sizes)
		}
		sum += s
	}
	if sum != d[ax] {
		return 0, nil, x.errf("split %v does not sum to %d", sizes, d[ax])
	}
	return ax, sizes, nil
}

func inferSplit(x *nodeCtx) ([]onnx.ValueInfo, error) {
	ax, sizes, err := splitSizes(x)
	if err != nil {
		return nil, err
	}
	t := x.in(0).DType
	if !runtimeType(t) {
		return nil, x.errf("input is %s", dtypeName(t))
	}
	// the kernel reads one form: axis and every output's size as attributes
	x.setInt("axis", int64(ax))
	x.setInts("split", sizes)
	delete(x.n.Attrs, "num_outputs")
	x.n.Inputs = x.n.Inputs[:1]
	var out []onnx.ValueInfo
	for _, s := range sizes {
		d := cloneDims(x.dims(0))
		d[ax] = s
		out = append(out, onnx.ValueInfo{DType: t, Dims: d})
	}
	return out, nil
}

func checkMod(x *nodeCtx) error {
	f, err := x.bool01("fmod", 0)
	if err != nil {
		return err
	}
	if x.in(0).DType == onnx.Float && !f {
		return x.errf("fmod=0 on float32 (the spec requires fmod=1)")
	}
	return nil
}

func inferMod(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := checkMod(x); err != nil {
		return nil, err
	}
	if t := x.in(0).DType; t == onnx.Bool || !runtimeType(t) {
		return nil, x.errf("inputs are %s", dtypeName(t))
	}
	return inferBinary(x)
}

func evalMod(x *nodeCtx) ([]*onnx.Tensor, error) {
	if err := checkMod(x); err != nil {
		return nil, err
	}
	return evalBinary(x)
}
