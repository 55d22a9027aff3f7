package graph

import (
	"fmt"
	"math"
	"strings"

	"idunno/kernel/onnx"
)

// TopK, Resize (and the older Upsample) and Einsum. Their parameters are resolved into
// one canonical form the kernel reads:
//
//   - TopK: attributes axis (non-negative), k, largest, sorted; input K is dropped.
//   - Resize and Upsample become Resize with the attributes mode ("nearest", "linear" or
//     "cubic"), coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
//     exclude_outside, extrapolation_value, "idunno.scales" (one float per dim: the scale
//     of the coordinate transformation) and "idunno.roi" (floats, starts then ends: used
//     by tf_crop_and_resize); only input X is kept.
//   - Einsum keeps its equation; ParseEinsum gives the kernel its letters.

func registerResize() {
	ops["TopK"] = &opSpec{attrs: []string{"axis", "k", "largest", "sorted"}, minIn: 1, maxIn: 2, infer: inferTopK}
	ops["Resize"] = &opSpec{attrs: []string{"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
		"exclude_outside", "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy",
		"idunno.scales", "idunno.roi"}, minIn: 1, maxIn: 4, infer: inferResize}
	ops["Upsample"] = &opSpec{attrs: []string{"mode", "scales"}, minIn: 1, maxIn: 2, infer: inferUpsample}
	ops["Einsum"] = &opSpec{attrs: []string{"equation"}, minIn: 1, maxIn: 1 << 10, infer: inferEinsum}
}

func inferTopK(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	d := x.dims(0)
	a, err := x.attrInt("axis", -1)
	if err != nil {
		return nil, err
	}
	ax, err := normAxis(a, len(d))
	if err != nil {
		return nil, x.errf("%v", err)
	}
	var k int64
	if x.opset() < 10 {
		if x.has(1) {
			return nil, x.errf("input K needs opset 10")
		}
		a, err := x.attr("k", onnx.AttrInt)
		if err != nil {
			return nil, err
		}
		if a == nil {
			return nil, x.errf("attribute k missing")
		}
		k = a.I
	} else {
		if _, ok := x.n.Attrs["k"]; ok {
			return nil, x.errf("attribute k not allowed at opset %d", x.opset())
		}
		if !x.has(1) {
			return nil, x.errf("input K missing")
		}
		v, err := x.constInts(1, "K")
		if err != nil {
			return nil, err
		}
		if len(v) != 1 {
			return nil, x.errf("K has %d values; want 1", len(v))
		}
		k = v[0]
	}
	if k < 0 || k > d[ax] {
		return nil, x.errf("K=%d outside [0, %d]", k, d[ax])
	}
	largest, err := x.bool01("largest", 1)
	if err != nil {
		return nil, err
	}
	if _, err := x.bool01("sorted", 1); err != nil {
		return nil, err
	}
	lg := int64(0)
	if largest {
		lg = 1
	}
	x.setInt("axis", int64(ax))
	x.setInt("k", k)
	x.setInt("largest", lg)
	x.setInt("sorted", 1) // the kernel always sorts, which sorted=0 allows
	x.n.Inputs = x.n.Inputs[:1]
	od := cloneDims(d)
	od[ax] = k
	return []onnx.ValueInfo{{DType: onnx.Float, Dims: od}, {DType: onnx.Int64, Dims: cloneDims(od)}}, nil
}

// resizeModes are the coordinate transformation modes the kernel implements.
var resizeModes = map[string]bool{"half_pixel": true, "pytorch_half_pixel": true, "align_corners": true,
	"asymmetric": true, "tf_half_pixel_for_nn": true, "tf_crop_and_resize": true, "half_pixel_symmetric": true}

func inferResize(x *nodeCtx) ([]onnx.ValueInfo, error) {
	if err := x.floatIn(0); err != nil {
		return nil, err
	}
	d := x.dims(0)
	r := len(d)
	mode, err := x.attrString("mode", "nearest")
	if err != nil {
		return nil, err
	}
	if mode != "nearest" && mode != "linear" && mode != "cubic" {
		return nil, x.errf("mode %q not supported", mode)
	}
	ctm, err := x.attrString("coordinate_transformation_mode", "half_pixel")
	if err != nil {
		return nil, err
	}
	nm, err := x.attrString("nearest_mode", "round_prefer_floor")
	if err != nil {
		return nil, err
	}
	if x.opset() < 11 {
		// Resize-10: inputs X and scales, asymmetric coordinates; nearest takes the
		// floor (what PyTorch's opset-10 export and Upsample mean).
		ctm, nm = "asymmetric", "floor"
	}
	if !resizeModes[ctm] {
		return nil, x.errf("coordinate_transformation_mode %q not supported", ctm)
	}
	switch nm {
	case "round_prefer_floor", "round_prefer_ceil", "floor", "ceil":
	default:
		return nil, x.errf("nearest_mode %q not supported", nm)
	}
	if aa, err := x.attrInt("antialias", 0); err != nil || aa != 0 {
		if err != nil {
			return nil, err
		}
		return nil, x.errf("antialias=1 not supported")
	}
	if p, err := x.attrString("keep_aspect_ratio_policy", "stretch"); err != nil || p != "stretch" {
		if err != nil {
			return nil, err
		}
		return nil, x.errf("keep_aspect_ratio_policy %q not supported", p)
	}
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if av, ok, err := x.attrInts("axes"); err != nil {
		return nil, err
	} else if ok {
		axes = axes[:0]
		seen := map[int]bool{}
		for _, a := range av {
			ax, err := normAxis(a, r)
			if err != nil || seen[ax] {
				return nil, x.errf("axes %v invalid for rank %d", av, r)
			}
			seen[ax] = true
			axes = append(axes, ax)
		}
	}
	// inputs: opset 10: X, scales; from 11: X, roi, scales, sizes
	roiIn, scalesIn, sizesIn := 1, 2, 3
	if x.opset() < 11 {
		roiIn, scalesIn, sizesIn = -1, 1, -1
	}
	floatsOf := func(i int, what string) ([]float32, bool, error) {
		if i < 0 || !x.has(i) {
			return nil, false, nil
		}
		t := x.cst(i)
		if t == nil {
			return nil, false, x.errf("%s (input %d) must be a constant", what, i)
		}
		if t.DType != onnx.Float || len(t.Dims) > 1 {
			return nil, false, x.errf("%s must be a 1-D float32 tensor", what)
		}
		return t.F32, len(t.F32) > 0, nil
	}
	roi, _, err := floatsOf(roiIn, "roi")
	if err != nil {
		return nil, err
	}
	sc, hasScales, err := floatsOf(scalesIn, "scales")
	if err != nil {
		return nil, err
	}
	var sizes []int64
	if sizesIn >= 0 && x.has(sizesIn) {
		v, err := x.constInts(sizesIn, "sizes")
		if err != nil {
			return nil, err
		}
		sizes = v
	}
	hasSizes := len(sizes) > 0
	if hasScales == hasSizes {
		return nil, x.errf("exactly one of scales and sizes must be given")
	}
	scales := make([]float64, r)
	out := cloneDims(d)
	for i := range scales {
		scales[i] = 1
	}
	n := len(axes)
	if hasScales && len(sc) != n || hasSizes && len(sizes) != n {
		return nil, x.errf("scales/sizes have %d values; want %d", max(len(sc), len(sizes)), n)
	}
	for j, ax := range axes {
		if hasScales {
			s := float64(sc[j])
			if !(s > 0) || math.IsInf(s, 0) {
				return nil, x.errf("scale %v must be positive and finite", sc[j])
			}
			scales[ax] = s
			out[ax] = int64(math.Floor(float64(d[ax]) * s))
		} else {
			if sizes[j] <= 0 || d[ax] == 0 {
				return nil, x.errf("size %d of dim %d not supported", sizes[j], ax)
			}
			out[ax] = sizes[j]
			scales[ax] = float64(sizes[j]) / float64(d[ax])
		}
		if out[ax] <= 0 || out[ax] > 1<<24 {
			return nil, x.errf("output dim %d of %d not supported", ax, out[ax])
		}
	}
	if ctm == "tf_crop_and_resize" {
		if len(roi) != 2*n {
			return nil, x.errf("roi has %d values; want %d", len(roi), 2*n)
		}
		full := make([]float32, 2*r)
		for i := 0; i < r; i++ {
			full[r+i] = 1
		}
		for j, ax := range axes {
			full[ax], full[r+ax] = roi[j], roi[n+j]
		}
		x.n.Attrs["idunno.roi"] = &onnx.Attribute{Name: "idunno.roi", Type: onnx.AttrFloats, Floats: full}
	}
	fs := make([]float32, r)
	for i, s := range scales {
		fs[i] = float32(s)
	}
	// float32 loses the scale's low bits; keep the float64 value exactly enough by
	// recomputing it from the dims in the kernel when sizes were given.
	x.n.Attrs["idunno.scales"] = &onnx.Attribute{Name: "idunno.scales", Type: onnx.AttrFloats, Floats: fs}
	x.n.Attrs["idunno.sizes_given"] = &onnx.Attribute{Name: "idunno.sizes_given", Type: onnx.AttrInt, I: b2i(hasSizes)}
	x.n.Attrs["mode"] = &onnx.Attribute{Name: "mode", Type: onnx.AttrString, S: mode}
	x.n.Attrs["coordinate_transformation_mode"] = &onnx.Attribute{Name: "coordinate_transformation_mode", Type: onnx.AttrString, S: ctm}
	x.n.Attrs["nearest_mode"] = &onnx.Attribute{Name: "nearest_mode", Type: onnx.AttrString, S: nm}
	delete(x.n.Attrs, "axes")
	x.n.Inputs = x.n.Inputs[:1]
	return one(out), nil
}

func b2i(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// inferUpsample rewrites Upsample (opsets 7 to 9) as the equivalent Resize: asymmetric
// coordinates, nearest taking the floor.
func inferUpsample(x *nodeCtx) ([]onnx.ValueInfo, error) {
	mode, err := x.attrString("mode", "nearest")
	if err != nil {
		return nil, err
	}
	if mode == "bilinear" {
		mode = "linear"
	}
	var sc []float32
	if x.opset() < 9 {
		a, err := x.attr("scales", onnx.AttrFloats)
		if err != nil {
			return nil, err
		}
		if a == nil || x.has(1) {
			return nil, x.errf("attribute scales missing")
		}
		sc = a.Floats
	} else {
		t := x.cst(1)
		if t == nil || t.DType != onnx.Float {
			return nil, x.errf("scales (input 1) must be a float32 constant")
		}
		sc = t.F32
	}
	// Resize reads roi, scales (inputs) from opset 11 on; put the scales in a fresh
	// constant named after the node.
	name := x.c.fresh(x.n.Name + "_scales")
	x.c.consts[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: []int64{int64(len(sc))}, F32: sc}
	x.c.vals[name] = vinfo(name, onnx.Float, []int64{int64(len(sc))})
	x.n.OpType = "Resize"
	x.n.Attrs = map[string]*onnx.Attribute{
		"mode":                           {Name: "mode", Type: onnx.AttrString, S: mode},
		"coordinate_transformation_mode": {Name: "coordinate_transformation_mode", Type: onnx.AttrString, S: "asymmetric"},
		"nearest_mode":                   {Name: "nearest_mode", Type: onnx.AttrString, S: "floor"},
	}
	x.n.Inputs = []string{x.n.Inputs[0], "", name}
	old := x.c.opset
	x.c.opset = max(old, 13)
	defer func() { x.c.opset = old }()
	return inferResize(x)
}

// Einsum is an equation resolved for given operand ranks: each operand's letters (a-z and
// A-Z; an ellipsis expanded into bytes from ellipsisLetter on) and the output's.
type Einsum struct {
	In  [][]byte
	Out []byte
}

// ParseEinsum resolves an Einsum equation for operands of the given ranks.
func ParseEinsum(eq string, ranks []int) (*Einsum, error) {
	eq = strings.ReplaceAll(eq, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(ranks) {
		return nil, fmt.Errorf("equation %q has %d operands; the node has %d", eq, len(terms), len(ranks))
	}
	ell := -1 // ellipsis rank
	e := &Einsum{}
	count := map[byte]int{}
	for i, t := range terms {
		letters, err := einsumTerm(t, ranks[i], &ell)
		if err != nil {
			return nil, fmt.Errorf("equation %q: %v", eq, err)
		}
		if len(letters) != ranks[i] {
			return nil, fmt.Errorf("equation %q: operand %d has %d letters for rank %d", eq, i, len(letters), ranks[i])
		}
		for _, c := range letters {
			count[c]++
		}
		e.In = append(e.In, letters)
	}
	if explicit {
		out, err := einsumTerm(rhs, -1, &ell)
		if err != nil {
			return nil, fmt.Errorf("equation %q: %v", eq, err)
		}
		seen := map[byte]bool{}
		for _, c := range out {
			if seen[c] || count[c] == 0 {
				return nil, fmt.Errorf("equation %q: output letter %q repeated or not in an operand", eq, c)
			}
			seen[c] = true
		}
		e.Out = out
	} else {
		// implicit: the ellipsis letters, then the letters used once in ASCII order
		// (A-Z before a-z, as numpy orders them)
		for i := 0; i < max(ell, 0); i++ {
			e.Out = append(e.Out, ellipsisLetter+byte(i))
		}
		for c := byte('A'); c <= 'z'; c++ {
			if isEinsumLetter(c) && count[c] == 1 {
				e.Out = append(e.Out, c)
			}
		}
	}
	return e, nil
}

// ellipsisLetter is the first of the bytes an ellipsis expands into (outside a-z, A-Z).
const ellipsisLetter = 0x80

func isEinsumLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// einsumTerm returns one term's letters; an ellipsis becomes the bytes ellipsisLetter,
// ellipsisLetter+1, ... (right-aligned, as numpy broadcasts). rank -1: the output (the
// ellipsis rank is known).
func einsumTerm(t string, rank int, ell *int) ([]byte, error) {
	pre, post, has := strings.Cut(t, "...")
	for _, s := range []string{pre, post} {
		for i := 0; i < len(s); i++ {
			if !isEinsumLetter(s[i]) {
				return nil, fmt.Errorf("letter %q not supported (a-z, A-Z and one ellipsis)", s[i])
			}
		}
	}
	if !has {
		return []byte(pre), nil
	}
	n := 0
	if rank >= 0 {
		n = rank - len(pre) - len(post)
		if n < 0 || *ell >= 0 && *ell != n {
			return nil, fmt.Errorf("ellipsis ranks differ (broadcasting ellipses not supported)")
		}
		*ell = n
	} else {
		n = max(*ell, 0)
	}
	if n > 64 {
		return nil, fmt.Errorf("ellipsis of rank %d", n)
	}
	out := []byte(pre)
	for i := 0; i < n; i++ {
		out = append(out, ellipsisLetter+byte(i))
	}
	return append(out, post...), nil
}

func inferEinsum(x *nodeCtx) ([]onnx.ValueInfo, error) {
	eq, err := x.attrString("equation", "")
	if err != nil {
		return nil, err
	}
	if len(x.n.Inputs) > 2 {
		return nil, x.errf("Einsum of %d operands not supported (one or two)", len(x.n.Inputs))
	}
	var ranks []int
	for i := range x.n.Inputs {
		if err := x.floatIn(i); err != nil {
			return nil, err
		}
		ranks = append(ranks, len(x.dims(i)))
	}
	e, err := ParseEinsum(eq, ranks)
	if err != nil {
		return nil, x.errf("%v", err)
	}
	size := map[byte]int64{}
	for i, letters := range e.In {
		for j, c := range letters {
			dv := x.dims(i)[j]
			if s, ok := size[c]; ok && s != dv {
				return nil, x.errf("letter %q has dims %d and %d (broadcasting not supported)", c, s, dv)
			}
			size[c] = dv
		}
	}
	out := make([]int64, len(e.Out))
	for i, c := range e.Out {
		out[i] = size[c]
	}
	return one(out), nil
}
