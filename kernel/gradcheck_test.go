package kernel

// gradcheck_test.go: per-op gradient checks of training plans against central finite
// differences of a float64 reference (gradref_test.go), optimizer and batch-statistics
// checks against PyTorch's formulas, determinism, and bad input.
//
// Tolerances. The kernel computes in float32, the reference in float64. Central
// differences of the float64 loss with h = 1e-6 are exact to about 1e-9 (truncation
// ~h^2, rounding ~1e-16*|loss|/h) away from kinks; where a kink (Relu, Clip, a max) lies
// within h of the point, the one-sided difference on the point's side is used instead.
// What remains is float32 rounding in the kernel: about 1e-7 relative per operation,
// summed over reductions of a few hundred terms, so a few 1e-6 of a tensor's largest
// gradient. gradTol (relative to each tensor's largest finite-difference gradient, but at
// least 1% of the model's largest, so a tensor whose true gradient is zero is judged
// against the model's scale) is 1e-4: about 7 times the worst error measured (1.4e-5; the
// test logs it), and far below what a wrong formula, a missed gradient contribution or a
// misplaced window gives (1e-2 to 1).

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

const (
	gradTol   = 1e-4 // gradient error / the tensor's largest gradient
	lossTol   = 1e-5 // loss error / max(1, |loss|)
	fdStep    = 1e-6 // finite-difference step in float64
	gradFloor = 1e-2 // the least gradient scale of a tensor, relative to the model's largest
	fdMax     = 64   // elements checked by finite differences per tensor (all, if fewer)
)

type gradCase struct {
	name    string
	in      []int64 // input dims without the batch
	batch   int
	classes int64
	body    func(b *netBuilder) string // returns the logits
}

// fdSamples lowers the elements differenced per tensor for cases too big for fdMax.
var fdSamples = map[string]int{"large_parallel_loops": 6}

// expectedParams lists the initializers a training plan must train, in the order its flat
// arrays hold them (node order, then input order): the weights and biases of Conv, Gemm
// and MatMul and the scale and bias of BatchNormalization.
func expectedParams(m *onnx.Model) []string {
	var out []string
	seen := map[string]bool{}
	add := func(n *onnx.Node, slots ...int) {
		for _, i := range slots {
			if i < len(n.Inputs) && n.Inputs[i] != "" && !seen[n.Inputs[i]] {
				seen[n.Inputs[i]] = true
				out = append(out, n.Inputs[i])
			}
		}
	}
	for _, n := range m.Graph.Nodes {
		switch n.OpType {
		case "Conv", "Gemm":
			add(n, 1, 2)
		case "MatMul":
			add(n, 1)
		case "BatchNormalization":
			add(n, 1, 2)
		}
	}
	return out
}

// fdIndices picks the elements of a tensor to difference: all of a small one, else fdMax
// spread over it, always with the kernel's largest gradient.
func fdIndices(g []float32, fdMax int) []int {
	if len(g) <= fdMax {
		idx := make([]int, len(g))
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	best := 0
	for i, v := range g {
		if math.Abs(float64(v)) > math.Abs(float64(g[best])) {
			best = i
		}
	}
	idx := []int{best}
	for k := 0; k < fdMax-1; k++ {
		i := (k*len(g) + len(g)/3) / (fdMax - 1) // a stride that is not a multiple of small dims
		if i != best {
			idx = append(idx, i%len(g))
		}
	}
	return idx
}

// gradReport is the worst relative errors of one check.
type gradReport struct {
	loss, grad float64
	where      string
	kinks      int // elements within fdStep of a kink, judged by one-sided differences
}

// checkGradients runs one training step of m in the kernel and compares its loss, batch
// statistics and every parameter's gradient with the float64 reference.
func checkGradients(t *testing.T, m *onnx.Model, batch, threads int, seed uint64, samples int) gradReport {
	t.Helper()
	tr, err := NewTrainer(m, batch, Options{Threads: threads})
	if err != nil {
		t.Fatalf("NewTrainer: %v", err)
	}
	defer tr.Close()
	var names []string
	for _, p := range tr.Params() {
		names = append(names, p.Name)
	}
	if want := expectedParams(m); !slices.Equal(names, want) {
		t.Fatalf("trainer parameters %v, want %v in this order", names, want)
	}
	dims := tr.Input().Dims
	x, labels := randBatch(seed, batch, dims, tr.Classes())
	scale := float32(1) / float32(batch)
	params, state := getArray(t, tr, Params), getArray(t, tr, State)
	loss, correct, err := tr.Run(x, labels, scale, seed+100)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	grads := getArray(t, tr, Grads)
	// a second Run of the same batch gives the same bits (gradients are overwritten, not
	// accumulated across runs) and neither run touches parameters or statistics
	loss2, _, err := tr.Run(x, labels, scale, seed+100)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if math.Float64bits(loss2) != math.Float64bits(loss) || !sameBits(getArray(t, tr, Grads), grads) {
		t.Errorf("a second Run of the same batch gives loss %v (first %v) or different gradients", loss2, loss)
	}
	if !sameBits(getArray(t, tr, Params), params) || !sameBits(getArray(t, tr, State), state) {
		t.Errorf("Run changed parameters or running statistics")
	}

	ref := newRefNet(m)
	if err := ref.setDropoutOps(dims); err != nil {
		t.Fatal(err)
	}
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	refLoss := func() float64 {
		l, err := ref.loss(x64, dims, labels, seed+100)
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		return l
	}
	want := refLoss()
	rep := gradReport{loss: math.Abs(loss-want) / math.Max(1, math.Abs(want))}
	if wantCorrect := ref.correct(labels); correct != wantCorrect {
		t.Errorf("%d correct top-1 answers, reference %d", correct, wantCorrect)
	}
	if rep.loss > lossTol {
		t.Errorf("loss %.9g, reference %.9g (relative error %.2g > %.0g)", loss, want, rep.loss, lossTol)
	}
	checkBatchStats(t, tr, ref)

	// finite differences first: every tensor's error is judged against its own largest
	// gradient, but no less than gradFloor of the model's largest (a tensor whose true
	// gradient is zero, like a Conv bias before BatchNormalization, then shows float32
	// noise, not an error)
	type fdElem struct {
		i                   int
		central, fore, back float64
	}
	fds := make([][]fdElem, len(tr.Params()))
	maxRef := make([]float64, len(tr.Params()))
	var modelMax float64
	for k, p := range tr.Params() {
		g := grads[p.Offset : p.Offset+p.Len()]
		w := ref.params[p.Name]
		for _, i := range fdIndices(g, samples) {
			orig := w[i]
			w[i] = orig + fdStep
			lp := refLoss()
			w[i] = orig - fdStep
			lm := refLoss()
			w[i] = orig
			s := float64(scale)
			e := fdElem{i, s * (lp - lm) / (2 * fdStep), s * (lp - want) / fdStep, s * (want - lm) / fdStep}
			fds[k] = append(fds[k], e)
			maxRef[k] = math.Max(maxRef[k], math.Abs(e.central))
		}
		modelMax = math.Max(modelMax, maxRef[k])
	}
	for k, p := range tr.Params() {
		g := grads[p.Offset : p.Offset+p.Len()]
		norm := math.Max(maxRef[k], gradFloor*modelMax)
		var maxErr float64
		var worst fdElem
		for _, e := range fds[k] {
			// Central differences, unless a kink (Relu, Clip, a max) lies within fdStep of
			// the point: then the one-sided difference on the point's side is the
			// derivative the kernel must give, so the closest estimate is judged.
			err := math.Abs(float64(g[e.i]) - e.central)
			if kink := math.Abs(e.fore-e.back) > gradTol*norm; kink {
				rep.kinks++
				err = math.Min(math.Abs(float64(g[e.i])-e.fore), math.Abs(float64(g[e.i])-e.back))
			}
			if err >= maxErr {
				maxErr, worst = err, e
			}
		}
		rel := maxErr / norm
		if rel > rep.grad {
			rep.grad, rep.where = rel, fmt.Sprintf("%s[%d]", p.Name, worst.i)
		}
		if rel > gradTol {
			t.Errorf("%s %v: gradient [%d] is %.7g, finite differences %.7g (one-sided %.7g, %.7g): error %.2g of %.3g; tolerance %.0g",
				p.Name, p.Dims, worst.i, g[worst.i], worst.central, worst.back, worst.fore, rel, norm, gradTol)
		}
	}
	return rep
}

// checkBatchStats compares the plan's BatchStats (per BatchNormalization in node order:
// the batch mean, then the unbiased variance) with the reference's last forward.
func checkBatchStats(t *testing.T, tr *Trainer, ref *refNet) {
	t.Helper()
	got := make([]float32, tr.Len(BatchStats))
	if err := tr.Get(BatchStats, got); err != nil {
		t.Fatal(err)
	}
	var want []float64
	for _, n := range ref.m.Graph.Nodes {
		if n.OpType != "BatchNormalization" {
			continue
		}
		st := ref.bnStats[n.Name]
		mean, biased := st[0], st[1]
		cnt := float64(ref.bnCounts[n.Name])
		want = append(want, mean...)
		for _, v := range biased { // the unbiased variance
			want = append(want, v*cnt/(cnt-1))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("BatchStats has %d values, reference %d", len(got), len(want))
	}
	for i := range got {
		if e := math.Abs(float64(got[i])-want[i]) / math.Max(1, math.Abs(want[i])); e > 1e-5 {
			t.Errorf("BatchStats[%d] = %.7g, reference %.7g", i, got[i], want[i])
		}
	}
}

// gradCases are the trainable ops and attribute combinations the kernel supports, each in
// a small model that ends in (batch, classes) logits. Ops after the first layer are checked
// through the first layer's gradients (which need their input gradients right).
var gradCases = []gradCase{
	// Conv
	{"conv/pads1_bias", []int64{3, 6, 6}, 2, 3, func(b *netBuilder) string {
		return b.head(b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1)), 3)
	}},
	{"conv/stride2_nobias", []int64{3, 7, 7}, 3, 3, func(b *netBuilder) string {
		return b.head(b.conv("input", 4, 3, 3, false, aInts("strides", 2, 2)), 3)
	}},
	{"conv/asymmetric_pads_strides_kernel", []int64{2, 7, 6}, 2, 3, func(b *netBuilder) string {
		return b.head(b.conv("input", 3, 2, 3, true, aInts("pads", 0, 1, 2, 0), aInts("strides", 1, 2)), 3)
	}},
	{"conv/dilations", []int64{2, 8, 8}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 3, 3, 3, true, aInts("dilations", 2, 1), aInts("pads", 2, 1, 1, 0))
		return b.head(x, 3)
	}},
	{"conv/second_layer", []int64{2, 6, 6}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		x = b.conv(x, 3, 3, 3, false, aInts("strides", 2, 2), aInts("pads", 1, 0, 0, 1))
		return b.head(x, 3)
	}},
	{"conv/groups", []int64{4, 6, 6}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 6, 3, 3, true, aInts("pads", 1, 1, 1, 1), aInt("group", 2))
		return b.head(b.conv(x, 4, 1, 1, true, aInt("group", 2)), 3)
	}},
	{"conv/depthwise", []int64{3, 6, 6}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 6, 1, 1, false)
		x = b.conv(x, 6, 3, 3, true, aInts("pads", 1, 1, 1, 1), aInt("group", 6), aInts("strides", 2, 2))
		return b.head(x, 3)
	}},
	{"conv/blocked_17_channels", []int64{3, 5, 5}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 17, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		x = b.conv(x, 16, 3, 3, true, aInts("strides", 2, 2))
		return b.head(x, 3)
	}},
	{"conv/blocked_groups", []int64{3, 5, 5}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 16, 1, 1, true)
		x = b.conv(x, 32, 3, 3, true, aInts("pads", 1, 1, 1, 1), aInt("group", 2))
		x = b.conv(x, 32, 3, 3, false, aInt("group", 32))
		return b.head(x, 3)
	}},

	// activations after a Conv (so the activation's input gradient reaches the Conv's weights)
	{"act/relu", []int64{2, 5, 5}, 2, 3, actCase("Relu")},
	{"act/leakyrelu", []int64{2, 5, 5}, 2, 3, actCase("LeakyRelu", aFloat("alpha", 0.15))},
	{"act/sigmoid", []int64{2, 5, 5}, 2, 3, actCase("Sigmoid")},
	{"act/tanh", []int64{2, 5, 5}, 2, 3, actCase("Tanh")},
	{"act/elu", []int64{2, 5, 5}, 2, 3, actCase("Elu", aFloat("alpha", 0.7))},
	{"act/hardswish", []int64{2, 5, 5}, 2, 3, func(b *netBuilder) string {
		// inputs spread over [-6, 6] to cross both of HardSwish's bends
		x := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		x = b.node("HardSwish", []string{b.node("Add", []string{x, x})})
		return b.head(x, 3)
	}},
	{"act/clip_min_max", []int64{2, 5, 5}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		return b.head(b.node("Clip", []string{x, b.scalar(-0.5), b.scalar(0.7)}), 3)
	}},
	{"act/clip_min_only", []int64{2, 5, 5}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		return b.head(b.node("Clip", []string{x, b.scalar(-0.3)}), 3)
	}},
	{"act/relu_blocked", []int64{3, 4, 4}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 17, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		return b.head(b.node("Relu", []string{x}), 3)
	}},

	// pooling
	{"maxpool/k2s2", []int64{2, 6, 6}, 2, 3, poolCase("MaxPool", aInts("kernel_shape", 2, 2), aInts("strides", 2, 2))},
	{"maxpool/k3s2_pads", []int64{2, 7, 7}, 2, 3, poolCase("MaxPool", aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1))},
	{"maxpool/asymmetric_pads", []int64{2, 6, 6}, 2, 3, poolCase("MaxPool", aInts("kernel_shape", 3, 2), aInts("strides", 1, 2), aInts("pads", 1, 0, 0, 1))},
	{"maxpool/dilations", []int64{2, 7, 7}, 2, 3, poolCase("MaxPool", aInts("kernel_shape", 2, 3), aInts("dilations", 2, 2), aInts("strides", 1, 2))},
	{"maxpool/ceil_mode", []int64{2, 8, 8}, 2, 3, poolCase("MaxPool", aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInt("ceil_mode", 1))},
	{"maxpool/ceil_mode_pads", []int64{2, 7, 6}, 2, 3, poolCase("MaxPool", aInts("kernel_shape", 2, 2), aInts("strides", 2, 2), aInts("pads", 1, 1, 0, 0), aInt("ceil_mode", 1))},
	{"avgpool/exclude_pad", []int64{2, 7, 7}, 2, 3, poolCase("AveragePool", aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1))},
	{"avgpool/include_pad", []int64{2, 7, 7}, 2, 3, poolCase("AveragePool", aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1), aInt("count_include_pad", 1))},
	{"avgpool/include_pad_asymmetric", []int64{2, 6, 6}, 2, 3, poolCase("AveragePool", aInts("kernel_shape", 2, 3), aInts("strides", 2, 1), aInts("pads", 0, 2, 1, 0), aInt("count_include_pad", 1))},
	{"avgpool/exclude_pad_ceil_mode", []int64{2, 8, 8}, 2, 3, poolCase("AveragePool", aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1), aInt("ceil_mode", 1))},
	{"avgpool/no_pads", []int64{2, 6, 6}, 2, 3, poolCase("AveragePool", aInts("kernel_shape", 2, 2), aInts("strides", 2, 2))},
	{"maxpool/blocked", []int64{3, 6, 6}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 17, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		return b.head(b.node("MaxPool", []string{x}, aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1)), 3)
	}},
	{"globalaveragepool", []int64{3, 5, 5}, 3, 3, func(b *netBuilder) string {
		x := b.conv("input", 6, 3, 3, true)
		return b.head(b.node("GlobalAveragePool", []string{x}), 3)
	}},
	{"globalaveragepool/blocked", []int64{3, 5, 5}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 20, 3, 3, true)
		return b.head(b.node("GlobalAveragePool", []string{x}), 3)
	}},

	// batch normalization (training statistics)
	{"batchnorm", []int64{2, 5, 5}, 3, 3, func(b *netBuilder) string {
		x := b.bn(b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1)), 1e-5, 0.9)
		return b.head(b.node("Relu", []string{x}), 3)
	}},
	{"batchnorm/eps_blocked", []int64{3, 4, 4}, 2, 3, func(b *netBuilder) string {
		x := b.bn(b.conv("input", 17, 3, 3, false, aInts("pads", 1, 1, 1, 1)), 1e-3, 0.8)
		return b.head(b.node("Relu", []string{x}), 3)
	}},
	{"batchnorm/two_in_a_row_of_convs", []int64{2, 5, 5}, 4, 3, func(b *netBuilder) string {
		x := b.node("Relu", []string{b.bn(b.conv("input", 4, 3, 3, false), 1e-5, 0.9)})
		x = b.node("Relu", []string{b.bn(b.conv(x, 5, 2, 2, false), 1e-5, 0.9)})
		return b.head(x, 3)
	}},
	{"batchnorm/on_the_input", []int64{3, 4, 4}, 3, 3, func(b *netBuilder) string {
		x := b.bn("input", 1e-5, 0.9)
		return b.head(b.node("Relu", []string{b.conv(x, 4, 3, 3, true)}), 3)
	}},
	{"batchnorm/2d", []int64{6}, 4, 3, func(b *netBuilder) string {
		x := b.bn(b.gemm("input", 5, true, true), 1e-5, 0.9)
		return b.gemm(b.node("Tanh", []string{x}), 3, true, true)
	}},

	// Add (residual fan-out: c1 is read by Relu and by Add)
	{"add/residual", []int64{3, 5, 5}, 2, 3, func(b *netBuilder) string {
		c1 := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		c2 := b.conv(b.node("Relu", []string{c1}), 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		return b.head(b.node("Add", []string{c2, c1}), 3)
	}},
	{"add/residual_blocked_bn", []int64{3, 4, 4}, 2, 3, func(b *netBuilder) string {
		c1 := b.node("Relu", []string{b.conv("input", 16, 3, 3, true, aInts("pads", 1, 1, 1, 1))})
		c2 := b.bn(b.conv(c1, 16, 3, 3, false, aInts("pads", 1, 1, 1, 1)), 1e-5, 0.9)
		return b.head(b.node("Relu", []string{b.node("Add", []string{c1, c2})}), 3)
	}},
	{"add/same_value_twice", []int64{2, 4, 4}, 2, 3, func(b *netBuilder) string {
		c1 := b.conv("input", 3, 3, 3, true)
		return b.head(b.node("Add", []string{c1, c1}), 3)
	}},

	// shapes
	{"flatten_gemm_transB0", []int64{2, 4, 4}, 2, 3, func(b *netBuilder) string {
		x := b.node("Flatten", []string{b.conv("input", 3, 3, 3, true)}, aInt("axis", 1))
		return b.gemm(x, 3, false, true)
	}},
	{"reshape", []int64{2, 5, 5}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 4, 3, 3, true)
		x = b.node("Reshape", []string{x, b.int64s(0, 4, -1)})
		x = b.node("Reshape", []string{x, b.int64s(0, -1)})
		return b.gemm(x, 3, true, true)
	}},
	{"concat/axis1", []int64{3, 5, 5}, 2, 3, func(b *netBuilder) string {
		a := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		c := b.conv("input", 5, 1, 1, false)
		x := b.node("Concat", []string{a, c, a}, aInt("axis", 1))
		return b.head(b.conv(x, 3, 3, 3, true), 3)
	}},
	{"concat/blocked", []int64{3, 4, 4}, 2, 3, func(b *netBuilder) string {
		a := b.conv("input", 8, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		c := b.node("Relu", []string{b.conv("input", 9, 3, 3, true, aInts("pads", 1, 1, 1, 1))})
		x := b.node("Concat", []string{c, a}, aInt("axis", 1))
		return b.head(b.conv(x, 16, 3, 3, true), 3)
	}},

	// Dropout (the mask is the kernel's documented counter-based one)
	{"dropout/after_conv", []int64{2, 5, 5}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		return b.head(b.node("Dropout", []string{x}, aFloat("ratio", 0.3)), 3)
	}},
	{"dropout/ratio_input_two_masks", []int64{2, 5, 5}, 3, 3, func(b *netBuilder) string {
		x := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		x = b.node("Dropout", []string{b.node("Relu", []string{x}), b.scalar(0.25)})
		x = b.node("Flatten", []string{x}, aInt("axis", 1))
		x = b.node("Dropout", []string{b.gemm(x, 6, true, true)}) // default ratio 0.5
		return b.gemm(x, 3, false, false)
	}},
	{"dropout/blocked", []int64{3, 4, 4}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 17, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		x = b.node("Dropout", []string{x}, aFloat("ratio", 0.4))
		return b.head(b.conv(x, 4, 3, 3, true), 3)
	}},

	// Gemm and MatMul
	{"gemm/transB_bias_variants", []int64{7}, 3, 4, func(b *netBuilder) string {
		x := b.node("Relu", []string{b.gemm("input", 6, false, false)})
		x = b.node("Sigmoid", []string{b.gemm(x, 5, true, false)})
		return b.gemm(x, 4, false, true)
	}},
	{"gemm/bias_1xN", []int64{5}, 2, 3, func(b *netBuilder) string {
		x := b.gemm("input", 4, true, false)
		n := b.g.Nodes[len(b.g.Nodes)-1]
		n.Inputs = append(n.Inputs, b.param("b", 0, 0.3, 1, 4))
		return b.gemm(b.node("Tanh", []string{x}), 3, true, true)
	}},
	{"matmul", []int64{2, 3, 3}, 2, 3, func(b *netBuilder) string {
		x := b.node("Flatten", []string{b.conv("input", 2, 2, 2, true)}, aInt("axis", 1))
		x = b.node("MatMul", []string{x, b.param("w", 0, 0.5, 8, 5)})
		return b.node("MatMul", []string{b.node("Elu", []string{x}), b.param("w", 0, 0.5, 5, 3)})
	}},
	{"conv1d_pools_bn", []int64{3, 11}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 4, 0, 3, true, aInts("pads", 2, 1), aInts("strides", 1), aInts("dilations", 2))
		x = b.node("Relu", []string{b.bn(x, 1e-5, 0.9)})
		x = b.node("MaxPool", []string{x}, aInts("kernel_shape", 3), aInts("strides", 2), aInts("pads", 1, 0), aInt("ceil_mode", 1))
		x = b.conv(x, 4, 0, 2, false, aInt("group", 2))
		x = b.node("AveragePool", []string{x}, aInts("kernel_shape", 2), aInts("pads", 1, 1), aInt("count_include_pad", 1))
		return b.head(x, 3)
	}},
	{"concat/axes_2_and_3", []int64{2, 4, 4}, 2, 3, func(b *netBuilder) string {
		a := b.conv("input", 3, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		c := b.conv("input", 3, 1, 1, true)
		x := b.node("Concat", []string{a, c}, aInt("axis", 2))
		x = b.node("Concat", []string{x, b.node("Tanh", []string{x})}, aInt("axis", -1))
		return b.head(b.conv(x, 2, 3, 3, false, aInts("strides", 2, 2)), 3)
	}},
	{"large_parallel_loops", []int64{2, 33, 33}, 4, 3, func(b *netBuilder) string {
		// 69,696 activations: more than the 65,536 above which the kernel's own loops
		// (gradient accumulation of a fan-out, dropout masks) run in parallel
		c1 := b.conv("input", 16, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		c2 := b.conv(b.node("Relu", []string{c1}), 16, 3, 3, true, aInts("pads", 1, 1, 1, 1), aInt("group", 16)) // depthwise: a cheap reference
		x := b.node("Dropout", []string{b.node("Add", []string{c1, c2})}, aFloat("ratio", 0.5))
		return b.head(b.node("GlobalAveragePool", []string{x}), 3)
	}},
	{"input_read_by_add_and_concat", []int64{3, 4, 4}, 2, 3, func(b *netBuilder) string {
		// the input needs no gradient: Add and Concat must send theirs only to the Conv
		x := b.node("Add", []string{"input", b.conv("input", 3, 3, 3, true, aInts("pads", 1, 1, 1, 1))})
		x = b.node("Concat", []string{"input", x}, aInt("axis", 1))
		return b.head(b.conv(x, 3, 3, 3, false), 3)
	}},
	{"pool_first", []int64{2, 7, 7}, 2, 3, func(b *netBuilder) string {
		x := b.node("MaxPool", []string{"input"}, aInts("kernel_shape", 2, 2), aInts("strides", 2, 2))
		return b.head(b.node("Sigmoid", []string{b.conv(x, 3, 2, 2, true)}), 3)
	}},
	{"blocked_padding/sigmoid_bn_avgpool", []int64{3, 6, 6}, 2, 3, func(b *netBuilder) string {
		// 17 channels in 16-blocks: the padded lanes of sigmoid(0) = 0.5 must not leak
		x := b.node("Sigmoid", []string{b.conv("input", 17, 3, 3, true, aInts("pads", 1, 1, 1, 1))})
		x = b.bn(x, 1e-5, 0.9)
		x = b.node("AveragePool", []string{x}, aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1), aInt("ceil_mode", 1))
		return b.head(b.conv(x, 3, 1, 1, true), 3)
	}},
	{"shared_weight", []int64{2, 5, 5}, 2, 3, func(b *netBuilder) string {
		// one weight read by two Convs: its gradient is the sum of both contributions
		a := b.conv("input", 2, 3, 3, false, aInts("pads", 1, 1, 1, 1))
		w := b.g.Nodes[len(b.g.Nodes)-1].Inputs[1]
		c := b.node("Conv", []string{b.node("Relu", []string{a}), w}, aInts("kernel_shape", 3, 3), aInts("strides", 2, 2))
		return b.head(c, 3)
	}},
	{"identity_squeeze_unsqueeze", []int64{3, 4, 4}, 2, 3, func(b *netBuilder) string {
		x := b.node("Identity", []string{b.conv("input", 5, 3, 3, true)})
		x = b.node("Squeeze", []string{b.node("GlobalAveragePool", []string{x}), b.int64s(2, 3)})
		x = b.node("Unsqueeze", []string{b.gemm(x, 4, true, true), b.int64s(-1)})
		x = b.node("Flatten", []string{b.node("Tanh", []string{x})}, aInt("axis", 1))
		return b.gemm(x, 3, false, true)
	}},
	{"constant_shape", []int64{2, 4, 4}, 2, 3, func(b *netBuilder) string {
		x := b.conv("input", 3, 3, 3, true)
		shape := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{2}, I64: []int64{0, -1}}
		c := b.node("Constant", nil, &onnx.Attribute{Name: "value", Type: onnx.AttrTensor, T: shape})
		return b.gemm(b.node("Reshape", []string{x, c}), 3, true, true)
	}},
	{"logsoftmax_output_left_out", []int64{2, 4, 4}, 2, 3, func(b *netBuilder) string {
		return b.node("LogSoftmax", []string{b.head(b.conv("input", 3, 3, 3, true), 3)}, aInt("axis", 1))
	}},
	{"softmax_output_left_out", []int64{2, 4, 4}, 2, 3, func(b *netBuilder) string {
		return b.node("Softmax", []string{b.head(b.conv("input", 3, 3, 3, true), 3)}, aInt("axis", 1))
	}},
}

func actCase(op string, attrs ...*onnx.Attribute) func(b *netBuilder) string {
	return func(b *netBuilder) string {
		x := b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		x = b.node(op, []string{x}, attrs...)
		return b.head(b.conv(x, 3, 3, 3, false), 3)
	}
}

func poolCase(op string, attrs ...*onnx.Attribute) func(b *netBuilder) string {
	return func(b *netBuilder) string {
		x := b.conv("input", 3, 3, 3, true, aInts("pads", 1, 1, 1, 1))
		return b.head(b.node(op, []string{x}, attrs...), 3)
	}
}

func buildCase(t *testing.T, c gradCase, seed uint64) *onnx.Model {
	t.Helper()
	b := newNet(t, seed, append([]int64{int64(c.batch)}, c.in...)...)
	return b.finish(c.body(b))
}

// TestGradCheckOps compares loss and gradients of every trainable op and attribute
// combination with finite differences of the float64 reference.
func TestGradCheckOps(t *testing.T) {
	var worst gradReport
	worstCase := ""
	for i, c := range gradCases {
		t.Run(c.name, func(t *testing.T) {
			m := buildCase(t, c, uint64(i+1))
			if d := m.Graph.Outputs[0].Dims; d[len(d)-1] != c.classes {
				t.Fatalf("the case's model has %d classes, the table says %d", d[len(d)-1], c.classes)
			}
			threads := 1 + i%2
			if c.name == "large_parallel_loops" {
				threads = 2
			}
			samples := fdSamples[c.name]
			if samples == 0 {
				samples = fdMax
			}
			r := checkGradients(t, m, c.batch, threads, uint64(i+11), samples)
			t.Logf("loss error %.2g, worst gradient error %.2g of the largest (%s), %d elements at kinks", r.loss, r.grad, r.where, r.kinks)
			if r.grad > worst.grad {
				worst, worstCase = r, c.name
			}
		})
	}
	t.Logf("worst gradient error over %d cases: %.2g (%s, %s); tolerance %.0g", len(gradCases), worst.grad, worstCase, worst.where, gradTol)
}

// ---- optimizers and running statistics ----

// TestGradOptimizers runs three optimizer steps in the kernel, each on the gradients of a
// fresh Run, and compares the weights and the optimizer state after each step with
// PyTorch's update rules in float64 (fed the kernel's gradients, so only the update is
// judged).
func TestGradOptimizers(t *testing.T) {
	c := gradCases[slices.IndexFunc(gradCases, func(c gradCase) bool { return c.name == "batchnorm" })]
	m := buildCase(t, c, 5)
	for _, tc := range []struct {
		o  Optimizer
		lr float64
	}{
		{Optimizer{Kind: "sgd"}, 0.1},
		{Optimizer{Kind: "sgd", WeightDecay: 0.01}, 0.1},
		{Optimizer{Kind: "sgd", Momentum: 0.9}, 0.05},
		{Optimizer{Kind: "sgd", Momentum: 0.8, WeightDecay: 5e-3}, 0.05},
		{Optimizer{Kind: "sgd", Momentum: 0.9, Nesterov: true}, 0.05},
		{Optimizer{Kind: "sgd", Momentum: 0.9, Nesterov: true, WeightDecay: 1e-2}, 0.05},
		{Optimizer{Kind: "adam"}, 1e-3},
		{Optimizer{Kind: "adam", WeightDecay: 0.01}, 1e-2},
		{Optimizer{Kind: "adam", Beta1: 0.8, Beta2: 0.99, Eps: 1e-6}, 1e-2},
		{Optimizer{Kind: "adamw", WeightDecay: 0.05}, 1e-2},
		{Optimizer{Kind: "adamw", WeightDecay: 0.1, Beta1: 0.5, Beta2: 0.9}, 3e-3},
	} {
		name := fmt.Sprintf("%s_m%g_n%v_wd%g_b%g,%g", tc.o.Kind, tc.o.Momentum, tc.o.Nesterov, tc.o.WeightDecay, tc.o.Beta1, tc.o.Beta2)
		t.Run(name, func(t *testing.T) {
			tr, err := NewTrainer(m, c.batch, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			n := tr.Len(Params)
			w32 := make([]float32, n)
			if err := tr.Get(Params, w32); err != nil {
				t.Fatal(err)
			}
			w := f64s(w32)
			ref := &refOptimizer{o: tc.o}
			g32 := make([]float32, n)
			for step := int64(1); step <= 3; step++ {
				x, y := randBatch(uint64(step), c.batch, tr.Input().Dims, tr.Classes())
				if _, _, err := tr.Run(x, y, 1/float32(c.batch), 1); err != nil {
					t.Fatal(err)
				}
				if err := tr.Get(Grads, g32); err != nil {
					t.Fatal(err)
				}
				if err := tr.Optimize(tc.o, tc.lr, step); err != nil {
					t.Fatal(err)
				}
				ref.step(w, f64s(g32), tc.lr, step)
				if err := tr.Get(Params, w32); err != nil {
					t.Fatal(err)
				}
				// float32 rounding of a weight and of its update: a few 1e-8 relative
				compareF(t, fmt.Sprintf("step %d weights", step), w32, w, 1e-6)
				if tc.o.Kind != "sgd" || tc.o.Momentum != 0 {
					compareF(t, fmt.Sprintf("step %d first moment / momentum", step), getArray(t, tr, Opt1), ref.m1, 1e-6)
				}
				if tc.o.Kind != "sgd" {
					compareF(t, fmt.Sprintf("step %d second moment", step), getArray(t, tr, Opt2), ref.m2, 1e-6)
				}
			}
		})
	}
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, f := range v {
		out[i] = float64(f)
	}
	return out
}

func getArray(t *testing.T, tr *Trainer, a Array) []float32 {
	t.Helper()
	v := make([]float32, tr.Len(a))
	if err := tr.Get(a, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// compareF checks got against want within tol of want's largest magnitude.
func compareF(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var max float64
	for _, v := range want {
		max = math.Max(max, math.Abs(v))
	}
	for i := range got {
		if e := math.Abs(float64(got[i]) - want[i]); e > tol*max {
			t.Errorf("%s [%d]: %.9g, reference %.9g (error %.2g of the largest, %.3g; tolerance %.0g)", what, i, got[i], want[i], e/max, max, tol)
			return
		}
	}
}

// TestGradBatchNormRunningStats checks BatchStats after Run (batch mean and unbiased
// variance) and the running statistics after ApplyBatchStats (ONNX momentum: running =
// running*momentum + batch*(1-momentum)), with the last Run's statistics and with
// statistics the caller gives (as data parallelism does).
func TestGradBatchNormRunningStats(t *testing.T) {
	b := newNet(t, 3, 3, 2, 5, 5)
	x := b.bn(b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1)), 1e-5, 0.9)
	x = b.bn(b.node("Relu", []string{x}), 1e-3, 0.7)
	m := b.finish(b.head(b.node("GlobalAveragePool", []string{x}), 3))
	tr, err := NewTrainer(m, 3, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if len(tr.State()) != 4 {
		t.Fatalf("state tensors %v, want two running means and variances", tr.State())
	}
	ref := newRefNet(m)
	run := map[string][]float64{}
	for _, s := range tr.State() {
		run[s.Name] = append([]float64(nil), ref.params[s.Name]...)
	}
	var bns []*onnx.Node
	for _, n := range m.Graph.Nodes {
		if n.OpType == "BatchNormalization" {
			bns = append(bns, n)
		}
	}
	dims := tr.Input().Dims
	apply := func(stats []float64) {
		off := 0
		for _, n := range bns {
			mom := float64(n.Attrs["momentum"].F)
			mean, variance := run[n.Inputs[3]], run[n.Inputs[4]]
			C := len(mean)
			for c := 0; c < C; c++ {
				mean[c] = mean[c]*mom + stats[off+c]*(1-mom)
				variance[c] = variance[c]*mom + stats[off+C+c]*(1-mom)
			}
			off += 2 * C
		}
	}
	checkState := func(what string) {
		t.Helper()
		got := getArray(t, tr, State)
		for _, s := range tr.State() {
			compareF(t, what+" "+s.Name, got[s.Offset:s.Offset+s.Len()], run[s.Name], 1e-6)
		}
	}
	for step := uint64(1); step <= 3; step++ {
		xs, labels := randBatch(step, 3, dims, 3)
		if _, _, err := tr.Run(xs, labels, 1.0/3, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := ref.forward(f64s(xs), dims, 0); err != nil {
			t.Fatal(err)
		}
		checkBatchStats(t, tr, ref)
		if step < 3 {
			if err := tr.ApplyBatchStats(nil); err != nil {
				t.Fatal(err)
			}
			apply(f64s(getArray(t, tr, BatchStats)))
			checkState(fmt.Sprintf("step %d running", step))
			continue
		}
		// caller's statistics: the mean of this batch's and made-up ones
		given := getArray(t, tr, BatchStats)
		for i := range given {
			given[i] = given[i]*0.5 + float32(i%5)*0.25
		}
		if err := tr.ApplyBatchStats(given); err != nil {
			t.Fatal(err)
		}
		apply(f64s(given))
		checkState("given statistics")
	}
	// Run and Optimize leave the running statistics alone
	before := getArray(t, tr, State)
	xs, labels := randBatch(9, 3, dims, 3)
	if _, _, err := tr.Run(xs, labels, 1.0/3, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.Optimize(Optimizer{Kind: "sgd"}, 0.1, 1); err != nil {
		t.Fatal(err)
	}
	if after := getArray(t, tr, State); !slices.Equal(before, after) {
		t.Errorf("Run or Optimize changed the running statistics")
	}
	if err := tr.ApplyBatchStats(make([]float32, tr.Len(BatchStats)+1)); err == nil {
		t.Errorf("ApplyBatchStats took statistics of the wrong length")
	}
}

// ---- determinism ----

// TestGradDeterminism: two trainers of one model (Conv, BatchNormalization, Dropout,
// MaxPool, residual Add, Concat) with the same data, seeds and thread count give
// byte-identical losses, gradients, weights, optimizer state and running statistics after
// every step.
func TestGradDeterminism(t *testing.T) {
	b := newNet(t, 21, 4, 3, 12, 12)
	c1 := b.node("Relu", []string{b.bn(b.conv("input", 16, 3, 3, false, aInts("pads", 1, 1, 1, 1)), 1e-5, 0.9)})
	c2 := b.bn(b.conv(c1, 16, 3, 3, false, aInts("pads", 1, 1, 1, 1)), 1e-5, 0.9)
	x := b.node("MaxPool", []string{b.node("Add", []string{c1, c2})}, aInts("kernel_shape", 2, 2), aInts("strides", 2, 2))
	x = b.node("Concat", []string{x, b.conv(x, 8, 1, 1, true)}, aInt("axis", 1))
	x = b.node("Dropout", []string{x}, aFloat("ratio", 0.2))
	m := b.finish(b.head(b.node("GlobalAveragePool", []string{x}), 5))
	for _, threads := range []int{1, 2} {
		var trs [2]*Trainer
		for i := range trs {
			tr, err := NewTrainer(m, 4, Options{Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			trs[i] = tr
		}
		if !slices.EqualFunc(trs[0].Params(), trs[1].Params(), sameTensor) || !slices.EqualFunc(trs[0].State(), trs[1].State(), sameTensor) {
			t.Fatalf("two trainers of one model lay out their arrays differently:\n%v\n%v", trs[0].Params(), trs[1].Params())
		}
		opt := Optimizer{Kind: "sgd", Momentum: 0.9, WeightDecay: 1e-4}
		for step := int64(1); step <= 4; step++ {
			xs, labels := randBatch(uint64(step), 4, trs[0].Input().Dims, 5)
			var losses [2]float64
			for i, tr := range trs {
				l, _, err := tr.Run(xs, labels, 0.25, uint64(step))
				if err != nil {
					t.Fatal(err)
				}
				losses[i] = l
				if err := tr.ApplyBatchStats(nil); err != nil {
					t.Fatal(err)
				}
				if err := tr.Optimize(opt, 0.05, step); err != nil {
					t.Fatal(err)
				}
			}
			if math.Float64bits(losses[0]) != math.Float64bits(losses[1]) {
				t.Errorf("threads %d step %d: losses %v differ", threads, step, losses)
			}
			for _, a := range []Array{Grads, Params, Opt1, State, BatchStats} {
				if g0, g1 := getArray(t, trs[0], a), getArray(t, trs[1], a); !sameBits(g0, g1) {
					t.Errorf("threads %d step %d: array %d differs between two trainers", threads, step, a)
				}
			}
		}
	}
}

func sameTensor(a, b Tensor) bool {
	return a.Name == b.Name && a.Offset == b.Offset && slices.Equal(a.Dims, b.Dims)
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// checkSameBits fails t, naming the first differing element, unless got has want's bits.
func checkSameBits(t *testing.T, what string, want, got []float32) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: element %d: %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestGradDropoutMasks: a Dropout on the input followed by Gemm, at batch 1, has weight
// gradient dW[k][f] = dz[k] * x[f] * mask[f], so its zeros are exactly the mask's. The mask
// must be the kernel's documented one (the reference's), the same with 1 and 2 threads
// (70,000 elements: the mask loop runs in parallel), and different for different seeds.
func TestGradDropoutMasks(t *testing.T) {
	const F = 70000
	b := newNet(t, 31, 1, F)
	m := b.finish(b.gemm(b.node("Dropout", []string{"input"}, aFloat("ratio", 0.3)), 3, true, false))
	x, labels := randBatch(4, 1, []int64{1, F}, 3)
	for i := range x {
		if x[i] == 0 {
			x[i] = 1 // a zero input would hide a kept element
		}
	}
	masks := map[uint64][]bool{}
	var grads [3][]float32
	for _, threads := range []int{1, 2} {
		tr, err := NewTrainer(m, 1, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		for _, seed := range []uint64{1, 2} {
			if _, _, err := tr.Run(x, labels, 1, seed); err != nil {
				t.Fatal(err)
			}
			g := getArray(t, tr, Grads)
			kept := make([]bool, F)
			n := 0
			for f := range kept {
				kept[f] = g[f] != 0 // row 0 of W (3, F)
				if kept[f] {
					n++
				}
			}
			if frac := float64(F-n) / F; math.Abs(frac-0.3) > 0.01 {
				t.Errorf("threads %d seed %d: %.4f of the elements dropped, ratio 0.3", threads, seed, frac)
			}
			ref := refDropoutMask(seed, 0, 0.3, F)
			for f := range kept {
				if kept[f] != (ref[f] != 0) {
					t.Fatalf("threads %d seed %d: element %d kept %v, the documented mask says %v", threads, seed, f, kept[f], ref[f] != 0)
				}
			}
			if prev, ok := masks[seed]; ok && !slices.Equal(prev, kept) {
				t.Errorf("seed %d: masks differ between 1 and 2 threads", seed)
			}
			masks[seed] = kept
			if seed == 1 {
				grads[threads] = g
			}
		}
		tr.Close()
	}
	if slices.Equal(masks[1], masks[2]) {
		t.Errorf("seeds 1 and 2 give the same mask")
	}
	if !sameBits(grads[1], grads[2]) {
		t.Errorf("gradients differ between 1 and 2 threads")
	}
}

// ---- bad input ----

// TestGradBadModels: a model NewTrainer cannot train fails with an error that wraps
// ErrNotTrainable and names the node (or the output) at fault.
func TestGradBadModels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    []int64
		build func(b *netBuilder) *onnx.Model
		says  string // in the error
	}{
		// conv gives (2, 3, 3, 3); the op under test keeps that shape; a Gemm of 27 features follows
		{"softmax_in_the_middle", []int64{2, 5, 5}, badMiddle("Softmax", aInt("axis", 1)), "Softmax_"},
		{"lrn", []int64{2, 5, 5}, badMiddle("LRN", aInt("size", 3)), "LRN_"},
		{"transpose", []int64{2, 5, 5}, badMiddle("Transpose", aInts("perm", 0, 1, 3, 2)), "Transpose_"},
		{"broadcast_add", []int64{2, 5, 5}, func(b *netBuilder) *onnx.Model {
			x := b.conv("input", 3, 3, 3, true)
			x = b.node("Add", []string{x, b.param("shift", 0, 1, 3, 1, 1)})
			x = b.node("Flatten", []string{x}, aInt("axis", 1))
			return b.model(b.gemmN(x, 27, 3, true, true), []int64{2, 3})
		}, "Add_"},
		{"gemm_transA", []int64{2}, func(b *netBuilder) *onnx.Model {
			x := b.node("Gemm", []string{"input", b.param("w", 0, 1, 2, 2)}, aInt("transA", 1))
			return b.model(x, []int64{2, 2})
		}, "Gemm_"},
		{"gemm_alpha", []int64{6}, func(b *netBuilder) *onnx.Model {
			x := b.node("Gemm", []string{"input", b.param("w", 0, 1, 6, 3)}, aFloat("alpha", 2))
			return b.model(x, []int64{2, 3})
		}, "Gemm_"},
		{"weight_not_an_initializer", []int64{6}, func(b *netBuilder) *onnx.Model {
			h := b.gemm("input", 6, true, true)
			w := b.node("Relu", []string{b.param("w", 0, 1, 6, 3)}) // a weight computed from one
			return b.model(b.node("MatMul", []string{h, w}), []int64{2, 3})
		}, "MatMul_"},
		{"output_not_logits", []int64{2, 5, 5}, func(b *netBuilder) *onnx.Model {
			return b.finish(b.conv("input", 3, 3, 3, true))
		}, "want (batch 2, classes) logits"},
		{"output_rank_3", []int64{2, 5, 5}, func(b *netBuilder) *onnx.Model {
			x := b.node("Reshape", []string{b.conv("input", 3, 3, 3, true), b.int64s(0, 3, -1)})
			return b.finish(x)
		}, "want (batch 2, classes) logits"},
		{"two_outputs", []int64{6}, func(b *netBuilder) *onnx.Model {
			x := b.gemm("input", 3, true, true)
			m := b.finish(x)
			m.Graph.Outputs = append(m.Graph.Outputs, m.Graph.Outputs[0])
			m.Graph.Outputs[1].Name = "input"
			return m
		}, "one output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newNet(t, 1, append([]int64{2}, tc.in...)...)
			m := tc.build(b)
			tr, err := NewTrainer(m, 2, Options{Threads: 1})
			if err == nil {
				tr.Close()
				t.Fatalf("NewTrainer accepted the model")
			}
			t.Logf("%v", err)
			if !errors.Is(err, ErrNotTrainable) {
				t.Errorf("error %q does not wrap ErrNotTrainable", err)
			}
			if !strings.Contains(err.Error(), tc.says) || !strings.HasPrefix(err.Error(), "kernel: ") {
				t.Errorf("error %q does not say %q (with the kernel: prefix)", err, tc.says)
			}
		})
	}
}

func badMiddle(op string, attrs ...*onnx.Attribute) func(b *netBuilder) *onnx.Model {
	return func(b *netBuilder) *onnx.Model {
		x := b.node(op, []string{b.conv("input", 3, 3, 3, true)}, attrs...)
		x = b.node("Flatten", []string{x}, aInt("axis", 1))
		return b.model(b.gemmN(x, 27, 3, true, true), []int64{2, 3})
	}
}

// TestGradBadRuns: wrong inputs, labels, scales and optimizer settings are clear errors
// that change nothing.
func TestGradBadRuns(t *testing.T) {
	b := newNet(t, 2, 2, 2, 5, 5)
	logits := b.head(b.bn(b.conv("input", 3, 3, 3, true), 1e-5, 0.9), 4)
	m := b.finish(logits)
	tr, err := NewTrainer(m, 2, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	x, labels := randBatch(1, 2, tr.Input().Dims, 4)
	if _, _, err := tr.Run(x, labels, 0.5, 1); err != nil {
		t.Fatal(err)
	}
	snapshot := func() [][]float32 {
		var out [][]float32
		for _, a := range []Array{Params, Grads, State, Opt1, Opt2, BatchStats} {
			out = append(out, getArray(t, tr, a))
		}
		return out
	}
	before := snapshot()
	expect := func(what string, err error, says string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: accepted", what)
			return
		}
		if !strings.Contains(err.Error(), says) || !strings.HasPrefix(err.Error(), "kernel: ") {
			t.Errorf("%s: error %q does not say %q", what, err, says)
		}
	}
	_, _, err = tr.Run(x, []int64{0, 4}, 0.5, 1)
	expect("label = classes", err, "label 4 at batch index 1 out of range for 4 classes")
	_, _, err = tr.Run(x, []int64{-1, 0}, 0.5, 1)
	expect("negative label", err, "out of range")
	_, _, err = tr.Run(x, []int64{0}, 0.5, 1)
	expect("one label for two images", err, "1 labels for a batch of 2")
	_, _, err = tr.Run(x, []int64{0, 1, 2}, 0.5, 1)
	expect("three labels for two images", err, "3 labels for a batch of 2")
	_, _, err = tr.Run(x[:len(x)-1], labels, 0.5, 1)
	expect("short input", err, "plan wants")
	_, _, err = tr.Run(append(x, 0), labels, 0.5, 1)
	expect("long input", err, "plan wants")
	_, _, err = tr.Run(nil, labels, 0.5, 1)
	expect("no input", err, "plan wants")
	for _, s := range []float32{0, -1, float32(math.NaN()), float32(math.Inf(1))} {
		_, _, err = tr.Run(x, labels, s, 1)
		expect(fmt.Sprintf("scale %g", s), err, "scale")
	}
	sgd := Optimizer{Kind: "sgd", Momentum: 0.9}
	for _, lr := range []float64{0, -0.1, math.NaN(), math.Inf(1)} {
		expect(fmt.Sprintf("lr %g", lr), tr.Optimize(sgd, lr, 1), "learning rate")
	}
	expect("unknown optimizer", tr.Optimize(Optimizer{Kind: "rmsprop"}, 0.1, 1), `optimizer "rmsprop" unknown`)
	expect("step 0", tr.Optimize(sgd, 0.1, 0), "step 0 must be >= 1")
	expect("Nesterov without momentum", tr.Optimize(Optimizer{Kind: "sgd", Nesterov: true}, 0.1, 1), "Nesterov")
	expect("negative momentum", tr.Optimize(Optimizer{Kind: "sgd", Momentum: -0.5}, 0.1, 1), "out of range")
	expect("negative weight decay", tr.Optimize(Optimizer{Kind: "adamw", WeightDecay: -1}, 0.1, 1), "out of range")
	expect("beta1 1", tr.Optimize(Optimizer{Kind: "adam", Beta1: 1}, 0.1, 1), "out of range")
	expect("beta2 > 1", tr.Optimize(Optimizer{Kind: "adam", Beta2: 1.5}, 0.1, 1), "out of range")
	expect("negative eps", tr.Optimize(Optimizer{Kind: "adam", Eps: -1}, 0.1, 1), "out of range")
	expect("get with a short buffer", tr.Get(Params, make([]float32, tr.Len(Params)-1)), "asked")
	expect("set with a long buffer", tr.Set(Params, make([]float32, tr.Len(Params)+1)), "given")
	expect("set batch statistics", tr.Set(BatchStats, make([]float32, tr.Len(BatchStats))), "cannot be set")
	expect("unknown array", tr.Get(Array(9), nil), "unknown")
	expect("short batch statistics", tr.ApplyBatchStats(make([]float32, 1)), "batch statistics")
	after := snapshot()
	for i := range before {
		if !sameBits(before[i], after[i]) {
			t.Errorf("array %d changed after refused calls", i)
		}
	}
	if _, err := NewTrainer(m, 0, Options{}); err == nil {
		t.Errorf("batch 0 accepted")
	}
	fixed := b.finish(logits)
	fixed.Graph.Inputs[0].Dims[0] = 3
	_, err = NewTrainer(fixed, 2, Options{})
	expect("batch 2 for an input fixed at 3", err, "fixed batch of 3")
	tr.Close()
	_, _, err = tr.Run(x, labels, 0.5, 1)
	expect("run after close", err, "closed")
	expect("optimize after close", tr.Optimize(sgd, 0.1, 1), "closed")
}

// ---- export ----

// TestGradExportMatchesReference trains a few steps, exports the model with
// BatchNormalization kept and folded, and runs both (after an ONNX encode/decode round
// trip) in the inference kernel: their logits must match the float64 reference evaluating
// the trained weights and running statistics in inference mode.
func TestGradExportMatchesReference(t *testing.T) {
	b := newNet(t, 41, 3, 2, 6, 6)
	c1 := b.node("Relu", []string{b.bn(b.conv("input", 4, 3, 3, true, aInts("pads", 1, 1, 1, 1)), 1e-5, 0.9)})
	c2 := b.bn(b.conv(c1, 4, 3, 3, false, aInts("pads", 1, 1, 1, 1)), 1e-3, 0.8)
	x := b.node("Dropout", []string{b.node("Add", []string{c1, c2})}, aFloat("ratio", 0.2))
	x = b.bn(b.node("MaxPool", []string{x}, aInts("kernel_shape", 2, 2), aInts("strides", 2, 2)), 1e-5, 0.9) // not after a Conv: kept
	m := b.finish(b.head(x, 3))
	tr, err := NewTrainer(m, 3, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for step := int64(1); step <= 3; step++ {
		xs, labels := randBatch(uint64(step), 3, tr.Input().Dims, 3)
		if _, _, err := tr.Run(xs, labels, 1.0/3, uint64(step)); err != nil {
			t.Fatal(err)
		}
		if err := tr.ApplyBatchStats(nil); err != nil {
			t.Fatal(err)
		}
		if err := tr.Optimize(Optimizer{Kind: "adam"}, 0.01, step); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := tr.Model(false)
	if err != nil {
		t.Fatal(err)
	}
	params, state := getArray(t, tr, Params), getArray(t, tr, State)
	for _, list := range []struct {
		ts   []Tensor
		vals []float32
	}{{tr.Params(), params}, {tr.State(), state}} {
		for _, p := range list.ts {
			if got := kept.Graph.Initializers[p.Name]; got == nil || !sameBits(got.F32, list.vals[p.Offset:p.Offset+p.Len()]) {
				t.Errorf("exported %s is not the trainer's value", p.Name)
			}
		}
	}
	ref := newRefNet(kept)
	ref.inference = true
	xs, _ := randBatch(77, 3, tr.Input().Dims, 3)
	vals, err := ref.forward(f64s(xs), tr.Input().Dims, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := vals[kept.Graph.Outputs[0].Name].v
	for _, fold := range []bool{false, true} {
		em, err := tr.Model(fold)
		if err != nil {
			t.Fatal(err)
		}
		bns := 0
		for _, n := range em.Graph.Nodes {
			if n.OpType == "BatchNormalization" {
				bns++
			}
		}
		if wantBN := map[bool]int{false: 3, true: 1}[fold]; bns != wantBN {
			t.Errorf("fold %v: %d BatchNormalization nodes, want %d", fold, bns, wantBN)
		}
		dm, err := onnx.Decode(onnx.Encode(em))
		if err != nil {
			t.Fatalf("fold %v: round trip: %v", fold, err)
		}
		im, err := LoadModel(dm, Options{Threads: 1})
		if err != nil {
			t.Fatalf("fold %v: %v", fold, err)
		}
		out, err := im.Run([]*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: tr.Input().Dims, F32: xs}})
		im.Close()
		if err != nil {
			t.Fatal(err)
		}
		compareF(t, fmt.Sprintf("fold %v logits", fold), out[0].F32, want, 1e-5)
	}
}

// TestGradSetRestoresState: values written with Set (a checkpoint restored, weights
// received from elsewhere) are the ones the next Run, ApplyBatchStats and Optimize use.
func TestGradSetRestoresState(t *testing.T) {
	c := gradCases[slices.IndexFunc(gradCases, func(c gradCase) bool { return c.name == "batchnorm/eps_blocked" })]
	m := buildCase(t, c, 8)
	tr, err := NewTrainer(m, c.batch, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	dims := tr.Input().Dims
	x, labels := randBatch(3, c.batch, dims, tr.Classes())
	if _, _, err := tr.Run(x, labels, 1, 0); err != nil { // run once with the initial values
		t.Fatal(err)
	}
	// new parameters and running statistics
	params, state := getArray(t, tr, Params), getArray(t, tr, State)
	for i := range params {
		params[i] = params[i]*0.7 + float32(i%7)*0.01
	}
	for i := range state {
		state[i] = state[i]*0.5 + 0.25
	}
	if err := tr.Set(Params, params); err != nil {
		t.Fatal(err)
	}
	if err := tr.Set(State, state); err != nil {
		t.Fatal(err)
	}
	loss, _, err := tr.Run(x, labels, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref := newRefNet(m)
	for _, p := range tr.Params() {
		ref.params[p.Name] = f64s(params[p.Offset : p.Offset+p.Len()])
	}
	if err := ref.setDropoutOps(dims); err != nil {
		t.Fatal(err)
	}
	want, err := ref.loss(f64s(x), dims, labels, 0)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(loss-want) > lossTol*math.Max(1, want) {
		t.Errorf("after Set(Params): loss %.9g, reference with the set weights %.9g", loss, want)
	}
	// running statistics move from the set values
	bstats := getArray(t, tr, BatchStats)
	if err := tr.ApplyBatchStats(nil); err != nil {
		t.Fatal(err)
	}
	wantState := f64s(state)
	off := int64(0) // of this BatchNormalization's statistics in bstats
	for _, n := range m.Graph.Nodes {
		if n.OpType != "BatchNormalization" {
			continue
		}
		mom := float64(n.Attrs["momentum"].F)
		var mean, variance Tensor
		for _, s := range tr.State() {
			switch s.Name {
			case n.Inputs[3]:
				mean = s
			case n.Inputs[4]:
				variance = s
			}
		}
		C := mean.Len()
		for i := int64(0); i < C; i++ {
			wantState[mean.Offset+i] = wantState[mean.Offset+i]*mom + float64(bstats[off+i])*(1-mom)
			wantState[variance.Offset+i] = wantState[variance.Offset+i]*mom + float64(bstats[off+C+i])*(1-mom)
		}
		off += 2 * C
	}
	compareF(t, "running statistics after Set(State)", getArray(t, tr, State), wantState, 1e-6)
	// Adam resumed at step 5 from set moments
	n := tr.Len(Params)
	m1, m2 := make([]float32, n), make([]float32, n)
	for i := range m1 {
		m1[i] = float32(i%5-2) * 1e-3
		m2[i] = float32(i%3+1) * 1e-5
	}
	if err := tr.Set(Opt1, m1); err != nil {
		t.Fatal(err)
	}
	if err := tr.Set(Opt2, m2); err != nil {
		t.Fatal(err)
	}
	grads := getArray(t, tr, Grads)
	o := Optimizer{Kind: "adam"}
	if err := tr.Optimize(o, 1e-3, 5); err != nil {
		t.Fatal(err)
	}
	ro := &refOptimizer{o: o, m1: f64s(m1), m2: f64s(m2)}
	w := f64s(params)
	ro.step(w, f64s(grads), 1e-3, 5)
	compareF(t, "weights after Adam resumed at step 5", getArray(t, tr, Params), w, 1e-6)
	compareF(t, "first moment after resuming", getArray(t, tr, Opt1), ro.m1, 1e-6)
	compareF(t, "second moment after resuming", getArray(t, tr, Opt2), ro.m2, 1e-6)
}
