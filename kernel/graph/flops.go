package graph

import "idunno/kernel/onnx"

// FLOPs estimates the floating-point operations of one run of a compiled graph (for its
// whole batch: divide by the batch size for a per-image figure). Conv, Gemm and MatMul
// count two per multiply-add; other ops count roughly one per output element (pools one
// per window element).
func FLOPs(g *onnx.Graph) float64 {
	if g == nil {
		return 0
	}
	dims := func(name string) []int64 {
		if v, ok := g.Values[name]; ok && v != nil {
			return v.Dims
		}
		return nil
	}
	count := func(name string) float64 {
		d := dims(name)
		if d == nil {
			return 0
		}
		n := 1.0
		for _, v := range d {
			n *= float64(v)
		}
		return n
	}
	var total float64
	for _, n := range g.Nodes {
		if n == nil || len(n.Outputs) == 0 {
			continue
		}
		out := count(n.Outputs[0])
		switch n.OpType {
		case "Conv":
			w := dims(n.Inputs[1])
			per := 1.0
			for _, v := range w[1:] { // C/group * kernel
				per *= float64(v)
			}
			total += 2 * out * per
			if a, ok := n.Attrs[postOpsAttr]; ok {
				total += out * float64(len(a.Strings))
			}
		case "Gemm":
			a := dims(n.Inputs[0])
			k := a[1]
			if t, ok := n.Attrs["transA"]; ok && t.I == 1 {
				k = a[0]
			}
			total += 2 * out * float64(k)
		case "MatMul":
			a := dims(n.Inputs[0])
			total += 2 * out * float64(a[len(a)-1])
		case AttentionOp: // two matrix products of (L x d) by (d x S) and (L x S) by (S x d)
			kt := dims(n.Inputs[1])
			total += 4 * out * float64(kt[len(kt)-1])
		case "MaxPool", "AveragePool":
			k := 1.0
			if ks, ok := n.Attrs["kernel_shape"]; ok {
				for _, v := range ks.Ints {
					k *= float64(v)
				}
			}
			total += out * k
		case "GlobalAveragePool", "GlobalMaxPool", "ReduceMean":
			total += count(n.Inputs[0])
		case "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity":
		default:
			total += out
		}
	}
	return total
}
