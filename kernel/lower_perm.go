package kernel

import (
	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// Transposes around batched matrix products (attention's head splits and merges: Q, K and
// V as (B, L, H, d) -> (B, H, L, d) or (B, H, d, L), the context back to (B, L, H, d);
// Swin's window attention) cost a copy each. A Transpose whose only reader is such a
// product, or that is the only reader of one, is lowered into it: the C matmul reads its
// operands and writes its output through permuted strides (IDK_OP_MATMUL's perms).

// permRef is a value read or written through a permutation: the product reads
// Transpose(src, perm), or writes dst = Transpose(product, perm).
type permRef struct {
	name string
	perm []int64
}

// graphUses indexes the graph's values for planPerms and planRolls: how often each is
// read (a sum post-op's operand included), its last reader, the graph outputs and each
// value's producer.
type graphUses struct {
	reads    map[string]int
	reader   map[string]*onnx.Node
	outs     map[string]bool
	producer map[string]*onnx.Node
}

func (b *builder) uses() graphUses {
	u := graphUses{reads: map[string]int{}, reader: map[string]*onnx.Node{}, outs: map[string]bool{}, producer: map[string]*onnx.Node{}}
	for _, n := range b.g.Nodes {
		for _, in := range n.Inputs {
			u.reads[in]++
			u.reader[in] = n
		}
		if posts, err := parsePostOps(n); err == nil {
			for _, p := range posts {
				if p.kind == postSum {
					u.reads[p.sum]++
				}
			}
		}
		for _, o := range n.Outputs {
			u.producer[o] = n
		}
	}
	for _, o := range b.g.Outputs {
		u.outs[o.Name] = true
	}
	return u
}

// planPerms decides, before lowering, which Transposes the products absorb.
func (b *builder) planPerms(u graphUses) {
	b.permIn = map[string]permRef{}
	b.permOut = map[*onnx.Node]permRef{}
	b.skip = map[*onnx.Node]bool{}
	reads, reader, outs, producer := u.reads, u.reader, u.outs, u.producer
	transpose := func(n *onnx.Node) ([]int64, bool) {
		if n == nil || n.OpType != "Transpose" || len(n.Inputs) != 1 || len(n.Outputs) != 1 || outs[n.Outputs[0]] {
			return nil, false
		}
		v, ok := b.g.Values[n.Outputs[0]]
		if !ok || v == nil || v.DType != onnx.Float || b.g.Initializers[n.Inputs[0]] != nil || outs[n.Inputs[0]] {
			return nil, false
		}
		perm, ok := attrInts(n, "perm")
		if !ok {
			perm = make([]int64, len(v.Dims))
			for i := range perm {
				perm[i] = int64(len(v.Dims) - 1 - i)
			}
		}
		return perm, len(perm) == len(v.Dims)
	}
	for _, n := range b.g.Nodes {
		var slots []int // inputs read through permutations
		switch {
		case n.OpType == graph.AttentionOp && len(n.Inputs) >= 3:
			slots = []int{0, 1, 2}
		case n.OpType == "MatMul" && b.batchedPlain(n):
			slots = []int{0, 1}
		default:
			continue
		}
		for _, i := range slots {
			in := n.Inputs[i]
			t := producer[in]
			if perm, ok := transpose(t); ok && reads[in] == 1 && reader[in] == n {
				b.permIn[in] = permRef{t.Inputs[0], perm}
				b.skip[t] = true
			}
		}
		out := n.Outputs[0]
		if t := reader[out]; reads[out] == 1 && !outs[out] && t != nil && t.Inputs[0] == out {
			if perm, ok := transpose(t); ok {
				b.permOut[n] = permRef{t.Outputs[0], perm}
				b.skip[t] = true
			}
		}
	}
}

// batchedPlain: a MatMul lowered as one batched product of its own operands (same rank >=
// 3, no flattening or broadcasting reshape, no bias or post-ops).
func (b *builder) batchedPlain(n *onnx.Node) bool {
	if len(n.Inputs) != 2 || len(n.Outputs) != 1 {
		return false
	}
	if _, ok := n.Attrs["idunno.post_ops"]; ok {
		return false
	}
	ad, err1 := b.dims(n.Inputs[0])
	bd, err2 := b.dims(n.Inputs[1])
	yd, err3 := b.dims(n.Outputs[0])
	return err1 == nil && err2 == nil && err3 == nil && len(ad) >= 3 && len(ad) == len(bd) && len(yd) == len(ad) &&
		b.g.Initializers[n.Inputs[1]] == nil
}

// permMatMul adds the product of the values named in0 and in1 (the graph's names:
// Transpose outputs when absorbed, read through their permutations), times alpha, written
// to y or, when pout is set, through its permutation into its Transpose's output.
func (b *builder) permMatMul(in0, in1 string, y int32, pout *permRef, alpha float32, rank int) error {
	var ids [2]int32
	perms := make([]int64, 0, 3*rank)
	identity := func() {
		for i := 0; i < rank; i++ {
			perms = append(perms, int64(i))
		}
	}
	for k, name := range []string{in0, in1} {
		pr, ok := b.permIn[name]
		if ok {
			name = pr.name
		}
		id, err := b.in(name)
		if err != nil {
			return err
		}
		ids[k] = id
		if ok {
			perms = append(perms, pr.perm...)
		} else {
			identity()
		}
	}
	if pout != nil {
		id, err := b.out(pout.name)
		if err != nil {
			return err
		}
		y = id
		perms = append(perms, pout.perm...)
	} else {
		identity()
	}
	return b.op(opMatMul, []int32{ids[0], ids[1]}, []int32{y}, append([]int64{0, 0}, perms...), []float32{alpha})
}

// outFor is the tensor a product writes for node n: nothing yet when a Transpose after it
// is absorbed (pout set; permMatMul makes that Transpose's output), else n's output.
func (b *builder) outFor(n *onnx.Node) (int32, *permRef, error) {
	if pr, ok := b.permOut[n]; ok {
		return -1, &pr, nil
	}
	y, err := b.out(n.Outputs[0])
	return y, nil, err
}

// permMatMulFrom is permMatMul with a first operand that is a tensor of the plan (the
// attention probabilities), not a graph value.
func (b *builder) permMatMulFrom(x0 int32, in1 string, y int32, pout *permRef, rank int) error {
	const tmp = "\x00idunno.probs" // never a graph name
	b.ids[tmp] = x0
	defer delete(b.ids, tmp)
	return b.permMatMul(tmp, in1, y, pout, 1, rank)
}

// A roll (torch.roll, Swin's shifted windows) is exported as Slices of one tensor along
// one axis concatenated back along it: two copies. planRolls finds Concats whose every
// input is such a Slice (unit steps, the whole tensor on every other axis, read only by
// the Concat) and lowers each as one Gather of the source with constant indices (runs of
// consecutive indices are single copies).

// rollOf is a Concat lowered as Gather(src, idx, axis).
type rollOf struct {
	src  string
	idx  []int64
	axis int64
}

func (b *builder) planRolls(u graphUses) {
	b.rolls = map[*onnx.Node]rollOf{}
	reads, outs, producer := u.reads, u.outs, u.producer
	defer func() { b.node = nil }()
	for _, n := range b.g.Nodes {
		if n.OpType != "Concat" || len(n.Inputs) < 2 || len(n.Outputs) != 1 {
			continue
		}
		yv := b.g.Values[n.Outputs[0]]
		if yv == nil || yv.DType != onnx.Float {
			continue
		}
		ax, ok := normAxis(attrInt(n, "axis", 0), len(yv.Dims))
		if !ok {
			continue
		}
		var src string
		var idx []int64
		var slices []*onnx.Node
		for _, in := range n.Inputs {
			s := producer[in]
			if s == nil || s.OpType != "Slice" || reads[in] != 1 || outs[in] || (src != "" && s.Inputs[0] != src) {
				idx = nil
				break
			}
			xd, err1 := b.dims(s.Inputs[0])
			sd, err2 := b.dims(in)
			b.node = s
			ia, err3 := b.sliceParams(s)
			if err1 != nil || err2 != nil || err3 != nil || len(xd) != len(yv.Dims) || b.g.Initializers[s.Inputs[0]] != nil {
				idx = nil
				break
			}
			r := len(xd)
			fits := xd[ax] == yv.Dims[ax]
			for i := 0; i < r; i++ {
				if ia[r+i] != 1 || (i != int(ax) && (ia[i] != 0 || sd[i] != xd[i])) {
					fits = false
				}
			}
			if !fits {
				idx = nil
				break
			}
			src = s.Inputs[0]
			for k := int64(0); k < sd[ax]; k++ {
				idx = append(idx, ia[ax]+k)
			}
			slices = append(slices, s)
		}
		if idx == nil || int64(len(idx)) != yv.Dims[ax] {
			continue
		}
		b.rolls[n] = rollOf{src, idx, ax}
		for _, s := range slices {
			b.skip[s] = true
		}
	}
}

// lowerRoll lowers a Concat planRolls chose as one Gather.
func (b *builder) lowerRoll(n *onnx.Node, r rollOf) error {
	x, err := b.in(r.src)
	if err != nil {
		return err
	}
	idx, err := b.addTensor(dtI64, []int64{int64(len(r.idx))}, nil, r.idx)
	if err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opGather, []int32{x, idx}, []int32{y}, []int64{r.axis}, nil)
}
