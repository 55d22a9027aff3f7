package graph

import (
	"math"

	"idunno/kernel/onnx"
)

// Operators that exporters use only to compute shapes: the compiler folds them when their
// inputs are constant and rejects them otherwise.
func registerFoldOnly() {
	for name, s := range map[string]*opSpec{
		"ConstantOfShape": {attrs: []string{"value"}, minIn: 1, maxIn: 1, eval: evalConstantOfShape},
		"Range":           {minIn: 3, maxIn: 3, eval: evalRange},
		"ScatterND":       {attrs: []string{"reduction"}, minIn: 3, maxIn: 3, eval: evalScatterND},
		"Expand":          {minIn: 2, maxIn: 2, eval: evalExpand},
		"Equal":           {minIn: 2, maxIn: 2, eval: evalCompare},
		"Where":           {minIn: 3, maxIn: 3, eval: evalWhere},
		"Neg":             {minIn: 1, maxIn: 1, eval: evalNeg},
	} {
		s.foldOnly = true
		s.infer = func(x *nodeCtx) ([]onnx.ValueInfo, error) {
			return nil, x.errf("operator supported only on constant inputs")
		}
		ops[name] = s
	}
}

func evalConstantOfShape(x *nodeCtx) ([]*onnx.Tensor, error) {
	dims, err := x.constInts(0, "shape")
	if err != nil {
		return nil, err
	}
	n, err := checkFoldSize(x, dims)
	if err != nil {
		return nil, err
	}
	out := &onnx.Tensor{DType: onnx.Float, Dims: cloneDims(dims)}
	var fv float32
	var iv int64
	if a, err := x.attr("value", onnx.AttrTensor); err != nil {
		return nil, err
	} else if a != nil {
		t := a.T
		if t == nil {
			return nil, x.errf("attribute value is empty")
		}
		switch {
		case t.DType == onnx.Float && len(t.F32) == 1:
			fv = t.F32[0]
		case isIntType(t.DType) && len(t.I64) == 1:
			iv = t.I64[0]
		default:
			return nil, x.errf("value must be one float32 or integer element")
		}
		out.DType = t.DType
	}
	if out.DType == onnx.Float {
		out.F32 = make([]float32, n)
		for i := range out.F32 {
			out.F32[i] = fv
		}
	} else {
		out.I64 = make([]int64, n)
		for i := range out.I64 {
			out.I64[i] = iv
		}
	}
	return []*onnx.Tensor{out}, nil
}

func evalRange(x *nodeCtx) ([]*onnx.Tensor, error) {
	var ts [3]*onnx.Tensor
	for i := range ts {
		t, err := x.evalIn(i)
		if err != nil {
			return nil, err
		}
		if len(t.Dims) != 0 && !(len(t.Dims) == 1 && t.Dims[0] == 1) {
			return nil, x.errf("input %d must be a scalar", i)
		}
		if i > 0 && t.DType != ts[0].DType {
			return nil, x.errf("inputs differ in type")
		}
		ts[i] = t
	}
	if ts[0].DType == onnx.Float {
		start, limit, delta := float64(ts[0].F32[0]), float64(ts[1].F32[0]), float64(ts[2].F32[0])
		if delta == 0 || !finite(start) || !finite(limit) || !finite(delta) {
			return nil, x.errf("bad range %g..%g step %g", start, limit, delta)
		}
		cnt := math.Max(math.Ceil((limit-start)/delta), 0)
		if err := checkRange(x, cnt); err != nil {
			return nil, err
		}
		out := &onnx.Tensor{DType: onnx.Float, Dims: []int64{int64(cnt)}, F32: make([]float32, int64(cnt))}
		for i := range out.F32 {
			out.F32[i] = float32(start + float64(i)*delta)
		}
		return []*onnx.Tensor{out}, nil
	}
	start, limit, delta := ts[0].I64[0], ts[1].I64[0], ts[2].I64[0]
	if delta == 0 {
		return nil, x.errf("range step 0")
	}
	cnt := math.Max(math.Ceil((float64(limit)-float64(start))/float64(delta)), 0)
	if err := checkRange(x, cnt); err != nil {
		return nil, err
	}
	out := &onnx.Tensor{DType: ts[0].DType, Dims: []int64{int64(cnt)}, I64: make([]int64, int64(cnt))}
	for i := range out.I64 {
		out.I64[i] = start + int64(i)*delta
	}
	return []*onnx.Tensor{out}, nil
}

func evalExpand(x *nodeCtx) ([]*onnx.Tensor, error) {
	t, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	shape, err := x.constInts(1, "shape")
	if err != nil {
		return nil, err
	}
	if err := checkDims(shape); err != nil {
		return nil, x.errf("%v", err)
	}
	out, err := broadcast(t.Dims, shape)
	if err != nil {
		return nil, x.errf("%v", err)
	}
	n, err := checkFoldSize(x, out)
	if err != nil {
		return nil, err
	}
	return []*onnx.Tensor{pick(t, out, broadcastIndex(t.Dims, out, n))}, nil
}

// checkRange charges a Range of cnt elements to the fold budget.
func checkRange(x *nodeCtx, cnt float64) error {
	if cnt > float64(maxFoldElems) {
		return x.errf("range of %g elements too large", cnt)
	}
	_, err := checkFoldSize(x, []int64{int64(cnt)})
	return err
}

// broadcastAll returns the broadcast dims of several tensors and each one's index map.
func broadcastAll(x *nodeCtx, ts ...*onnx.Tensor) ([]int64, [][]int64, error) {
	out := []int64{}
	for _, t := range ts {
		var err error
		if out, err = broadcast(out, t.Dims); err != nil {
			return nil, nil, x.errf("%v", err)
		}
	}
	n, err := checkFoldSize(x, out)
	if err != nil {
		return nil, nil, err
	}
	idx := make([][]int64, len(ts))
	for i, t := range ts {
		idx[i] = broadcastIndex(t.Dims, out, n)
	}
	return out, idx, nil
}

func evalCompare(x *nodeCtx) ([]*onnx.Tensor, error) {
	a, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	b, err := x.evalIn(1)
	if err != nil {
		return nil, err
	}
	if a.DType != b.DType {
		return nil, x.errf("input types differ")
	}
	out, idx, err := broadcastAll(x, a, b)
	if err != nil {
		return nil, err
	}
	res := &onnx.Tensor{DType: onnx.Bool, Dims: out, I64: make([]int64, len(idx[0]))}
	for i := range res.I64 {
		var eq bool
		if a.DType == onnx.Float {
			eq = a.F32[idx[0][i]] == b.F32[idx[1][i]]
		} else {
			eq = a.I64[idx[0][i]] == b.I64[idx[1][i]]
		}
		if eq {
			res.I64[i] = 1
		}
	}
	return []*onnx.Tensor{res}, nil
}

func evalWhere(x *nodeCtx) ([]*onnx.Tensor, error) {
	var ts [3]*onnx.Tensor
	for i := range ts {
		t, err := x.evalIn(i)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	if ts[0].DType != onnx.Bool || ts[1].DType != ts[2].DType {
		return nil, x.errf("want a bool condition and two inputs of one type")
	}
	out, idx, err := broadcastAll(x, ts[0], ts[1], ts[2])
	if err != nil {
		return nil, err
	}
	res := &onnx.Tensor{DType: ts[1].DType, Dims: out}
	n := len(idx[0])
	if ts[1].DType == onnx.Float {
		res.F32 = make([]float32, n)
	} else {
		res.I64 = make([]int64, n)
	}
	for i := 0; i < n; i++ {
		src, j := ts[2], idx[2][i]
		if ts[0].I64[idx[0][i]] != 0 {
			src, j = ts[1], idx[1][i]
		}
		if res.F32 != nil {
			res.F32[i] = src.F32[j]
		} else {
			res.I64[i] = src.I64[j]
		}
	}
	return []*onnx.Tensor{res}, nil
}

func evalNeg(x *nodeCtx) ([]*onnx.Tensor, error) {
	t, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	if _, err := checkFoldSize(x, t.Dims); err != nil {
		return nil, err
	}
	out := &onnx.Tensor{DType: t.DType, Dims: cloneDims(t.Dims)}
	if t.DType == onnx.Float {
		out.F32 = make([]float32, len(t.F32))
		for i, v := range t.F32 {
			out.F32[i] = -v
		}
	} else {
		out.I64 = make([]int64, len(t.I64))
		for i, v := range t.I64 {
			out.I64[i] = castInt(-v, t.DType)
		}
	}
	return []*onnx.Tensor{out}, nil
}

// evalScatterND folds ScatterND (reduction none): exporters write it for masks built by
// slice assignment (Swin's shifted-window attention mask).
func evalScatterND(x *nodeCtx) ([]*onnx.Tensor, error) {
	if r, err := x.attrString("reduction", "none"); err != nil {
		return nil, err
	} else if r != "none" {
		return nil, x.errf("reduction %q not supported", r)
	}
	data, err := x.evalIn(0)
	if err != nil {
		return nil, err
	}
	ind := x.cst(1)
	if ind == nil || !isIntType(ind.DType) {
		return nil, x.errf("indices must be a constant integer tensor")
	}
	upd, err := x.evalIn(2)
	if err != nil {
		return nil, err
	}
	if upd.DType != data.DType {
		return nil, x.errf("updates type differs from data")
	}
	if len(ind.Dims) == 0 {
		return nil, x.errf("indices must have rank >= 1")
	}
	k := int(ind.Dims[len(ind.Dims)-1])
	if k < 1 || k > len(data.Dims) {
		return nil, x.errf("index depth %d for data of rank %d", k, len(data.Dims))
	}
	want := append(cloneDims(ind.Dims[:len(ind.Dims)-1]), data.Dims[k:]...)
	if !dimsEqual(want, upd.Dims) {
		return nil, x.errf("updates dims %v; want %v", upd.Dims, want)
	}
	if _, err := checkFoldSize(x, data.Dims); err != nil {
		return nil, err
	}
	out := &onnx.Tensor{DType: data.DType, Dims: cloneDims(data.Dims)}
	out.F32 = append([]float32(nil), data.F32...)
	out.I64 = append([]int64(nil), data.I64...)
	st := strides(data.Dims)
	slice, _ := numel(data.Dims[k:])
	nidx := int64(len(ind.I64)) / int64(k)
	for i := int64(0); i < nidx; i++ {
		off := int64(0)
		for j := 0; j < k; j++ {
			v := ind.I64[i*int64(k)+int64(j)]
			if v < 0 {
				v += data.Dims[j]
			}
			if v < 0 || v >= data.Dims[j] {
				return nil, x.errf("index %d out of range for dim %d", ind.I64[i*int64(k)+int64(j)], data.Dims[j])
			}
			off += v * st[j]
		}
		for e := int64(0); e < slice; e++ {
			if out.F32 != nil {
				out.F32[off+e] = upd.F32[i*slice+e]
			} else {
				out.I64[off+e] = upd.I64[i*slice+e]
			}
		}
	}
	return []*onnx.Tensor{out}, nil
}
