package kernel

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// plan is one compiled C plan: the network for one exact set of input shapes.
type plan struct {
	h       uintptr
	inputs  []tensorSlot // run-time inputs in graph order
	outputs []tensorSlot
	flops   float64
}

// tensorSlot is a plan input or output: its element type and exact dims.
type tensorSlot struct {
	name  string
	dtype onnx.DataType
	dims  []int64
}

// builder lowers one compiled graph into a C plan.
type builder struct {
	h     uintptr
	g     *onnx.Graph
	opset int64
	ids   map[string]int32
	node  *onnx.Node
	// Transposes lowered into matrix products (lower_perm.go)
	permIn  map[string]permRef
	permOut map[*onnx.Node]permRef
	skip    map[*onnx.Node]bool
	rolls   map[*onnx.Node]rollOf // Concats of Slices lowered as one Gather
}

func volume(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

func (b *builder) errf(format string, args ...any) error {
	if b.node != nil {
		return fmt.Errorf("kernel: node %s (%s): %s", b.node.Name, b.node.OpType, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("kernel: %s", fmt.Sprintf(format, args...))
}

func (b *builder) cerr(st int32) error {
	return b.errf("%s: %s", idkStatusStr(st), idkPlanError(b.h))
}

func dimsPtr(d []int64) *int64 {
	if len(d) == 0 {
		return nil
	}
	return &d[0]
}

// addTensor declares a tensor; data (F32 or I64 slice) makes it a constant.
func (b *builder) addTensor(dtype int32, dims []int64, f32 []float32, i64 []int64) (int32, error) {
	var id int32
	var ptr uintptr
	var nbytes int64
	switch {
	case f32 != nil:
		if len(f32) > 0 {
			ptr = uintptr(unsafe.Pointer(&f32[0]))
		}
		nbytes = int64(len(f32)) * 4
	case i64 != nil:
		if len(i64) > 0 {
			ptr = uintptr(unsafe.Pointer(&i64[0]))
		}
		nbytes = int64(len(i64)) * 8
	}
	if (f32 != nil || i64 != nil) && ptr == 0 {
		// an empty constant: pass a valid pointer so the kernel knows it is constant
		var one [1]int64
		ptr = uintptr(unsafe.Pointer(&one[0]))
		st := idkPlanAddTensor(b.h, dtype, int32(len(dims)), dimsPtr(dims), ptr, 0, &id)
		runtime.KeepAlive(one)
		if st != statusOK {
			return 0, b.cerr(st)
		}
		return id, nil
	}
	st := idkPlanAddTensor(b.h, dtype, int32(len(dims)), dimsPtr(dims), ptr, nbytes, &id)
	runtime.KeepAlive(f32)
	runtime.KeepAlive(i64)
	runtime.KeepAlive(dims)
	if st != statusOK {
		return 0, b.cerr(st)
	}
	return id, nil
}

func kernelDType(d onnx.DataType) (int32, bool) {
	switch d {
	case onnx.Float:
		return dtF32, true
	case onnx.Int64, onnx.Int32, onnx.Int16, onnx.Int8, onnx.Uint8, onnx.Bool:
		return dtI64, true
	}
	return 0, false
}

// constTensor returns the kernel id of an initializer, adding it on first use.
func (b *builder) constTensor(name string, t *onnx.Tensor) (int32, error) {
	if id, ok := b.ids[name]; ok {
		return id, nil
	}
	dt, ok := kernelDType(t.DType)
	if !ok {
		return 0, b.errf("constant %s has unsupported type %d", name, t.DType)
	}
	var id int32
	var err error
	if dt == dtF32 {
		if int64(len(t.F32)) != volume(t.Dims) {
			return 0, b.errf("constant %s: %d values for dims %v", name, len(t.F32), t.Dims)
		}
		id, err = b.addTensor(dt, t.Dims, nonNilF(t.F32), nil)
	} else {
		if int64(len(t.I64)) != volume(t.Dims) {
			return 0, b.errf("constant %s: %d values for dims %v", name, len(t.I64), t.Dims)
		}
		id, err = b.addTensor(dt, t.Dims, nil, nonNilI(t.I64))
	}
	if err != nil {
		return 0, err
	}
	b.ids[name] = id
	return id, nil
}

func nonNilF(v []float32) []float32 {
	if v == nil {
		return []float32{}
	}
	return v
}

func nonNilI(v []int64) []int64 {
	if v == nil {
		return []int64{}
	}
	return v
}

// in returns the kernel id of a value read by the current node.
func (b *builder) in(name string) (int32, error) {
	if id, ok := b.ids[name]; ok {
		return id, nil
	}
	if t, ok := b.g.Initializers[name]; ok && t != nil {
		return b.constTensor(name, t)
	}
	return 0, b.errf("value %q is not defined before use", name)
}

// dims returns the exact dims of a value.
func (b *builder) dims(name string) ([]int64, error) {
	if v, ok := b.g.Values[name]; ok && v != nil {
		return v.Dims, nil
	}
	if t, ok := b.g.Initializers[name]; ok && t != nil {
		return t.Dims, nil
	}
	return nil, b.errf("no shape for value %q", name)
}

// out declares the tensor a node writes under name.
func (b *builder) out(name string) (int32, error) {
	if _, ok := b.ids[name]; ok {
		return 0, b.errf("value %q written twice", name)
	}
	v, ok := b.g.Values[name]
	if !ok || v == nil {
		return 0, b.errf("no shape for output %q", name)
	}
	dt, ok := kernelDType(v.DType)
	if !ok {
		return 0, b.errf("output %q has unsupported type %d", name, v.DType)
	}
	id, err := b.addTensor(dt, v.Dims, nil, nil)
	if err != nil {
		return 0, err
	}
	b.ids[name] = id
	return id, nil
}

// temp declares an unnamed intermediate float tensor.
func (b *builder) temp(dims []int64) (int32, error) { return b.addTensor(dtF32, dims, nil, nil) }

func (b *builder) op(kind int32, in, out []int32, ia []int64, fa []float32) error {
	var pi, po *int32
	var pia *int64
	var pfa *float32
	if len(in) > 0 {
		pi = &in[0]
	}
	po = &out[0]
	if len(ia) > 0 {
		pia = &ia[0]
	}
	if len(fa) > 0 {
		pfa = &fa[0]
	}
	st := idkPlanAddOp(b.h, kind, int32(len(in)), pi, int32(len(out)), po, int32(len(ia)), pia, int32(len(fa)), pfa)
	runtime.KeepAlive(in)
	runtime.KeepAlive(out)
	runtime.KeepAlive(ia)
	runtime.KeepAlive(fa)
	if st != statusOK {
		return b.cerr(st)
	}
	return nil
}

// ---- attributes ----

func attrInt(n *onnx.Node, name string, def int64) int64 {
	if a, ok := n.Attrs[name]; ok && a != nil {
		return a.I
	}
	return def
}

func attrFloat(n *onnx.Node, name string, def float32) float32 {
	if a, ok := n.Attrs[name]; ok && a != nil {
		return a.F
	}
	return def
}

func attrInts(n *onnx.Node, name string) ([]int64, bool) {
	if a, ok := n.Attrs[name]; ok && a != nil {
		return a.Ints, true
	}
	return nil, false
}

func attrString(n *onnx.Node, name, def string) string {
	if a, ok := n.Attrs[name]; ok && a != nil {
		return a.S
	}
	return def
}

// constInts reads an optional constant int64 input.
func (b *builder) constInts(i int) ([]int64, bool, error) {
	n := b.node
	if i >= len(n.Inputs) || n.Inputs[i] == "" {
		return nil, false, nil
	}
	t, ok := b.g.Initializers[n.Inputs[i]]
	if !ok || t == nil {
		return nil, false, b.errf("input %d (%s) must be constant", i, n.Inputs[i])
	}
	if t.I64 != nil || t.DType != onnx.Float {
		return t.I64, true, nil
	}
	return nil, false, b.errf("input %d (%s) must be integer", i, n.Inputs[i])
}

// constScalar reads an optional constant float scalar input.
func (b *builder) constScalar(i int) (float32, bool, error) {
	n := b.node
	if i >= len(n.Inputs) || n.Inputs[i] == "" {
		return 0, false, nil
	}
	t, ok := b.g.Initializers[n.Inputs[i]]
	if !ok || t == nil {
		return 0, false, b.errf("input %d (%s) must be constant", i, n.Inputs[i])
	}
	switch {
	case len(t.F32) == 1:
		return t.F32[0], true, nil
	case len(t.I64) == 1:
		return float32(t.I64[0]), true, nil
	case len(t.F64) == 1:
		return float32(t.F64[0]), true, nil
	}
	return 0, false, b.errf("input %d (%s) must be a scalar", i, n.Inputs[i])
}

func normAxis(ax int64, rank int) (int64, bool) {
	if ax < 0 {
		ax += int64(rank)
	}
	return ax, ax >= 0 && ax < int64(rank)
}

// ---- lowering ----

// lowerGraph builds and compiles a C plan for a compiled graph.
func lowerGraph(g *onnx.Graph, opset int64, threads int, prec Precision) (*plan, error) {
	return lowerGraphShared(g, opset, threads, prec, 0)
}

// lowerGraphShared is lowerGraph for a plan that reads the constants of the compiled plan
// donor (0: none) where they are the same bytes in the same layout (idk_plan_share_weights;
// the split batch's parts). The donor's memory lives until both plans are destroyed.
func lowerGraphShared(g *onnx.Graph, opset int64, threads int, prec Precision, donor uintptr) (*plan, error) {
	var h uintptr
	if st := idkPlanCreate(&h, int32(threads)); st != statusOK {
		return nil, fmt.Errorf("kernel: create plan: %s", idkStatusStr(st))
	}
	if prec == BF16 {
		if st := idkPlanSetPrec(h, dtBF16); st != statusOK {
			err := fmt.Errorf("kernel: bf16: %s: %s", idkStatusStr(st), idkPlanError(h))
			idkPlanDestroy(h)
			return nil, err
		}
	}
	if donor != 0 {
		if st := idkPlanShareW(h, donor); st != statusOK {
			err := fmt.Errorf("kernel: share weights: %s: %s", idkStatusStr(st), idkPlanError(h))
			idkPlanDestroy(h)
			return nil, err
		}
	}
	b := &builder{h: h, g: g, opset: opset, ids: map[string]int32{}}
	p, err := b.build()
	if err != nil {
		idkPlanDestroy(h)
		return nil, err
	}
	return p, nil
}

func (b *builder) build() (*plan, error) {
	p := &plan{h: b.h}
	var inIDs, outIDs []int32
	for _, vi := range b.g.Inputs {
		id, err := b.out(vi.Name)
		if err != nil {
			return nil, err
		}
		v := b.g.Values[vi.Name]
		inIDs = append(inIDs, id)
		p.inputs = append(p.inputs, tensorSlot{vi.Name, v.DType, v.Dims})
	}
	u := b.uses()
	b.planPerms(u)
	b.planRolls(u)
	for _, n := range b.g.Nodes {
		b.node = n
		if b.skip[n] { // a Transpose a matrix product reads or writes through strides
			continue
		}
		lower := b.lowerNode
		if code, ok := b.wrapsNarrow(n); ok {
			lower = func(n *onnx.Node) error { return b.lowerWrapped(n, code) }
		}
		if err := lower(n); err != nil {
			return nil, err
		}
		p.flops += nodeFLOPs(b.g, n)
	}
	b.node = nil
	for _, vo := range b.g.Outputs {
		id, err := b.in(vo.Name)
		if err != nil {
			return nil, err
		}
		d, err := b.dims(vo.Name)
		if err != nil {
			return nil, err
		}
		dt := onnx.Float
		if v, ok := b.g.Values[vo.Name]; ok && v != nil {
			dt = v.DType
		} else if t, ok := b.g.Initializers[vo.Name]; ok {
			dt = t.DType
		}
		if _, ok := kernelDType(dt); !ok {
			return nil, b.errf("output %s has unsupported type %d", vo.Name, dt)
		}
		outIDs = append(outIDs, id)
		p.outputs = append(p.outputs, tensorSlot{vo.Name, dt, d})
	}
	if len(outIDs) == 0 {
		return nil, b.errf("graph has no outputs")
	}
	var pin *int32
	if len(inIDs) > 0 {
		pin = &inIDs[0]
	}
	if st := idkPlanSetIO(b.h, int32(len(inIDs)), pin, int32(len(outIDs)), &outIDs[0]); st != statusOK {
		return nil, b.cerr(st)
	}
	runtime.KeepAlive(inIDs)
	runtime.KeepAlive(outIDs)
	if st := idkPlanCompile(b.h); st != statusOK {
		return nil, b.cerr(st)
	}
	return p, nil
}

// nodeFLOPs counts two per multiply-add of Conv, Gemm and MatMul.
func nodeFLOPs(g *onnx.Graph, n *onnx.Node) float64 {
	if len(n.Outputs) == 0 || len(n.Inputs) < 2 {
		return 0
	}
	ov, ok := g.Values[n.Outputs[0]]
	if !ok || ov == nil {
		return 0
	}
	dimsOf := func(name string) []int64 {
		if v, ok := g.Values[name]; ok && v != nil {
			return v.Dims
		}
		if t, ok := g.Initializers[name]; ok && t != nil {
			return t.Dims
		}
		return nil
	}
	out := float64(volume(ov.Dims))
	switch n.OpType {
	case "Conv":
		w := dimsOf(n.Inputs[1])
		if len(w) < 2 {
			return 0
		}
		return 2 * out * float64(volume(w[1:]))
	case "Gemm":
		a := dimsOf(n.Inputs[0])
		if len(a) != 2 {
			return 0
		}
		k := a[1]
		if attrInt(n, "transA", 0) != 0 {
			k = a[0]
		}
		return 2 * out * float64(k)
	case "MatMul":
		a := dimsOf(n.Inputs[0])
		if len(a) == 0 {
			return 0
		}
		return 2 * out * float64(a[len(a)-1])
	case graph.AttentionOp:
		if kt := dimsOf(n.Inputs[1]); len(kt) > 0 {
			return 4 * out * float64(kt[len(kt)-1])
		}
	}
	return 0
}

func (b *builder) lowerNode(n *onnx.Node) error {
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return b.errf("domain %q not supported", n.Domain)
	}
	if len(n.Outputs) == 0 {
		return b.errf("no outputs")
	}
	if ok, err := b.lowerModern(n); ok {
		return err
	}
	if ok, err := b.lowerQuant(n); ok {
		return err
	}
	switch n.OpType {
	case "Conv":
		return b.lowerConv(n)
	case "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Elu", "HardSigmoid", "HardSwish":
		alg, alpha, beta, err := b.activation(n)
		if err != nil {
			return err
		}
		return b.unary(opEltwise, n, []int64{alg}, []float32{alpha, beta})
	case "PRelu":
		return b.binary(n, binPRelu)
	case "Add":
		return b.binary(n, binAdd)
	case "Sub":
		return b.binary(n, binSub)
	case "Mul":
		return b.binary(n, binMul)
	case "Div":
		return b.binary(n, binDiv)
	case "MaxPool", "AveragePool":
		return b.lowerPool(n)
	case "GlobalAveragePool", "GlobalMaxPool":
		return b.lowerGlobalPool(n)
	case "BatchNormalization":
		return b.lowerBNorm(n)
	case "Gemm":
		return b.lowerGemm(n)
	case "MatMul":
		return b.lowerMatMul(n)
	case "Concat":
		return b.lowerConcat(n)
	case "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout":
		if len(n.Outputs) > 1 {
			for _, o := range n.Outputs[1:] {
				if o != "" {
					return b.errf("optional output %s not supported", o)
				}
			}
		}
		return b.unary(opReshape, n, nil, nil)
	case "Transpose":
		return b.lowerTranspose(n)
	case "Softmax", "LogSoftmax":
		return b.lowerSoftmax(n)
	case "LRN":
		size := attrInt(n, "size", 0)
		return b.unary(opLRN, n, []int64{size}, []float32{attrFloat(n, "alpha", 1e-4), attrFloat(n, "beta", 0.75), attrFloat(n, "bias", 1)})
	case "Pad":
		return b.lowerPad(n)
	case "Gather":
		return b.lowerGather(n)
	case "Slice":
		return b.lowerSlice(n)
	case "ReduceMean":
		return b.lowerReduceMean(n)
	case "Constant", "Shape":
		// the graph compiler folds these; their values are initializers
		for _, o := range n.Outputs {
			if _, ok := b.g.Initializers[o]; !ok {
				return b.errf("not folded to a constant")
			}
		}
		return nil
	}
	return b.errf("operator not supported by the kernel")
}

// unary lowers a one-input one-output node.
func (b *builder) unary(kind int32, n *onnx.Node, ia []int64, fa []float32) error {
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(kind, []int32{x}, []int32{y}, ia, fa)
}

func (b *builder) activation(n *onnx.Node) (alg int64, alpha, beta float32, err error) {
	switch n.OpType {
	case "Relu":
		return eltRelu, 0, 0, nil
	case "LeakyRelu":
		return eltRelu, attrFloat(n, "alpha", 0.01), 0, nil
	case "Sigmoid":
		return eltSigmoid, 0, 0, nil
	case "Tanh":
		return eltTanh, 0, 0, nil
	case "Elu":
		return eltElu, attrFloat(n, "alpha", 1), 0, nil
	case "HardSigmoid":
		return eltHardSigmoid, attrFloat(n, "alpha", 0.2), attrFloat(n, "beta", 0.5), nil
	case "HardSwish":
		return eltHardSwish, 0, 0, nil
	case "Clip":
		lo, hi := float32(-math.MaxFloat32), float32(math.MaxFloat32)
		if b.opset < 11 {
			lo, hi = attrFloat(n, "min", lo), attrFloat(n, "max", hi)
		} else {
			if v, ok, e := b.constScalar(1); e != nil {
				return 0, 0, 0, e
			} else if ok {
				lo = v
			}
			if v, ok, e := b.constScalar(2); e != nil {
				return 0, 0, 0, e
			} else if ok {
				hi = v
			}
		}
		return eltClip, lo, hi, nil
	}
	return 0, 0, 0, b.errf("not an activation")
}

func (b *builder) binary(n *onnx.Node, alg int64) error {
	if len(n.Inputs) != 2 {
		return b.errf("want 2 inputs")
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	w, err := b.in(n.Inputs[1])
	if err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opBinary, []int32{x, w}, []int32{y}, []int64{alg}, nil)
}

// postOps parses the graph compiler's "idunno.post_ops" attribute.
type postOp struct {
	kind        int32
	alg         int32
	alpha, beta float32
	sum         string
	sumID       int32 // when > 0: the tensor to sum (a reshape of sum), instead of sum's own
}

func parsePostOps(n *onnx.Node) ([]postOp, error) {
	a, ok := n.Attrs["idunno.post_ops"]
	if !ok || a == nil {
		return nil, nil
	}
	var out []postOp
	for _, s := range a.Strings {
		parts := strings.Split(s, ":")
		f := func(i int) (float32, error) {
			if i >= len(parts) {
				return 0, fmt.Errorf("post-op %q: missing parameter", s)
			}
			v, err := strconv.ParseFloat(parts[i], 32)
			return float32(v), err
		}
		var p postOp
		var e1, e2 error
		switch parts[0] {
		case "sum":
			if len(parts) < 2 {
				return nil, fmt.Errorf("post-op %q: missing value", s)
			}
			p = postOp{kind: postSum, sum: strings.Join(parts[1:], ":")}
		case "relu":
			p = postOp{alg: eltRelu}
		case "leaky_relu":
			p = postOp{alg: eltRelu}
			p.alpha, e1 = f(1)
		case "clip":
			p = postOp{alg: eltClip}
			p.alpha, e1 = f(1)
			p.beta, e2 = f(2)
		case "sigmoid":
			p = postOp{alg: eltSigmoid}
		case "tanh":
			p = postOp{alg: eltTanh}
		case "elu":
			p = postOp{alg: eltElu}
			p.alpha, e1 = f(1)
		case "hard_sigmoid":
			p = postOp{alg: eltHardSigmoid}
			p.alpha, e1 = f(1)
			p.beta, e2 = f(2)
		case "hard_swish":
			p = postOp{alg: eltHardSwish}
		case "swish":
			p = postOp{alg: eltSwish}
			p.alpha, e1 = f(1)
		case "gelu_erf":
			p = postOp{alg: eltGeluErf}
		case "gelu_tanh":
			p = postOp{alg: eltGeluTanh}
		default:
			return nil, fmt.Errorf("post-op %q not supported", s)
		}
		if e1 != nil || e2 != nil {
			return nil, fmt.Errorf("post-op %q: bad number", s)
		}
		out = append(out, p)
	}
	return out, nil
}

func (b *builder) addPostOps(posts []postOp) error {
	for _, p := range posts {
		var t int32 = -1
		if p.kind == postSum && p.sumID > 0 {
			t = p.sumID
		} else if p.kind == postSum {
			id, err := b.in(p.sum)
			if err != nil {
				return err
			}
			t = id
		}
		if st := idkPlanAddPostOp(b.h, p.kind, p.alg, p.alpha, p.beta, t); st != statusOK {
			return b.cerr(st)
		}
	}
	return nil
}

func (b *builder) lowerConv(n *onnx.Node) error {
	if s := attrString(n, "auto_pad", "NOTSET"); s != "NOTSET" && s != "" {
		return b.errf("auto_pad %s not resolved by the graph compiler", s)
	}
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	S := len(xd) - 2
	if S < 1 || S > 3 {
		return b.errf("conv of rank %d not supported", len(xd))
	}
	ints := func(name string, def int64, count int) ([]int64, error) {
		v, ok := attrInts(n, name)
		if !ok {
			v = make([]int64, count)
			for i := range v {
				v[i] = def
			}
		}
		if len(v) != count {
			return nil, b.errf("attribute %s has %d values, want %d", name, len(v), count)
		}
		return v, nil
	}
	strides, err := ints("strides", 1, S)
	if err != nil {
		return err
	}
	dil, err := ints("dilations", 1, S)
	if err != nil {
		return err
	}
	pads, err := ints("pads", 0, 2*S)
	if err != nil {
		return err
	}
	ia := []int64{int64(S)}
	ia = append(ia, strides...)
	ia = append(ia, dil...)
	ia = append(ia, pads...)
	ia = append(ia, attrInt(n, "group", 1))
	posts, err := parsePostOps(n)
	if err != nil {
		return b.errf("%v", err)
	}
	var in []int32
	for i, name := range n.Inputs {
		if name == "" {
			if i == 2 {
				continue
			}
			return b.errf("input %d missing", i)
		}
		id, err := b.in(name)
		if err != nil {
			return err
		}
		in = append(in, id)
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	if err := b.op(opConv, in, []int32{y}, ia, nil); err != nil {
		return err
	}
	return b.addPostOps(posts)
}

func (b *builder) lowerPool(n *onnx.Node) error {
	if len(n.Outputs) > 1 && n.Outputs[1] != "" {
		return b.errf("Indices output not supported")
	}
	if s := attrString(n, "auto_pad", "NOTSET"); s != "NOTSET" && s != "" {
		return b.errf("auto_pad %s not resolved by the graph compiler", s)
	}
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return err
	}
	S := len(xd) - 2
	if S < 1 || S > 3 || len(yd) != len(xd) {
		return b.errf("pool of rank %d not supported", len(xd))
	}
	k, ok := attrInts(n, "kernel_shape")
	if !ok || len(k) != S {
		return b.errf("kernel_shape missing or wrong length")
	}
	get := func(name string, def int64, count int) ([]int64, error) {
		v, ok := attrInts(n, name)
		if !ok {
			v = make([]int64, count)
			for i := range v {
				v[i] = def
			}
		}
		if len(v) != count {
			return nil, b.errf("attribute %s has %d values, want %d", name, len(v), count)
		}
		return v, nil
	}
	strides, err := get("strides", 1, S)
	if err != nil {
		return err
	}
	dil, err := get("dilations", 1, S)
	if err != nil {
		return err
	}
	pads, err := get("pads", 0, 2*S)
	if err != nil {
		return err
	}
	alg := int64(poolMax)
	if n.OpType == "AveragePool" {
		alg = poolAvgExclude
		if attrInt(n, "count_include_pad", 0) != 0 {
			alg = poolAvgInclude
		}
	}
	ia := []int64{alg, int64(S)}
	ia = append(ia, k...)
	ia = append(ia, strides...)
	ia = append(ia, dil...)
	ia = append(ia, pads[:S]...)
	for i := 0; i < S; i++ {
		// the end pad that makes the kernel produce exactly the compiled output size
		// (ceil_mode adds to it; a floor that drops the last partial window shrinks it)
		ke := (k[i]-1)*dil[i] + 1
		pe := (yd[2+i]-1)*strides[i] + ke - xd[2+i] - pads[i]
		if pe < 0 {
			pe = 0
		}
		if alg == poolAvgInclude && pe > pads[S+i] {
			return b.errf("ceil_mode with count_include_pad not supported")
		}
		ia = append(ia, pe)
	}
	return b.unary(opPool, n, ia, nil)
}

func (b *builder) lowerGlobalPool(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	S := len(xd) - 2
	if S < 1 || S > 3 {
		return b.errf("global pool of rank %d not supported", len(xd))
	}
	alg := int64(poolMax)
	if n.OpType == "GlobalAveragePool" {
		alg = poolAvgExclude
	}
	ia := []int64{alg, int64(S)}
	ia = append(ia, xd[2:]...)
	for range 2 * S {
		ia = append(ia, 1)
	}
	for range 2 * S {
		ia = append(ia, 0)
	}
	// strides 1, dilations 1 (written above as the 2*S ones), pads 0
	return b.unary(opPool, n, ia, nil)
}

func (b *builder) lowerBNorm(n *onnx.Node) error {
	if attrInt(n, "training_mode", 0) != 0 {
		return b.errf("training_mode not supported")
	}
	return b.bnorm(n, []float32{attrFloat(n, "epsilon", 1e-5)})
}

// bnorm lowers a BatchNormalization node with float attributes fa (epsilon, and for
// training plans the momentum of its running statistics).
func (b *builder) bnorm(n *onnx.Node, fa []float32) error {
	for _, o := range n.Outputs[1:] {
		if o != "" {
			return b.errf("training outputs (running mean/var) are not supported as graph values")
		}
	}
	var in []int32
	for _, name := range n.Inputs {
		id, err := b.in(name)
		if err != nil {
			return err
		}
		in = append(in, id)
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opBNorm, in, []int32{y}, nil, fa)
}

// reshaped returns a tensor that views id with new dims (no copy).
func (b *builder) reshaped(id int32, dims []int64) (int32, error) {
	t, err := b.temp(dims)
	if err != nil {
		return 0, err
	}
	return t, b.op(opReshape, []int32{id}, []int32{t}, nil, nil)
}

// applyPostsSeparately runs activation post-ops as their own ops (when a bias add
// could not be fused before them).
func (b *builder) applyPostsSeparately(x int32, dims []int64, posts []postOp, final int32) error {
	cur := x
	for i, p := range posts {
		var next int32
		var err error
		if i == len(posts)-1 {
			next = final
		} else if next, err = b.temp(dims); err != nil {
			return err
		}
		if p.kind == postSum {
			s, err := b.in(p.sum)
			if err != nil {
				return err
			}
			if err := b.op(opBinary, []int32{cur, s}, []int32{next}, []int64{binAdd}, nil); err != nil {
				return err
			}
		} else if err := b.op(opEltwise, []int32{cur}, []int32{next}, []int64{int64(p.alg)}, []float32{p.alpha, p.beta}); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

func (b *builder) lowerGemm(n *onnx.Node) error {
	alpha, beta := attrFloat(n, "alpha", 1), attrFloat(n, "beta", 1)
	ta, tb := attrInt(n, "transA", 0), attrInt(n, "transB", 0)
	ad, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	bd, err := b.dims(n.Inputs[1])
	if err != nil {
		return err
	}
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return err
	}
	if len(ad) != 2 || len(bd) != 2 || len(yd) != 2 {
		return b.errf("Gemm needs 2-D inputs")
	}
	posts, err := parsePostOps(n)
	if err != nil {
		return b.errf("%v", err)
	}
	a, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	bw, err := b.in(n.Inputs[1])
	if err != nil {
		return err
	}
	hasC := len(n.Inputs) > 2 && n.Inputs[2] != "" && beta != 0
	var bias int32 = -1
	sepC := false
	if hasC {
		ct, isConst := b.g.Initializers[n.Inputs[2]]
		cd, err := b.dims(n.Inputs[2])
		if err != nil {
			return err
		}
		if len(cd) > 2 {
			return b.errf("C of rank %d", len(cd))
		}
		c2 := append(make([]int64, 2-len(cd), 2), cd...)
		for i := range c2 {
			if i < 2-len(cd) {
				c2[i] = 1
			}
			if c2[i] != 1 && c2[i] != yd[i] {
				return b.errf("C dims %v do not broadcast to %v", cd, yd)
			}
		}
		if isConst && ct != nil && ct.DType == onnx.Float && alpha == 1 {
			vals := make([]float32, len(ct.F32))
			for i, v := range ct.F32 {
				vals[i] = v * beta
			}
			if bias, err = b.addTensor(dtF32, c2, nonNilF(vals), nil); err != nil {
				return err
			}
		} else {
			sepC = true
		}
	}
	if !sepC {
		y, err := b.out(n.Outputs[0])
		if err != nil {
			return err
		}
		in := []int32{a, bw}
		if bias >= 0 {
			in = append(in, bias)
		}
		if err := b.op(opMatMul, in, []int32{y}, []int64{ta, tb}, []float32{alpha}); err != nil {
			return err
		}
		return b.addPostOps(posts)
	}
	// alpha*A*B, then + beta*C as a separate broadcast add, then the activations
	ab, err := b.temp(yd)
	if err != nil {
		return err
	}
	if err := b.op(opMatMul, []int32{a, bw}, []int32{ab}, []int64{ta, tb}, []float32{alpha}); err != nil {
		return err
	}
	c, err := b.in(n.Inputs[2])
	if err != nil {
		return err
	}
	cd, _ := b.dims(n.Inputs[2])
	if beta != 1 {
		bc, err := b.temp(cd)
		if err != nil {
			return err
		}
		if err := b.op(opEltwise, []int32{c}, []int32{bc}, []int64{eltLinear}, []float32{beta, 0}); err != nil {
			return err
		}
		c = bc
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	if len(posts) == 0 {
		return b.op(opBinary, []int32{ab, c}, []int32{y}, []int64{binAdd}, nil)
	}
	sum, err := b.temp(yd)
	if err != nil {
		return err
	}
	if err := b.op(opBinary, []int32{ab, c}, []int32{sum}, []int64{binAdd}, nil); err != nil {
		return err
	}
	return b.applyPostsSeparately(sum, yd, posts, y)
}

func (b *builder) lowerMatMul(n *onnx.Node) error {
	ad, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	bd, err := b.dims(n.Inputs[1])
	if err != nil {
		return err
	}
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return err
	}
	if len(ad) == 0 || len(bd) == 0 {
		return b.errf("MatMul of a scalar")
	}
	posts, err := parsePostOps(n)
	if err != nil {
		return b.errf("%v", err)
	}
	if _, ok := b.permOut[n]; ok || b.permIn[n.Inputs[0]].name != "" || b.permIn[n.Inputs[1]].name != "" {
		// planPerms checked: a batched product of the operands as they are, no post-ops
		y, pout, err := b.outFor(n)
		if err != nil {
			return err
		}
		return b.permMatMul(n.Inputs[0], n.Inputs[1], y, pout, 1, len(yd))
	}
	a2, b2 := ad, bd
	if len(a2) == 1 {
		a2 = []int64{1, a2[0]}
	}
	if len(b2) == 1 {
		b2 = []int64{b2[0], 1}
	}
	r := max(len(a2), len(b2))
	pad := func(d []int64) []int64 {
		out := make([]int64, r-len(d), r)
		for i := range out {
			out[i] = 1
		}
		return append(out, d...)
	}
	a2, b2 = pad(a2), pad(b2)
	if len(ad) > 2 && len(bd) == 2 {
		// (..., M, K) x (K, N): one (prod(...)*M, K) x (K, N) product instead of a batch of
		// small ones each re-reading B (ConvNeXt's and transformers' Linear layers), and B,
		// a constant in practice, gets a packed layout
		a2 = []int64{volume(ad[:len(ad)-1]), ad[len(ad)-1]}
		b2 = bd
		r = 2
	}
	o2 := make([]int64, r)
	for i := 0; i < r-2; i++ {
		o2[i] = max(a2[i], b2[i])
	}
	o2[r-2], o2[r-1] = a2[r-2], b2[r-1]
	if volume(o2) != volume(yd) {
		return b.errf("output dims %v do not match %v", yd, o2)
	}
	a, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	bw, err := b.in(n.Inputs[1])
	if err != nil {
		return err
	}
	if !equalDims(a2, ad) {
		if a, err = b.reshaped(a, a2); err != nil {
			return err
		}
	}
	if !equalDims(b2, bd) {
		if bw, err = b.reshaped(bw, b2); err != nil {
			return err
		}
	}
	if r > 6 {
		return b.errf("MatMul of rank %d not supported", r)
	}
	ins := []int32{a, bw}
	if len(n.Inputs) == 3 {
		// the graph compiler's fused bias (N values along the last dim), as (1, ..., 1, N)
		bd, err := b.dims(n.Inputs[2])
		if err != nil {
			return err
		}
		if volume(bd) != o2[r-1] {
			return b.errf("bias dims %v for an output of %v", bd, o2)
		}
		c, err := b.in(n.Inputs[2])
		if err != nil {
			return err
		}
		cd := make([]int64, r)
		for i := range cd {
			cd[i] = 1
		}
		cd[r-1] = o2[r-1]
		if !equalDims(cd, bd) {
			if c, err = b.reshaped(c, cd); err != nil {
				return err
			}
		}
		ins = append(ins, c)
	}
	if !equalDims(o2, yd) {
		// a residual sum operand has the output's dims: reshaped to the product's (before the
		// MatMul op, which its post-ops follow)
		for i := range posts {
			if posts[i].kind != postSum {
				continue
			}
			id, err := b.in(posts[i].sum)
			if err != nil {
				return err
			}
			if posts[i].sumID, err = b.reshaped(id, o2); err != nil {
				return err
			}
		}
	}
	if equalDims(o2, yd) {
		y, err := b.out(n.Outputs[0])
		if err != nil {
			return err
		}
		if err := b.op(opMatMul, ins, []int32{y}, []int64{0, 0}, []float32{1}); err != nil {
			return err
		}
		return b.addPostOps(posts)
	}
	t, err := b.temp(o2)
	if err != nil {
		return err
	}
	if err := b.op(opMatMul, ins, []int32{t}, []int64{0, 0}, []float32{1}); err != nil {
		return err
	}
	if err := b.addPostOps(posts); err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opReshape, []int32{t}, []int32{y}, nil, nil)
}

func equalDims(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (b *builder) lowerConcat(n *onnx.Node) error {
	if r, ok := b.rolls[n]; ok {
		return b.lowerRoll(n, r)
	}
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return err
	}
	ax, ok := normAxis(attrInt(n, "axis", 0), len(yd))
	if !ok {
		return b.errf("axis out of range")
	}
	var in []int32
	for _, name := range n.Inputs {
		id, err := b.in(name)
		if err != nil {
			return err
		}
		in = append(in, id)
	}
	if len(in) > 64 {
		return b.errf("more than 64 inputs")
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opConcat, in, []int32{y}, []int64{ax}, nil)
}

func (b *builder) lowerTranspose(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	perm, ok := attrInts(n, "perm")
	if !ok {
		perm = make([]int64, len(xd))
		for i := range perm {
			perm[i] = int64(len(xd) - 1 - i)
		}
	}
	return b.unary(opTranspose, n, perm, nil)
}

func (b *builder) lowerSoftmax(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	log := int64(0)
	if n.OpType == "LogSoftmax" {
		log = 1
	}
	r := len(xd)
	if r == 0 {
		return b.errf("softmax of a scalar")
	}
	if b.opset >= 13 {
		ax, ok := normAxis(attrInt(n, "axis", -1), r)
		if !ok {
			return b.errf("axis out of range")
		}
		return b.unary(opSoftmax, n, []int64{ax, log}, nil)
	}
	ax, ok := normAxis(attrInt(n, "axis", 1), r)
	if !ok && !(attrInt(n, "axis", 1) == int64(r)) {
		return b.errf("axis out of range")
	}
	// before opset 13 the input is coerced to 2-D at axis
	d2 := []int64{volume(xd[:ax]), volume(xd[ax:])}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	x2, err := b.reshaped(x, d2)
	if err != nil {
		return err
	}
	t, err := b.temp(d2)
	if err != nil {
		return err
	}
	if err := b.op(opSoftmax, []int32{x2}, []int32{t}, []int64{1, log}, nil); err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opReshape, []int32{t}, []int32{y}, nil, nil)
}

func (b *builder) lowerPad(n *onnx.Node) error {
	if m := attrString(n, "mode", "constant"); m != "constant" {
		return b.errf("mode %s not supported", m)
	}
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	var pads []int64
	value := float32(0)
	if b.opset < 11 {
		pads, _ = attrInts(n, "pads")
		value = attrFloat(n, "value", 0)
	} else {
		p, ok, err := b.constInts(1)
		if err != nil {
			return err
		}
		if !ok {
			return b.errf("pads input missing")
		}
		pads = p
		if v, ok, err := b.constScalar(2); err != nil {
			return err
		} else if ok {
			value = v
		}
	}
	if len(pads) != 2*len(xd) {
		return b.errf("pads has %d values for rank %d", len(pads), len(xd))
	}
	return b.unary(opPad, n, pads, []float32{value})
}

func (b *builder) lowerGather(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	ax, ok := normAxis(attrInt(n, "axis", 0), len(xd))
	if !ok {
		return b.errf("axis out of range")
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	idx, err := b.in(n.Inputs[1])
	if err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opGather, []int32{x, idx}, []int32{y}, []int64{ax}, nil)
}

func (b *builder) lowerSlice(n *onnx.Node) error {
	ia, err := b.sliceParams(n)
	if err != nil {
		return err
	}
	return b.unary(opSlice, n, ia, nil)
}

// sliceParams returns a Slice node's start and step per dim (IDK_OP_SLICE's ints).
func (b *builder) sliceParams(n *onnx.Node) ([]int64, error) {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return nil, err
	}
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return nil, err
	}
	r := len(xd)
	var starts, ends, axes, steps []int64
	if b.opset < 10 {
		starts, _ = attrInts(n, "starts")
		ends, _ = attrInts(n, "ends")
		axes, _ = attrInts(n, "axes")
	} else {
		var ok bool
		if starts, ok, err = b.constInts(1); err != nil || !ok {
			return nil, b.errf("starts must be a constant input")
		}
		if ends, ok, err = b.constInts(2); err != nil || !ok {
			return nil, b.errf("ends must be a constant input")
		}
		if axes, _, err = b.constInts(3); err != nil {
			return nil, err
		}
		if steps, _, err = b.constInts(4); err != nil {
			return nil, err
		}
	}
	if len(starts) != len(ends) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return nil, b.errf("starts/ends/axes/steps lengths differ")
	}
	st := make([]int64, r)
	sp := make([]int64, r)
	for i := range sp {
		sp[i] = 1
	}
	for i := range starts {
		ax := int64(i)
		if axes != nil {
			ax = axes[i]
		}
		ax, ok := normAxis(ax, r)
		if !ok {
			return nil, b.errf("axis out of range")
		}
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return nil, b.errf("step 0")
		}
		dim := xd[ax]
		s := starts[i]
		if s < 0 {
			s += dim
		}
		if step > 0 {
			s = min(max(s, 0), dim)
		} else {
			s = min(max(s, 0), dim-1)
		}
		st[ax], sp[ax] = s, step
	}
	ia := append(st, sp...)
	if len(yd) != r {
		return nil, b.errf("output rank differs")
	}
	return ia, nil
}

func (b *builder) lowerReduceMean(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return err
	}
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
			return b.errf("axis out of range")
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
	if volume(kd) != volume(yd) {
		return b.errf("output dims %v do not match reduction", yd)
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	if equalDims(kd, yd) {
		y, err := b.out(n.Outputs[0])
		if err != nil {
			return err
		}
		return b.op(opReduceMean, []int32{x}, []int32{y}, nil, nil)
	}
	t, err := b.temp(kd)
	if err != nil {
		return err
	}
	if err := b.op(opReduceMean, []int32{x}, []int32{t}, nil, nil); err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opReshape, []int32{t}, []int32{y}, nil, nil)
}
