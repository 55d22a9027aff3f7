package quantize

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/sched/dataset"
)

// textModel is the zoo's transformer_encoder (int64 "ids" and "mask" of shape (N, length),
// token embedding by Gather, MatMul attention and feed-forward, LayerNormalization) at a
// small size.
func textModel(t *testing.T, vocab, length int64) *onnx.Model {
	t.Helper()
	m, err := zoo.BuildText(zoo.TextOptions{Vocab: vocab, Length: length, Layers: 2, Heads: 4, Width: 64, Classes: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// textArrays are n samples of token ids in [0, vocab) and masks of 1 for a random number
// (at least a quarter) of leading tokens and 0 for the padding after them, from seed.
func textArrays(seed uint64, n int, vocab, length int64) map[string]*dataset.Array {
	r := rand.New(rand.NewPCG(seed, 7))
	ids := &dataset.Array{DType: onnx.Int64, Dims: []int64{int64(n), length}, I64: make([]int64, int64(n)*length)}
	mask := &dataset.Array{DType: onnx.Int64, Dims: []int64{int64(n), length}, I64: make([]int64, int64(n)*length)}
	for i := 0; i < n; i++ {
		real := length/4 + r.Int64N(length-length/4+1)
		for j := int64(0); j < length; j++ {
			k := int64(i)*length + j
			ids.I64[k] = r.Int64N(vocab)
			if j < real {
				mask.I64[k] = 1
			}
		}
	}
	return map[string]*dataset.Array{"ids": ids, "mask": mask}
}

// TestTextModelInt8 quantizes a transformer encoder whose inputs are int64 token ids and a
// mask, calibrated on 32 samples of named arrays: every MatMul with constant weights (the
// attention projections, the feed-forward layers and the head, all after the embedding
// Gather) reads QDQ int8, while the integer paths (the Gather on ids, the Cast of mask) are
// left as they were. The int8 model loads with --precision int8 and on 16 other samples
// gives logits within 0.05 of the largest float logit (relative; 0.008 measured) and the
// same top-1 for at least 15 of 16; two runs give the same bytes.
func TestTextModelInt8(t *testing.T) {
	const vocab, length = 1000, 32
	fm := textModel(t, vocab, length)
	batches, err := Batches(fm, Data{Arrays: textArrays(1, 32, vocab, length)}, 32, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 4 || len(batches[0]) != 2 || batches[0][0].Name != "ids" || batches[0][1].Dims[0] != 8 {
		t.Fatalf("batches: %d of %d inputs", len(batches), len(batches[0]))
	}
	qm := quantizeDecoded(t, fm, batches)
	var floatMatMuls, qdqMatMuls int
	for _, n := range fm.Graph.Nodes {
		if (n.OpType == "MatMul" || n.OpType == "Gemm") && fm.Graph.Initializers[n.Inputs[1]] != nil {
			floatMatMuls++
		}
	}
	producer := map[string]*onnx.Node{}
	for _, n := range qm.Graph.Nodes {
		for _, o := range n.Outputs {
			producer[o] = n
		}
	}
	for _, n := range qm.Graph.Nodes {
		switch n.OpType {
		case "MatMul", "Gemm":
			a, w := producer[n.Inputs[0]], producer[n.Inputs[1]]
			if a != nil && a.OpType == "DequantizeLinear" && w != nil && w.OpType == "DequantizeLinear" {
				qdqMatMuls++
			}
		case "Gather":
			if n.Inputs[1] != "ids" {
				t.Errorf("the embedding Gather reads %s, want ids", n.Inputs[1])
			}
		case "Cast":
			if n.Inputs[0] != "mask" {
				t.Errorf("the mask's Cast reads %s, want mask", n.Inputs[0])
			}
		case "QuantizeLinear":
			if n.Inputs[0] == "ids" || n.Inputs[0] == "mask" {
				t.Errorf("integer input %s quantized", n.Inputs[0])
			}
		}
	}
	if floatMatMuls != 2*6+1 || qdqMatMuls != floatMatMuls {
		t.Errorf("%d of %d MatMuls with constant weights are QDQ; want all of 2 layers x 6 + the head", qdqMatMuls, floatMatMuls)
	}
	test, err := Batches(fm, Data{Arrays: textArrays(2, 16, vocab, length)}, 16, 16)
	if err != nil {
		t.Fatal(err)
	}
	checkNearFloat(t, fm, qm, test[0], 16, 15)
}

// checkNearFloat runs in through the float model fm and twice through its int8 rewrite qm
// (the same bytes both times), and fails unless the int8 logits are within 0.05 of the
// largest float logit (relative) and at least minSame of the rows of classes logits have
// the float top-1.
func checkNearFloat(t *testing.T, fm, qm *onnx.Model, in []*onnx.Tensor, classes, minSame int) {
	t.Helper()
	f, err := kernel.LoadModel(fm, kernel.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q, err := kernel.LoadModel(qm, kernel.Options{Threads: 2, Precision: kernel.INT8})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ref, err := f.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	var got []*onnx.Tensor
	for i := 0; i < 2; i++ {
		if got, err = q.Run(in); err != nil {
			t.Fatal(err)
		}
		b := onnx.EncodeTensor(got[0])
		if i == 1 && !bytes.Equal(b, first) {
			t.Fatal("two int8 runs gave different bytes")
		}
		first = b
	}
	var scale, diff float64
	for i, v := range ref[0].F32 {
		scale = max(scale, math.Abs(float64(v)))
		diff = max(diff, math.Abs(float64(v-got[0].F32[i])))
	}
	rows := len(ref[0].F32) / classes
	same := 0
	for i := 0; i < rows; i++ {
		if argmax(ref[0].F32[i*classes:(i+1)*classes]) == argmax(got[0].F32[i*classes:(i+1)*classes]) {
			same++
		}
	}
	t.Logf("int8 against float: max |diff| %.4g at max |logit| %.4g (%.3f relative), same top-1 %d of %d", diff, scale, diff/scale, same, rows)
	if scale == 0 || diff/scale > 0.05 || same < minSame {
		t.Errorf("int8 logits differ by %.4g at scale %.4g (want within 0.05 relative), same top-1 %d of %d (want >= %d)", diff, scale, same, rows, minSame)
	}
}

// TestBatchesErrors: calibration data that does not fit the model's inputs gets an error
// naming the input.
func TestBatchesErrors(t *testing.T) {
	const vocab, length = 50, 8
	m := textModel(t, vocab, length)
	good := func() map[string]*dataset.Array { return textArrays(3, 4, vocab, length) }
	floatIDs := good()
	floatIDs["ids"] = &dataset.Array{DType: onnx.Float, Dims: []int64{4, length}, F32: make([]float32, 4*length)}
	short := good()
	short["mask"] = &dataset.Array{DType: onnx.Int64, Dims: []int64{4, length - 1}, I64: make([]int64, 4*(length-1))}
	flat := good()
	flat["mask"] = &dataset.Array{DType: onnx.Int64, Dims: []int64{4 * length, 1}, I64: make([]int64, 4*length)}
	fewer := good()
	fewer["mask"] = &dataset.Array{DType: onnx.Int64, Dims: []int64{3, length}, I64: make([]int64, 3*length)}
	unknown := good()
	unknown["idz"] = unknown["ids"]
	noMask := good()
	delete(noMask, "mask")
	img, _ := fashion(t, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 8)
	for _, c := range []struct {
		name string
		d    Data
		want string
	}{
		{"no data for an integer input", Data{Arrays: noMask}, `input "mask"`},
		{"unknown input", Data{Arrays: unknown}, `"idz": the model has no such input`},
		{"float array for int64 ids", Data{Arrays: floatIDs}, `input "ids" is a float32 array`},
		{"rows of the wrong length", Data{Arrays: short}, `input "mask" has rows shaped [7]`},
		{"rows of the wrong rank", Data{Arrays: flat}, `input "mask" has rows shaped [1]`},
		{"differing sample counts", Data{Arrays: fewer}, "differ in samples"},
		{"images for a model without a float input", Data{Arrays: good(), Images: img}, "every model input"},
		{"images alone for integer inputs", Data{Images: img}, `input "ids"`},
	} {
		_, err := Batches(m, c.d, 4, 4)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "quantize: ") {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if b, err := Batches(m, Data{Arrays: good()}, 4, 3); err != nil || len(b) != 2 || b[1][0].Dims[0] != 1 {
		t.Errorf("4 samples in batches of 3: %v", err)
	}
	// a single image input still works as before, with preprocessing
	lenet, err := zoo.Build("lenet5", zoo.Options{InputShape: []int64{1, 28, 28}, Classes: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Batches(lenet, Data{Images: img, Pre: dataset.Preprocess{Scale: 1.0 / 255}}, 8, 5)
	if err != nil || len(b) != 2 || len(b[0]) != 1 || b[0][0].Dims[0] != 5 || b[1][0].Dims[0] != 3 {
		t.Fatalf("LeNet-5 from images: %v", err)
	}
	if _, err := Batches(lenet, Data{}, 8, 5); err == nil || !strings.Contains(err.Error(), `input "input" has no calibration data`) {
		t.Errorf("LeNet-5 without data: %v", err)
	}
}

// mixedModel has an image input (N, 1, 28, 28) and an int64 input "kind" (N, 1): the image
// through Conv (8 filters, stride 2) + ReLU, global average pooling and Flatten, plus an
// embedding of kind (Gather from a (5, 8) table, then Flatten), into a Gemm with 4 outputs.
func mixedModel(seed uint64) *onnx.Model {
	r := rand.New(rand.NewPCG(seed, 3))
	ini := map[string]*onnx.Tensor{}
	f32 := func(name string, dims ...int64) string {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64()) * 0.5
		}
		ini[name] = &onnx.Tensor{Name: name, DType: onnx.Float, Dims: dims, F32: v}
		return name
	}
	node := func(op string, in []string, out string, attrs ...*onnx.Attribute) *onnx.Node {
		a := map[string]*onnx.Attribute{}
		for _, x := range attrs {
			a[x.Name] = x
		}
		return &onnx.Node{Name: out + "_node", OpType: op, Inputs: in, Outputs: []string{out}, Attrs: a}
	}
	nodes := []*onnx.Node{
		node("Conv", []string{"image", f32("w", 8, 1, 3, 3), f32("b", 8)}, "c", &onnx.Attribute{Name: "strides", Type: onnx.AttrInts, Ints: []int64{2, 2}}),
		node("Relu", []string{"c"}, "r"),
		node("GlobalAveragePool", []string{"r"}, "p"),
		node("Flatten", []string{"p"}, "f"),
		node("Gather", []string{f32("table", 5, 8), "kind"}, "e"),
		node("Flatten", []string{"e"}, "ef"),
		node("Add", []string{"f", "ef"}, "s"),
		node("Gemm", []string{"s", f32("w2", 8, 4), f32("b2", 4)}, "output"),
	}
	return &onnx.Model{IRVersion: 8, Opset: 13, Graph: &onnx.Graph{
		Name: "mixed", Nodes: nodes, Initializers: ini,
		Inputs: []onnx.ValueInfo{
			{Name: "image", DType: onnx.Float, Dims: []int64{-1, 1, 28, 28}, DimParams: []string{"N", "", "", ""}, HasShape: true},
			{Name: "kind", DType: onnx.Int64, Dims: []int64{-1, 1}, DimParams: []string{"N", ""}, HasShape: true},
		},
		Outputs: []onnx.ValueInfo{{Name: "output", DType: onnx.Float, Dims: []int64{-1, 4}, DimParams: []string{"N", ""}, HasShape: true}},
	}}
}

// TestMixedInputsInt8 quantizes a model with an image input and a named integer input
// (`idunno quantize --calibration IMAGES --calibration kind=ARRAY.npy`), calibrated on 64
// Fashion-MNIST images and a kind array of 64 rows: the batches feed both inputs in the
// model's order, the Conv and the Gemm read QDQ int8 while the Gather's indices stay
// integer, the int8 logits of 32 other samples are within 0.05 of the largest float one
// (relative) with the same top-1 for at least 30, and two runs give the same bytes. Data
// whose samples differ in number gets an error.
func TestMixedInputsInt8(t *testing.T) {
	imgs, _ := fashion(t, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 96)
	kinds := func(from, n int) *dataset.Array {
		a := &dataset.Array{DType: onnx.Int64, Dims: []int64{int64(n), 1}, I64: make([]int64, n)}
		for i := range a.I64 {
			a.I64[i] = int64((from + i*7) % 5)
		}
		return a
	}
	pre := dataset.Preprocess{Scale: 1.0 / 255}
	fm := mixedModel(1)
	if _, err := Batches(fm, Data{Images: imgs, Pre: pre, Arrays: map[string]*dataset.Array{"kind": kinds(0, 64)}}, 96, 16); err == nil ||
		!strings.Contains(err.Error(), "differ in samples") {
		t.Fatalf("96 images and 64 kinds: %v, want an error on the sample counts", err)
	}
	calib := view{imgs, 64}
	batches, err := Batches(fm, Data{Images: calib, Pre: pre, Arrays: map[string]*dataset.Array{"kind": kinds(0, 64)}}, 64, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 4 || len(batches[0]) != 2 || batches[0][0].Name != "image" || batches[0][1].Name != "kind" ||
		batches[0][1].DType != onnx.Int64 || batches[0][0].Dims[0] != 16 {
		t.Fatalf("batches: %d, first %v", len(batches), batches[0])
	}
	qm := quantizeDecoded(t, fm, batches)
	producer := producers(qm)
	for _, n := range qm.Graph.Nodes {
		switch n.OpType {
		case "Conv", "Gemm":
			if producer[n.Inputs[0]] != "DequantizeLinear" || producer[n.Inputs[1]] != "DequantizeLinear" {
				t.Errorf("%s reads %s and %s, want QDQ", n.OpType, producer[n.Inputs[0]], producer[n.Inputs[1]])
			}
		case "Gather":
			if n.Inputs[1] != "kind" {
				t.Errorf("the Gather's indices are %s, want kind", n.Inputs[1])
			}
		case "QuantizeLinear":
			if n.Inputs[0] == "kind" {
				t.Error("the integer input is quantized")
			}
		}
	}
	test, err := Batches(fm, Data{Images: testView{imgs, 64, 32}, Pre: pre, Arrays: map[string]*dataset.Array{"kind": kinds(3, 32)}}, 32, 32)
	if err != nil {
		t.Fatal(err)
	}
	checkNearFloat(t, fm, qm, test[0], 4, 30)
}

// testView is n samples of a dataset from sample from.
type testView struct {
	ds      dataset.Dataset
	from, n int
}

func (v testView) Len() int                            { return v.n }
func (v testView) Sample(i int) (dataset.Image, error) { return v.ds.Sample(v.from + i) }
