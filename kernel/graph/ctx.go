package graph

import (
	"fmt"

	"idunno/kernel/onnx"
)

// opSpec describes how the compiler handles one operator.
type opSpec struct {
	attrs        []string // attribute names the op may carry
	minIn, maxIn int      // number of inputs (counting omitted optional ones)
	// infer returns the dtype and dims of each output the kernel computes.
	infer func(x *nodeCtx) ([]onnx.ValueInfo, error)
	// eval computes the outputs when every input is constant (or always, with alwaysFold).
	eval       func(x *nodeCtx) ([]*onnx.Tensor, error)
	alwaysFold bool
	foldOnly   bool // the kernel does not run it: only constant inputs are accepted
	// passThrough reports that the node only renames its first input.
	passThrough func(x *nodeCtx) (bool, error)
}

func (s *opSpec) allows(name string, _ int64) bool {
	for _, a := range s.attrs {
		if a == name {
			return true
		}
	}
	return false
}

// nodeCtx gives shape inference and evaluation access to one node and the compiler state.
type nodeCtx struct {
	c *compiler
	n *onnx.Node
}

func (x *nodeCtx) errf(format string, args ...any) error {
	return fmt.Errorf("graph: node %s (%s): %s", x.n.Name, x.n.OpType, fmt.Sprintf(format, args...))
}

func (x *nodeCtx) checkArity(s *opSpec) error {
	n := len(x.n.Inputs)
	for n > 0 && x.n.Inputs[n-1] == "" {
		n--
	}
	if n < s.minIn || n > s.maxIn {
		return x.errf("has %d inputs, want %d to %d", n, s.minIn, s.maxIn)
	}
	for i := 0; i < s.minIn; i++ {
		if x.n.Inputs[i] == "" {
			return x.errf("required input %d is missing", i)
		}
	}
	if len(x.n.Outputs) == 0 || x.n.Outputs[0] == "" {
		return x.errf("has no output")
	}
	return nil
}

func (x *nodeCtx) opset() int64 { return x.c.opset }

func (x *nodeCtx) has(i int) bool { return i < len(x.n.Inputs) && x.n.Inputs[i] != "" }

// in returns the value info of input i (which must be present).
func (x *nodeCtx) in(i int) *onnx.ValueInfo { return x.c.vals[x.n.Inputs[i]] }

// dims returns the dims of input i.
func (x *nodeCtx) dims(i int) []int64 { return x.in(i).Dims }

// cst returns input i's constant value, or nil when it is absent or computed at run time.
func (x *nodeCtx) cst(i int) *onnx.Tensor {
	if !x.has(i) {
		return nil
	}
	return x.c.consts[x.n.Inputs[i]]
}

// floatIn requires input i to be float32.
func (x *nodeCtx) floatIn(i int) error {
	if t := x.in(i).DType; t != onnx.Float {
		return x.errf("input %d is %s; want float32", i, dtypeName(t))
	}
	return nil
}

// constInts returns the integer values of constant input i.
func (x *nodeCtx) constInts(i int, what string) ([]int64, error) {
	t := x.cst(i)
	if t == nil {
		return nil, x.errf("%s (input %d) must be a constant", what, i)
	}
	if !isIntType(t.DType) {
		return nil, x.errf("%s is %s; want an integer type", what, dtypeName(t.DType))
	}
	if len(t.Dims) > 1 {
		return nil, x.errf("%s must be a scalar or 1-D, has dims %v", what, t.Dims)
	}
	return t.I64, nil
}

// constScalar returns the float value of an optional constant scalar input.
func (x *nodeCtx) constScalar(i int, what string) (float32, bool, error) {
	if !x.has(i) {
		return 0, false, nil
	}
	t := x.cst(i)
	if t == nil {
		return 0, false, x.errf("%s (input %d) must be a constant", what, i)
	}
	if len(t.Dims) > 1 || (len(t.Dims) == 1 && t.Dims[0] != 1) {
		return 0, false, x.errf("%s must be a scalar, has dims %v", what, t.Dims)
	}
	switch {
	case t.DType == onnx.Float && len(t.F32) == 1:
		return t.F32[0], true, nil
	case isIntType(t.DType) && len(t.I64) == 1:
		return float32(t.I64[0]), true, nil
	}
	return 0, false, x.errf("%s has unsupported dtype %s", what, dtypeName(t.DType))
}

func (x *nodeCtx) attr(name string, want onnx.AttrType) (*onnx.Attribute, error) {
	a, ok := x.n.Attrs[name]
	if !ok {
		return nil, nil
	}
	if a.Type != want {
		return nil, x.errf("attribute %q has type %d, want %d", name, a.Type, want)
	}
	return a, nil
}

func (x *nodeCtx) attrInt(name string, def int64) (int64, error) {
	a, err := x.attr(name, onnx.AttrInt)
	if err != nil || a == nil {
		return def, err
	}
	return a.I, nil
}

func (x *nodeCtx) attrFloat(name string, def float32) (float32, error) {
	a, err := x.attr(name, onnx.AttrFloat)
	if err != nil || a == nil {
		return def, err
	}
	if !finite(float64(a.F)) {
		return 0, x.errf("attribute %q is not finite", name)
	}
	return a.F, nil
}

func (x *nodeCtx) attrString(name, def string) (string, error) {
	a, err := x.attr(name, onnx.AttrString)
	if err != nil || a == nil {
		return def, err
	}
	return a.S, nil
}

// attrInts returns an ints attribute and whether it was present.
func (x *nodeCtx) attrInts(name string) ([]int64, bool, error) {
	a, err := x.attr(name, onnx.AttrInts)
	if err != nil || a == nil {
		return nil, false, err
	}
	return a.Ints, true, nil
}

// bool01 reads an int attribute that must be 0 or 1.
func (x *nodeCtx) bool01(name string, def int64) (bool, error) {
	v, err := x.attrInt(name, def)
	if err != nil {
		return false, err
	}
	if v != 0 && v != 1 {
		return false, x.errf("attribute %s=%d; want 0 or 1", name, v)
	}
	return v == 1, nil
}

func (x *nodeCtx) setInts(name string, v []int64) {
	x.n.Attrs[name] = &onnx.Attribute{Name: name, Type: onnx.AttrInts, Ints: v}
}

func (x *nodeCtx) setInt(name string, v int64) {
	x.n.Attrs[name] = &onnx.Attribute{Name: name, Type: onnx.AttrInt, I: v}
}

// one returns a single float output of the given dims.
func one(dims []int64) []onnx.ValueInfo {
	return []onnx.ValueInfo{{DType: onnx.Float, Dims: dims}}
}
