package quantize

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"idunno/kernel"
	"idunno/kernel/graph"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/sched/dataset"
	"idunno/sched/train"
)

const fmnist = "/usr/share/datasets/fashion-mnist"

// view is the first n samples of a dataset.
type view struct {
	ds dataset.Dataset
	n  int
}

func (v view) Len() int                            { return v.n }
func (v view) Sample(i int) (dataset.Image, error) { return v.ds.Sample(i) }

func fashion(t *testing.T, images, labels string, n int) (dataset.Dataset, []int64) {
	t.Helper()
	f, err := os.Open(filepath.Join(fmnist, images))
	if err != nil {
		t.Fatalf("Fashion-MNIST missing (make test-deps installs dataset-fashion-mnist): %v", err)
	}
	defer f.Close()
	ds, err := dataset.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	lf, err := os.Open(filepath.Join(fmnist, labels))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	l32, err := dataset.ReadLabels(labels, lf)
	if err != nil {
		t.Fatal(err)
	}
	l := make([]int64, n)
	for i := range l {
		l[i] = int64(l32[i])
	}
	return view{ds, n}, l
}

// TestLeNetInt8 trains LeNet-5 for one epoch on 12,000 Fashion-MNIST images, quantizes it
// with 512 calibration images, and checks on 2,000 test images that the int8 model agrees
// with the float one on top-1 for at least 98% of them and is within 1.5 points of its
// accuracy (the full test set's figure, within 0.5, is in benchmarks/README.md), that the
// QDQ file round-trips, and that int8 results are the same bytes twice.
func TestLeNetInt8(t *testing.T) {
	pre := dataset.Preprocess{Scale: 1.0 / 255}
	fm, qm, testX, testY := trainQuantize(t, "lenet5", []int64{1, 28, 28}, pre, 12000, 2000, 128, 512)
	if !kernel.IsQuantized(qm) || kernel.IsQuantized(fm) {
		t.Fatalf("IsQuantized: float %v, quantized %v", kernel.IsQuantized(fm), kernel.IsQuantized(qm))
	}
	checkInt8Accuracy(t, fm, qm, testX, testY, pre, []int64{-1, 1, 28, 28}, 64)
}

// trainQuantize trains the zoo model name (input shape in) for one epoch on the first
// trainN Fashion-MNIST training images, calibrates it on the first calibN of them in
// batches of cb, and returns the float model, its QDQ rewrite as a reader of the written
// file gets it, and the first testN test images with their labels.
func trainQuantize(t *testing.T, name string, in []int64, pre dataset.Preprocess, trainN, testN, cb, calibN int) (fm, qm *onnx.Model, testX dataset.Dataset, testY []int64) {
	t.Helper()
	trainX, trainY := fashion(t, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", trainN)
	testX, testY = fashion(t, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", testN)
	m, err := zoo.Build(name, zoo.Options{InputShape: in, Classes: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := train.Config{
		Plan:      train.Plan{Samples: trainX.Len(), Batch: 32, Shards: 1, Epochs: 1, Seed: 1},
		LR:        0.01,
		Optimizer: kernel.Optimizer{Kind: "sgd", Momentum: 0.9},
		Schedule:  train.Schedule{Kind: "constant"},
		Threads:   2,
	}
	fm, _, err = train.Local(context.Background(), m, cfg, train.Data{Images: trainX, Labels: trainY, Prep: pre}, nil, train.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	var batches [][]*onnx.Tensor
	for from := 0; from < calibN; from += cb {
		b, err := dataset.Batch(trainX, from, from+cb, pre, append([]int64{-1}, in...))
		if err != nil {
			t.Fatal(err)
		}
		b.Name = "input"
		batches = append(batches, []*onnx.Tensor{b})
	}
	return fm, quantizeDecoded(t, fm, batches), testX, testY
}

// quantizeDecoded calibrates fm on batches, rewrites it with Q/DQ and returns the model as
// a reader of the written file gets it.
func quantizeDecoded(t *testing.T, fm *onnx.Model, batches [][]*onnx.Tensor) *onnx.Model {
	t.Helper()
	ranges, err := Calibrate(fm, batches, 2)
	if err != nil {
		t.Fatal(err)
	}
	qm, err := Rewrite(fm, ranges)
	if err != nil {
		t.Fatal(err)
	}
	qm, err = onnx.Decode(onnx.Encode(qm))
	if err != nil {
		t.Fatal(err)
	}
	return qm
}

// producers maps every tensor m's nodes write to the writer's op type.
func producers(m *onnx.Model) map[string]string {
	out := map[string]string{}
	for _, n := range m.Graph.Nodes {
		for _, o := range n.Outputs {
			out[o] = n.OpType
		}
	}
	return out
}

// checkInt8Accuracy checks the int8 model against the float one on the test images: top-1
// agreement of at least 98% and accuracy within 1.5 points (the float model must have
// learnt: at least 60%), and that two int8 runs of the first batch images give the same
// bytes.
func checkInt8Accuracy(t *testing.T, fm, qm *onnx.Model, testX dataset.Dataset, testY []int64, pre dataset.Preprocess, shape []int64, batch int) {
	t.Helper()
	a, err := Compare(fm, qm, testX, testY, pre, 250, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d test images: float %.2f%%, int8 %.2f%%, same top-1 %.2f%%, max |diff| %.3g",
		a.Samples, 100*a.FloatTop1, 100*a.QuantTop1, 100*a.SameTop1, a.MaxAbsDiff)
	if a.FloatTop1 < 0.6 {
		t.Fatalf("float model at %.2f%%: training failed", 100*a.FloatTop1)
	}
	if a.SameTop1 < 0.98 || math.Abs(a.QuantTop1-a.FloatTop1) > 0.015 {
		t.Errorf("int8 agreement %.4f (want >= 0.98), accuracy change %.4f (want within 0.015)", a.SameTop1, a.QuantTop1-a.FloatTop1)
	}
	// determinism: same model, input and threads give the same bytes
	km, err := kernel.LoadModel(qm, kernel.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer km.Close()
	x, err := dataset.Batch(testX, 0, batch, pre, shape)
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for i := 0; i < 2; i++ {
		out, err := km.Run([]*onnx.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		b := onnx.EncodeTensor(out[0])
		if i == 1 && !bytes.Equal(b, first) {
			t.Fatal("two int8 runs gave different bytes")
		}
		first = b
	}
}

// TestRewriteErrors: models Rewrite cannot quantize get clear errors.
func TestRewriteErrors(t *testing.T) {
	m, err := zoo.Build("lenet5", zoo.Options{InputShape: []int64{1, 28, 28}, Classes: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Rewrite(m, Ranges{}); err == nil {
		t.Fatal("Rewrite without ranges: no error")
	}
	old := *m
	old.Opset = 11
	if _, err := Rewrite(&old, Ranges{}); err == nil {
		t.Fatal("opset 11: no error")
	}
	empty := &onnx.Model{Opset: 13, Graph: &onnx.Graph{Initializers: map[string]*onnx.Tensor{}}}
	if _, err := Rewrite(empty, Ranges{}); err != ErrNothingToQuantize {
		t.Fatalf("no Conv: %v", err)
	}
	if _, err := kernel.LoadModel(m, kernel.Options{Precision: kernel.INT8}); !errors.Is(err, kernel.ErrNotQuantized) {
		t.Fatalf("--precision int8 on a float model: %v, want ErrNotQuantized", err)
	}
}

// TestActivationParams: zero is exact and the range is covered.
func TestActivationParams(t *testing.T) {
	for _, r := range []Range{{0, 1}, {-1, 1}, {-3, -1}, {2, 5}, {0, 0}} {
		s, z := ActivationParams(r)
		if !(s > 0) {
			t.Fatalf("%v: scale %v", r, s)
		}
		lo, hi := (0-float32(z))*s, (255-float32(z))*s
		if lo > min(r.Min, 0)+s/2 || hi < max(r.Max, 0)-s/2 {
			t.Errorf("%v: scale %v zero %d covers [%v, %v]", r, s, z, lo, hi)
		}
	}
}

// TestResNetInt8 trains the zoo's ResNet-18 (residual blocks with BatchNormalization, which
// the exporter-like graph keeps and the compiler folds) for one epoch on 4,000 Fashion-MNIST
// images resized to 32x32, quantizes it with 256 calibration images, and checks on 1,000
// test images TestLeNetInt8's bounds: top-1 agreement with the float model of at least 98%
// and accuracy within 1.5 points. Both inputs of every residual Add read Q/DQ (residualAdds),
// the compiled graph fuses each such Add into an int8 convolution (no Add or QuantizeLinear
// left), and two runs give the same bytes.
func TestResNetInt8(t *testing.T) {
	pre := dataset.Preprocess{Scale: 1.0 / 255, Resize: [2]int{32, 32}}
	fm, qm, testX, testY := trainQuantize(t, "resnet18", []int64{1, 32, 32}, pre, 4000, 1000, 64, 256)
	producer := producers(qm)
	adds := 0
	for _, n := range qm.Graph.Nodes {
		if n.OpType == "Add" {
			adds++
			if producer[n.Inputs[0]] != "DequantizeLinear" || producer[n.Inputs[1]] != "DequantizeLinear" {
				t.Errorf("Add %s reads %s and %s, want two DequantizeLinear outputs", n.Name, producer[n.Inputs[0]], producer[n.Inputs[1]])
			}
		}
	}
	if adds != 8 {
		t.Errorf("%d Adds, want ResNet-18's 8 residual ones", adds)
	}
	g, err := graph.Compile(qm, map[string][]int64{"input": {2, 1, 32, 32}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if n.OpType == "Add" || n.OpType == "QuantizeLinear" {
			t.Errorf("compiled int8 graph keeps %s %s", n.OpType, n.Name)
		}
	}
	checkInt8Accuracy(t, fm, qm, testX, testY, pre, []int64{-1, 1, 32, 32}, 32)
}
