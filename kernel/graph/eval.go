package graph

import (
	"errors"
	"fmt"
	"math"

	"idunno/kernel/onnx"
)

// The reference evaluator folds constants. It handles float32 and the integer types
// (stored widened in Tensor.I64); other dtypes are an error.

func (x *nodeCtx) evalIn(i int) (*onnx.Tensor, error) {
	t := x.cst(i)
	if t == nil {
		return nil, x.errf("input %d is not constant", i)
	}
	if !isFloatType(t.DType) && !isIntType(t.DType) {
		return nil, x.errf("cannot fold input %d of type %s", i, dtypeName(t.DType))
	}
	return t, nil
}

// errFoldTooBig marks a fold whose result would exceed maxFoldElems; the node then runs
// at run time instead.
var errFoldTooBig = errors.New("folded constant too large")

func checkFoldSize(x *nodeCtx, dims []int64) (int64, error) {
	n, err := numel(dims)
	if err != nil {
		return 0, x.errf("%v", err)
	}
	if n > maxFoldElems {
		return 0, fmt.Errorf("graph: node %s (%s): folded constant would have %d elements (limit %d): %w",
			x.n.Name, x.n.OpType, n, maxFoldElems, errFoldTooBig)
	}
	if n > x.c.foldBudget {
		return 0, fmt.Errorf("graph: node %s (%s): folded constants exceed %d elements in all: %w",
			x.n.Name, x.n.OpType, maxFoldTotal, errFoldTooBig)
	}
	x.c.foldBudget -= n
	return n, nil
}

// pick builds a tensor of the given dims from t's elements at idx.
func pick(t *onnx.Tensor, dims []int64, idx []int64) *onnx.Tensor {
	out := &onnx.Tensor{DType: t.DType, Dims: dims}
	if isFloatType(t.DType) {
		out.F32 = make([]float32, len(idx))
		for i, j := range idx {
			out.F32[i] = t.F32[j]
		}
	} else {
		out.I64 = make([]int64, len(idx))
		for i, j := range idx {
			out.I64[i] = t.I64[j]
		}
	}
	return out
}

func strides(dims []int64) []int64 {
	s := make([]int64, len(dims))
	acc := int64(1)
	for i := len(dims) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= dims[i]
	}
	return s
}

// forEach calls f with every coordinate of dims in row-major order (f must not keep coord).
func forEach(dims []int64, f func(coord []int64)) {
	for _, d := range dims {
		if d == 0 {
			return
		}
	}
	coord := make([]int64, len(dims))
	for {
		f(coord)
		i := len(dims) - 1
		for ; i >= 0; i-- {
			coord[i]++
			if coord[i] < dims[i] {
				break
			}
			coord[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

func evalConstant(x *nodeCtx) ([]*onnx.Tensor, error) {
	if len(x.n.Attrs) != 1 {
		return nil, x.errf("want exactly one value attribute, have %d", len(x.n.Attrs))
	}
	for name, a := range x.n.Attrs {
		if name != "value" && x.opset() < 12 {
			return nil, x.errf("attribute %s needs opset 12", name)
		}
		switch name {
		case "value":
			if a.Type != onnx.AttrTensor || a.T == nil {
				return nil, x.errf("attribute value is not a tensor")
			}
			if !isFloatType(a.T.DType) && !isIntType(a.T.DType) {
				return nil, x.errf("constant of type %s not supported", dtypeName(a.T.DType))
			}
			return []*onnx.Tensor{a.T}, nil
		case "value_float":
			if a.Type != onnx.AttrFloat {
				return nil, x.errf("attribute value_float has wrong type")
			}
			return []*onnx.Tensor{{DType: onnx.Float, Dims: []int64{}, F32: []float32{a.F}}}, nil
		case "value_floats":
			if a.Type != onnx.AttrFloats {
				return nil, x.errf("attribute value_floats has wrong type")
			}
			return []*onnx.Tensor{{DType: onnx.Float, Dims: []int64{int64(len(a.Floats))}, F32: append([]float32(nil), a.Floats...)}}, nil
		case "value_int":
			if a.Type != onnx.AttrInt {
				return nil, x.errf("attribute value_int has wrong type")
			}
			return []*onnx.Tensor{{DType: onnx.Int64, Dims: []int64{}, I64: []int64{a.I}}}, nil
		case "value_ints":
			if a.Type != onnx.AttrInts {
				return nil, x.errf("attribute value_ints has wrong type")
			}
			return []*onnx.Tensor{{DType: onnx.Int64, Dims: []int64{int64(len(a.Ints))}, I64: append([]int64(nil), a.Ints...)}}, nil
		default:
			return nil, x.errf("attribute %s not supported", name)
		}
	}
	return nil, x.errf("no value")
}

func evalShape(x *nodeCtx) ([]*onnx.Tensor, error) {
	d := x.dims(0)
	r := int64(len(d))
	start, err := x.attrInt("start", 0)
	if err != nil {
		return nil, err
	}
	end, err := x.attrInt("end", r)
	if err != nil {
		return nil, err
	}
	if (start != 0 || end != r) && x.opset() < 15 {
		return nil, x.errf("start/end need opset 15")
	}
	norm := func(v int64) int64 {
		if v < 0 {
			v = clampAdd(v, r)
		}
		if v < 0 {
			return 0
		}
		if v > r {
			return r
		}
		return v
	}
	start, end = norm(start), norm(end)
	if end < start {
		end = start
	}
	vals := cloneDims(d[start:end])
	return []*onnx.Tensor{{DType: onnx.Int64, Dims: []int64{int64(len(vals))}, I64: vals}}, nil
}

func evalReshapeLike(infer func(*nodeCtx) ([]onnx.ValueInfo, error)) func(*nodeCtx) ([]*onnx.Tensor, error) {
	return func(x *nodeCtx) ([]*onnx.Tensor, error) {
		t, err := x.evalIn(0)
		if err != nil {
			return nil, err
		}
		infos, err := infer(x)
		if err != nil {
			return nil, err
		}
		out := *t
		out.Name = ""
		out.Dims = infos[0].Dims
		return []*onnx.Tensor{&out}, nil
	}
}

func evalTranspose(x *nodeCtx) ([]*onnx.Tensor, error) {
	t, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	perm, err := transposePerm(x)
	if err != nil {
		return nil, err
	}
	infos, _ := inferTranspose(x)
	out := infos[0].Dims
	n, err := checkFoldSize(x, out)
	if err != nil {
		return nil, err
	}
	st := strides(t.Dims)
	idx := make([]int64, 0, n)
	forEach(out, func(c []int64) {
		var off int64
		for i, p := range perm {
			off += c[i] * st[p]
		}
		idx = append(idx, off)
	})
	return []*onnx.Tensor{pick(t, out, idx)}, nil
}

func evalConcat(x *nodeCtx) ([]*onnx.Tensor, error) {
	infos, err := inferConcat(x)
	if err != nil {
		return nil, err
	}
	out := infos[0].Dims
	a, _ := x.attrInt("axis", 0)
	axis, _ := normAxis(a, len(out))
	if _, err := checkFoldSize(x, out); err != nil {
		return nil, err
	}
	res := &onnx.Tensor{DType: infos[0].DType, Dims: out}
	outer, _ := numel(out[:axis])
	for o := int64(0); o < outer; o++ {
		for i := range x.n.Inputs {
			t, err := x.evalIn(i)
			if err != nil {
				return nil, err
			}
			chunk, _ := numel(t.Dims[axis:])
			if isFloatType(t.DType) {
				res.F32 = append(res.F32, t.F32[o*chunk:(o+1)*chunk]...)
			} else {
				res.I64 = append(res.I64, t.I64[o*chunk:(o+1)*chunk]...)
			}
		}
	}
	return []*onnx.Tensor{res}, nil
}

func evalGather(x *nodeCtx) ([]*onnx.Tensor, error) {
	t, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	infos, err := inferGather(x)
	if err != nil {
		return nil, err
	}
	out := infos[0].Dims
	n, err := checkFoldSize(x, out)
	if err != nil {
		return nil, err
	}
	a, _ := x.attrInt("axis", 0)
	axis, _ := normAxis(a, len(t.Dims))
	ind := x.cst(1)
	outer, _ := numel(t.Dims[:axis])
	inner, _ := numel(t.Dims[axis+1:])
	dim := t.Dims[axis]
	idx := make([]int64, 0, n)
	for o := int64(0); o < outer; o++ {
		for _, k := range ind.I64 {
			if k < 0 {
				k += dim
			}
			for i := int64(0); i < inner; i++ {
				idx = append(idx, (o*dim+k)*inner+i)
			}
		}
	}
	return []*onnx.Tensor{pick(t, out, idx)}, nil
}

func evalSlice(x *nodeCtx) ([]*onnx.Tensor, error) {
	t, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	r, err := sliceParams(x)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(r))
	for i, s := range r {
		out[i] = s.count
	}
	n, err := checkFoldSize(x, out)
	if err != nil {
		return nil, err
	}
	st := strides(t.Dims)
	idx := make([]int64, 0, n)
	forEach(out, func(c []int64) {
		var off int64
		for i, s := range r {
			off += (s.start + c[i]*s.step) * st[i]
		}
		idx = append(idx, off)
	})
	return []*onnx.Tensor{pick(t, out, idx)}, nil
}

func evalCast(x *nodeCtx) ([]*onnx.Tensor, error) {
	t, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	to, err := castTarget(x)
	if err != nil {
		return nil, err
	}
	out := &onnx.Tensor{DType: to, Dims: cloneDims(t.Dims)}
	if !(to == onnx.Float && isFloatType(t.DType)) {
		if _, err := checkFoldSize(x, t.Dims); err != nil {
			return nil, err
		}
	}
	switch {
	case to == onnx.Float && isFloatType(t.DType):
		out.F32 = t.F32
	case to == onnx.Float:
		out.F32 = make([]float32, len(t.I64))
		for i, v := range t.I64 {
			out.F32[i] = float32(v)
		}
	case isIntType(to) && isIntType(t.DType):
		out.I64 = make([]int64, len(t.I64))
		for i, v := range t.I64 {
			out.I64[i] = castInt(v, to)
		}
	case isIntType(to):
		out.I64 = make([]int64, len(t.F32))
		for i, v := range t.F32 {
			f := float64(v)
			if to == onnx.Bool {
				if f != 0 {
					out.I64[i] = 1
				}
				continue
			}
			if !finite(f) || math.Abs(f) >= 1<<63 {
				return nil, x.errf("cannot cast %g to %s", f, dtypeName(to))
			}
			out.I64[i] = castInt(int64(f), to)
		}
	default:
		return nil, x.errf("Cast to %s not supported", dtypeName(to))
	}
	return []*onnx.Tensor{out}, nil
}

// castInt wraps an integer into the range of an integer dtype, as C casts do.
func castInt(v int64, to onnx.DataType) int64 {
	switch to {
	case onnx.Bool:
		if v != 0 {
			return 1
		}
		return 0
	case onnx.Int8:
		return int64(int8(v))
	case onnx.Uint8:
		return int64(uint8(v))
	case onnx.Int16:
		return int64(int16(v))
	case onnx.Uint16:
		return int64(uint16(v))
	case onnx.Int32:
		return int64(int32(v))
	case onnx.Uint32:
		return int64(uint32(v))
	}
	return v
}

func evalBinary(x *nodeCtx) ([]*onnx.Tensor, error) {
	a, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	b, err := x.evalIn(1)
	if err != nil {
		return nil, err
	}
	infos, err := inferBinary(x)
	if err != nil {
		return nil, err
	}
	out := infos[0].Dims
	n, err := checkFoldSize(x, out)
	if err != nil {
		return nil, err
	}
	ai, bi := broadcastIndex(a.Dims, out, n), broadcastIndex(b.Dims, out, n)
	res := &onnx.Tensor{DType: a.DType, Dims: out}
	op := x.n.OpType
	if isFloatType(a.DType) {
		res.F32 = make([]float32, n)
		for i := range res.F32 {
			p, q := a.F32[ai[i]], b.F32[bi[i]]
			switch op {
			case "Add":
				res.F32[i] = p + q
			case "Sub":
				res.F32[i] = p - q
			case "Mul":
				res.F32[i] = p * q
			case "Div":
				res.F32[i] = p / q
			case "Mod":
				res.F32[i] = float32(math.Mod(float64(p), float64(q)))
			}
		}
		return []*onnx.Tensor{res}, nil
	}
	res.I64 = make([]int64, n)
	for i := range res.I64 {
		p, q := a.I64[ai[i]], b.I64[bi[i]]
		switch op {
		case "Add":
			res.I64[i] = p + q
		case "Sub":
			res.I64[i] = p - q
		case "Mul":
			res.I64[i] = p * q
		case "Div":
			if q == 0 {
				return nil, x.errf("integer division by zero")
			}
			if p == math.MinInt64 && q == -1 {
				return nil, x.errf("integer division overflow")
			}
			res.I64[i] = p / q
		case "Mod":
			if q == 0 {
				return nil, x.errf("integer modulo by zero")
			}
			r := int64(0)
			if q != -1 {
				r = p % q
			}
			if attrIntOr(x.n, "fmod", 0) == 0 && r != 0 && (r < 0) != (q < 0) {
				r += q
			}
			res.I64[i] = r
		}
		res.I64[i] = castInt(res.I64[i], a.DType)
	}
	return []*onnx.Tensor{res}, nil
}

// broadcastIndex maps every element of out (n elements) to the element of a tensor of
// dims that numpy broadcasting reads.
func broadcastIndex(dims, out []int64, n int64) []int64 {
	st := strides(dims)
	off := len(out) - len(dims)
	idx := make([]int64, 0, n)
	forEach(out, func(c []int64) {
		var o int64
		for i, d := range dims {
			if d != 1 {
				o += c[i+off] * st[i]
			}
		}
		idx = append(idx, o)
	})
	return idx
}

func evalUnaryFloat(f func(float32) float32) func(*nodeCtx) ([]*onnx.Tensor, error) {
	return func(x *nodeCtx) ([]*onnx.Tensor, error) {
		t, err := x.evalIn(0)
		if err != nil {
			return nil, err
		}
		if !isFloatType(t.DType) {
			return nil, x.errf("input is %s; want float32", dtypeName(t.DType))
		}
		if _, err := checkFoldSize(x, t.Dims); err != nil {
			return nil, err
		}
		out := &onnx.Tensor{DType: onnx.Float, Dims: cloneDims(t.Dims), F32: make([]float32, len(t.F32))}
		for i, v := range t.F32 {
			out.F32[i] = f(v)
		}
		return []*onnx.Tensor{out}, nil
	}
}

// attrIntOr returns an int attribute of n, or def when absent.
func attrIntOr(n *onnx.Node, name string, def int64) int64 {
	if a, ok := n.Attrs[name]; ok && a != nil && a.Type == onnx.AttrInt {
		return a.I
	}
	return def
}
