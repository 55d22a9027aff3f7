package kernel

import (
	"fmt"
	"math"
	"testing"

	"idunno/kernel/onnx"
)

// numpyMatMul is numpy's matmul: 1-D operands are promoted (and the added dim removed from
// the result), batch dims broadcast.
func numpyMatMul(a []float32, ad []int64, b []float32, bd []int64) ([]float32, []int64) {
	a2, b2 := append([]int64(nil), ad...), append([]int64(nil), bd...)
	if len(ad) == 1 {
		a2 = []int64{1, ad[0]}
	}
	if len(bd) == 1 {
		b2 = []int64{bd[0], 1}
	}
	r := max(len(a2), len(b2))
	pad := func(d []int64) []int64 {
		for len(d) < r {
			d = append([]int64{1}, d...)
		}
		return d
	}
	a2, b2 = pad(a2), pad(b2)
	m, k, n := a2[r-2], a2[r-1], b2[r-1]
	batch := make([]int64, r-2)
	for i := range batch {
		batch[i] = max(a2[i], b2[i])
	}
	nb := volume(batch)
	out := make([]float32, nb*m*n)
	idx := make([]int64, len(batch))
	for bi := int64(0); bi < nb; bi++ {
		rem := bi
		for i := len(batch) - 1; i >= 0; i-- {
			idx[i] = rem % batch[i]
			rem /= batch[i]
		}
		var ao, bo int64
		for i := range batch {
			ai, bj := idx[i], idx[i]
			if a2[i] == 1 {
				ai = 0
			}
			if b2[i] == 1 {
				bj = 0
			}
			ao = ao*a2[i] + ai
			bo = bo*b2[i] + bj
		}
		ao *= m * k
		bo *= k * n
		for i := int64(0); i < m; i++ {
			for j := int64(0); j < n; j++ {
				var s float64
				for p := int64(0); p < k; p++ {
					s += float64(a[ao+i*k+p]) * float64(b[bo+p*n+j])
				}
				out[bi*m*n+i*n+j] = float32(s)
			}
		}
	}
	dims := append(batch, m, n)
	if len(ad) == 1 {
		dims = append(dims[:len(dims)-2], n)
	}
	if len(bd) == 1 {
		dims = dims[:len(dims)-1]
	}
	return out, dims
}

// TestBatchedMatMulBroadcast runs MatMul on run-time operands of different ranks whose
// batch dims broadcast (numpy rules, 1-D operands included) against a direct evaluation.
func TestBatchedMatMulBroadcast(t *testing.T) {
	for _, c := range []struct{ a, b []int64 }{
		{[]int64{2, 1, 3, 4}, []int64{5, 4, 6}},
		{[]int64{3, 4}, []int64{2, 4, 5}},
		{[]int64{2, 3, 4}, []int64{4}},
		{[]int64{4}, []int64{2, 4, 5}},
		{[]int64{1, 2, 3, 4}, []int64{3, 1, 4, 2}},
		{[]int64{2, 2, 3, 5, 4}, []int64{2, 1, 1, 4, 3}},
	} {
		t.Run(fmt.Sprintf("%v_x_%v", c.a, c.b), func(t *testing.T) {
			vi := func(name string, d []int64) onnx.ValueInfo {
				return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: d, DimParams: make([]string, len(d)), HasShape: true}
			}
			m := &onnx.Model{IRVersion: 8, Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
				Name:         "mm",
				Nodes:        []*onnx.Node{{Name: "mm", OpType: "MatMul", Inputs: []string{"a", "b"}, Outputs: []string{"y"}, Attrs: map[string]*onnx.Attribute{}}},
				Inputs:       []onnx.ValueInfo{vi("a", c.a), vi("b", c.b)},
				Outputs:      []onnx.ValueInfo{{Name: "y", DType: onnx.Float}},
				Initializers: map[string]*onnx.Tensor{},
			}}
			a, b := sinTensor(1, c.a...), sinTensor(2, c.b...)
			want, wd := numpyMatMul(a.F32, c.a, b.F32, c.b)
			checkMatMulRun(t, m, []*onnx.Tensor{a, b}, want, wd)
		})
	}
}

// TestLinearFusions runs transformer-style Linear layers whose bias Add, Gelu and residual
// Add the graph compiler fuses into the MatMul (bias input, gelu_erf and sum post-ops),
// against a direct evaluation: the residual is a graph input (summed into a copy), an
// intermediate that dies at the sum (summed in place) and one still read afterwards.
func TestLinearFusions(t *testing.T) {
	const B, L, D, H = 2, 5, 8, 6
	vi := func(name string, d ...int64) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: d, DimParams: make([]string, len(d)), HasShape: true}
	}
	node := func(op string, ins []string, out string) *onnx.Node {
		return &onnx.Node{Name: out, OpType: op, Inputs: ins, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
	}
	w1, b1, w2, b2 := sinTensor(1, D, H), sinTensor(2, H), sinTensor(3, H, D), sinTensor(4, 1, D)
	w1.Name, b1.Name, w2.Name, b2.Name = "w1", "b1", "w2", "b2"
	x := sinTensor(5, B, L, D)
	// direct: h = gelu(x W1 + b1); z = relu(x); y = z + (h W2 + b2); y2 = y + z
	h := make([]float64, B*L*H)
	for r := 0; r < B*L; r++ {
		for j := 0; j < H; j++ {
			s := float64(b1.F32[j])
			for k := 0; k < D; k++ {
				s += float64(x.F32[r*D+k]) * float64(w1.F32[k*H+j])
			}
			h[r*H+j] = float64(float32(0.5 * s * (1 + math.Erf(s/math.Sqrt2))))
		}
	}
	lin := make([]float64, B*L*D)
	for r := 0; r < B*L; r++ {
		for j := 0; j < D; j++ {
			s := float64(b2.F32[j])
			for k := 0; k < H; k++ {
				s += h[r*H+k] * float64(w2.F32[k*D+j])
			}
			lin[r*D+j] = s
		}
	}
	for _, c := range []struct {
		name     string
		residual string // "x", "z" (dies at the sum) or "z2" (z read again after)
	}{{"input residual", "x"}, {"in place", "z"}, {"residual read later", "z2"}} {
		t.Run(c.name, func(t *testing.T) {
			res := c.residual
			if res == "z2" {
				res = "z"
			}
			nodes := []*onnx.Node{
				node("Relu", []string{"x"}, "z"),
				node("MatMul", []string{"x", "w1"}, "m1"),
				node("Add", []string{"m1", "b1"}, "a1"),
				node("Gelu", []string{"a1"}, "h"),
				node("MatMul", []string{"h", "w2"}, "m2"),
				node("Add", []string{"b2", "m2"}, "a2"),
				node("Add", []string{res, "a2"}, "y"),
			}
			out := "y"
			if c.residual == "z2" {
				nodes = append(nodes, node("Add", []string{"y", "z"}, "y2"))
				out = "y2"
			}
			m := &onnx.Model{IRVersion: 9, Opset: 20, Opsets: map[string]int64{"": 20}, Graph: &onnx.Graph{
				Name: "linear", Nodes: nodes, Inputs: []onnx.ValueInfo{vi("x", B, L, D)},
				Outputs:      []onnx.ValueInfo{{Name: out, DType: onnx.Float}},
				Initializers: map[string]*onnx.Tensor{"w1": w1, "b1": b1, "w2": w2, "b2": b2},
			}}
			md, err := LoadModel(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer md.Close()
			got, err := md.Run([]*onnx.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			for i := range lin {
				r := float64(x.F32[i])
				if c.residual != "x" {
					r = math.Max(r, 0)
				}
				want := r + lin[i]
				if c.residual == "z2" {
					want += r
				}
				if d := math.Abs(float64(got[0].F32[i]) - want); d > 1e-5*math.Max(1, math.Abs(want)) {
					t.Fatalf("value %d: %v, want %v", i, got[0].F32[i], want)
				}
			}
		})
	}
}

// transposeF32 is numpy's transpose of a row-major tensor.
func transposeF32(x []float32, d []int64, perm []int64) ([]float32, []int64) {
	nd := len(d)
	od := make([]int64, nd)
	for i, p := range perm {
		od[i] = d[p]
	}
	st := make([]int64, nd)
	s := int64(1)
	for i := nd - 1; i >= 0; i-- {
		st[i] = s
		s *= d[i]
	}
	out := make([]float32, len(x))
	idx := make([]int64, nd)
	for n := range out {
		var off int64
		for i := range idx {
			off += idx[i] * st[perm[i]]
		}
		out[n] = x[off]
		for k := nd - 1; k >= 0; k-- {
			if idx[k]++; idx[k] < od[k] {
				break
			}
			idx[k] = 0
		}
	}
	return out, od
}

// TestTransposedMatMul: Transposes that are a batched MatMul's only operands' producers or
// its output's only reader are lowered into the product (permuted strides, or plain copies
// where oneDNN has only its reference kernel); the result must match a direct evaluation.
func TestTransposedMatMul(t *testing.T) {
	for _, c := range []struct {
		name       string
		ad, bd     []int64 // the run-time inputs
		pa, pb, py []int64 // nil: no Transpose there
	}{
		{"attention scores", []int64{1, 6, 2, 4}, []int64{1, 6, 2, 4}, []int64{0, 2, 1, 3}, []int64{0, 2, 3, 1}, nil},
		{"attention context", []int64{1, 2, 6, 6}, []int64{1, 6, 2, 4}, nil, []int64{0, 2, 1, 3}, []int64{0, 2, 1, 3}},
		{"batch dims swapped", []int64{3, 2, 4, 5}, []int64{2, 3, 5, 4}, []int64{1, 0, 2, 3}, nil, []int64{3, 2, 1, 0}},
		{"rank 3, both", []int64{5, 4, 2}, []int64{2, 5, 3}, []int64{2, 1, 0}, []int64{0, 1, 2}, []int64{1, 0, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vi := func(name string, d []int64) onnx.ValueInfo {
				return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: d, DimParams: make([]string, len(d)), HasShape: true}
			}
			perm := func(p []int64) map[string]*onnx.Attribute {
				return map[string]*onnx.Attribute{"perm": {Name: "perm", Type: onnx.AttrInts, Ints: p}}
			}
			var nodes []*onnx.Node
			ina, inb := "a", "b"
			if c.pa != nil {
				nodes = append(nodes, &onnx.Node{Name: "ta", OpType: "Transpose", Inputs: []string{"a"}, Outputs: []string{"at"}, Attrs: perm(c.pa)})
				ina = "at"
			}
			if c.pb != nil {
				nodes = append(nodes, &onnx.Node{Name: "tb", OpType: "Transpose", Inputs: []string{"b"}, Outputs: []string{"bt"}, Attrs: perm(c.pb)})
				inb = "bt"
			}
			out := "y"
			if c.py != nil {
				out = "p"
			}
			nodes = append(nodes, &onnx.Node{Name: "mm", OpType: "MatMul", Inputs: []string{ina, inb}, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}})
			if c.py != nil {
				nodes = append(nodes, &onnx.Node{Name: "ty", OpType: "Transpose", Inputs: []string{"p"}, Outputs: []string{"y"}, Attrs: perm(c.py)})
			}
			m := &onnx.Model{IRVersion: 8, Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
				Name: "tmm", Nodes: nodes, Inputs: []onnx.ValueInfo{vi("a", c.ad), vi("b", c.bd)},
				Outputs: []onnx.ValueInfo{{Name: "y", DType: onnx.Float}}, Initializers: map[string]*onnx.Tensor{},
			}}
			a, b := sinTensor(1, c.ad...), sinTensor(2, c.bd...)
			av, ad, bv, bd := a.F32, c.ad, b.F32, c.bd
			if c.pa != nil {
				av, ad = transposeF32(av, ad, c.pa)
			}
			if c.pb != nil {
				bv, bd = transposeF32(bv, bd, c.pb)
			}
			want, wd := numpyMatMul(av, ad, bv, bd)
			if c.py != nil {
				want, wd = transposeF32(want, wd, c.py)
			}
			checkMatMulRun(t, m, []*onnx.Tensor{a, b}, want, wd)
		})
	}
}

// TestRollAsGather: a roll exported as Slices of one tensor concatenated along the sliced
// axis is lowered as one Gather; every form (two or three pieces, any axis, and a strided
// Slice that stays a Slice) must give numpy's result.
func TestRollAsGather(t *testing.T) {
	dims := []int64{2, 5, 4, 3}
	x := &onnx.Tensor{Name: "x", DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
	for i := range x.F32 {
		x.F32[i] = float32(i)
	}
	i64 := func(name string, v ...int64) *onnx.Tensor {
		return &onnx.Tensor{Name: name, DType: onnx.Int64, Dims: []int64{int64(len(v))}, I64: v}
	}
	type piece struct{ start, end, step int64 }
	for _, c := range []struct {
		name   string
		axis   int64
		pieces []piece
	}{
		{"roll by 3 on axis 1", 1, []piece{{3, 5, 1}, {0, 3, 1}}},
		{"roll by -1 on axis 2", 2, []piece{{3, 4, 1}, {0, 3, 1}}},
		{"three pieces on axis 3", 3, []piece{{2, 3, 1}, {0, 1, 1}, {1, 2, 1}}},
		{"strided piece", 1, []piece{{0, 5, 2}, {1, 5, 2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inits := map[string]*onnx.Tensor{"ax": i64("ax", c.axis)}
			var nodes []*onnx.Node
			var cat []string
			var want [][]int64 // source indices along axis, in output order
			for k, p := range c.pieces {
				s, e, st := fmt.Sprint("s", k), fmt.Sprint("e", k), fmt.Sprint("st", k)
				inits[s], inits[e], inits[st] = i64(s, p.start), i64(e, p.end), i64(st, p.step)
				out := fmt.Sprint("p", k)
				nodes = append(nodes, &onnx.Node{Name: out, OpType: "Slice", Inputs: []string{"x", s, e, "ax", st}, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}})
				cat = append(cat, out)
				var idx []int64
				for j := p.start; j < p.end; j += p.step {
					idx = append(idx, j)
				}
				want = append(want, idx)
			}
			nodes = append(nodes, &onnx.Node{Name: "cat", OpType: "Concat", Inputs: cat, Outputs: []string{"y"},
				Attrs: map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: c.axis}}})
			m := &onnx.Model{IRVersion: 8, Opset: 17, Opsets: map[string]int64{"": 17}, Graph: &onnx.Graph{
				Name: "roll", Nodes: nodes,
				Inputs:  []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: dims, DimParams: make([]string, 4), HasShape: true}},
				Outputs: []onnx.ValueInfo{{Name: "y", DType: onnx.Float}}, Initializers: inits,
			}}
			md, err := LoadModel(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer md.Close()
			got, err := md.Run([]*onnx.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			var src []int64
			for _, w := range want {
				src = append(src, w...)
			}
			od := append([]int64(nil), dims...)
			od[c.axis] = int64(len(src))
			if fmt.Sprint(got[0].Dims) != fmt.Sprint(od) {
				t.Fatalf("dims %v, want %v", got[0].Dims, od)
			}
			st := []int64{60, 12, 3, 1}
			idx := make([]int64, 4)
			for n, v := range got[0].F32 {
				var off int64
				for i := range idx {
					j := idx[i]
					if int64(i) == c.axis {
						j = src[j]
					}
					off += j * st[i]
				}
				if v != x.F32[off] {
					t.Fatalf("element %d (%v): %v, want %v", n, idx, v, x.F32[off])
				}
				for k := 3; k >= 0; k-- {
					if idx[k]++; idx[k] < od[k] {
						break
					}
					idx[k] = 0
				}
			}
		})
	}
}

// sinTensor is a float tensor of dims d holding sin(seed + 0.37 i).
func sinTensor(seed float64, d ...int64) *onnx.Tensor {
	t := &onnx.Tensor{DType: onnx.Float, Dims: d, F32: make([]float32, volume(d))}
	for i := range t.F32 {
		t.F32[i] = float32(math.Sin(seed + float64(i)*0.37))
	}
	return t
}

// checkMatMulRun runs m (2 threads) on ins and checks its first output against want, of
// dims wd, to 1e-5 of each value (at least 1).
func checkMatMulRun(t *testing.T, m *onnx.Model, ins []*onnx.Tensor, want []float32, wd []int64) {
	t.Helper()
	md, err := LoadModel(m, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	out, err := md.Run(ins)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out[0].Dims) != fmt.Sprint(wd) {
		t.Fatalf("dims %v, want %v", out[0].Dims, wd)
	}
	for i := range want {
		if d := math.Abs(float64(out[0].F32[i] - want[i])); d > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("value %d: %v, want %v", i, out[0].F32[i], want[i])
		}
	}
}
