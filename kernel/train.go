package kernel

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// Array names one of a training plan's flat float arrays (idk_train_get/set).
type Array int32

// The arrays of a training plan. Params, Grads, Opt1 and Opt2 hold every parameter in
// Params() order, State every running statistic in State() order, and BatchStats each
// BatchNormalization's last batch mean then unbiased variance, in node order.
const (
	Params     Array = 0
	Grads      Array = 1
	State      Array = 2
	Opt1       Array = 3
	Opt2       Array = 4
	BatchStats Array = 5
)

// Trainable lists the ONNX operators a training plan accepts.
var Trainable = map[string]bool{
	"Conv": true, "Gemm": true, "MatMul": true, "Relu": true, "LeakyRelu": true, "Sigmoid": true,
	"Tanh": true, "Clip": true, "Elu": true, "HardSwish": true, "MaxPool": true, "AveragePool": true,
	"GlobalAveragePool": true, "BatchNormalization": true, "Add": true, "Flatten": true,
	"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Identity": true, "Concat": true,
	"Dropout": true, "Constant": true, "Shape": true,
}

// ErrNotTrainable is wrapped by NewTrainer's errors for a model it cannot train (an op
// with no backward pass, a weight that is not an initializer, an output that is not
// (batch, classes) logits).
var ErrNotTrainable = errors.New("not trainable")

// Tensor names one parameter or running statistic: its initializer name, dims and place in
// its flat array.
type Tensor struct {
	Name   string
	Dims   []int64
	Offset int64
}

// Len is the tensor's element count.
func (t Tensor) Len() int64 { return volume(t.Dims) }

// Optimizer is an optimizer's kind and hyperparameters, as PyTorch defines them.
type Optimizer struct {
	Kind        string  // "sgd", "adam" or "adamw"
	Momentum    float64 // sgd
	Nesterov    bool    // sgd
	WeightDecay float64 // L2 (sgd, adam) or decoupled (adamw)
	Beta1       float64 // adam/adamw; 0 means 0.9
	Beta2       float64 // adam/adamw; 0 means 0.999
	Eps         float64 // adam/adamw; 0 means 1e-8
}

// Trainer is a compiled training plan for one model at one batch size. Its methods must
// not run concurrently (one plan owns one set of buffers); it is safe to call them from
// different goroutines one at a time.
type Trainer struct {
	mu        sync.Mutex
	h         uintptr
	src       *onnx.Model
	threads   int
	batch     int
	input     onnx.ValueInfo // the run-time input with the batch dim fixed
	classes   int
	params    []Tensor
	state     []Tensor
	nparams   int64
	nstate    int64
	nbstats   int64
	flops     float64 // forward FLOPs of one batch
	lossNode  string  // a trailing Softmax/LogSoftmax left out of training, if any
	closed    bool
	lastNanos int64
}

// NewTrainer compiles m into a training plan for batches of exactly batch samples. The
// model must have one float input (batch first) and one output: (batch, classes) logits,
// or their Softmax/LogSoftmax (which training leaves out: the loss is softmax
// cross-entropy on the logits). Every operator must be trainable and every weight of Conv,
// Gemm, MatMul and BatchNormalization an initializer.
func NewTrainer(m *onnx.Model, batch int, opt Options) (*Trainer, error) {
	if err := load(); err != nil {
		return nil, err
	}
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("kernel: no model")
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	if batch < 1 || batch > 1<<20 {
		return nil, fmt.Errorf("kernel: batch %d out of range", batch)
	}
	threads := opt.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	var ins []onnx.ValueInfo
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; !init {
			ins = append(ins, in)
		}
	}
	if len(ins) != 1 || ins[0].DType != onnx.Float || len(ins[0].Dims) < 2 {
		return nil, fmt.Errorf("kernel: training needs one float input of rank >= 2, model has %d inputs: %w", len(ins), ErrNotTrainable)
	}
	if len(m.Graph.Outputs) != 1 {
		return nil, fmt.Errorf("kernel: training needs one output (the logits), model has %d: %w", len(m.Graph.Outputs), ErrNotTrainable)
	}
	in := ins[0]
	dims := append([]int64(nil), in.Dims...)
	if dims[0] >= 0 && dims[0] != int64(batch) {
		return nil, fmt.Errorf("kernel: input %s has a fixed batch of %d, training batch is %d", in.Name, dims[0], batch)
	}
	dims[0] = int64(batch)
	for i, d := range dims[1:] {
		if d < 1 {
			return nil, fmt.Errorf("kernel: input %s: dim %d is symbolic (only the batch may be)", in.Name, i+1)
		}
	}
	in.Dims = dims
	g, err := graph.CompileTraining(m, map[string][]int64{in.Name: dims})
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	t := &Trainer{src: m, threads: threads, batch: batch, input: in}
	if err := t.build(g, m); err != nil {
		if t.h != 0 {
			idkPlanDestroy(t.h)
		}
		return nil, err
	}
	runtime.SetFinalizer(t, func(t *Trainer) { t.Close() })
	return t, nil
}

// paramSlots says which inputs of a trainable node are parameters or running statistics,
// in input order (the order fixes the flat arrays' layout, so it must not vary).
func paramSlots(n *onnx.Node) []struct{ in, role int } {
	switch n.OpType {
	case "Conv", "Gemm":
		return []struct{ in, role int }{{1, roleParam}, {2, roleParam}}
	case "MatMul":
		return []struct{ in, role int }{{1, roleParam}}
	case "BatchNormalization":
		return []struct{ in, role int }{{1, roleParam}, {2, roleParam}, {3, roleState}, {4, roleState}}
	}
	return nil
}

func (t *Trainer) build(g *onnx.Graph, src *onnx.Model) error {
	nodes := g.Nodes
	outName := g.Outputs[0].Name
	logits := outName
	if k := len(nodes); k > 0 && (nodes[k-1].OpType == "Softmax" || nodes[k-1].OpType == "LogSoftmax") && nodes[k-1].Outputs[0] == outName {
		logits = nodes[k-1].Inputs[0]
		t.lossNode = nodes[k-1].Name
		nodes = nodes[:k-1]
	}
	lv, ok := g.Values[logits]
	if !ok || len(lv.Dims) != 2 || lv.Dims[0] != int64(t.batch) || lv.Dims[1] < 1 {
		var d []int64
		if ok {
			d = lv.Dims
		}
		return fmt.Errorf("kernel: model output %s has dims %v, want (batch %d, classes) logits: %w", logits, d, t.batch, ErrNotTrainable)
	}
	t.classes = int(lv.Dims[1])
	// every node trainable, every weight an initializer of the source model
	roles := map[string]int{}
	var order []string
	for _, n := range nodes {
		if !Trainable[n.OpType] || (n.Domain != "" && n.Domain != "ai.onnx") {
			return fmt.Errorf("kernel: node %s (%s): operator has no backward pass: %w", n.Name, n.OpType, ErrNotTrainable)
		}
		for _, slot := range paramSlots(n) {
			i, role := slot.in, slot.role
			if i >= len(n.Inputs) || n.Inputs[i] == "" {
				continue
			}
			name := n.Inputs[i]
			init, isInit := src.Graph.Initializers[name]
			if !isInit || g.Initializers[name] == nil || init.DType != onnx.Float {
				return fmt.Errorf("kernel: node %s (%s): input %d (%s) must be a float initializer to be trained: %w", n.Name, n.OpType, i, name, ErrNotTrainable)
			}
			if r, seen := roles[name]; seen {
				if r != role {
					return fmt.Errorf("kernel: initializer %s is both a parameter and a running statistic: %w", name, ErrNotTrainable)
				}
				continue
			}
			roles[name] = role
			order = append(order, name)
		}
		if n.OpType == "Gemm" {
			if attrInt(n, "transA", 0) != 0 || attrFloat(n, "alpha", 1) != 1 || (len(n.Inputs) > 2 && n.Inputs[2] != "" && attrFloat(n, "beta", 1) != 1) {
				return fmt.Errorf("kernel: node %s (Gemm): only transA=0, alpha=1, beta=1 is trainable: %w", n.Name, ErrNotTrainable)
			}
		}
	}
	var h uintptr
	if st := idkPlanCreate(&h, int32(t.threads)); st != statusOK {
		return fmt.Errorf("kernel: create plan: %s", idkStatusStr(st))
	}
	t.h = h
	b := &builder{h: h, g: g, opset: src.Opset, ids: map[string]int32{}}
	inID, err := b.out(t.input.Name)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		b.node = n
		if err := b.lowerTrainNode(n); err != nil {
			return err
		}
		t.flops += nodeFLOPs(g, n)
	}
	b.node = nil
	logID, ok := b.ids[logits]
	if !ok {
		return fmt.Errorf("kernel: logits %s are not computed: %w", logits, ErrNotTrainable)
	}
	for _, name := range order {
		id, ok := b.ids[name]
		if !ok {
			continue // read by no lowered op
		}
		if st := idkTrainSetRole(h, id, int32(roles[name])); st != statusOK {
			return b.cerr(st)
		}
		tn := Tensor{Name: name, Dims: append([]int64(nil), src.Graph.Initializers[name].Dims...)}
		if roles[name] == roleParam {
			tn.Offset = t.nparams
			t.nparams += tn.Len()
			t.params = append(t.params, tn)
		} else {
			tn.Offset = t.nstate
			t.nstate += tn.Len()
			t.state = append(t.state, tn)
		}
	}
	if st := idkTrainCompile(h, inID, logID); st != statusOK {
		return b.cerr(st)
	}
	var np, ns, nb int64
	if st := idkTrainSizes(h, &np, &ns, &nb); st != statusOK {
		return b.cerr(st)
	}
	if np != t.nparams || ns != t.nstate {
		return fmt.Errorf("kernel: internal: plan has %d parameters and %d statistics, expected %d and %d", np, ns, t.nparams, t.nstate)
	}
	t.nbstats = nb
	return nil
}

// lowerTrainNode lowers one node of a training graph.
func (b *builder) lowerTrainNode(n *onnx.Node) error {
	switch n.OpType {
	case "Conv":
		return b.lowerConv(n)
	case "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Elu", "HardSwish":
		alg, alpha, beta, err := b.activation(n)
		if err != nil {
			return err
		}
		return b.unary(opEltwise, n, []int64{alg}, []float32{alpha, beta})
	case "Add":
		ad, err := b.dims(n.Inputs[0])
		if err != nil {
			return err
		}
		bd, err := b.dims(n.Inputs[1])
		if err != nil {
			return err
		}
		if !equalDims(ad, bd) {
			return fmt.Errorf("kernel: node %s (Add): inputs %v and %v: only Add of same-shaped tensors is trainable: %w", n.Name, ad, bd, ErrNotTrainable)
		}
		return b.binary(n, binAdd)
	case "MaxPool", "AveragePool":
		return b.lowerPool(n)
	case "GlobalAveragePool":
		return b.lowerGlobalPool(n)
	case "BatchNormalization":
		return b.bnorm(n, []float32{attrFloat(n, "epsilon", 1e-5), attrFloat(n, "momentum", 0.9)})
	case "Gemm", "MatMul":
		return b.lowerTrainMatMul(n)
	case "Concat":
		return b.lowerConcat(n)
	case "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity":
		return b.unary(opReshape, n, nil, nil)
	case "Dropout":
		r, err := graph.DropoutRatio(n, b.opset, b.g.Initializers)
		if err != nil {
			return err
		}
		return b.unary(opDropout, n, nil, []float32{r})
	case "Constant", "Shape":
		for _, o := range n.Outputs {
			if _, ok := b.g.Initializers[o]; !ok {
				return b.errf("not folded to a constant")
			}
		}
		return nil
	}
	return fmt.Errorf("kernel: node %s (%s): operator has no backward pass: %w", n.Name, n.OpType, ErrNotTrainable)
}

// lowerTrainMatMul lowers Gemm (transA 0, alpha 1, beta 1) or a 2-D MatMul by a weight into
// the kernel's MATMUL with the bias declared as (1, N) over the initializer's values.
func (b *builder) lowerTrainMatMul(n *onnx.Node) error {
	ad, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	wd, err := b.dims(n.Inputs[1])
	if err != nil {
		return err
	}
	if len(ad) != 2 || len(wd) != 2 {
		return fmt.Errorf("kernel: node %s (%s): only 2-D inputs are trainable (got %v and %v): %w", n.Name, n.OpType, ad, wd, ErrNotTrainable)
	}
	tb := int64(0)
	if n.OpType == "Gemm" {
		tb = attrInt(n, "transB", 0)
	}
	a, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	w, err := b.in(n.Inputs[1])
	if err != nil {
		return err
	}
	in := []int32{a, w}
	if n.OpType == "Gemm" && len(n.Inputs) > 2 && n.Inputs[2] != "" {
		name := n.Inputs[2]
		c := b.g.Initializers[name]
		N := wd[1]
		if tb != 0 {
			N = wd[0]
		}
		if c == nil || int64(len(c.F32)) != N || (len(c.Dims) == 2 && c.Dims[0] != 1) || len(c.Dims) > 2 {
			return fmt.Errorf("kernel: node %s (Gemm): bias C must be a (%d) or (1, %d) initializer to be trained: %w", n.Name, N, N, ErrNotTrainable)
		}
		id, ok := b.ids[name]
		if !ok {
			if id, err = b.addTensor(dtF32, []int64{1, N}, nonNilF(c.F32), nil); err != nil {
				return err
			}
			b.ids[name] = id
		}
		in = append(in, id)
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opMatMul, in, []int32{y}, []int64{0, tb}, []float32{1})
}

func (t *Trainer) check() error {
	if t.closed {
		return fmt.Errorf("kernel: trainer is closed")
	}
	return nil
}

func (t *Trainer) cerr(what string, st int32) error {
	return fmt.Errorf("kernel: %s: %s: %s", what, idkStatusStr(st), idkPlanError(t.h))
}

// Batch is the plan's batch size; Classes the logits' width; Threads its kernel threads.
func (t *Trainer) Batch() int   { return t.batch }
func (t *Trainer) Classes() int { return t.classes }
func (t *Trainer) Threads() int { return t.threads }

// Input is the plan's input with its exact dims (batch first).
func (t *Trainer) Input() onnx.ValueInfo {
	in := t.input
	in.Dims = append([]int64(nil), in.Dims...)
	return in
}

// Params lists the parameters in the flat arrays' order; State the running statistics.
func (t *Trainer) Params() []Tensor { return append([]Tensor(nil), t.params...) }
func (t *Trainer) State() []Tensor  { return append([]Tensor(nil), t.state...) }

// Len returns the length of array a.
func (t *Trainer) Len(a Array) int {
	switch a {
	case Params, Grads, Opt1, Opt2:
		return int(t.nparams)
	case State:
		return int(t.nstate)
	case BatchStats:
		return int(t.nbstats)
	}
	return 0
}

// FLOPs is the forward pass's floating-point operations for one batch (a training step
// costs about three times as much).
func (t *Trainer) FLOPs() float64 { return t.flops }

// LossNode names a trailing Softmax/LogSoftmax that training leaves out ("" if none).
func (t *Trainer) LossNode() string { return t.lossNode }

// LastRunNanos is the wall time of the last Run inside the kernel.
func (t *Trainer) LastRunNanos() int64 { return t.lastNanos }

func ptrF(v []float32) *float32 {
	if len(v) == 0 {
		return nil
	}
	return &v[0]
}

// Get copies array a into dst (len(dst) must be Len(a)).
func (t *Trainer) Get(a Array, dst []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	st := idkTrainGet(t.h, int32(a), ptrF(dst), int64(len(dst)))
	runtime.KeepAlive(dst)
	if st != statusOK {
		return t.cerr("get", st)
	}
	return nil
}

// Set copies src into array a (not BatchStats).
func (t *Trainer) Set(a Array, src []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	st := idkTrainSet(t.h, int32(a), ptrF(src), int64(len(src)))
	runtime.KeepAlive(src)
	if st != statusOK {
		return t.cerr("set", st)
	}
	return nil
}

// Run runs forward, loss and backward on one batch: x in the input's plain layout, one
// label per sample. Grads becomes the gradient of scale × the summed loss; the summed loss
// and the count of correct top-1 answers are returned. Parameters and running statistics do
// not change.
func (t *Trainer) Run(x []float32, labels []int64, scale float32, seed uint64) (loss float64, correct int64, err error) {
	if want := volume(t.input.Dims); int64(len(x)) != want {
		return 0, 0, fmt.Errorf("kernel: train input has %d values, plan wants %d (%v)", len(x), want, t.input.Dims)
	}
	if len(labels) != t.batch {
		return 0, 0, fmt.Errorf("kernel: %d labels for a batch of %d", len(labels), t.batch)
	}
	for i, l := range labels {
		if l < 0 || l >= int64(t.classes) {
			return 0, 0, fmt.Errorf("kernel: label %d at batch index %d out of range for %d classes", l, i, t.classes)
		}
	}
	if !(scale > 0) || math.IsInf(float64(scale), 0) {
		return 0, 0, fmt.Errorf("kernel: gradient scale %g must be positive", scale)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return 0, 0, err
	}
	st := idkTrainRun(t.h, &x[0], &labels[0], scale, seed, &loss, &correct)
	runtime.KeepAlive(x)
	runtime.KeepAlive(labels)
	if st != statusOK {
		return 0, 0, t.cerr("train run", st)
	}
	t.lastNanos = idkPlanLastRunNs(t.h)
	return loss, correct, nil
}

// ApplyBatchStats moves the running statistics towards batch statistics laid out as the
// BatchStats array; nil applies the last Run's.
func (t *Trainer) ApplyBatchStats(stats []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	if stats != nil && len(stats) != int(t.nbstats) {
		return fmt.Errorf("kernel: %d batch statistics, plan has %d", len(stats), t.nbstats)
	}
	var p *float32
	if stats != nil {
		p = ptrF(stats)
		if p == nil { // a plan without BatchNormalization
			return nil
		}
	}
	st := idkTrainApplyBStats(t.h, p, int64(len(stats)))
	runtime.KeepAlive(stats)
	if st != statusOK {
		return t.cerr("apply batch statistics", st)
	}
	return nil
}

// Optimize applies one optimizer step (step counts from 1) with learning rate lr to the
// parameters from the current gradients.
func (t *Trainer) Optimize(o Optimizer, lr float64, step int64) error {
	var kind int32
	switch o.Kind {
	case "sgd", "":
		kind = 0
	case "adam":
		kind = 1
	case "adamw":
		kind = 2
	default:
		return fmt.Errorf("kernel: optimizer %q unknown (sgd, adam, adamw)", o.Kind)
	}
	if !(lr > 0) || math.IsInf(lr, 0) {
		return fmt.Errorf("kernel: learning rate %g must be positive", lr)
	}
	b1, b2, eps := o.Beta1, o.Beta2, o.Eps
	if b1 == 0 {
		b1 = 0.9
	}
	if b2 == 0 {
		b2 = 0.999
	}
	if eps == 0 {
		eps = 1e-8
	}
	var flags int32
	if o.Nesterov {
		flags = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.check(); err != nil {
		return err
	}
	if st := idkTrainOptimize(t.h, kind, flags, lr, o.Momentum, b1, b2, eps, o.WeightDecay, step); st != statusOK {
		return t.cerr("optimize", st)
	}
	return nil
}

// Close frees the plan. Later calls fail.
func (t *Trainer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		idkPlanDestroy(t.h)
		t.closed = true
	}
	return nil
}
