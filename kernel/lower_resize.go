package kernel

import (
	"math"
	"os"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
)

// Lowering of TopK, Resize and Einsum (graph/resize.go gives their canonical forms).

// idk_op_kind_t: ops_modern.c
const (
	opTopK          = 40
	opResize        = 41
	opMaskedSoftmax = 42
	opAttention     = 43 // attn.c
)

// AttnFusedEnv names the switch that, set to 0, lowers fused attention nodes in three steps
// (two products and a softmax) instead of attn.c's one (for A/B and tests).
const AttnFusedEnv = "IDK_ATTN_FUSED"

// lowerAttention lowers a fused attention node (graph.AttentionOp) to one attn.c step
// (opAttention: Q, Kt and V read, the output written, through the permutations absorbed
// around it) or, with IDK_ATTN_FUSED=0, in three steps: the scores Q Kt with the scale as
// the oneDNN matmul's alpha, the mask add and softmax in one C pass (oneDNN's softmax when
// there is no mask), and the product with V. A mask of lower rank is viewed with leading 1s.
func (b *builder) lowerAttention(n *onnx.Node) error {
	qd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	kd, err := b.dims(n.Inputs[1])
	if err != nil {
		return err
	}
	r := len(qd)
	ids := make([]int32, len(n.Inputs))
	for i, name := range n.Inputs {
		if _, absorbed := b.permIn[name]; absorbed { // read through a permutation (lower_perm.go)
			continue
		}
		if ids[i], err = b.in(name); err != nil {
			return err
		}
	}
	if len(ids) == 4 {
		if ids[3], err = b.rankedMask(ids[3], n.Inputs[3], r); err != nil {
			return err
		}
	}
	if os.Getenv(AttnFusedEnv) != "0" {
		return b.fusedAttention(n, ids, r)
	}
	sd := append(append([]int64(nil), qd[:r-1]...), kd[r-1])
	scores, err := b.temp(sd)
	if err != nil {
		return err
	}
	if err := b.permMatMul(n.Inputs[0], n.Inputs[1], scores, nil, attrFloat(n, "scale", 1), r); err != nil {
		return err
	}
	probs, err := b.temp(sd)
	if err != nil {
		return err
	}
	if len(ids) == 4 {
		if err := b.op(opMaskedSoftmax, []int32{scores, ids[3]}, []int32{probs}, nil, nil); err != nil {
			return err
		}
	} else if err := b.op(opSoftmax, []int32{scores}, []int32{probs}, []int64{int64(r - 1), 0}, nil); err != nil {
		return err
	}
	y, pout, err := b.outFor(n)
	if err != nil {
		return err
	}
	return b.permMatMulFrom(probs, n.Inputs[2], y, pout, r)
}

// rankedMask is the mask (the graph value name, tensor id) viewed at rank r, with leading 1s.
func (b *builder) rankedMask(id int32, name string, r int) (int32, error) {
	md, err := b.dims(name)
	if err != nil || len(md) >= r {
		return id, err
	}
	full := make([]int64, r-len(md), r)
	for k := range full {
		full[k] = 1
	}
	return b.reshaped(id, append(full, md...))
}

// fusedAttention adds the opAttention step of node n (ids: its inputs' tensors, 0 where
// read through an absorbed permutation; the mask at rank r).
func (b *builder) fusedAttention(n *onnx.Node, ids []int32, r int) error {
	ia := make([]int64, 0, 4*r)
	identity := func() {
		for i := 0; i < r; i++ {
			ia = append(ia, int64(i))
		}
	}
	in := append([]int32(nil), ids...)
	for k := 0; k < 3; k++ {
		pr, ok := b.permIn[n.Inputs[k]]
		if !ok {
			identity()
			continue
		}
		id, err := b.in(pr.name)
		if err != nil {
			return err
		}
		in[k] = id
		ia = append(ia, pr.perm...)
	}
	y, pout, err := b.outFor(n)
	if err != nil {
		return err
	}
	if pout != nil {
		if y, err = b.out(pout.name); err != nil {
			return err
		}
		ia = append(ia, pout.perm...)
	} else {
		identity()
	}
	return b.op(opAttention, in, []int32{y}, ia, []float32{attrFloat(n, "scale", 1)})
}

func (b *builder) lowerTopK(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	ax, k := attrInt(n, "axis", -1), attrInt(n, "k", -1)
	if ax < 0 || ax >= int64(len(xd)) || k < 0 || k > xd[ax] {
		return b.errf("axis %d or k %d out of range", ax, k)
	}
	od := append([]int64(nil), xd...)
	od[ax] = k
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	outs := make([]int32, 2)
	for i, dt := range []int32{dtF32, dtI64} {
		if i < len(n.Outputs) && n.Outputs[i] != "" {
			if outs[i], err = b.out(n.Outputs[i]); err != nil {
				return err
			}
		} else if outs[i], err = b.addTensor(dt, od, nil, nil); err != nil {
			return err
		}
	}
	return b.op(opTopK, []int32{x}, outs, []int64{ax, k, attrInt(n, "largest", 1)}, nil)
}

// resizeTaps returns, for one dim, each output index's source indices and weights.
func resizeTaps(n *onnx.Node, in, out int64, scale float64, roiStart, roiEnd float64) (taps int, idx []int64, w []float32) {
	mode := attrString(n, "mode", "nearest")
	ctm := attrString(n, "coordinate_transformation_mode", "half_pixel")
	if in == out && scale == 1 && ctm != "tf_crop_and_resize" {
		// every mode maps x to x
		idx = make([]int64, out)
		w = make([]float32, out)
		for o := range idx {
			idx[o], w[o] = int64(o), 1
		}
		return 1, idx, w
	}
	lenResized := scale * float64(in)
	coord := func(o float64) (float64, bool) {
		switch ctm {
		case "half_pixel":
			return (o+0.5)/scale - 0.5, true
		case "half_pixel_symmetric":
			adj := float64(out) / lenResized
			off := float64(in) / 2 * (1 - adj)
			return off + (o+0.5)/scale - 0.5, true
		case "pytorch_half_pixel":
			if lenResized > 1 {
				return (o+0.5)/scale - 0.5, true
			}
			return 0, true
		case "align_corners":
			if lenResized == 1 {
				return 0, true
			}
			return o * float64(in-1) / (lenResized - 1), true
		case "tf_half_pixel_for_nn":
			return (o + 0.5) / scale, true
		case "tf_crop_and_resize":
			var v float64
			if lenResized > 1 {
				v = roiStart*float64(in-1) + o*(roiEnd-roiStart)*float64(in-1)/(lenResized-1)
			} else {
				v = 0.5 * (roiStart + roiEnd) * float64(in-1)
			}
			return v, v >= 0 && v <= float64(in-1)
		}
		return o / scale, true // asymmetric
	}
	clamp := func(i int64) int64 { return min(max(i, 0), in-1) }
	switch mode {
	case "linear":
		taps = 2
	case "cubic":
		taps = 4
	default:
		taps = 1
	}
	idx = make([]int64, int(out)*taps)
	w = make([]float32, int(out)*taps)
	a := float64(attrFloat(n, "cubic_coeff_a", -0.75))
	excl := attrInt(n, "exclude_outside", 0) != 0
	nm := attrString(n, "nearest_mode", "round_prefer_floor")
	for o := int64(0); o < out; o++ {
		t := idx[int(o)*taps : int(o+1)*taps]
		ws := w[int(o)*taps : int(o+1)*taps]
		x, ok := coord(float64(o))
		if !ok {
			t[0] = -1 // extrapolation value
			continue
		}
		fl := math.Floor(x)
		r := x - fl
		i0 := int64(fl)
		switch taps {
		case 1:
			up := false
			switch nm {
			case "round_prefer_ceil":
				up = r >= 0.5
			case "floor":
			case "ceil":
				up = r > 0
			default:
				up = r > 0.5
			}
			if up {
				i0++
			}
			t[0], ws[0] = clamp(i0), 1
		case 2:
			t[0], t[1] = clamp(i0), clamp(i0+1)
			ws[0], ws[1] = float32(1-r), float32(r)
		case 4:
			s := 1 - r
			c := [4]float64{
				((a*(r+1)-5*a)*(r+1)+8*a)*(r+1) - 4*a,
				((a+2)*r-(a+3))*r*r + 1,
				((a+2)*s-(a+3))*s*s + 1,
				((a*(s+1)-5*a)*(s+1)+8*a)*(s+1) - 4*a,
			}
			sum := 0.0
			for k := range 4 {
				j := i0 - 1 + int64(k)
				if excl && (j < 0 || j >= in) {
					c[k] = 0
				}
				sum += c[k]
				t[k] = clamp(j)
			}
			for k := range 4 {
				if excl && sum != 0 {
					c[k] /= sum
				}
				ws[k] = float32(c[k])
			}
		}
	}
	return taps, idx, w
}

func (b *builder) lowerResize(n *onnx.Node) error {
	xd, err := b.dims(n.Inputs[0])
	if err != nil {
		return err
	}
	yd, err := b.dims(n.Outputs[0])
	if err != nil {
		return err
	}
	sa, ok := n.Attrs["idunno.scales"]
	if !ok || sa == nil || len(sa.Floats) != len(xd) || len(yd) != len(xd) {
		return b.errf("scales not resolved")
	}
	var roi []float32
	if a, ok := n.Attrs["idunno.roi"]; ok && a != nil {
		roi = a.Floats
	}
	r := len(xd)
	ia := make([]int64, r)
	var tabIdx []int64
	var tabW []float32
	for i := range xd {
		scale := float64(sa.Floats[i])
		if attrInt(n, "idunno.sizes_given", 0) != 0 && xd[i] > 0 {
			scale = float64(yd[i]) / float64(xd[i]) // as exact as the reference's
		}
		start, end := 0.0, 1.0
		if len(roi) == 2*r {
			start, end = float64(roi[i]), float64(roi[r+i])
		}
		taps, idx, w := resizeTaps(n, xd[i], yd[i], scale, start, end)
		ia[i] = int64(taps)
		tabIdx = append(tabIdx, idx...)
		tabW = append(tabW, w...)
	}
	x, err := b.in(n.Inputs[0])
	if err != nil {
		return err
	}
	it, err := b.addTensor(dtI64, []int64{int64(len(tabIdx))}, nil, tabIdx)
	if err != nil {
		return err
	}
	wt, err := b.addTensor(dtF32, []int64{int64(len(tabW))}, tabW, nil)
	if err != nil {
		return err
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	return b.op(opResize, []int32{x, it, wt}, []int32{y}, ia, []float32{attrFloat(n, "extrapolation_value", 0)})
}

// einsumOperand is one operand during Einsum's lowering: a kernel tensor, its dims and
// the letter of each dim.
type einsumOperand struct {
	id      int32
	dims    []int64
	letters []byte
}

// permute transposes o so that its letters come in the given order (no op when they do).
func (b *builder) permute(o einsumOperand, order []byte) (einsumOperand, error) {
	perm := make([]int64, len(order))
	dims := make([]int64, len(order))
	same := true
	for i, c := range order {
		for j, d := range o.letters {
			if d == c {
				perm[i], dims[i] = int64(j), o.dims[j]
			}
		}
		same = same && perm[i] == int64(i)
	}
	if same {
		return einsumOperand{o.id, dims, append([]byte(nil), order...)}, nil
	}
	t, err := b.temp(dims)
	if err != nil {
		return o, err
	}
	if err := b.op(opTranspose, []int32{o.id}, []int32{t}, perm, nil); err != nil {
		return o, err
	}
	return einsumOperand{t, dims, append([]byte(nil), order...)}, nil
}

// view reshapes o to dims (no op when they are its dims).
func (b *builder) view(o einsumOperand, dims []int64, letters []byte) (einsumOperand, error) {
	if equalDims(o.dims, dims) {
		return einsumOperand{o.id, dims, letters}, nil
	}
	t, err := b.reshaped(o.id, dims)
	return einsumOperand{t, dims, letters}, err
}

// diagonal takes the diagonal of the two dims lettered c: the other dims first, then
// the two merged, then every (n+1)-th element.
func (b *builder) diagonal(o einsumOperand, c byte) (einsumOperand, error) {
	var rest []byte
	var n int64
	for i, d := range o.letters {
		if d != c {
			rest = append(rest, d)
		} else {
			n = o.dims[i]
		}
	}
	// permute by position (the letter is repeated)
	perm := []int64{}
	dims := []int64{}
	for i, d := range o.letters {
		if d != c {
			perm, dims = append(perm, int64(i)), append(dims, o.dims[i])
		}
	}
	for i, d := range o.letters {
		if d == c {
			perm, dims = append(perm, int64(i)), append(dims, o.dims[i])
		}
	}
	t, err := b.temp(dims)
	if err != nil {
		return o, err
	}
	if err := b.op(opTranspose, []int32{o.id}, []int32{t}, perm, nil); err != nil {
		return o, err
	}
	flat := append(append([]int64(nil), dims[:len(dims)-2]...), n*n)
	f, err := b.reshaped(t, flat)
	if err != nil {
		return o, err
	}
	od := append(append([]int64(nil), dims[:len(dims)-2]...), n)
	y, err := b.temp(od)
	if err != nil {
		return o, err
	}
	ia := make([]int64, 2*len(od))
	for i := range od {
		ia[len(od)+i] = 1
	}
	ia[2*len(od)-1] = n + 1
	if err := b.op(opSlice, []int32{f}, []int32{y}, ia, nil); err != nil {
		return o, err
	}
	return einsumOperand{y, od, append(rest, c)}, nil
}

// sumOut sums o over the dims whose letters keep does not hold.
func (b *builder) sumOut(o einsumOperand, keep func(byte) bool) (einsumOperand, error) {
	var kd, rd []int64
	var letters []byte
	reduced := false
	for i, c := range o.letters {
		if keep(c) {
			kd, rd, letters = append(kd, o.dims[i]), append(rd, o.dims[i]), append(letters, c)
		} else {
			kd, reduced = append(kd, 1), true
		}
	}
	if !reduced {
		return o, nil
	}
	t, err := b.temp(kd)
	if err != nil {
		return o, err
	}
	if err := b.op(opReduce, []int32{o.id}, []int32{t}, []int64{redSum}, nil); err != nil {
		return o, err
	}
	return b.view(einsumOperand{t, kd, nil}, rd, letters)
}

// lowerEinsum lowers one or two operands to diagonals, sums, transposes and one
// batched MatMul.
func (b *builder) lowerEinsum(n *onnx.Node) error {
	var ops []einsumOperand
	var ranks []int
	for _, name := range n.Inputs {
		d, err := b.dims(name)
		if err != nil {
			return err
		}
		id, err := b.in(name)
		if err != nil {
			return err
		}
		ops = append(ops, einsumOperand{id, d, nil})
		ranks = append(ranks, len(d))
	}
	e, err := graph.ParseEinsum(attrString(n, "equation", ""), ranks)
	if err != nil {
		return b.errf("%v", err)
	}
	inOut := map[byte]bool{}
	for _, c := range e.Out {
		inOut[c] = true
	}
	size := map[byte]int64{}
	for i := range ops {
		ops[i].letters = e.In[i]
		for j, c := range e.In[i] {
			size[c] = ops[i].dims[j]
		}
		for {
			seen, rep := map[byte]bool{}, byte(0)
			for _, c := range ops[i].letters {
				if seen[c] {
					rep = c
					break
				}
				seen[c] = true
			}
			if rep == 0 {
				break
			}
			if ops[i].id, err = b.diagonalID(&ops[i], rep); err != nil {
				return err
			}
		}
	}
	in := func(o einsumOperand, c byte) bool {
		for _, d := range o.letters {
			if d == c {
				return true
			}
		}
		return false
	}
	for i := range ops {
		other := func(c byte) bool {
			for j := range ops {
				if j != i && in(ops[j], c) {
					return true
				}
			}
			return false
		}
		if ops[i], err = b.sumOut(ops[i], func(c byte) bool { return inOut[c] || other(c) }); err != nil {
			return err
		}
	}
	y, err := b.out(n.Outputs[0])
	if err != nil {
		return err
	}
	yd, _ := b.dims(n.Outputs[0])
	var res einsumOperand
	switch len(ops) {
	case 1:
		res = ops[0]
	case 2:
		a, c := ops[0], ops[1]
		var batch, left, contract, right []byte
		for _, l := range a.letters {
			switch {
			case in(c, l) && inOut[l]:
				batch = append(batch, l)
			case in(c, l):
				contract = append(contract, l)
			default:
				left = append(left, l)
			}
		}
		for _, l := range c.letters {
			if !in(a, l) {
				right = append(right, l)
			}
		}
		prod := func(ls []byte) int64 {
			p := int64(1)
			for _, l := range ls {
				p *= size[l]
			}
			return p
		}
		cat := func(s ...[]byte) []byte {
			var o []byte
			for _, x := range s {
				o = append(o, x...)
			}
			return o
		}
		nb, nl, nk, nr := prod(batch), prod(left), prod(contract), prod(right)
		if a, err = b.permute(a, cat(batch, left, contract)); err != nil {
			return err
		}
		if c, err = b.permute(c, cat(batch, contract, right)); err != nil {
			return err
		}
		if a, err = b.view(a, []int64{nb, nl, nk}, nil); err != nil {
			return err
		}
		if c, err = b.view(c, []int64{nb, nk, nr}, nil); err != nil {
			return err
		}
		m, err := b.temp([]int64{nb, nl, nr})
		if err != nil {
			return err
		}
		if err := b.op(opMatMul, []int32{a.id, c.id}, []int32{m}, []int64{0, 0}, []float32{1}); err != nil {
			return err
		}
		letters := cat(batch, left, right)
		dims := make([]int64, len(letters))
		for i, l := range letters {
			dims[i] = size[l]
		}
		if res, err = b.view(einsumOperand{m, []int64{nb, nl, nr}, nil}, dims, letters); err != nil {
			return err
		}
	default:
		return b.errf("Einsum of %d operands not supported (one or two)", len(ops))
	}
	if res, err = b.permute(res, e.Out); err != nil {
		return err
	}
	if !equalDims(res.dims, yd) {
		return b.errf("result dims %v, want %v", res.dims, yd)
	}
	return b.op(opCopy, []int32{res.id}, []int32{y}, nil, nil)
}

// diagonalID replaces o by its diagonal over letter c and returns the new tensor.
func (b *builder) diagonalID(o *einsumOperand, c byte) (int32, error) {
	d, err := b.diagonal(*o, c)
	if err != nil {
		return 0, err
	}
	*o = d
	return d.id, nil
}
