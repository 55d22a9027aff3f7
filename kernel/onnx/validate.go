package onnx

import "fmt"

// The opset versions of the default domain IDunno accepts (the graph compiler's range:
// it checks the attributes and inputs whose meaning changed between them, node by node).
const (
	MinOpset = 7
	MaxOpset = 21
)

// Validate checks what the compiler relies on: a supported opset of the default domain
// only; nodes in topological order (every input defined before use, hence no cycles);
// no dangling names; every value defined once; graph outputs produced; sane initializers
// and declared shapes. Errors name the node.
func (m *Model) Validate() error {
	if m.Graph == nil {
		return fmt.Errorf("onnx: model has no graph")
	}
	if m.Opset == 0 {
		return fmt.Errorf("onnx: model imports no opset of the default domain")
	}
	if m.Opset < MinOpset || m.Opset > MaxOpset {
		return fmt.Errorf("onnx: opset %d of the default domain is not supported (want %d to %d)", m.Opset, MinOpset, MaxOpset)
	}
	if err := validateGraph(m.Graph, nil); err != nil {
		return fmt.Errorf("onnx: %w", err)
	}
	return nil
}

// scope is the set of value names visible in a graph: its own and its enclosing graphs'.
type scope struct {
	names  map[string]bool
	parent *scope
}

func (s *scope) has(name string) bool {
	for ; s != nil; s = s.parent {
		if s.names[name] {
			return true
		}
	}
	return false
}

// nodeLabel names a node in an error message.
func nodeLabel(i int, n *Node) string {
	if n.Name != "" {
		return fmt.Sprintf("node %d %q (%s)", i, n.Name, n.OpType)
	}
	return fmt.Sprintf("node %d (%s)", i, n.OpType)
}

func validateGraph(g *Graph, outer *scope) error {
	sc := &scope{names: map[string]bool{}, parent: outer}
	define := func(name, what string) error {
		if name == "" {
			return fmt.Errorf("%s has an empty name", what)
		}
		if sc.has(name) {
			return fmt.Errorf("%s %q is defined more than once", what, name)
		}
		sc.names[name] = true
		return nil
	}
	for i := range g.Inputs {
		vi := &g.Inputs[i]
		if err := define(vi.Name, "graph input"); err != nil {
			return err
		}
		if err := checkShape(vi); err != nil {
			return fmt.Errorf("graph input %q: %w", vi.Name, err)
		}
	}
	inputs := map[string]*ValueInfo{}
	for i := range g.Inputs {
		inputs[g.Inputs[i].Name] = &g.Inputs[i]
	}
	for _, name := range sortedKeys(g.Initializers) {
		t := g.Initializers[name]
		if err := checkInitializer(name, t, inputs[name]); err != nil {
			return err
		}
		if inputs[name] == nil {
			if err := define(name, "initializer"); err != nil {
				return err
			}
		}
	}
	// producer records where each name is produced, to tell "used before defined" from "dangling".
	producer := map[string]int{}
	for i, n := range g.Nodes {
		for _, out := range n.Outputs {
			if _, ok := producer[out]; !ok && out != "" {
				producer[out] = i
			}
		}
	}
	for i, n := range g.Nodes {
		if err := validateNode(n, sc, producer); err != nil {
			return fmt.Errorf("%s: %w", nodeLabel(i, n), err)
		}
		for _, out := range n.Outputs {
			if out == "" {
				continue // an omitted optional output
			}
			if sc.has(out) {
				return fmt.Errorf("%s: output %q is already defined (duplicate output)", nodeLabel(i, n), out)
			}
			sc.names[out] = true
		}
	}
	if len(g.Outputs) == 0 {
		return fmt.Errorf("graph %q has no outputs", g.Name)
	}
	seen := map[string]bool{}
	for i := range g.Outputs {
		vi := &g.Outputs[i]
		if !sc.has(vi.Name) {
			return fmt.Errorf("graph output %q is not produced by any node, input or initializer", vi.Name)
		}
		if seen[vi.Name] {
			return fmt.Errorf("graph output %q is listed twice", vi.Name)
		}
		seen[vi.Name] = true
		if err := checkShape(vi); err != nil {
			return fmt.Errorf("graph output %q: %w", vi.Name, err)
		}
	}
	return nil
}

func validateNode(n *Node, sc *scope, producer map[string]int) error {
	if n.OpType == "" {
		return fmt.Errorf("no op_type")
	}
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return fmt.Errorf("unknown operator domain %q", n.Domain)
	}
	for _, in := range n.Inputs {
		if in == "" || sc.has(in) {
			continue
		}
		if j, later := producer[in]; later {
			return fmt.Errorf("input %q is used before node %d defines it (nodes are not in topological order, or the graph has a cycle)", in, j)
		}
		return fmt.Errorf("input %q is not defined by any node, graph input or initializer", in)
	}
	for _, name := range sortedKeys(n.Attrs) {
		a := n.Attrs[name]
		if a.G != nil {
			if err := validateGraph(a.G, sc); err != nil {
				return fmt.Errorf("attribute %q: %w", name, err)
			}
		}
		for _, g := range a.Graphs {
			if err := validateGraph(g, sc); err != nil {
				return fmt.Errorf("attribute %q: %w", name, err)
			}
		}
	}
	return nil
}

// checkShape rejects declared dimensions no model could have.
func checkShape(vi *ValueInfo) error {
	if len(vi.Dims) > MaxRank {
		return fmt.Errorf("rank %d over the limit of %d", len(vi.Dims), MaxRank)
	}
	if len(vi.DimParams) != 0 && len(vi.DimParams) != len(vi.Dims) {
		return fmt.Errorf("%d dimension names for %d dimensions", len(vi.DimParams), len(vi.Dims))
	}
	for _, d := range vi.Dims {
		if d < -1 || d > MaxDim {
			return fmt.Errorf("absurd dimension %d", d)
		}
	}
	return nil
}

// checkInitializer checks that t holds exactly as many elements as its shape says, and
// agrees with a graph input of the same name when there is one.
func checkInitializer(name string, t *Tensor, in *ValueInfo) error {
	if t == nil {
		return fmt.Errorf("initializer %q is nil", name)
	}
	if t.Name != name {
		return fmt.Errorf("initializer %q is stored under name %q", t.Name, name)
	}
	n, err := NumElements(t.Dims)
	if err != nil {
		return fmt.Errorf("initializer %q: %w", name, err)
	}
	if int64(t.Len()) != n && !(t.DType == String && n == 0) {
		return fmt.Errorf("initializer %q: shape %v needs %d elements, holds %d", name, t.Dims, n, t.Len())
	}
	if in != nil && in.DType != Undefined && in.DType != t.DType {
		return fmt.Errorf("initializer %q is %v but the graph input of that name is %v", name, t.DType, in.DType)
	}
	if in != nil && in.HasShape {
		if len(in.Dims) != len(t.Dims) {
			return fmt.Errorf("initializer %q has shape %v but the graph input of that name has rank %d", name, t.Dims, len(in.Dims))
		}
		for i, d := range in.Dims {
			if d >= 0 && d != t.Dims[i] {
				return fmt.Errorf("initializer %q has shape %v but the graph input of that name declares %v", name, t.Dims, in.Dims)
			}
		}
	}
	return nil
}
