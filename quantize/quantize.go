// Package quantize calibrates a float ONNX model on sample inputs and rewrites it as a standard QDQ int8 model.
package quantize

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"idunno/kernel"
	"idunno/kernel/onnx"
)

// MinOpset is the lowest opset of a model Rewrite accepts: per-channel (axis) QuantizeLinear
// and DequantizeLinear need 13.
const MinOpset = 13

// ErrNothingToQuantize: the model has no Conv, Gemm or MatMul with constant weights.
var ErrNothingToQuantize = errors.New("quantize: the model has no Conv, Gemm or MatMul with constant float weights")

// Range is the observed interval of one activation tensor.
type Range struct{ Min, Max float32 }

// Ranges maps an activation's name to its calibrated range.
type Ranges map[string]Range

// target is one node Rewrite quantizes: its activation input and its constant weights.
type target struct {
	node   *onnx.Node
	act    string // input 0
	weight string // input 1, an initializer
	axis   int    // the weights' output-channel axis
}

// targets lists the Conv, Gemm (transA=0) and MatMul (2-D constant right operand) nodes
// with float weight initializers, in graph order.
func targets(g *onnx.Graph) []target {
	var out []target
	for _, n := range g.Nodes {
		if n.Domain != "" && n.Domain != "ai.onnx" || len(n.Inputs) < 2 {
			continue
		}
		w := g.Initializers[n.Inputs[1]]
		if w == nil || w.DType != onnx.Float || g.Initializers[n.Inputs[0]] != nil {
			continue
		}
		t := target{node: n, act: n.Inputs[0], weight: n.Inputs[1]}
		switch n.OpType {
		case "Conv":
			if len(w.Dims) < 3 {
				continue
			}
		case "Gemm":
			if attrInt(n, "transA") != 0 || len(w.Dims) != 2 {
				continue
			}
			if attrInt(n, "transB") == 0 {
				t.axis = 1
			}
		case "MatMul":
			if len(w.Dims) != 2 {
				continue
			}
			t.axis = 1
		default:
			continue
		}
		out = append(out, t)
	}
	return out
}

// residualAdds lists the Add nodes Rewrite quantizes both inputs of (as ONNX Runtime's QDQ
// quantizer does for Add): two float activations, at least one the output of a quantized
// Conv (ts), and no constant (a bias Add stays float). An Add's output is quantized where
// its readers quantize it (a Conv, or another such Add). Only Adds after Convs are taken:
// the kernel fuses the QDQ around them into the int8 convolution's sum post-op
// (kernel/graph/quant.go, fuseQDQAdd), while quantizing a transformer's residual Adds
// would only add rounding and reference-path steps.
func residualAdds(g *onnx.Graph, ts []target) []*onnx.Node {
	conv := map[string]bool{}
	for _, t := range ts {
		if t.node.OpType == "Conv" {
			for _, o := range t.node.Outputs {
				conv[o] = true
			}
		}
	}
	var out []*onnx.Node
	for _, n := range g.Nodes {
		if n.OpType != "Add" || n.Domain != "" && n.Domain != "ai.onnx" || len(n.Inputs) != 2 || n.Inputs[0] == n.Inputs[1] {
			continue
		}
		if g.Initializers[n.Inputs[0]] != nil || g.Initializers[n.Inputs[1]] != nil {
			continue
		}
		if conv[n.Inputs[0]] || conv[n.Inputs[1]] {
			out = append(out, n)
		}
	}
	return out
}

// activations lists the activation tensors Rewrite quantizes, each once, in graph order:
// the targets' inputs and the residual Adds' inputs.
func activations(g *onnx.Graph, ts []target) []string {
	var out []string
	seen := map[string]bool{}
	addOne := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	adds := map[*onnx.Node]bool{}
	for _, n := range residualAdds(g, ts) {
		adds[n] = true
	}
	node := map[*onnx.Node]string{}
	for _, t := range ts {
		node[t.node] = t.act
	}
	for _, n := range g.Nodes {
		if a, ok := node[n]; ok {
			addOne(a)
		}
		if adds[n] {
			addOne(n.Inputs[0])
			addOne(n.Inputs[1])
		}
	}
	return out
}

func attrInt(n *onnx.Node, name string) int64 {
	if a := n.Attrs[name]; a != nil {
		return a.I
	}
	return 0
}

// Observer accumulates the min and max of every activation Rewrite will quantize.
type Observer struct {
	names  []string
	ranges Ranges
}

// CalibrationModel returns a copy of m whose outputs are m's outputs followed by every
// activation to calibrate, and an Observer that reads those extra outputs.
func CalibrationModel(m *onnx.Model) (*onnx.Model, *Observer, error) {
	if m == nil || m.Graph == nil {
		return nil, nil, errors.New("quantize: no model graph")
	}
	ts := targets(m.Graph)
	if len(ts) == 0 {
		return nil, nil, ErrNothingToQuantize
	}
	g := *m.Graph
	g.Outputs = append([]onnx.ValueInfo(nil), m.Graph.Outputs...)
	isOut := map[string]bool{}
	for _, o := range g.Outputs {
		isOut[o.Name] = true
	}
	ob := &Observer{ranges: Ranges{}}
	for _, a := range activations(m.Graph, ts) {
		ob.names = append(ob.names, a)
		if !isOut[a] {
			g.Outputs = append(g.Outputs, onnx.ValueInfo{Name: a, DType: onnx.Float})
		}
	}
	cm := *m
	cm.Graph = &g
	return &cm, ob, nil
}

// Observe records one run's outputs (of the calibration model, in its output order).
func (ob *Observer) Observe(cm *onnx.Model, outs []*onnx.Tensor) error {
	byName := map[string]*onnx.Tensor{}
	for i, o := range cm.Graph.Outputs {
		if i < len(outs) {
			byName[o.Name] = outs[i]
		}
	}
	for _, name := range ob.names {
		t := byName[name]
		if t == nil || t.DType != onnx.Float {
			return fmt.Errorf("quantize: activation %s missing from the calibration run", name)
		}
		r, ok := ob.ranges[name]
		if !ok {
			r = Range{Min: float32(math.Inf(1)), Max: float32(math.Inf(-1))}
		}
		for _, v := range t.F32 {
			if v != v || math.IsInf(float64(v), 0) {
				return fmt.Errorf("quantize: activation %s has a non-finite value", name)
			}
			r.Min = min(r.Min, v)
			r.Max = max(r.Max, v)
		}
		ob.ranges[name] = r
	}
	return nil
}

// Ranges returns what Observe saw.
func (ob *Observer) Ranges() Ranges { return ob.ranges }

// Calibrate runs m through the kernel on every batch (each a list of m's run-time inputs)
// and returns the range of every activation to quantize.
func Calibrate(m *onnx.Model, batches [][]*onnx.Tensor, threads int) (Ranges, error) {
	cm, ob, err := CalibrationModel(m)
	if err != nil {
		return nil, err
	}
	md, err := kernel.LoadModel(cm, kernel.Options{Threads: threads})
	if err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	defer md.Close()
	for i, b := range batches {
		outs, err := md.Run(b)
		if err != nil {
			return nil, fmt.Errorf("quantize: calibration batch %d: %w", i, err)
		}
		if err := ob.Observe(cm, outs); err != nil {
			return nil, err
		}
	}
	if len(batches) == 0 {
		return nil, errors.New("quantize: no calibration samples")
	}
	return ob.Ranges(), nil
}

// ActivationParams returns the uint8 scale and zero point of an asymmetric per-tensor
// quantization covering r (widened to include 0, so zero is exact).
func ActivationParams(r Range) (scale float32, zero uint8) {
	lo, hi := float64(min(r.Min, 0)), float64(max(r.Max, 0))
	if hi-lo < 1e-12 {
		return 1, 0
	}
	s := float32((hi - lo) / 255)
	z := math.RoundToEven(-lo / float64(s))
	return s, uint8(max(0, min(255, z)))
}

// weightParams quantizes w symmetrically per index of axis into int8 in [-127, 127].
func weightParams(w *onnx.Tensor, axis int) (q []int64, scales []float32) {
	outer, count, inner := int64(1), w.Dims[axis], int64(1)
	for i, d := range w.Dims {
		if i < axis {
			outer *= d
		} else if i > axis {
			inner *= d
		}
	}
	scales = make([]float32, count)
	for c := int64(0); c < count; c++ {
		var m float32
		for a := int64(0); a < outer; a++ {
			for i := int64(0); i < inner; i++ {
				m = max(m, float32(math.Abs(float64(w.F32[(a*count+c)*inner+i]))))
			}
		}
		scales[c] = m / 127
		if m == 0 {
			scales[c] = 1
		}
	}
	q = make([]int64, len(w.F32))
	for a := int64(0); a < outer; a++ {
		for c := int64(0); c < count; c++ {
			for i := int64(0); i < inner; i++ {
				k := (a*count+c)*inner + i
				v := math.RoundToEven(float64(w.F32[k] / scales[c]))
				q[k] = int64(max(-127, min(127, v)))
			}
		}
	}
	return q, scales
}

// Rewrite returns a QDQ copy of m: every Conv, Gemm and MatMul with constant weights reads
// DequantizeLinear(int8 weights, per-output-channel scales, zero points 0) and
// DequantizeLinear(QuantizeLinear(activation)) with the activation's uint8 per-tensor scale
// and zero point from ranges; so do both inputs of the residual Adds after Convs
// (residualAdds). Biases stay float. The result is a standard ONNX model (opset >= 13) that
// any QDQ-aware runtime loads.
func Rewrite(m *onnx.Model, ranges Ranges) (*onnx.Model, error) {
	if m == nil || m.Graph == nil {
		return nil, errors.New("quantize: no model graph")
	}
	if m.Opset < MinOpset {
		return nil, fmt.Errorf("quantize: model opset %d; per-channel QDQ needs opset %d or later (re-export the model)", m.Opset, MinOpset)
	}
	ts := targets(m.Graph)
	if len(ts) == 0 {
		return nil, ErrNothingToQuantize
	}
	g := *m.Graph
	g.Initializers = make(map[string]*onnx.Tensor, len(m.Graph.Initializers)+4*len(ts))
	for k, v := range m.Graph.Initializers {
		g.Initializers[k] = v
	}
	names := map[string]bool{}
	for k := range g.Initializers {
		names[k] = true
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			names[o] = true
		}
		for _, in := range n.Inputs {
			names[in] = true
		}
	}
	for _, in := range g.Inputs {
		names[in.Name] = true
	}
	fresh := func(base string) string {
		name := base
		for i := 1; names[name]; i++ {
			name = fmt.Sprintf("%s_%d", base, i)
		}
		names[name] = true
		return name
	}
	add := func(base string, t *onnx.Tensor) string {
		name := fresh(base)
		t.Name = name
		g.Initializers[name] = t
		return name
	}
	before := map[*onnx.Node][]*onnx.Node{} // new nodes to insert before a target
	actDQ := map[string]string{}            // activation -> its DequantizeLinear output
	wDQ := map[string]string{}              // weight (and axis) -> its DequantizeLinear output
	rewritten := map[*onnx.Node][]string{}
	// actFor returns the DequantizeLinear(QuantizeLinear(act)) output that node n (the
	// first reader in graph order makes it) reads.
	actFor := func(act string, n *onnx.Node) (string, error) {
		if xdq, ok := actDQ[act]; ok {
			return xdq, nil
		}
		r, ok := ranges[act]
		if !ok {
			return "", fmt.Errorf("quantize: no calibrated range for %s (input of node %s)", act, n.Name)
		}
		s, z := ActivationParams(r)
		sn := add(act+"_scale", &onnx.Tensor{DType: onnx.Float, Dims: []int64{}, F32: []float32{s}})
		zn := add(act+"_zero_point", &onnx.Tensor{DType: onnx.Uint8, Dims: []int64{}, I64: []int64{int64(z)}})
		q := fresh(act + "_quantized")
		xdq := fresh(act + "_dequantized")
		before[n] = append(before[n],
			&onnx.Node{Name: fresh(act + "_QuantizeLinear"), OpType: "QuantizeLinear", Inputs: []string{act, sn, zn}, Outputs: []string{q}, Attrs: map[string]*onnx.Attribute{}},
			&onnx.Node{Name: fresh(act + "_DequantizeLinear"), OpType: "DequantizeLinear", Inputs: []string{q, sn, zn}, Outputs: []string{xdq}, Attrs: map[string]*onnx.Attribute{}})
		actDQ[act] = xdq
		return xdq, nil
	}
	byNode := map[*onnx.Node]target{}
	for _, t := range ts {
		byNode[t.node] = t
	}
	adds := map[*onnx.Node]bool{}
	for _, n := range residualAdds(m.Graph, ts) {
		adds[n] = true
	}
	for _, n := range m.Graph.Nodes {
		if adds[n] {
			a, err := actFor(n.Inputs[0], n)
			if err != nil {
				return nil, err
			}
			b, err := actFor(n.Inputs[1], n)
			if err != nil {
				return nil, err
			}
			rewritten[n] = []string{a, b}
			continue
		}
		t, ok := byNode[n]
		if !ok {
			continue
		}
		xdq, err := actFor(t.act, n)
		if err != nil {
			return nil, err
		}
		key := fmt.Sprintf("%s/%d", t.weight, t.axis)
		wdq, ok := wDQ[key]
		if !ok {
			w := g.Initializers[t.weight]
			qv, sc := weightParams(w, t.axis)
			qn := add(t.weight+"_quantized", &onnx.Tensor{DType: onnx.Int8, Dims: append([]int64(nil), w.Dims...), I64: qv})
			sn := add(t.weight+"_scale", &onnx.Tensor{DType: onnx.Float, Dims: []int64{int64(len(sc))}, F32: sc})
			zn := add(t.weight+"_zero_point", &onnx.Tensor{DType: onnx.Int8, Dims: []int64{int64(len(sc))}, I64: make([]int64, len(sc))})
			wdq = fresh(t.weight + "_dequantized")
			before[t.node] = append(before[t.node], &onnx.Node{Name: fresh(t.weight + "_DequantizeLinear"), OpType: "DequantizeLinear",
				Inputs: []string{qn, sn, zn}, Outputs: []string{wdq},
				Attrs: map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: int64(t.axis)}}})
			wDQ[key] = wdq
		}
		rewritten[t.node] = []string{xdq, wdq}
	}
	g.Nodes = nil
	for _, n := range m.Graph.Nodes {
		g.Nodes = append(g.Nodes, before[n]...)
		if ins, ok := rewritten[n]; ok {
			c := *n
			c.Inputs = append([]string{ins[0], ins[1]}, n.Inputs[2:]...)
			n = &c
		}
		g.Nodes = append(g.Nodes, n)
	}
	// a weight used only by quantized nodes is now unused in float form
	used := map[string]bool{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			used[in] = true
		}
	}
	for _, o := range g.Outputs {
		used[o.Name] = true
	}
	var drop []string
	for k := range g.Initializers {
		if !used[k] {
			drop = append(drop, k)
		}
	}
	sort.Strings(drop)
	for _, k := range drop {
		delete(g.Initializers, k)
	}
	var inputs []onnx.ValueInfo
	for _, in := range g.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; init && !used[in.Name] {
			continue
		}
		inputs = append(inputs, in)
	}
	g.Inputs = inputs
	out := *m
	out.Graph = &g
	out.ProducerName = "idunno quantize"
	return &out, nil
}
