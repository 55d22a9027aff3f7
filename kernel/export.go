package kernel

import (
	"fmt"
	"math"

	"idunno/kernel/onnx"
)

// Model returns the trained model: the source model with every parameter and running
// statistic replaced by the plan's current values. With foldBN, each BatchNormalization
// whose input is a Conv read by nothing else is folded into that Conv's weights and bias
// (the inference form); without it, BatchNormalization nodes stay (with their running
// statistics). Either model loads in the inference kernel and in other ONNX runtimes.
func (t *Trainer) Model(foldBN bool) (*onnx.Model, error) {
	params := make([]float32, t.nparams)
	state := make([]float32, t.nstate)
	if err := t.Get(Params, params); err != nil {
		return nil, err
	}
	if err := t.Get(State, state); err != nil {
		return nil, err
	}
	return ExportModel(t.src, t.params, params, t.state, state, foldBN)
}

// ExportModel writes flat parameter and statistic values (laid out as Trainer.Params and
// Trainer.State describe) into a copy of src; see Trainer.Model.
func ExportModel(src *onnx.Model, params []Tensor, pv []float32, state []Tensor, sv []float32, foldBN bool) (*onnx.Model, error) {
	g := *src.Graph
	g.Initializers = make(map[string]*onnx.Tensor, len(src.Graph.Initializers))
	for k, v := range src.Graph.Initializers {
		g.Initializers[k] = v
	}
	g.Values = nil
	put := func(list []Tensor, vals []float32) error {
		for _, p := range list {
			if p.Offset < 0 || p.Offset+p.Len() > int64(len(vals)) {
				return fmt.Errorf("kernel: export: %s lies outside the %d values given", p.Name, len(vals))
			}
			old := src.Graph.Initializers[p.Name]
			if old == nil {
				return fmt.Errorf("kernel: export: initializer %s not in the model", p.Name)
			}
			nt := &onnx.Tensor{Name: p.Name, DType: onnx.Float, Dims: append([]int64(nil), old.Dims...),
				F32: append([]float32(nil), vals[p.Offset:p.Offset+p.Len()]...)}
			g.Initializers[p.Name] = nt
		}
		return nil
	}
	if err := put(params, pv); err != nil {
		return nil, err
	}
	if err := put(state, sv); err != nil {
		return nil, err
	}
	g.Nodes = make([]*onnx.Node, len(src.Graph.Nodes))
	copy(g.Nodes, src.Graph.Nodes)
	m := *src
	m.Graph = &g
	if foldBN {
		if err := foldBatchNorms(&g); err != nil {
			return nil, err
		}
	}
	return &m, nil
}

// foldBatchNorms folds BatchNormalization into a preceding Conv read by nothing else.
func foldBatchNorms(g *onnx.Graph) error {
	readers := map[string]int{}
	producer := map[string]*onnx.Node{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in]++
		}
		for _, o := range n.Outputs {
			producer[o] = n
		}
	}
	for _, o := range g.Outputs {
		readers[o.Name]++
	}
	var kept []*onnx.Node
	removed := map[string]bool{}
	replaced := map[*onnx.Node]*onnx.Node{}
	dead := map[*onnx.Node]bool{}
	for _, bn := range g.Nodes {
		if bn.OpType != "BatchNormalization" || len(bn.Inputs) != 5 || readers[bn.Inputs[0]] != 1 {
			continue
		}
		conv := producer[bn.Inputs[0]]
		if conv == nil || conv.OpType != "Conv" || dead[conv] {
			continue
		}
		if replaced[conv] != nil {
			conv = replaced[conv]
		}
		w := g.Initializers[conv.Inputs[1]]
		if w == nil || w.DType != onnx.Float || readers[conv.Inputs[1]] != 1 || len(w.Dims) < 2 {
			continue
		}
		var bias *onnx.Tensor
		if len(conv.Inputs) > 2 && conv.Inputs[2] != "" {
			if bias = g.Initializers[conv.Inputs[2]]; bias == nil || readers[conv.Inputs[2]] != 1 {
				continue
			}
		}
		var ps [4]*onnx.Tensor
		ok := true
		for i := range ps {
			ps[i] = g.Initializers[bn.Inputs[i+1]]
			ok = ok && ps[i] != nil && ps[i].DType == onnx.Float && int64(len(ps[i].F32)) == w.Dims[0]
		}
		if !ok {
			continue
		}
		eps := float64(1e-5)
		if a, ok := bn.Attrs["epsilon"]; ok && a != nil {
			eps = float64(a.F)
		}
		oc := w.Dims[0]
		per := int64(len(w.F32)) / oc
		nw := &onnx.Tensor{Name: conv.Inputs[1], DType: onnx.Float, Dims: append([]int64(nil), w.Dims...), F32: make([]float32, len(w.F32))}
		nb := &onnx.Tensor{Name: bn.Outputs[0] + ".folded_bias", DType: onnx.Float, Dims: []int64{oc}, F32: make([]float32, oc)}
		if bias != nil {
			nb.Name = conv.Inputs[2]
		}
		for o := int64(0); o < oc; o++ {
			k := float64(ps[0].F32[o]) / math.Sqrt(float64(ps[3].F32[o])+eps)
			for i := int64(0); i < per; i++ {
				nw.F32[o*per+i] = float32(float64(w.F32[o*per+i]) * k)
			}
			b0 := 0.0
			if bias != nil {
				b0 = float64(bias.F32[o])
			}
			nb.F32[o] = float32((b0-float64(ps[2].F32[o]))*k + float64(ps[1].F32[o]))
		}
		g.Initializers[nw.Name] = nw
		g.Initializers[nb.Name] = nb
		nc := *conv
		nc.Inputs = []string{conv.Inputs[0], conv.Inputs[1], nb.Name}
		nc.Outputs = []string{bn.Outputs[0]}
		replaced[producer[bn.Inputs[0]]] = &nc
		dead[bn] = true
		for _, name := range bn.Inputs[1:] {
			if readers[name]--; readers[name] == 0 {
				delete(g.Initializers, name)
				removed[name] = true
			}
		}
	}
	for _, n := range g.Nodes {
		if dead[n] {
			continue
		}
		if r := replaced[n]; r != nil {
			n = r
		}
		kept = append(kept, n)
	}
	g.Nodes = kept
	// drop graph inputs that named removed initializers (older exporters list them)
	var ins []onnx.ValueInfo
	for _, in := range g.Inputs {
		if !removed[in.Name] {
			ins = append(ins, in)
		}
	}
	g.Inputs = ins
	return nil
}
