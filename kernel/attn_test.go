package kernel

import (
	"fmt"
	"math"
	"testing"

	"idunno/kernel/onnx"
)

// attnModel is scaled dot-product attention as exporters write it, with its head splits
// and merge: in the "mha" layout (nn.MultiheadAttention, ViT) q, k and v are (L, N, d)
// with N = batch x heads, read as (N, L, d), (N, d, L), (N, L, d) through Transposes and
// the output written back as (L, N, d); in the "bert" layout they are (B, L, H, d), read
// as (B, H, L, d), (B, H, d, L), (B, H, L, d), the output (B, L, H, d), with an optional
// additive mask (B, 1, 1, L); in the "plain" layout q and v are (N, L, d) and k is
// already Kt, (N, d, L), with no Transposes. The compiler fuses it into one attention node whose
// Transposes the lowering absorbs.
func attnModel(layout string, dims []int64, masked bool, scale float32) *onnx.Model {
	vi := func(name string, d ...int64) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: d, DimParams: make([]string, len(d)), HasShape: true}
	}
	node := func(op string, ins []string, out string, perm ...int64) *onnx.Node {
		n := &onnx.Node{Name: out, OpType: op, Inputs: ins, Outputs: []string{out}, Attrs: map[string]*onnx.Attribute{}}
		if perm != nil {
			n.Attrs["perm"] = &onnx.Attribute{Name: "perm", Type: onnx.AttrInts, Ints: perm}
		}
		return n
	}
	pq, pk, py := []int64{1, 0, 2}, []int64{1, 2, 0}, []int64{1, 0, 2}
	if layout == "bert" {
		pq, pk, py = []int64{0, 2, 1, 3}, []int64{0, 2, 3, 1}, []int64{0, 2, 1, 3}
	}
	nodes := []*onnx.Node{
		node("Transpose", []string{"q"}, "qt", pq...),
		node("Transpose", []string{"k"}, "kt", pk...),
		node("Transpose", []string{"v"}, "vt", pq...),
		node("Mul", []string{"qt", "c"}, "qs"),
		node("MatMul", []string{"qs", "kt"}, "s"),
	}
	inputs := []onnx.ValueInfo{vi("q", dims...), vi("k", dims...), vi("v", dims...)}
	if layout == "plain" { // no Transposes: kt given as (N, d, L)
		nodes = []*onnx.Node{node("Mul", []string{"q", "c"}, "qs"), node("MatMul", []string{"qs", "k"}, "s")}
		inputs[1] = vi("k", dims[0], dims[2], dims[1])
	}
	scores := "s"
	if masked {
		nodes = append(nodes, node("Add", []string{"s", "mask"}, "sm"))
		inputs = append(inputs, vi("mask", dims[0], 1, 1, dims[1]))
		scores = "sm"
	}
	sm := node("Softmax", []string{scores}, "p")
	sm.Attrs["axis"] = &onnx.Attribute{Name: "axis", Type: onnx.AttrInt, I: -1}
	if layout == "plain" {
		nodes = append(nodes, sm, node("MatMul", []string{"p", "v"}, "y"))
	} else {
		nodes = append(nodes, sm, node("MatMul", []string{"p", "vt"}, "o"), node("Transpose", []string{"o"}, "y", py...))
	}
	return &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: &onnx.Graph{
		Name: "attention", Inputs: inputs, Nodes: nodes,
		Outputs:      []onnx.ValueInfo{{Name: "y", DType: onnx.Float}},
		Initializers: map[string]*onnx.Tensor{"c": {Name: "c", DType: onnx.Float, Dims: []int64{}, F32: []float32{scale}}},
	}}
}

// attnReference evaluates attnModel in float64.
func attnReference(layout string, dims []int64, ins []*onnx.Tensor, scale float64) []float64 {
	var nb, L, d int64
	var at func(x []float32, b, i, c int64) float64 // element (batch-head b, row i, column c)
	var yidx func(b, i, c int64) int64
	atk := func(x []float32, b, j, c int64) float64 { return at(x, b, j, c) }
	switch layout {
	case "plain":
		nb, L, d = dims[0], dims[1], dims[2]
		at = func(x []float32, b, i, c int64) float64 { return float64(x[(b*L+i)*d+c]) }
		atk = func(x []float32, b, j, c int64) float64 { return float64(x[(b*d+c)*L+j]) }
		yidx = func(b, i, c int64) int64 { return (b*L+i)*d + c }
	case "bert":
		B, H := dims[0], dims[2]
		nb, L, d = B*H, dims[1], dims[3]
		at = func(x []float32, b, i, c int64) float64 { return float64(x[((b/H*L+i)*H+b%H)*d+c]) }
		yidx = func(b, i, c int64) int64 { return ((b/H*L+i)*H+b%H)*d + c }
	default:
		L, nb, d = dims[0], dims[1], dims[2]
		at = func(x []float32, b, i, c int64) float64 { return float64(x[(i*nb+b)*d+c]) }
		yidx = func(b, i, c int64) int64 { return (i*nb+b)*d + c }
	}
	y := make([]float64, nb*L*d)
	s := make([]float64, L)
	for b := int64(0); b < nb; b++ {
		for i := int64(0); i < L; i++ {
			mx := math.Inf(-1)
			for j := int64(0); j < L; j++ {
				var acc float64
				for c := int64(0); c < d; c++ {
					acc += at(ins[0].F32, b, i, c) * atk(ins[1].F32, b, j, c)
				}
				s[j] = acc * scale
				if len(ins) == 4 {
					s[j] += float64(ins[3].F32[b/dims[2]*L+j])
				}
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for c := int64(0); c < d; c++ {
				var acc float64
				for j := int64(0); j < L; j++ {
					acc += s[j] * at(ins[2].F32, b, j, c)
				}
				y[yidx(b, i, c)] = acc / sum
			}
		}
	}
	return y
}

// TestFusedAttention: attn.c's one-step attention (IDK_OP_ATTENTION) on ViT's shapes (L
// 197, 12 heads of 64, batch 1 and 3), the encoder's (L 128, 8 heads of 64, with and
// without a padding mask), odd lengths (1, 7, 50, 257) and head sizes not a multiple of
// 16 (V and the output through packed copies), a Kt stored (d, L): on 1 and 2 threads, the output
// is within 2e-6 of the largest of a float64 evaluation (the old three-step path,
// IDK_ATTN_FUSED=0, is held to the same bound), the plan has two steps fewer than the
// old one (the scores product and the softmax: the switch took effect), a second run
// gives the same bytes and so does the other thread count. The plain-C blocks a CPU
// without AVX-512 runs (IDK_ATTN_AVX512=0) are held to the same bound.
func TestFusedAttention(t *testing.T) {
	cases := []struct {
		layout string
		dims   []int64
		masked bool
	}{
		{"mha", []int64{197, 12, 64}, false},
		{"mha", []int64{197, 36, 64}, false},
		{"bert", []int64{1, 128, 8, 64}, false},
		{"bert", []int64{2, 128, 8, 64}, true},
		{"mha", []int64{1, 3, 16}, false},
		{"mha", []int64{7, 2, 8}, false},
		{"bert", []int64{2, 50, 3, 24}, true},
		{"mha", []int64{257, 2, 40}, false},
		{"plain", []int64{3, 33, 32}, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s%v/mask=%v", c.layout, c.dims, c.masked), func(t *testing.T) {
			scale := float32(1 / math.Sqrt(float64(c.dims[len(c.dims)-1])))
			kd := c.dims
			if c.layout == "plain" {
				kd = []int64{c.dims[0], c.dims[2], c.dims[1]}
			}
			ins := []*onnx.Tensor{sinTensor(1, c.dims...), sinTensor(2, kd...), sinTensor(3, c.dims...)}
			for _, x := range ins {
				for i := range x.F32 { // scores of a few units: a softmax neither flat nor one-hot
					x.F32[i] *= 1.5
				}
			}
			if c.masked {
				B, L := c.dims[0], c.dims[1]
				m := &onnx.Tensor{DType: onnx.Float, Dims: []int64{B, 1, 1, L}, F32: make([]float32, B*L)}
				for b := int64(0); b < B; b++ {
					for j := L - 5 - 9*b; j < L; j++ { // padding: the last keys masked out
						m.F32[b*L+j] = -10000
					}
				}
				ins = append(ins, m)
			}
			want := attnReference(c.layout, c.dims, ins, float64(scale))
			var top float64
			for _, v := range want {
				top = math.Max(top, math.Abs(v))
			}
			run := func(threads int) ([]float32, int32) {
				md, err := LoadModel(attnModel(c.layout, c.dims, c.masked, scale), Options{Threads: threads})
				if err != nil {
					t.Fatal(err)
				}
				defer md.Close()
				out, err := md.Run(ins)
				if err != nil {
					t.Fatal(err)
				}
				again, err := md.Run(ins)
				if err != nil {
					t.Fatal(err)
				}
				if !sameBits(out[0].F32, again[0].F32) {
					t.Errorf("%d threads: a second run gives other bytes", threads)
				}
				return out[0].F32, planSteps(t, md)
			}
			check := func(name string, got []float32) {
				var diff float64
				for i, v := range got {
					diff = math.Max(diff, math.Abs(float64(v)-want[i]))
				}
				t.Logf("%s: max |got - float64| = %.3g (largest %.3g)", name, diff, top)
				if !(diff <= 2e-6*top) {
					t.Errorf("%s: off the float64 evaluation by %.3g (largest %.3g)", name, diff, top)
				}
			}
			one, steps := run(1)
			two, _ := run(2)
			check("fused, 1 thread", one)
			check("fused, 2 threads", two)
			if !sameBits(one, two) {
				t.Errorf("1 and 2 threads give other bytes")
			}
			t.Setenv("IDK_ATTN_AVX512", "0") // the plain-C blocks of a CPU without AVX-512
			plain, plainSteps := run(2)
			check("fused, plain C, 2 threads", plain)
			if plainSteps != steps {
				t.Errorf("plain-C fused plan: %d steps, the AVX-512 one %d", plainSteps, steps)
			}
			t.Setenv(AttnFusedEnv, "0")
			old, oldSteps := run(2)
			check("three steps", old)
			if steps != oldSteps-2 {
				t.Errorf("fused plan: %d steps, the three-step one %d: want 2 fewer", steps, oldSteps)
			}
		})
	}
}
