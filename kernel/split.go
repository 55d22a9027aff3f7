package kernel

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// Split batches. A model on T > 1 threads runs a batch of B >= T samples as T sub-batches
// of sizes as equal as possible (8 = 4+4, 5 = 3+2), each on a plan of one thread, all at
// once, each on an OS thread of its own (the first on the caller's), writing straight into
// its rows of the outputs, in every precision (fp32, bf16, int8; see splitRule).
// One plan on T threads splits every oneDNN primitive across them and meets at a barrier
// after each; small layers split badly and the barriers add up. On the 2-vCPU VM, two
// one-thread processes at batch 4 ran MnasNet at 329-334 images/s against 281-284 for one
// two-thread process at batch 8, MobileNetV2 328-335 against 269-273, ResNets 2-3% faster.
//
// It is done only where graph.BatchAxes proves that the graph computes every sample from
// that sample alone, and graph.SameUpToBatch that the graphs compiled for the sub-batches
// compute each sample the same way. Whether a batch is split is a pure function of the
// model, the input shapes, the thread count, the precision and IDK_SPLIT: the same inputs
// give the same output bytes on every run. Those bytes may differ from the unsplit plan's
// in the last bits (oneDNN picks kernels and blockings by batch size and thread count).

// SplitEnv names the environment variable that overrides the rule: 0 never splits, 1
// splits every provably batch-independent batch of at least Threads samples, whatever
// the weight size.
const SplitEnv = "IDK_SPLIT"

// The default rule also leaves alone the models where T copies of the weights cost more
// than the barriers saved (weights counted at 4 bytes an element in every precision: for
// bf16 and int8 the bounds are the fp32 model's, the same models stay whole):
//
//   - maxSplitWeightBytes bounds the constant data: the later sub-plans read the first
//     one's weights (idk_plan_share_weights, IDK_SPLIT_SHARE), plain and reordered, but
//     only where oneDNN picks the same layout for their sub-batch size, which unequal
//     sub-batches (5 = 3+2) need not; a copy per part cost VGG-11 at batch 8 3.5 GB
//     resident whole against 4.6 GB split, Wide ResNet-50-2 1.8 against 2.4 GB (shared:
//     1.8, as whole; ResNet-50 0.70 whole, 0.92 with copies, 0.72 shared);
//   - maxSplitStreamBytes bounds the weights of memory-bound matrix products (a classifier
//     layer read for a handful of rows): each sub-plan streams all of them from memory
//     where one plan on T threads reads each weight once (AlexNet at batch 8, 234 MB of
//     them: 46.7 ms minimum whole against 53.8 split, alternating single runs in one
//     process; MobileNetV2's and ResNet's classifiers, 5-8 MB, stay in the caches). The
//     parts reading one shared copy at about the same time did not change that (57.4 ms
//     whole, 66.5 split and shared, 64.0 split with copies, on a loaded machine).
//
// In bf16 and int8 the weight bound is lower, maxSplitWeightBytesLow: oneDNN's AMX kernels
// compute so much faster than fp32 that a sub-plan streaming its own pass over a
// transformer's matrix weights (ViT-B/16, 330 MB counted at 4 bytes; the BERT-base-sized
// encoder, 414 MB) costs more than the barriers saved, where the convolutional networks up
// to Wide ResNet-50-2 (262 MB) and Swin-T and ConvNeXt-T (about 110 MB) still gain
// (benchmarks/README.md, helper h12r).
const (
	maxSplitWeightBytes    = 512 << 20
	maxSplitWeightBytesLow = 300 << 20
	maxSplitStreamBytes    = 32 << 20
	streamRows             = 64 // a matrix product with fewer rows per sub-batch is memory-bound
)

// splitPart is one sub-batch's plan: rows samples, run on th (nil: the caller's thread).
type splitPart struct {
	p    *plan
	th   *osThread
	rows int64
}

// splitSizes divides batch samples into parts sub-batches, the larger first.
func splitSizes(batch int64, parts int) []int64 {
	out := make([]int64, parts)
	for i := range out {
		out[i] = batch / int64(parts)
		if int64(i) < batch%int64(parts) {
			out[i]++
		}
	}
	return out
}

// SplitRowsEnv names the environment variable that sets the rows of a chunk (see
// splitChunk): a positive number dividing the batch into at least Threads chunks runs the
// batch as chunks of that many rows; 0 (or a number that does not divide it) keeps one
// sub-batch per thread.
const SplitRowsEnv = "IDK_SPLIT_ROWS"

// splitChunk returns the rows of a chunk for a split batch of batch samples on threads
// threads, or 0 to run it as one sub-batch per thread. In chunks, every thread holds a plan
// of the chunk's size and takes chunks from a shared counter until none are left, so a
// thread the machine deschedules takes fewer of them; each chunk's arithmetic is that of a
// plan of the same graph, size and weights whichever thread runs it, so the outputs are the
// same bytes whatever the order.
func splitChunk(batch int64, threads int) int64 {
	env := os.Getenv(SplitRowsEnv)
	if env == "" {
		return 0
	}
	n, err := strconv.ParseInt(env, 10, 64)
	if err != nil || n <= 0 || batch%n != 0 || batch/n < int64(threads) {
		return 0
	}
	return n
}

// splitWeightBound is the default rule's bound on weightBytes for a precision.
func splitWeightBound(p Precision) int64 {
	if p == FP32 {
		return maxSplitWeightBytes
	}
	return maxSplitWeightBytesLow
}

// splitRule returns the sub-batch sizes to run a batch of these shapes as (one a thread),
// or nil to run it whole. The graph still has to pass the proof (buildSplit).
func (m *Model) splitRule(shapes map[string][]int64) []int64 {
	env := os.Getenv(SplitEnv)
	if env == "0" || m.threads < 2 || len(m.consts) > 0 || len(m.inputs) == 0 {
		return nil
	}
	batch := int64(-1)
	for _, in := range m.inputs {
		d := shapes[in.Name]
		if len(d) == 0 || (batch >= 0 && d[0] != batch) {
			return nil
		}
		batch = d[0]
	}
	if batch < int64(m.threads) {
		return nil
	}
	if env != "1" && m.weightBytes() > splitWeightBound(m.prec) {
		return nil
	}
	if c := splitChunk(batch, m.threads); c > 0 {
		sizes := make([]int64, m.threads)
		for i := range sizes {
			sizes[i] = c
		}
		return sizes
	}
	return splitSizes(batch, m.threads)
}

// streamedBytes sums the constant weights of the matrix products of g (compiled for the
// whole batch) that a sub-batch of rows samples reads for fewer than streamRows rows.
func streamedBytes(g *onnx.Graph, batch, rows int64) int64 {
	var n int64
	for _, nd := range g.Nodes {
		if (nd.OpType != "Gemm" && nd.OpType != "MatMul") || len(nd.Inputs) < 2 || len(nd.Outputs) != 1 {
			continue
		}
		w, ok := g.Initializers[nd.Inputs[1]]
		out := g.Values[nd.Outputs[0]]
		if !ok || w == nil || out == nil || len(out.Dims) == 0 {
			continue
		}
		cols := out.Dims[len(out.Dims)-1]
		if cols > 0 && volume(out.Dims)/cols*rows/batch < streamRows {
			n += volume(w.Dims) * 4
		}
	}
	return n
}

// weightBytes is the size of the model's constant tensors at 4 bytes an element (computed
// once).
func (m *Model) weightBytes() int64 {
	m.weightOnce.Do(func() {
		for _, t := range m.src.Graph.Initializers {
			if t != nil {
				m.weights += volume(t.Dims) * 4
			}
		}
	})
	return m.weights
}

// buildSplit compiles the plans of a split batch: g is the graph compiled for the whole
// batch with opts (compileOptions; the sub-batches take the same), sizes the sub-batches. It returns nil when the graph is not provably
// batch-independent, or a sub-batch does not compile (a Reshape to a fixed batch size
// would not), or its plan fails to build: the batch then runs whole, and any real error
// shows there.
func (m *Model) buildSplit(g *onnx.Graph, shapes map[string][]int64, sizes []int64, opts graph.Options) []splitPart {
	batch := shapes[m.inputs[0].Name][0]
	if os.Getenv(SplitEnv) != "1" && streamedBytes(g, batch, sizes[0]) > maxSplitStreamBytes {
		return nil
	}
	axes, err := graph.BatchAxes(g, m.src.Opset, batch)
	if err != nil {
		return nil
	}
	var parts []splitPart
	fail := func() []splitPart {
		destroyParts(parts)
		return nil
	}
	for i, rows := range sizes {
		sub := map[string][]int64{}
		for n, d := range shapes {
			d = append([]int64(nil), d...)
			d[0] = rows
			sub[n] = d
		}
		gs, err := graph.CompileWith(m.src, sub, nil, opts)
		if err != nil {
			return fail()
		}
		if graph.SameUpToBatch(g, gs, axes, batch, rows) != nil {
			return fail() // not provably the same function of each sample
		}
		var th *osThread // the first part runs on the caller's thread
		if i > 0 {
			th = newOSThread()
		}
		var donor uintptr // the later parts read the first part's weights (splitShare)
		if i > 0 && splitShare() {
			donor = parts[0].p.h
		}
		var p *plan
		th.do(func() { p, err = lowerGraphShared(gs, m.src.Opset, 1, m.prec, donor) })
		if err != nil {
			th.stop()
			return fail()
		}
		parts = append(parts, splitPart{p: p, th: th, rows: rows})
	}
	return parts
}

// SplitShareEnv names the environment variable that, set to 0, gives every part of a split
// batch its own copy of the weights. By default the parts after the first read the first
// part's constants, plain and reordered, wherever they are the same bytes in the same
// layout (idk_plan_share_weights): with equal sub-batches, all of them. The parts run the
// same arithmetic on the same bytes either way, so the outputs are the same.
const SplitShareEnv = "IDK_SPLIT_SHARE"

func splitShare() bool { return os.Getenv(SplitShareEnv) != "0" }

func destroyParts(parts []splitPart) {
	for _, s := range parts {
		s.th.do(func() { idkPlanDestroy(s.p.h) })
		s.th.stop()
	}
}

// runSplit runs the parts of a split entry at once, each on its rows of the inputs and
// outputs (all of which carry the batch on axis 0, so a sub-batch is a contiguous block).
// When the parts' rows add up to less than the batch (splitChunk), the batch is chunks of
// one part's rows, and each part's thread runs its plan on the next chunk left until none
// is. The caller holds e.mu.
func (e *planEntry) runSplit(byName map[string]*onnx.Tensor, outs []*onnx.Tensor) error {
	type result struct {
		st    int32
		msg   string
		chunk int64
		ns    int64
	}
	batch := e.inputs[0].dims[0]
	var sum int64
	for _, s := range e.parts {
		sum += s.rows
	}
	chunked := sum != batch
	res := make([]result, len(e.parts))
	inPtrs := make([][]uintptr, len(e.parts))
	outPtrs := make([][]uintptr, len(e.parts))
	var next atomic.Int64 // the next chunk's index (chunked)
	var row int64
	// place points part k's pointers at rows first.. of the inputs and outputs.
	place := func(k int, first int64) {
		s := e.parts[k]
		for i, slot := range s.p.inputs {
			inPtrs[k][i] = rowsPtr(byName[slot.name], first, s.rows)
		}
		for i := range s.p.outputs {
			outPtrs[k][i] = rowsPtr(outs[i], first, s.rows)
		}
	}
	for k, s := range e.parts {
		inPtrs[k] = make([]uintptr, len(s.p.inputs)+1)
		outPtrs[k] = make([]uintptr, len(s.p.outputs)+1)
		if !chunked {
			place(k, row)
			row += s.rows
		}
	}
	runPart := func(k int) {
		s := e.parts[k]
		for {
			if chunked {
				c := next.Add(1) - 1
				if c*s.rows >= batch {
					return
				}
				res[k].chunk = c
				place(k, c*s.rows)
			}
			st := idkPlanRun(s.p.h, &inPtrs[k][0], &outPtrs[k][0])
			res[k].ns += idkPlanLastRunNs(s.p.h)
			res[k].st = st
			if st != statusOK {
				res[k].msg = idkPlanError(s.p.h)
				next.Store(batch) // the others stop after their chunk
				return
			}
			if !chunked {
				return
			}
		}
	}
	var wg sync.WaitGroup
	for k := 1; k < len(e.parts); k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.parts[k].th.do(func() { runPart(k) })
		}()
	}
	runPart(0)
	wg.Wait()
	runtime.KeepAlive(byName)
	runtime.KeepAlive(outs)
	runtime.KeepAlive(inPtrs)
	runtime.KeepAlive(outPtrs)
	var ns int64
	for _, r := range res {
		ns = max(ns, r.ns)
	}
	e.splitNs.Store(ns)
	for k, r := range res {
		if r.st != statusOK {
			if chunked {
				return fmt.Errorf("kernel: run (chunk %d of %d): %s: %s", r.chunk+1, batch/e.parts[k].rows, idkStatusStr(r.st), r.msg)
			}
			return fmt.Errorf("kernel: run (sub-batch %d of %d): %s: %s", k+1, len(res), idkStatusStr(r.st), r.msg)
		}
	}
	return nil
}

// rowsPtr points at row first of a tensor whose axis 0 is the batch (0 when the block is
// empty).
func rowsPtr(t *onnx.Tensor, first, rows int64) uintptr {
	if len(t.Dims) == 0 || t.Dims[0] == 0 {
		return 0
	}
	per := volume(t.Dims[1:])
	if per*rows == 0 {
		return 0
	}
	if t.DType == onnx.Float {
		return uintptr(unsafe.Pointer(&t.F32[first*per]))
	}
	return uintptr(unsafe.Pointer(&t.I64[first*per]))
}

// wholeBatch is the slots of a part's plan (inputs or outputs) with batch on axis 0.
func wholeBatch(batch int64, slots []tensorSlot) []tensorSlot {
	out := make([]tensorSlot, len(slots))
	for i, s := range slots {
		d := append([]int64(nil), s.dims...)
		d[0] = batch
		out[i] = tensorSlot{name: s.name, dtype: s.dtype, dims: d}
	}
	return out
}
