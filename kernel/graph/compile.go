package graph

import (
	"container/heap"
	"errors"
	"fmt"
	"sort"
	"strings"

	"idunno/kernel/onnx"
)

// Opset range the compiler accepts for the default domain: the one onnx.Validate checks
// (a model the validator refused could never reach the compiler's wider range).
const (
	MinOpset = onnx.MinOpset
	MaxOpset = onnx.MaxOpset
)

// compiler holds one compilation; it is used by one goroutine.
type compiler struct {
	opset      int64
	nodes      []*onnx.Node               // kept nodes, topological order
	consts     map[string]*onnx.Tensor    // every constant value by name
	vals       map[string]*onnx.ValueInfo // dtype and dims of every value
	outputs    map[string]bool            // graph output names
	alias      map[string]string          // removed value -> value that replaces it
	names      map[string]bool            // every name seen, for fresh names
	runtime    []onnx.ValueInfo           // run-time graph inputs in model order
	deferred   []*onnx.Node               // Identity nodes whose output is a graph output
	usedNames  map[string]bool            // every name some source node reads
	foldBudget int64                      // elements folding may still create
	training   bool                       // CompileTraining: keep BatchNormalization and Dropout, fuse nothing
	dq         map[string]*dqSource       // folded DequantizeLinear outputs: their integer source (quant.go)
}

// CheckOperators reports the first node of m whose operator the compiler does not know,
// whatever the input shapes: a loader calls it so that such a model fails at load even
// when it cannot compile the model before it sees real shapes or input values.
func CheckOperators(m *onnx.Model) error {
	if m == nil || m.Graph == nil {
		return fmt.Errorf("graph: no graph")
	}
	for _, n := range m.Graph.Nodes {
		if n == nil {
			continue
		}
		if n.Domain != "" && n.Domain != "ai.onnx" {
			return fmt.Errorf("graph: node %s (%s): operator domain %q not supported", n.Name, n.OpType, n.Domain)
		}
		if _, ok := ops[n.OpType]; !ok {
			return fmt.Errorf("graph: node %s (%s): operator not supported", n.Name, n.OpType)
		}
	}
	return nil
}

// Compile returns a graph ready for the kernel, for these exact input shapes.
func Compile(m *onnx.Model, shapes map[string][]int64, consts map[string]*onnx.Tensor) (*onnx.Graph, error) {
	return compileOpts(m, shapes, consts, false, Options{})
}

// CompileTraining returns a graph for a training plan: shapes, constants and pads are
// resolved as by Compile, but BatchNormalization stays a node (it is not folded into a
// Conv), Dropout stays a node (with its ratio as a constant input or attribute), and no
// post-ops are fused, so every trainable operator is its own node and every parameter is
// still the initializer of its original name.
func CompileTraining(m *onnx.Model, shapes map[string][]int64) (*onnx.Graph, error) {
	return compileOpts(m, shapes, nil, true, Options{})
}

func compileOpts(m *onnx.Model, shapes map[string][]int64, consts map[string]*onnx.Tensor, training bool, opts Options) (*onnx.Graph, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("graph: no model graph")
	}
	if m.Opset < MinOpset || m.Opset > MaxOpset {
		return nil, fmt.Errorf("graph: opset %d not supported (want %d to %d)", m.Opset, MinOpset, MaxOpset)
	}
	c := &compiler{
		opset:      m.Opset,
		consts:     map[string]*onnx.Tensor{},
		vals:       map[string]*onnx.ValueInfo{},
		outputs:    map[string]bool{},
		alias:      map[string]string{},
		names:      map[string]bool{},
		foldBudget: maxFoldTotal,
		training:   training,
		dq:         map[string]*dqSource{},
	}
	src := m.Graph
	if err := c.bindInputs(src, shapes, consts); err != nil {
		return nil, err
	}
	nodes, err := c.sortNodes(src)
	if err != nil {
		return nil, err
	}
	if nodes, err = c.expandQuantOps(nodes); err != nil {
		return nil, err
	}
	for _, o := range src.Outputs {
		if o.Name == "" {
			return nil, fmt.Errorf("graph: graph output with empty name")
		}
		c.outputs[o.Name] = true
	}
	for _, n := range nodes {
		if err := c.visit(n); err != nil {
			return nil, err
		}
	}
	if err := c.finishIdentities(); err != nil {
		return nil, err
	}
	c.pruneDead()
	if !c.training {
		if err := c.foldBatchNorm(); err != nil {
			return nil, err
		}
	}
	c.foldPads()
	if !c.training {
		c.fuseQDQ()
		c.fuseLayerNorm()
		c.dropExpands()
		c.fuseTransformer()
		if opts.ConcatConv {
			c.splitConcatConvs()
		}
		c.fusePostOps()
		c.splitSlicedLinears()
		c.fuseQDQAdd()
		c.chainQDQ()
	}
	c.pruneDead()
	return c.build(src)
}

// bindInputs records the run-time inputs and every constant.
func (c *compiler) bindInputs(src *onnx.Graph, shapes map[string][]int64, consts map[string]*onnx.Tensor) error {
	declared := map[string]bool{}
	for _, in := range src.Inputs {
		declared[in.Name] = true
	}
	for name := range shapes {
		if !declared[name] {
			return fmt.Errorf("graph: shape given for %q, which is not a graph input", name)
		}
	}
	for name := range consts {
		if !declared[name] {
			return fmt.Errorf("graph: value given for %q, which is not a graph input", name)
		}
		if _, ok := shapes[name]; ok {
			return fmt.Errorf("graph: input %q given both a shape and a value", name)
		}
	}
	for name, t := range src.Initializers {
		if _, ok := shapes[name]; ok {
			continue // a run-time input overrides its default
		}
		if err := c.addConst(name, t); err != nil {
			return fmt.Errorf("graph: initializer %q: %w", name, err)
		}
	}
	for _, in := range src.Inputs {
		if in.Name == "" {
			return fmt.Errorf("graph: graph input with empty name")
		}
		if in.NotTensor {
			return fmt.Errorf("graph: input %q is not a tensor", in.Name)
		}
		if dims, ok := shapes[in.Name]; ok {
			if err := c.bindRuntime(in, dims); err != nil {
				return err
			}
			continue
		}
		if t, ok := consts[in.Name]; ok {
			if t == nil {
				return fmt.Errorf("graph: input %q: nil value", in.Name)
			}
			if in.DType != onnx.Undefined && t.DType != in.DType {
				return fmt.Errorf("graph: input %q: value is %s, graph declares %s", in.Name, dtypeName(t.DType), dtypeName(in.DType))
			}
			if err := matchDeclared(in, t.Dims); err != nil {
				return err
			}
			if err := c.addConst(in.Name, t); err != nil {
				return fmt.Errorf("graph: input %q: %w", in.Name, err)
			}
			continue
		}
		if _, ok := c.consts[in.Name]; ok {
			continue
		}
		return fmt.Errorf("graph: input %q (%s %v): no shape or value given", in.Name, dtypeName(in.DType), in.Dims)
	}
	return nil
}

func (c *compiler) bindRuntime(in onnx.ValueInfo, dims []int64) error {
	if !runtimeType(in.DType) {
		return fmt.Errorf("graph: input %q is %s; run-time inputs must be float32, an integer type or bool (pass its value as a constant)", in.Name, dtypeName(in.DType))
	}
	if err := checkDims(dims); err != nil {
		return fmt.Errorf("graph: input %q: %w", in.Name, err)
	}
	if err := matchDeclared(in, dims); err != nil {
		return err
	}
	if c.names[in.Name] {
		return fmt.Errorf("graph: input %q declared twice", in.Name)
	}
	vi := onnx.ValueInfo{Name: in.Name, DType: in.DType, Dims: cloneDims(dims)}
	c.runtime = append(c.runtime, vi)
	c.vals[in.Name] = &onnx.ValueInfo{Name: in.Name, DType: in.DType, Dims: cloneDims(dims)}
	c.names[in.Name] = true
	return nil
}

// matchDeclared checks given dims against the graph's declaration (-1 matches anything).
func matchDeclared(in onnx.ValueInfo, dims []int64) error {
	if !in.HasShape && len(in.Dims) == 0 {
		return nil // no declared shape
	}
	if len(in.Dims) != len(dims) {
		return fmt.Errorf("graph: input %q: given dims %v, graph declares %v", in.Name, dims, in.Dims)
	}
	for i, d := range in.Dims {
		if d >= 0 && d != dims[i] {
			return fmt.Errorf("graph: input %q: given dims %v, graph declares %v", in.Name, dims, in.Dims)
		}
	}
	return nil
}

func (c *compiler) addConst(name string, t *onnx.Tensor) error {
	if t == nil {
		return fmt.Errorf("nil tensor")
	}
	if _, err := tensorLen(t); err != nil {
		return err
	}
	c.consts[name] = t
	c.vals[name] = &onnx.ValueInfo{Name: name, DType: t.DType, Dims: cloneDims(t.Dims)}
	c.names[name] = true
	return nil
}

// nodeHeap orders ready nodes by their position in the file, so the sort is stable.
type nodeHeap []int

func (h nodeHeap) Len() int           { return len(h) }
func (h nodeHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h nodeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *nodeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sortNodes clones the nodes and orders them topologically (stable in file order),
// rejecting dangling names, values produced twice and cycles.
func (c *compiler) sortNodes(src *onnx.Graph) ([]*onnx.Node, error) {
	nodes := make([]*onnx.Node, len(src.Nodes))
	producer := map[string]int{}
	for i, sn := range src.Nodes {
		if sn == nil {
			return nil, fmt.Errorf("graph: node %d is nil", i)
		}
		n := cloneNode(sn)
		if n.Name == "" {
			n.Name = fmt.Sprintf("#%d", i)
		}
		if n.Domain != "" && n.Domain != "ai.onnx" {
			return nil, fmt.Errorf("graph: node %s (%s): domain %q not supported", n.Name, n.OpType, n.Domain)
		}
		for _, o := range n.Outputs {
			if o == "" {
				continue
			}
			if _, dup := producer[o]; dup || c.names[o] {
				return nil, fmt.Errorf("graph: node %s (%s): value %q is defined more than once", n.Name, n.OpType, o)
			}
			producer[o] = i
		}
		nodes[i] = n
	}
	for o := range producer {
		c.names[o] = true
	}
	c.usedNames = map[string]bool{}
	for _, n := range nodes {
		for _, in := range n.Inputs {
			c.usedNames[in] = true
		}
	}
	indeg := make([]int, len(nodes))
	users := make([][]int, len(nodes))
	for i, n := range nodes {
		seen := map[int]bool{}
		for _, in := range n.Inputs {
			if in == "" {
				continue
			}
			p, ok := producer[in]
			if !ok {
				if _, ok := c.vals[in]; !ok {
					return nil, fmt.Errorf("graph: node %s (%s): input %q is not defined", n.Name, n.OpType, in)
				}
				continue
			}
			if !seen[p] {
				seen[p] = true
				indeg[i]++
				users[p] = append(users[p], i)
			}
		}
	}
	h := &nodeHeap{}
	for i := range nodes {
		if indeg[i] == 0 {
			*h = append(*h, i)
		}
	}
	heap.Init(h)
	out := make([]*onnx.Node, 0, len(nodes))
	for h.Len() > 0 {
		i := heap.Pop(h).(int)
		out = append(out, nodes[i])
		for _, u := range users[i] {
			indeg[u]--
			if indeg[u] == 0 {
				heap.Push(h, u)
			}
		}
	}
	if len(out) != len(nodes) {
		for i, d := range indeg {
			if d > 0 {
				return nil, fmt.Errorf("graph: node %s (%s) is on a cycle or depends on one", nodes[i].Name, nodes[i].OpType)
			}
		}
	}
	return out, nil
}

func cloneNode(sn *onnx.Node) *onnx.Node {
	n := &onnx.Node{Name: sn.Name, OpType: sn.OpType, Domain: sn.Domain}
	n.Inputs = append([]string(nil), sn.Inputs...)
	n.Outputs = append([]string(nil), sn.Outputs...)
	n.Attrs = make(map[string]*onnx.Attribute, len(sn.Attrs))
	for k, a := range sn.Attrs {
		n.Attrs[k] = a
	}
	return n
}

func (c *compiler) resolve(name string) string {
	for i := 0; i < 1000; i++ {
		r, ok := c.alias[name]
		if !ok {
			return name
		}
		name = r
	}
	return name
}

// fresh returns an unused value name derived from base.
func (c *compiler) fresh(base string) string {
	name := base
	for i := 1; c.names[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	c.names[name] = true
	return name
}

// visit folds, removes or shape-infers one node, in topological order.
func (c *compiler) visit(n *onnx.Node) error {
	for i, in := range n.Inputs {
		if in != "" {
			n.Inputs[i] = c.resolve(in)
		}
	}
	spec, ok := ops[n.OpType]
	if !ok {
		return fmt.Errorf("graph: node %s (%s): operator not supported", n.Name, n.OpType)
	}
	x := &nodeCtx{c: c, n: n}
	if err := x.checkArity(spec); err != nil {
		return err
	}
	attrNames := make([]string, 0, len(n.Attrs))
	for name := range n.Attrs {
		attrNames = append(attrNames, name)
	}
	sort.Strings(attrNames) // deterministic errors
	for _, name := range attrNames {
		if a := n.Attrs[name]; a == nil {
			return x.errf("attribute %q is empty", name)
		}
		if !spec.allows(name, c.opset) {
			return x.errf("attribute %q not supported", name)
		}
	}
	if c.training && n.OpType == "Dropout" {
		infos, err := trainingDropout(x)
		if err != nil {
			return err
		}
		return c.keep(x, infos)
	}
	if spec.passThrough != nil {
		through, err := spec.passThrough(x)
		if err != nil {
			return err
		}
		if through {
			return c.passThrough(x)
		}
	}
	allConst := true
	for _, in := range n.Inputs {
		if in != "" && c.consts[in] == nil {
			allConst = false
		}
	}
	if spec.eval != nil && (allConst || spec.alwaysFold) {
		outs, err := spec.eval(x)
		if err == nil {
			return c.setConstOutputs(x, outs)
		}
		if !errors.Is(err, errFoldTooBig) || spec.infer == nil || spec.foldOnly {
			return err
		}
	}
	infos, err := spec.infer(x)
	if err != nil {
		return err
	}
	return c.keep(x, infos)
}

// keep records inferred outputs of a run-time node and keeps the node.
func (c *compiler) keep(x *nodeCtx, infos []onnx.ValueInfo) error {
	n := x.n
	if len(infos) < len(n.Outputs) {
		// Optional outputs that the compiler does not compute must be unused.
		for _, o := range n.Outputs[len(infos):] {
			if o != "" && c.used(o) {
				return x.errf("output %q is not supported", o)
			}
		}
		n.Outputs = n.Outputs[:len(infos)]
	}
	for i, o := range n.Outputs {
		if o == "" {
			continue
		}
		vi := infos[i]
		if err := checkDims(vi.Dims); err != nil {
			return x.errf("output %q: %v", o, err)
		}
		if !runtimeType(vi.DType) {
			return x.errf("output %q is %s at run time; only float32, integer types and bool are supported", o, dtypeName(vi.DType))
		}
		vi.Name = o
		c.vals[o] = &vi
	}
	// Trailing unused outputs are dropped so the kernel sees only what it computes.
	for len(n.Outputs) > 1 && (n.Outputs[len(n.Outputs)-1] == "" || !c.used(n.Outputs[len(n.Outputs)-1])) {
		n.Outputs = n.Outputs[:len(n.Outputs)-1]
	}
	c.nodes = append(c.nodes, n)
	return nil
}

// used reports whether a value is read by any node of the source graph or is a graph
// output.
func (c *compiler) used(name string) bool {
	if c.outputs[name] {
		return true
	}
	return c.usedNames[name]
}

func (c *compiler) setConstOutputs(x *nodeCtx, outs []*onnx.Tensor) error {
	n := x.n
	for i, o := range n.Outputs {
		if o == "" {
			continue
		}
		if i >= len(outs) || outs[i] == nil {
			if c.used(o) {
				return x.errf("output %q is not supported", o)
			}
			continue
		}
		t := *outs[i]
		t.Name = o
		num, err := tensorLen(&t)
		if err != nil {
			return x.errf("output %q: %v", o, err)
		}
		// DequantizeLinear of constant weights is as large as its input, already held: a
		// quantized model's big layers (VGG's classifier, Wide ResNet's 3x3s) fold whatever their size
		if num > maxFoldElems && n.OpType != "DequantizeLinear" {
			return x.errf("folded constant %q has %d elements (limit %d)", o, num, maxFoldElems)
		}
		c.consts[o] = &t
		c.vals[o] = &onnx.ValueInfo{Name: o, DType: t.DType, Dims: cloneDims(t.Dims)}
	}
	return nil
}

// passThrough removes an Identity-like node: its output becomes another name for its input.
func (c *compiler) passThrough(x *nodeCtx) error {
	n := x.n
	in := n.Inputs[0]
	for _, o := range n.Outputs[1:] {
		if o != "" && c.used(o) {
			return x.errf("output %q is not supported", o)
		}
	}
	out := n.Outputs[0]
	if out == "" {
		return nil
	}
	src := c.vals[in]
	if c.outputs[out] {
		n.OpType, n.Inputs, n.Outputs, n.Attrs = "Identity", []string{in}, []string{out}, map[string]*onnx.Attribute{}
		c.vals[out] = &onnx.ValueInfo{Name: out, DType: src.DType, Dims: cloneDims(src.Dims)}
		c.deferred = append(c.deferred, n)
		c.nodes = append(c.nodes, n)
		return nil
	}
	c.alias[out] = in
	return nil
}

// finishIdentities removes the Identity nodes kept for graph outputs where possible.
func (c *compiler) finishIdentities() error {
	ix := c.index()
	for _, n := range c.deferred {
		in, out := n.Inputs[0], n.Outputs[0]
		if t, ok := c.consts[in]; ok {
			ct := *t
			ct.Name = out
			c.consts[out] = &ct
			ix.kill(n)
			continue
		}
		if ix.producer[in] == nil || c.outputs[in] {
			continue // graph input or another graph output: keep the copy
		}
		ix.kill(n)
		c.rename(ix, in, out)
	}
	c.compact(ix)
	return nil
}

// rename gives value from the name to, in its producer, its readers and Values.
func (c *compiler) rename(ix *graphIndex, from, to string) {
	if p := ix.producer[from]; p != nil {
		for i, s := range p.Outputs {
			if s == from {
				p.Outputs[i] = to
			}
		}
		ix.producer[to] = p
		delete(ix.producer, from)
	}
	for n := range ix.readers[from] {
		for i, s := range n.Inputs {
			if s == from {
				n.Inputs[i] = to
			}
		}
		if a, ok := n.Attrs[postOpsAttr]; ok {
			changed := append([]string(nil), a.Strings...)
			for i, s := range changed {
				if s == "sum:"+from {
					changed[i] = "sum:" + to
				}
			}
			n.Attrs[postOpsAttr] = &onnx.Attribute{Name: postOpsAttr, Type: onnx.AttrStrings, Strings: changed}
		}
	}
	for n, k := range ix.readers[from] {
		for ; k > 0; k-- {
			ix.addReader(to, n)
		}
	}
	delete(ix.readers, from)
	delete(ix.nreads, from)
	if v, ok := c.vals[from]; ok {
		nv := *v
		nv.Name = to
		c.vals[to] = &nv
		delete(c.vals, from)
	}
}

// graphIndex maps values to the nodes that write and read them, for the passes after
// shape inference. Passes mark removed nodes dead and keep the maps current; compact
// then drops the dead nodes, so positions stay valid during a pass.
type graphIndex struct {
	producer map[string]*onnx.Node
	readers  map[string]map[*onnx.Node]int // of run-time values: node -> input slots (and "sum:") reading it
	nreads   map[string]int                // total slots reading each run-time value
	pos      map[*onnx.Node]int
	dead     map[*onnx.Node]bool
}

func (c *compiler) index() *graphIndex {
	ix := &graphIndex{
		producer: map[string]*onnx.Node{},
		readers:  map[string]map[*onnx.Node]int{},
		nreads:   map[string]int{},
		pos:      map[*onnx.Node]int{},
		dead:     map[*onnx.Node]bool{},
	}
	for i, n := range c.nodes {
		ix.pos[n] = i
		for _, o := range n.Outputs {
			if o != "" {
				ix.producer[o] = n
			}
		}
		for _, in := range reads(n) {
			if c.consts[in] == nil { // constants may have thousands of readers; no pass asks
				ix.addReader(in, n)
			}
		}
	}
	return ix
}

// reads lists the values a node reads: its inputs and its "sum:" post-op operand.
func reads(n *onnx.Node) []string {
	var out []string
	for _, in := range n.Inputs {
		if in != "" {
			out = append(out, in)
		}
	}
	if a, ok := n.Attrs[postOpsAttr]; ok {
		for _, s := range a.Strings {
			if strings.HasPrefix(s, "sum:") {
				out = append(out, s[4:])
			}
		}
	}
	return out
}

// uses counts the input slots that read name.
func (ix *graphIndex) uses(name string) int { return ix.nreads[name] }

// onlyReader returns the node reading name when exactly one slot reads it.
func (ix *graphIndex) onlyReader(name string) *onnx.Node {
	if ix.nreads[name] != 1 {
		return nil
	}
	for n := range ix.readers[name] {
		return n
	}
	return nil
}

func (ix *graphIndex) addReader(name string, n *onnx.Node) {
	rs := ix.readers[name]
	if rs == nil {
		rs = map[*onnx.Node]int{}
		ix.readers[name] = rs
	}
	rs[n]++
	ix.nreads[name]++
}

// dropReader forgets every slot of n that reads name.
func (ix *graphIndex) dropReader(name string, n *onnx.Node) {
	if k, ok := ix.readers[name][n]; ok {
		ix.nreads[name] -= k
		delete(ix.readers[name], n)
	}
}

// kill marks n removed and forgets it as a reader and producer.
func (ix *graphIndex) kill(n *onnx.Node) {
	ix.dead[n] = true
	for _, in := range reads(n) {
		ix.dropReader(in, n)
	}
	for _, o := range n.Outputs {
		if ix.producer[o] == n {
			delete(ix.producer, o)
		}
	}
}

// compact drops the nodes a pass killed.
func (c *compiler) compact(ix *graphIndex) {
	kept := c.nodes[:0]
	for _, n := range c.nodes {
		if !ix.dead[n] {
			kept = append(kept, n)
		}
	}
	c.nodes = kept
}

// pruneDead drops nodes none of whose outputs is used, in one backward pass.
func (c *compiler) pruneDead() {
	live := map[string]bool{}
	for o := range c.outputs {
		live[o] = true
	}
	keep := make([]bool, len(c.nodes))
	for i := len(c.nodes) - 1; i >= 0; i-- {
		n := c.nodes[i]
		for _, o := range n.Outputs {
			if o != "" && live[o] {
				keep[i] = true
			}
		}
		if keep[i] {
			for _, in := range reads(n) {
				live[in] = true
			}
		}
	}
	kept := c.nodes[:0]
	for i, n := range c.nodes {
		if keep[i] {
			kept = append(kept, n)
		}
	}
	c.nodes = kept
}

// build assembles the result graph.
func (c *compiler) build(src *onnx.Graph) (*onnx.Graph, error) {
	g := &onnx.Graph{
		Name:         src.Name,
		Nodes:        c.nodes,
		Initializers: map[string]*onnx.Tensor{},
		Values:       map[string]*onnx.ValueInfo{},
	}
	need := map[string]bool{}
	for _, n := range c.nodes {
		for _, in := range n.Inputs {
			if in != "" {
				need[in] = true
			}
		}
		for _, o := range n.Outputs {
			if o != "" {
				need[o] = true
			}
		}
		if a, ok := n.Attrs[postOpsAttr]; ok {
			for _, s := range a.Strings {
				if len(s) > 4 && s[:4] == "sum:" {
					need[s[4:]] = true
				}
			}
		}
	}
	for _, in := range c.runtime {
		need[in.Name] = true
		g.Inputs = append(g.Inputs, *vinfo(in.Name, in.DType, in.Dims))
	}
	for _, o := range src.Outputs {
		v, ok := c.vals[o.Name]
		if !ok {
			return nil, fmt.Errorf("graph: graph output %q is not computed by the graph", o.Name)
		}
		if o.DType != onnx.Undefined && o.DType != v.DType {
			return nil, fmt.Errorf("graph: graph output %q is %s, graph declares %s", o.Name, dtypeName(v.DType), dtypeName(o.DType))
		}
		need[o.Name] = true
		g.Outputs = append(g.Outputs, *vinfo(o.Name, v.DType, v.Dims))
	}
	names := make([]string, 0, len(need))
	for name := range need {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v, ok := c.vals[name]
		if !ok {
			return nil, fmt.Errorf("graph: internal: value %q has no shape", name)
		}
		g.Values[name] = vinfo(name, v.DType, v.Dims)
		if t, ok := c.consts[name]; ok {
			g.Initializers[name] = t
		}
	}
	return g, nil
}
