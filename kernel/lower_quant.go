package kernel

import (
	"runtime"
	"time"
	"unsafe"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// The int8 ops (issue 12), mirrored from kernel/include/idunno_kernel.h.
const (
	dtI8         = 3
	opQuantize   = 64
	opDequantize = 65
	opQConv      = 66
	opQMatMul    = 67
)

// lowerQuant lowers QuantizeLinear, DequantizeLinear and the Conv nodes the graph compiler
// marked for int8 execution; handled is false for every other node.
func (b *builder) lowerQuant(n *onnx.Node) (handled bool, err error) {
	switch {
	case n.OpType == "QuantizeLinear" || n.OpType == "DequantizeLinear":
		return true, b.lowerQDQ(n)
	case n.OpType == "Conv" && n.Attrs[graph.QDQAttrs.Weights] != nil:
		return true, b.lowerQConv(n)
	case (n.OpType == "MatMul" || n.OpType == "Gemm") && n.Attrs[graph.QDQAttrs.Weights] != nil:
		return true, b.lowerQMatMul(n)
	}
	return false, nil
}

func (b *builder) lowerQDQ(n *onnx.Node) error {
	q := n.OpType == "QuantizeLinear"
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	sd, err := b.dims(n.Inputs[1])
	if err != nil {
		return err
	}
	axis := int64(0)
	if volume(sd) != 1 || len(sd) > 1 {
		a, ok := normAxis(attrInt(n, "axis", 1), len(xd))
		if !ok {
			return b.errf("axis out of range")
		}
		axis = a
	}
	var in []int32
	for _, name := range n.Inputs {
		if name == "" {
			continue
		}
		id, err := b.in(name)
		if err != nil {
			return err
		}
		in = append(in, id)
	}
	ia := []int64{axis}
	if q {
		v, ok := b.g.Values[n.Outputs[0]]
		if !ok {
			return b.errf("no type for output %s", n.Outputs[0])
		}
		lo, hi := graph.QuantRange(v.DType)
		if lo == hi {
			return b.errf("quantized type %d not supported", v.DType)
		}
		ia = append(ia, lo, hi)
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	kind := int32(opDequantize)
	if q {
		kind = opQuantize
	}
	return b.op(kind, in, []int32{y}, ia, nil)
}

// int8Const adds a constant int8 tensor.
func (b *builder) int8Const(t *onnx.Tensor) (int32, error) {
	data := make([]int8, len(t.I64))
	for i, v := range t.I64 {
		if v < -128 || v > 127 {
			return 0, b.errf("int8 weight %d out of range", v)
		}
		data[i] = int8(v)
	}
	var ptr uintptr
	var one [1]int8
	if len(data) > 0 {
		ptr = uintptr(unsafe.Pointer(&data[0]))
	} else {
		ptr = uintptr(unsafe.Pointer(&one[0]))
	}
	var id int32
	st := idkPlanAddTensor(b.h, dtI8, int32(len(t.Dims)), dimsPtr(t.Dims), ptr, int64(len(data)), &id)
	runtime.KeepAlive(data)
	runtime.KeepAlive(one)
	runtime.KeepAlive(t.Dims)
	if st != statusOK {
		return 0, b.cerr(st)
	}
	return id, nil
}

// int8Weights adds an int8 node's weights t (the qdq_w attribute's values, as the op takes
// them) and their scales (qdq_w_scales, one per output channel) as kernel tensors.
func (b *builder) int8Weights(n *onnx.Node, t *onnx.Tensor) (w, ws int32, err error) {
	if w, err = b.int8Const(t); err != nil {
		return 0, 0, err
	}
	sc := n.Attrs[graph.QDQAttrs.WScales].Floats
	ws, err = b.addTensor(dtF32, []int64{int64(len(sc))}, nonNilF(sc), nil)
	return w, ws, err
}

// lowerQConv lowers a Conv carrying the graph compiler's qdq attributes into IDK_OP_QCONV.
func (b *builder) lowerQConv(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	S := len(xd) - 2
	if S < 1 || S > 3 {
		return b.errf("int8 conv of rank %d not supported", len(xd))
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
	ia := []int64{int64(S)}
	for _, a := range []struct {
		name  string
		def   int64
		count int
	}{{"strides", 1, S}, {"dilations", 1, S}, {"pads", 0, 2 * S}} {
		v, err := ints(a.name, a.def, a.count)
		if err != nil {
			return err
		}
		ia = append(ia, v...)
	}
	ia = append(ia, attrInt(n, "group", 1), attrInt(n, graph.QDQAttrs.XZero, 0), attrInt(n, graph.QDQAttrs.XSigned, 0))
	fa := []float32{attrFloat(n, graph.QDQAttrs.XScale, 0)}
	// present flag, zero point and signedness of: the output written as 8-bit values
	// (chainQDQ), the output rounded through a quantization before its sum post-op and the
	// summand read through its own (fuseQDQAdd)
	a := graph.QDQAttrs
	for _, q := range [][3]string{{a.YScale, a.YZero, a.YSigned}, {a.OScale, a.OZero, a.OSigned}, {a.SScale, a.SZero, a.SSigned}} {
		has := int64(0)
		if n.Attrs[q[0]] != nil {
			has = 1
		}
		ia = append(ia, has, attrInt(n, q[1], 0), attrInt(n, q[2], 0))
		fa = append(fa, attrFloat(n, q[0], 0))
	}
	posts, err := parsePostOps(n)
	if err != nil {
		return b.errf("%v", err)
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	w, wsID, err := b.int8Weights(n, n.Attrs[graph.QDQAttrs.Weights].T)
	if err != nil {
		return err
	}
	in := []int32{x, w, wsID}
	if len(n.Inputs) > 2 && n.Inputs[2] != "" {
		id, err := b.in(n.Inputs[2])
		if err != nil {
			return err
		}
		in = append(in, id)
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	if err := b.op(opQConv, in, []int32{y}, ia, fa); err != nil {
		return err
	}
	return b.addPostOps(posts)
}

// lowerQMatMul lowers a MatMul or Gemm carrying the graph compiler's qdq attributes into
// IDK_OP_QMATMUL: x (rank >= 2, read as rows of K), int8 weights as (K, N), one weight scale
// per column and an optional constant bias of N values.
func (b *builder) lowerQMatMul(n *onnx.Node) error {
	wt := n.Attrs[graph.QDQAttrs.Weights].T
	if len(wt.Dims) != 2 {
		return b.errf("int8 matmul weights of rank %d", len(wt.Dims))
	}
	w := wt
	if n.OpType == "Gemm" && attrInt(n, "transB", 0) != 0 {
		// (N, K) -> (K, N)
		N, K := wt.Dims[0], wt.Dims[1]
		v := make([]int64, len(wt.I64))
		for i := int64(0); i < N; i++ {
			for k := int64(0); k < K; k++ {
				v[k*N+i] = wt.I64[i*K+k]
			}
		}
		w = &onnx.Tensor{DType: wt.DType, Dims: []int64{K, N}, I64: v}
	}
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	if len(xd) < 2 || xd[len(xd)-1] != w.Dims[0] {
		return b.errf("int8 matmul input %v does not fit weights %v", xd, w.Dims)
	}
	posts, err := parsePostOps(n)
	if err != nil {
		return b.errf("%v", err)
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	wid, wsID, err := b.int8Weights(n, w)
	if err != nil {
		return err
	}
	in := []int32{x, wid, wsID}
	if len(n.Inputs) > 2 && n.Inputs[2] != "" {
		bt, ok := b.g.Initializers[n.Inputs[2]]
		if !ok || bt == nil || bt.DType != onnx.Float || int64(len(bt.F32)) != w.Dims[1] {
			return b.errf("int8 matmul bias must be %d constant floats", w.Dims[1])
		}
		id, err := b.addTensor(dtF32, []int64{w.Dims[1]}, nonNilF(bt.F32), nil)
		if err != nil {
			return err
		}
		in = append(in, id)
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	ia := []int64{attrInt(n, graph.QDQAttrs.XZero, 0), attrInt(n, graph.QDQAttrs.XSigned, 0)}
	fa := []float32{attrFloat(n, graph.QDQAttrs.XScale, 0)}
	if err := b.op(opQMatMul, in, []int32{y}, ia, fa); err != nil {
		return err
	}
	return b.addPostOps(posts)
}

// IsQuantized reports whether m is a quantized model: it has QuantizeLinear/DequantizeLinear
// (QDQ) or QLinearConv/QLinearMatMul/ConvInteger/MatMulInteger nodes. Such a model runs its
// quantized convolutions in int8 whatever precision is asked for (the int8 values are part of
// the model); --precision int8 refuses any other model (checkPrecision, ErrNotQuantized).
func IsQuantized(m *onnx.Model) bool {
	if m == nil || m.Graph == nil {
		return false
	}
	for _, n := range m.Graph.Nodes {
		switch n.OpType {
		case "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger":
			return true
		}
	}
	return false
}

// PeakInt8GOPS measures this machine's AVX-512 VNNI int8 multiply-accumulate peak with the
// given threads over about 0.3 s of wall time, in giga-ops per second (0 without VNNI).
func PeakInt8GOPS(threads int) float64 { return int8Peak(idkInt8Run, threads) }

// PeakInt8AMXGOPS is PeakInt8GOPS for AMX's tdpbusd, the instruction of oneDNN's int8
// kernels on CPUs with AMX; 0 where oneDNN does not use AMX.
func PeakInt8AMXGOPS(threads int) float64 { return int8Peak(idkInt8AMXRun, threads) }

// PeakInt8KernelGOPS is the int8 peak of the instructions oneDNN's int8 kernels run here:
// AMX where it uses AMX, else VNNI (the peak --precision int8 fractions are against).
func PeakInt8KernelGOPS(threads int) float64 {
	if g := PeakInt8AMXGOPS(threads); g > 0 {
		return g
	}
	return PeakInt8GOPS(threads)
}

func int8Peak(run func(int32, int64) float64, threads int) float64 {
	if load() != nil {
		return 0
	}
	threads = max(threads, 1)
	iters, best := int64(1<<12), 0.0
	onOwnThread(func() { // AMX state is asked for per thread (peak.c, amx_ok)
		for spent := 0.0; spent < 0.3; {
			t0 := time.Now()
			ops := run(int32(threads), iters)
			dt := time.Since(t0).Seconds()
			spent += dt
			if ops == 0 {
				return
			}
			if dt < 0.03 {
				iters *= 2
				continue
			}
			best = max(best, ops/dt/1e9)
		}
	})
	return best
}

// PeakInt8GOPSPerCPUSecond is the VNNI int8 peak of one core per second of CPU time the
// loop got (meaningful on a loaded machine, like PeakGFLOPSPerCPUSecond).
func PeakInt8GOPSPerCPUSecond() float64 { return int8PeakCPU(idkInt8Run) }

// PeakInt8AMXGOPSPerCPUSecond is PeakInt8GOPSPerCPUSecond for AMX (0 where oneDNN does not use it).
func PeakInt8AMXGOPSPerCPUSecond() float64 { return int8PeakCPU(idkInt8AMXRun) }

// PeakInt8KernelGOPSPerCPUSecond is AMX's per-CPU-second peak where oneDNN uses AMX, else VNNI's.
func PeakInt8KernelGOPSPerCPUSecond() float64 {
	if g := PeakInt8AMXGOPSPerCPUSecond(); g > 0 {
		return g
	}
	return PeakInt8GOPSPerCPUSecond()
}

func int8PeakCPU(run func(int32, int64) float64) float64 {
	if load() != nil {
		return 0
	}
	r := 0.0
	onOwnThread(func() {
		for iters := int64(1 << 12); ; iters *= 2 {
			c0 := CPUSeconds()
			ops := run(1, iters)
			dt := CPUSeconds() - c0
			if ops == 0 {
				return
			}
			if dt > 0.2 {
				r = ops / dt / 1e9
				return
			}
		}
	})
	return r
}
