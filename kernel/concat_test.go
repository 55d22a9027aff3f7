package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// catGraph builds graphs for the in-place concatenation tests: nodes append to g, weights
// are seeded.
type catGraph struct {
	g   *onnx.Graph
	rng *rand.Rand
}

func newCatGraph(input string, dims ...int64) *catGraph {
	g := &onnx.Graph{Initializers: map[string]*onnx.Tensor{}}
	g.Inputs = []onnx.ValueInfo{{Name: input, DType: onnx.Float, Dims: dims}}
	return &catGraph{g: g, rng: rand.New(rand.NewPCG(12, 4))}
}

func (c *catGraph) param(name string, dims ...int64) string {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	t := &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: make([]float32, n)}
	for i := range t.F32 {
		t.F32[i] = c.rng.Float32() - 0.5
	}
	c.g.Initializers[name] = t
	return name
}

func (c *catGraph) node(op, out string, attrs map[string]*onnx.Attribute, in ...string) string {
	if attrs == nil {
		attrs = map[string]*onnx.Attribute{}
	}
	c.g.Nodes = append(c.g.Nodes, &onnx.Node{Name: out, OpType: op, Inputs: in, Outputs: []string{out}, Attrs: attrs})
	return out
}

// conv adds a k x k convolution (padding k/2) from cin to cout channels, with bias.
func (c *catGraph) conv(out, in string, cin, cout, k int64) string {
	w := c.param(out+".w", cout, cin, k, k)
	b := c.param(out+".b", cout)
	return c.node("Conv", out, map[string]*onnx.Attribute{
		"kernel_shape": {Name: "kernel_shape", Type: onnx.AttrInts, Ints: []int64{k, k}},
		"pads":         {Name: "pads", Type: onnx.AttrInts, Ints: []int64{k / 2, k / 2, k / 2, k / 2}},
	}, in, w, b)
}

func (c *catGraph) concat(out string, axis int64, in ...string) string {
	return c.node("Concat", out, map[string]*onnx.Attribute{"axis": {Name: "axis", Type: onnx.AttrInt, I: axis}}, in...)
}

func (c *catGraph) outputs(names ...string) {
	for _, n := range names {
		c.g.Outputs = append(c.g.Outputs, onnx.ValueInfo{Name: n, DType: onnx.Float})
	}
}

// runCat runs the graph at the input's shape on two threads, twice, and returns every
// output; the two runs must agree bit for bit.
func runCat(t *testing.T, c *catGraph, x *onnx.Tensor) [][]float32 {
	t.Helper()
	return runTwiceOn(t, c.g, x, 2, "the same input")
}

// runTwiceOn runs graph g on x with the given threads twice and returns the first run's
// outputs; the second must give the same bits (what names the case in failures).
func runTwiceOn(t *testing.T, g *onnx.Graph, x *onnx.Tensor, threads int, what string) [][]float32 {
	t.Helper()
	m, err := LoadModel(&onnx.Model{IRVersion: 8, Opset: 13, Graph: g}, Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var first [][]float32
	for r := 0; r < 2; r++ {
		out, err := m.Run([]*onnx.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if r == 0 {
				first = append(first, o.F32)
				continue
			}
			checkSameBits(t, fmt.Sprintf("%s, output %d, second run", what, i), first[i], o.F32)
		}
	}
	return first
}

func seeded(seed uint64, dims ...int64) *onnx.Tensor {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	rng := rand.New(rand.NewPCG(seed, 9))
	x := &onnx.Tensor{DType: onnx.Float, Dims: dims, F32: make([]float32, n)}
	for i := range x.F32 {
		x.F32[i] = rng.Float32()*2 - 1
	}
	return x
}

// checkParts checks that cat, an output concatenated on axis from parts (outputs too), holds
// their values bit for bit; outer is the product of the dims before the axis.
func checkParts(t *testing.T, name string, cat []float32, outer int, parts ...[]float32) {
	t.Helper()
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if len(cat) != total {
		t.Fatalf("%s: %d values, its parts have %d", name, len(cat), total)
	}
	at := 0
	for o := 0; o < outer; o++ {
		for k, p := range parts {
			w := len(p) / outer
			for j := 0; j < w; j++ {
				if math.Float32bits(cat[at]) != math.Float32bits(p[o*w+j]) {
					t.Fatalf("%s: part %d, row %d, element %d: %v, the part has %v", name, k, o, j, cat[at], p[o*w+j])
				}
				at++
			}
		}
	}
}

// TestConcatInPlace: concatenations at batch 1 written in place (their inputs' producers
// write straight into the output: nChw16c on channels, and plain ones with only 1s before
// the axis) hold exactly their inputs, including nested ones sharing a prefix (DenseNet's
// pattern), an input twice, a constant, the graph input, and an input some later op
// overwrites in place as a residual sum; and every output matches the copying lowering
// (IDK_CONCAT_INPLACE=0) to 1e-5, bit for bit where nothing but the layout changes.
func TestConcatInPlace(t *testing.T) {
	c := newCatGraph("x", -1, 16, 28, 28)
	a := c.conv("a", "x", 16, 16, 3) // Winograd on nChw16c: written in place
	b := c.conv("b", a, 16, 32, 3)
	c1 := c.concat("c1", 1, a, b)
	d := c.conv("d", c1, 48, 16, 1)
	c2 := c.concat("c2", 1, a, b, d) // c1 becomes c2's prefix
	c3 := c.concat("c3", 1, d, a)    // both already in c2: copied
	w := c.param("w", 1, 16, 28, 28)
	c4 := c.concat("c4", 1, "x", w, a, a)
	// a residual sum overwriting y in place would clobber cy, still to be read
	y := c.conv("y", "x", 16, 16, 3)
	z := c.conv("z", y, 16, 16, 3)
	cy := c.concat("cy", 1, y, z)
	s := c.node("Add", "s", nil, c.conv("sz", z, 16, 16, 1), y)
	cs := c.concat("cs", 1, cy, s)
	c.outputs(c2, c3, c4, a, b, d, cs, cy, s, z)
	x := seeded(3, 1, 16, 28, 28)

	setCEnv(t, "IDK_CONCAT_INPLACE", "0")
	ref := runCat(t, c, x)
	setCEnv(t, "IDK_CONCAT_INPLACE", "")
	got := runCat(t, c, x)
	names := []string{"c2", "c3", "c4", "a", "b", "d", "cs", "cy", "s", "z"}
	for i, n := range names {
		checkClose(t, n+", in place against copied", ref[i], got[i], 1e-5)
	}
	ga, gb, gd := got[3], got[4], got[5]
	checkParts(t, "c2", got[0], 1, ga, gb, gd)
	checkParts(t, "c3", got[1], 1, gd, ga)
	checkParts(t, "c4", got[2], 1, x.F32, c.g.Initializers["w"].F32, ga, ga)
	checkParts(t, "cs", got[6], 1, got[7], got[8])
	if len(got[7]) != 2*len(got[9]) {
		t.Fatalf("cy has %d values", len(got[7]))
	}
	checkParts(t, "cy's second half", got[7][len(got[9]):], 1, got[9])
}

// TestConcatInPlacePlain: plain concatenations along an axis with only 1s before it at batch 1
// (in place) and at batch 3 (copied) hold exactly their inputs.
func TestConcatInPlacePlain(t *testing.T) {
	c := newCatGraph("x", -1, 5, 8)
	r := c.node("Relu", "r", nil, "x")
	g := c.node("Sigmoid", "g", nil, "x")
	k := c.concat("k", 1, r, g, "x")
	k2 := c.concat("k2", 1, g, "x", r)
	j := c.concat("j", 2, k, k2) // 15 rows before the axis at batch 1: copied
	c.outputs(k, k2, j, r, g)
	for _, n := range []int64{1, 3} {
		t.Run(fmt.Sprintf("batch%d", n), func(t *testing.T) {
			x := seeded(5, n, 5, 8)
			got := runCat(t, c, x)
			checkParts(t, "k", got[0], int(n), got[3], got[4], x.F32)
			checkParts(t, "k2", got[1], int(n), got[4], x.F32, got[3])
			checkParts(t, "j", got[2], int(n)*15, got[0], got[1])
		})
	}
}

// TestConcatMixedLayouts: SqueezeNet at 224x224 and batch 2, whose fire modules at 54x54
// concatenate a 1x1 convolution's nhwc output and a Winograd 3x3 one's nChw16c output (one
// reorder per input into its channels of the output, concat_by_reorders), gives the logits of
// the plan that reorders every input to nchw first (IDK_CONCAT_REORDERS=0) bit for bit, and
// the same bytes on a second run. (With the fire modules' concatenations kept: at batch 2
// they are otherwise rewritten away, IDK_CONCAT_CONV.)
func TestConcatMixedLayouts(t *testing.T) {
	if testing.Short() {
		t.Skip("SqueezeNet at 224x224")
	}
	t.Setenv(ConcatConvEnv, "0")
	m, err := zoo.Build("squeezenet", zoo.Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	in := seeded(13, 2, 3, 224, 224)
	setCEnv(t, "IDK_CONCAT_REORDERS", "0")
	ref := logits(t, m, in)
	setCEnv(t, "IDK_CONCAT_REORDERS", "")
	got := logits(t, m, in)
	again := logits(t, m, in)
	for i := range ref {
		if math.Float32bits(ref[i]) != math.Float32bits(got[i]) || math.Float32bits(got[i]) != math.Float32bits(again[i]) {
			t.Fatalf("logit %d: %v, then %v; the plain concatenations give %v", i, got[i], again[i], ref[i])
		}
	}
}
