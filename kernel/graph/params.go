package graph

import "idunno/kernel/onnx"

// paramSlots lists, per operator, the inputs the compiler needs as constants.
var paramSlots = map[string][]int{
	"Reshape":   {1},
	"Slice":     {1, 2, 3, 4},
	"Squeeze":   {1},
	"Unsqueeze": {1},
	"Pad":       {1, 2},
	"Clip":      {1, 2},
	"Dropout":   {1, 2},
	"Expand":    {1},
	"Tile":      {1},
	"CumSum":    {1},
	"Split":     {1},
	"ReduceSum": {1}, "ReduceMean": {1}, "ReduceMax": {1}, "ReduceMin": {1},
	"ReduceL1": {1}, "ReduceL2": {1}, "ReduceSumSquare": {1}, "ReduceProd": {1},
	"ConstantOfShape": {0},
	"Range":           {0, 1, 2},
	"TopK":            {1},
	"Resize":          {1, 2, 3},
	"Upsample":        {1},
	"QLinearConv":     {1, 4, 6}, // scales (quant.go folds them into the requantization)
	"QLinearMatMul":   {1, 4, 6},
}

// ConstantInputs returns the graph inputs (not initializers) that the compiler needs as
// constants: those of a non-float type, and those feeding a parameter slot (Reshape
// shape, Slice starts/ends/axes/steps, Squeeze/Unsqueeze axes, Pad pads and value, Clip
// min/max, Gather indices, Dropout ratio/training_mode). Callers that feed every input
// from files pass these in Compile's consts and the rest in shapes.
func ConstantInputs(m *onnx.Model) map[string]bool {
	out := map[string]bool{}
	if m == nil || m.Graph == nil {
		return out
	}
	g := m.Graph
	isInput := map[string]bool{}
	for _, in := range g.Inputs {
		if _, init := g.Initializers[in.Name]; init {
			continue
		}
		isInput[in.Name] = true
		if !runtimeType(in.DType) {
			out[in.Name] = true
		}
	}
	for _, n := range g.Nodes {
		if n == nil {
			continue
		}
		for _, i := range paramSlots[n.OpType] {
			if i < len(n.Inputs) && isInput[n.Inputs[i]] {
				out[n.Inputs[i]] = true
			}
		}
	}
	return out
}
