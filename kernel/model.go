// Package kernel runs ONNX models on the CPU through IDunno's C kernel (libidunno_kernel.so,
// built on oneDNN), loaded with purego: no cgo.
//
// A Model is one loaded network. Each distinct set of input shapes (in practice, each batch
// size) gets its own compiled plan, built on first use and cached; a plan holds its oneDNN
// primitives, reordered weights and an activation arena. Runs of one plan are serialised;
// runs of different plans and of different models go on at once, each with the thread
// count of its model. On T > 1 threads, a batch of at least T samples of a graph that
// provably computes each sample from itself alone runs as T one-thread sub-batches at once
// (split.go).
package kernel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// Options configures a model instance.
type Options struct {
	Threads   int       // kernel threads for this model instance; 0 means one per CPU
	Precision Precision // compute precision; the zero value is FP32
}

// Precision is the number format a model computes in. Inputs and outputs are fp32 whatever it is.
type Precision int

const (
	// FP32 computes in 32-bit floats (the default).
	FP32 Precision = iota
	// BF16 runs convolutions and matrix products with constant weights in bfloat16 on
	// oneDNN's AVX512_BF16/AMX kernels (f32 accumulation); other ops stay in or near fp32.
	BF16
	// INT8 runs a quantized (QDQ) model on integer kernels; a model without
	// QuantizeLinear/DequantizeLinear is refused (ErrNotQuantized).
	INT8
)

// String is the name ParsePrecision takes.
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case BF16:
		return "bf16"
	case INT8:
		return "int8"
	}
	return fmt.Sprintf("precision(%d)", int(p))
}

// ParsePrecision reads "fp32", "bf16" or "int8" (the --precision flags' values; "" is fp32).
func ParsePrecision(s string) (Precision, error) {
	switch strings.ToLower(s) {
	case "", "fp32", "f32", "float32":
		return FP32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "int8", "i8":
		return INT8, nil
	}
	return FP32, fmt.Errorf("kernel: precision %q: want fp32, bf16 or int8", s)
}

// ErrNoBF16 is returned by Load for BF16 on a CPU without AVX512_BF16 (or AMX).
var ErrNoBF16 = errors.New("kernel: bf16 needs a CPU with AVX512_BF16 or AMX (this one has neither); use --precision fp32")

// ErrNotQuantized is returned by Load for INT8 when the model has no quantization nodes.
var ErrNotQuantized = errors.New("kernel: --precision int8 needs a quantized (QDQ) model: run `idunno quantize --model M.onnx --calibration DATA --out M.int8.onnx` first")

// BF16Support reports whether this CPU runs bf16 natively: "amx" (AMX tiles and
// AVX512_BF16), "avx512_bf16", or "" (none; BF16 models fail to load with ErrNoBF16).
func BF16Support() string {
	if load() != nil {
		return ""
	}
	switch idkBF16Supported() {
	case 2:
		return "amx"
	case 1:
		return "avx512_bf16"
	}
	return ""
}

// checkPrecision is the one place that decides whether model m can run at precision p.
func checkPrecision(m *onnx.Model, p Precision) error {
	switch p {
	case FP32:
		return nil
	case BF16:
		if BF16Support() == "" {
			return ErrNoBF16
		}
		return nil
	case INT8:
		if IsQuantized(m) {
			return nil
		}
		return ErrNotQuantized
	}
	return fmt.Errorf("kernel: unknown precision %d", int(p))
}

// maxPlans bounds how many input shapes one model keeps compiled at once.
const maxPlans = 8

// maxElements bounds the elements of one input tensor (4 Gi floats would be 16 GiB).
const maxElements = 1 << 30

// Model is a loaded network, safe for concurrent use.
type Model struct {
	src     *onnx.Model
	threads int
	prec    Precision
	inputs  []onnx.ValueInfo // run-time inputs, batch dim -1 when symbolic
	outputs []onnx.ValueInfo
	consts  map[string]bool // inputs the graph compiler needs as values

	weightOnce sync.Once // weights: bytes of constant data (split.go)
	weights    int64

	mu     sync.Mutex // guards plans, order and closed
	plans  map[string]*planEntry
	order  []string
	closed bool
}

// planEntry is one cached plan; mu serialises its runs (it owns one arena). th is the OS
// thread a multi-threaded plan is compiled, run and destroyed on (see osThread). A split
// batch (split.go) has no plan of its own but parts, the plans of its sub-batches; inputs
// and outputs are the whole batch's either way.
type planEntry struct {
	mu      sync.Mutex
	p       *plan
	th      *osThread
	parts   []splitPart
	splitNs atomic.Int64 // a split batch's last run in the kernel: the busiest thread's
	inputs  []tensorSlot
	outputs []tensorSlot
	dead    bool
}

// plans is how many compiled plans the entry holds, for the cache bound.
func (e *planEntry) plans() int { return max(1, len(e.parts)) }

// Load reads, validates and loads an ONNX model file.
func Load(path string, opt Options) (*Model, error) {
	m, err := onnx.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	return LoadModel(m, opt)
}

// LoadModel loads a decoded model. It compiles the model once for its declared input shapes
// (batch 1 where the batch is symbolic), so an unsupported operator or attribute is a
// load-time error naming the node.
func LoadModel(m *onnx.Model, opt Options) (*Model, error) { return loadModel(m, opt, true) }

// loadModel loads m; eager compiles it once for its declared shapes.
func loadModel(m *onnx.Model, opt Options, eager bool) (*Model, error) {
	if err := load(); err != nil {
		return nil, err
	}
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("kernel: no model")
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	if err := checkPrecision(m, opt.Precision); err != nil {
		return nil, err
	}
	if eager {
		// every operator, whatever the shapes (the compile below is skipped for models
		// whose plans depend on input values)
		if err := graph.CheckOperators(m); err != nil {
			return nil, fmt.Errorf("kernel: %w", err)
		}
	}
	threads := opt.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	md := &Model{src: m, threads: threads, prec: opt.Precision, plans: map[string]*planEntry{}, consts: graph.ConstantInputs(m)}
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; init {
			continue
		}
		md.inputs = append(md.inputs, in)
	}
	md.outputs = append(md.outputs, m.Graph.Outputs...)
	if eager && len(md.consts) == 0 {
		// compile once now: unsupported ops fail at load, not at the first query
		shapes := map[string][]int64{}
		for _, in := range md.inputs {
			d := append([]int64(nil), in.Dims...)
			for i := range d {
				if d[i] < 0 {
					if i != 0 {
						return nil, fmt.Errorf("kernel: input %s: symbolic dim %d (only the batch may be symbolic)", in.Name, i)
					}
					d[i] = 1
				}
			}
			shapes[in.Name] = d
		}
		if _, err := md.planFor(shapes, nil); err != nil {
			return nil, err
		}
	}
	return md, nil
}

// Inputs returns the run-time inputs in order; the batch dim is -1 when symbolic.
func (m *Model) Inputs() []onnx.ValueInfo { return append([]onnx.ValueInfo(nil), m.inputs...) }

// Outputs returns the model's outputs in order.
func (m *Model) Outputs() []onnx.ValueInfo { return append([]onnx.ValueInfo(nil), m.outputs...) }

// Precision returns the compute precision of this instance.
func (m *Model) Precision() Precision { return m.prec }

// Threads returns the kernel thread count of this instance.
func (m *Model) Threads() int { return m.threads }

// planKey identifies a plan by the exact shapes and constant input values.
func planKey(shapes map[string][]int64, consts map[string]*onnx.Tensor) string {
	var sb strings.Builder
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&sb, "%s%v;", n, shapes[n])
	}
	names = names[:0]
	for n := range consts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := consts[n]
		fmt.Fprintf(&sb, "%s=%d%v%v%v;", n, t.DType, t.Dims, t.I64, t.F32)
	}
	return sb.String()
}

// ConcatConvEnv names the environment variable that, set to 0, keeps the channel
// concatenations that graph.Options.ConcatConv removes.
const ConcatConvEnv = "IDK_CONCAT_CONV"

// compileOptions picks the graph passes for a batch of these shapes: a pure function of
// the model, the shapes, the precision and the environment. A split batch's sub-batches
// are compiled with the whole batch's options (buildSplit), so that a sub-batch of 1
// still computes each sample as the others do.
//
// ConcatConv applies from batch 2 up, in fp32: at batch 1 the kernel puts a concatenation's
// inputs in place in its output (concat_in_place in ops.c) and copies nothing, so splitting
// the convolution after it would only cost.
func (m *Model) compileOptions(shapes map[string][]int64) graph.Options {
	var o graph.Options
	env := os.Getenv(ConcatConvEnv)
	if len(m.inputs) == 0 || m.prec != FP32 || env == "0" {
		return o
	}
	d := shapes[m.inputs[0].Name]
	o.ConcatConv = env == "1" || len(d) > 0 && d[0] >= 2
	return o
}

// planFor returns the cached plan for these shapes, compiling it on first use.
func (m *Model) planFor(shapes map[string][]int64, consts map[string]*onnx.Tensor) (*planEntry, error) {
	key := planKey(shapes, consts)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("kernel: model is closed")
	}
	if e, ok := m.plans[key]; ok {
		return e, nil
	}
	opts := m.compileOptions(shapes)
	g, err := graph.CompileWith(m.src, shapes, consts, opts)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	var e *planEntry
	if sizes := m.splitRule(shapes); sizes != nil {
		if parts := m.buildSplit(g, shapes, sizes, opts); parts != nil {
			b := shapes[m.inputs[0].Name][0]
			e = &planEntry{parts: parts, inputs: wholeBatch(b, parts[0].p.inputs), outputs: wholeBatch(b, parts[0].p.outputs)}
		}
	}
	if e == nil {
		var th *osThread // nil: the caller's thread (see osThread)
		if m.threads > 1 {
			th = newOSThread()
		}
		var p *plan
		th.do(func() { p, err = lowerGraph(g, m.src.Opset, m.threads, m.prec) })
		if err != nil {
			th.stop()
			return nil, err
		}
		e = &planEntry{p: p, th: th, inputs: p.inputs, outputs: p.outputs}
	}
	// the bound counts compiled plans (each holds its weights and arena): a split entry
	// counts one per part
	held := e.plans()
	for _, k := range m.order {
		held += m.plans[k].plans()
	}
	for held > maxPlans && len(m.order) > 0 {
		old := m.order[0]
		m.order = m.order[1:]
		e := m.plans[old]
		delete(m.plans, old)
		held -= e.plans()
		go e.destroy() // waits for a run in progress
	}
	m.plans[key] = e
	m.order = append(m.order, key)
	return e, nil
}

func (e *planEntry) destroy() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.dead {
		if e.p != nil {
			e.th.do(func() { idkPlanDestroy(e.p.h) })
			e.th.stop()
		}
		destroyParts(e.parts)
		e.dead = true
	}
}

// Run runs the model on one batch. inputs bind to Inputs() in order; any batch size works.
// Inputs are checked against the model before anything reaches the kernel.
func (m *Model) Run(inputs []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if len(inputs) != len(m.inputs) {
		return nil, fmt.Errorf("kernel: %d inputs given, model has %d", len(inputs), len(m.inputs))
	}
	shapes := map[string][]int64{}
	consts := map[string]*onnx.Tensor{}
	for i, t := range inputs {
		if err := m.checkInput(i, t); err != nil {
			return nil, err
		}
		name := m.inputs[i].Name
		if m.consts[name] {
			c := *t
			c.Name = name
			consts[name] = &c
		} else {
			shapes[name] = append([]int64(nil), t.Dims...)
		}
	}
	for {
		e, err := m.planFor(shapes, consts)
		if err != nil {
			return nil, err
		}
		outs, err := e.run(inputs, m.inputs)
		if err == errEvicted {
			continue // another shape pushed this plan out of the cache: build it again
		}
		return outs, err
	}
}

// Prepare builds and caches the plan for batches of the given size (compiling the graph
// and creating every oneDNN primitive), so that the first Run of that size costs what
// later ones do. It does nothing for a model whose plans depend on more than the batch
// size (inputs folded as constants, or other dimensions left free).
func (m *Model) Prepare(batch int) error {
	if batch < 1 {
		return fmt.Errorf("kernel: prepare: batch size %d", batch)
	}
	shapes := map[string][]int64{}
	for _, in := range m.inputs {
		if m.consts[in.Name] || len(in.Dims) == 0 {
			return nil
		}
		d := append([]int64(nil), in.Dims...)
		d[0] = int64(batch)
		for _, x := range d[1:] {
			if x <= 0 {
				return nil
			}
		}
		shapes[in.Name] = d
	}
	_, err := m.planFor(shapes, map[string]*onnx.Tensor{})
	return err
}

// errEvicted reports a run on a plan that was dropped from the cache meanwhile.
var errEvicted = fmt.Errorf("kernel: plan evicted")

func (m *Model) checkInput(i int, t *onnx.Tensor) error {
	decl := m.inputs[i]
	if t == nil {
		return fmt.Errorf("kernel: input %d (%s) is nil", i, decl.Name)
	}
	want := decl.DType
	if want == onnx.Undefined {
		want = onnx.Float
	}
	if t.DType != want {
		return fmt.Errorf("kernel: input %s: type %d, model wants %d", decl.Name, t.DType, want)
	}
	if decl.Dims != nil && len(t.Dims) != len(decl.Dims) {
		return fmt.Errorf("kernel: input %s: rank %d, model wants %d (dims %v)", decl.Name, len(t.Dims), len(decl.Dims), decl.Dims)
	}
	n := int64(1)
	for j, d := range t.Dims {
		if d < 0 {
			return fmt.Errorf("kernel: input %s: bad dim %d at %d", decl.Name, d, j)
		}
		if decl.Dims != nil && j > 0 && decl.Dims[j] >= 0 && decl.Dims[j] != d {
			return fmt.Errorf("kernel: input %s: dims %v, model wants %v", decl.Name, t.Dims, decl.Dims)
		}
		if d > 0 && n > maxElements/d {
			return fmt.Errorf("kernel: input %s: dims %v too large", decl.Name, t.Dims)
		}
		n *= d
	}
	switch t.DType {
	case onnx.Float:
		if int64(len(t.F32)) != n {
			return fmt.Errorf("kernel: input %s: %d values for dims %v", decl.Name, len(t.F32), t.Dims)
		}
	default:
		if _, ok := kernelDType(t.DType); !ok {
			return fmt.Errorf("kernel: input %s: type %d not supported", decl.Name, t.DType)
		}
		if int64(len(t.I64)) != n {
			return fmt.Errorf("kernel: input %s: %d values for dims %v", decl.Name, len(t.I64), t.Dims)
		}
		if lo, hi, narrow := narrowRange(t.DType); narrow {
			for j, v := range t.I64 {
				if v < lo || v > hi {
					return fmt.Errorf("kernel: input %s: value %d at %d is outside %v's range [%d, %d]", decl.Name, v, j, t.DType, lo, hi)
				}
			}
		}
	}
	return nil
}

// narrowRange is the value range of an integer or boolean type the kernel carries as
// int64 but that is narrower (int32, int16, int8, uint8, bool).
func narrowRange(t onnx.DataType) (lo, hi int64, ok bool) {
	switch t {
	case onnx.Int32:
		return math.MinInt32, math.MaxInt32, true
	case onnx.Int16:
		return math.MinInt16, math.MaxInt16, true
	case onnx.Int8:
		return math.MinInt8, math.MaxInt8, true
	case onnx.Uint8:
		return 0, math.MaxUint8, true
	case onnx.Bool:
		return 0, 1, true
	}
	return 0, 0, false
}

// run executes one plan; inputs are already checked against the model.
func (e *planEntry) run(inputs []*onnx.Tensor, decl []onnx.ValueInfo) ([]*onnx.Tensor, error) {
	byName := map[string]*onnx.Tensor{}
	for i, t := range inputs {
		byName[decl[i].Name] = t
	}
	var keep []any
	inPtrs := make([]uintptr, len(e.inputs)+1)
	for i, s := range e.inputs {
		t, ok := byName[s.name]
		if !ok {
			return nil, fmt.Errorf("kernel: plan input %s not given", s.name)
		}
		if !equalDims(t.Dims, s.dims) {
			return nil, fmt.Errorf("kernel: input %s: dims %v, plan wants %v", s.name, t.Dims, s.dims)
		}
		switch {
		case s.dtype == onnx.Float && len(t.F32) > 0:
			inPtrs[i] = uintptr(unsafe.Pointer(&t.F32[0]))
			keep = append(keep, t.F32)
		case s.dtype != onnx.Float && len(t.I64) > 0:
			inPtrs[i] = uintptr(unsafe.Pointer(&t.I64[0]))
			keep = append(keep, t.I64)
		}
	}
	outs := make([]*onnx.Tensor, len(e.outputs))
	outPtrs := make([]uintptr, len(e.outputs)+1)
	for i, s := range e.outputs {
		n := volume(s.dims)
		t := &onnx.Tensor{Name: s.name, DType: s.dtype, Dims: append([]int64(nil), s.dims...)}
		if s.dtype == onnx.Float {
			t.F32 = make([]float32, n)
			if n > 0 {
				outPtrs[i] = uintptr(unsafe.Pointer(&t.F32[0]))
			}
		} else {
			t.I64 = make([]int64, n) // every integer and boolean type travels widened to int64

			if n > 0 {
				outPtrs[i] = uintptr(unsafe.Pointer(&t.I64[0]))
			}
		}
		outs[i] = t
	}
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return nil, errEvicted
	}
	if e.parts != nil {
		err := e.runSplit(byName, outs)
		e.mu.Unlock()
		runtime.KeepAlive(keep)
		if err != nil {
			return nil, err
		}
		return outs, nil
	}
	p := e.p
	var st int32
	var msg string
	e.th.do(func() {
		st = idkPlanRun(p.h, &inPtrs[0], &outPtrs[0])
		if st != statusOK {
			msg = idkPlanError(p.h)
		}
	})
	e.mu.Unlock()
	runtime.KeepAlive(keep)
	runtime.KeepAlive(outs)
	runtime.KeepAlive(inPtrs)
	runtime.KeepAlive(outPtrs)
	if st != statusOK {
		return nil, fmt.Errorf("kernel: run: %s: %s", idkStatusStr(st), msg)
	}
	return outs, nil
}

// Close frees every plan; runs in progress finish first. Later runs fail.
func (m *Model) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	plans := m.plans
	m.plans = nil
	m.mu.Unlock()
	for _, e := range plans {
		e.destroy()
	}
	return nil
}

// FLOPs returns the floating-point operations of one run at this batch size (two per
// multiply-add of Conv, Gemm and MatMul).
func (m *Model) FLOPs(batch int) float64 {
	shapes := map[string][]int64{}
	for _, in := range m.inputs {
		d := append([]int64(nil), in.Dims...)
		if len(d) > 0 {
			d[0] = int64(batch)
		}
		shapes[in.Name] = d
	}
	g, err := graph.Compile(m.src, shapes, nil)
	if err != nil {
		return math.NaN()
	}
	var f float64
	for _, n := range g.Nodes {
		f += nodeFLOPs(g, n)
	}
	return f
}

// PeakGFLOPS measures this machine's FP32 FMA peak with the given threads (about 0.3 s).
func PeakGFLOPS(threads int) float64 {
	if load() != nil {
		return 0
	}
	if threads < 1 {
		threads = 1
	}
	var g float64
	onOwnThread(func() { g = idkPeakGflops(int32(threads), 0.3) })
	return g
}

// PeakBF16GFLOPS measures this machine's bf16 dot-product peak (AVX512_BF16) with the given
// threads (about 0.3 s); 0 without AVX512_BF16.
func PeakBF16GFLOPS(threads int) float64 {
	if load() != nil {
		return 0
	}
	if threads < 1 {
		threads = 1
	}
	var g float64
	onOwnThread(func() { g = idkPeakBF16(int32(threads), 0.3) })
	return g
}

// PeakGFLOPSPerCPUSecond measures the FP32 FMA peak of one core per second of CPU time
// the loop actually got, which stays meaningful on a loaded machine where wall-clock peaks
// do not.
func PeakGFLOPSPerCPUSecond() float64 {
	if load() != nil {
		return 0
	}
	iters := int64(1 << 16)
	for {
		c0 := CPUSeconds()
		f := idkFmaRun(1, iters)
		dt := CPUSeconds() - c0
		if dt > 0.2 {
			return f / dt / 1e9
		}
		iters *= 2
	}
}

// CPUSeconds returns the user+system CPU time this process has used.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// Overhead measures the cost of one bare call into the library, for dispatch reports.
func callNoop() int32 { return idkNoop(1) }

// LastRunKernelNanos reports the time the last run of this batch size spent inside the C
// kernel (entry to return), or -1 when no such plan exists.
func (m *Model) LastRunKernelNanos(batch int) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.plans {
		if len(e.inputs) > 0 && len(e.inputs[0].dims) > 0 && e.inputs[0].dims[0] == int64(batch) {
			if e.p != nil {
				return idkPlanLastRunNs(e.p.h)
			}
			// a split batch: its parts run at once, the busiest thread's time is the batch's
			return e.splitNs.Load()
		}
	}
	return -1
}
