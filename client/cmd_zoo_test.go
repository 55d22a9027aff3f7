package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// TestZooCommand runs `idunno zoo` and checks the files it writes.
func TestZooCommand(t *testing.T) {
	bin := testBinary(t)
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"zoo"}, args...)...).CombinedOutput()
		return string(out), err
	}
	a, b := filepath.Join(dir, "a.onnx"), filepath.Join(dir, "b.onnx")
	if out, err := run("lenet5", "--out", a, "--seed", "3"); err != nil || !strings.Contains(out, "61706 parameters") {
		t.Fatalf("zoo lenet5: %v\n%s", err, out)
	}
	if out, err := run("--seed", "3", "--out", b, "lenet5"); err != nil {
		t.Fatalf("zoo with the name last: %v\n%s", err, out)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Error("the same seed wrote different files")
	}
	r := filepath.Join(dir, "r.onnx")
	if out, err := run("resnet18", "--out", r, "--input-shape", "3,32,48", "--classes", "5"); err != nil {
		t.Fatalf("zoo resnet18: %v\n%s", err, out)
	}
	m, err := onnx.ReadFile(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	in, out := m.Graph.Inputs[0], m.Graph.Outputs[0]
	if in.Name != "input" || in.Dims[1] != 3 || in.Dims[2] != 32 || in.Dims[3] != 48 || in.DimParams[0] != "N" ||
		out.Name != "output" || out.Dims[1] != 5 || m.Opset != 13 {
		t.Errorf("resnet18 input %+v output %+v opset %d", in, out, m.Opset)
	}
	// --init torch: PyTorch's initialisation, deterministic, with torchvision's Dropout.
	ta, tb := filepath.Join(dir, "ta.onnx"), filepath.Join(dir, "tb.onnx")
	if out, err := run("lenet5", "--out", ta, "--seed", "3", "--init", "torch"); err != nil || !strings.Contains(out, "61706 parameters, torch init") {
		t.Fatalf("zoo lenet5 --init torch: %v\n%s", err, out)
	}
	if out, err := run("--init", "torch", "--seed", "3", "--out", tb, "lenet5"); err != nil {
		t.Fatalf("zoo --init torch with the name last: %v\n%s", err, out)
	}
	tab, _ := os.ReadFile(ta)
	tbb, _ := os.ReadFile(tb)
	if len(tab) == 0 || !bytes.Equal(tab, tbb) {
		t.Error("--init torch with the same seed wrote different files")
	}
	if bytes.Equal(tab, ab) {
		t.Error("--init torch wrote the default weights")
	}
	mb := filepath.Join(dir, "mb.onnx")
	if out, err := run("mobilenet_v2", "--out", mb, "--input-shape", "3,32,32", "--classes", "4", "--init", "torch"); err != nil {
		t.Fatalf("zoo mobilenet_v2 --init torch: %v\n%s", err, out)
	}
	mm, err := onnx.ReadFile(mb)
	if err != nil {
		t.Fatal(err)
	}
	if err := mm.Validate(); err != nil {
		t.Fatal(err)
	}
	drop := 0
	for _, n := range mm.Graph.Nodes {
		if n.OpType == "Dropout" {
			drop++
		}
	}
	if drop != 1 {
		t.Errorf("mobilenet_v2 --init torch has %d Dropout nodes, want 1", drop)
	}
	for _, bad := range [][]string{
		{"lenet5", "--out", r, "--init", "xavier"},
		{"nosuch", "--out", r},
		{"lenet5"},
		{"lenet5", "--out", r, "--input-shape", "1,x,28"},
		{"inception_v3", "--out", r, "--input-shape", "3,32,32"},
	} {
		if out, err := run(bad...); err == nil || !strings.Contains(out, "zoo") {
			t.Errorf("zoo %v: want an error, got %v\n%s", bad, err, out)
		}
	}
}

// TestZooTransformerEncoderCommand: `idunno zoo transformer_encoder` sizes the model by its
// flags (vocabulary, length, layers, heads, width, classes), deterministically by seed,
// and refuses flags that do not fit.
func TestZooTransformerEncoderCommand(t *testing.T) {
	bin := testBinary(t)
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"zoo"}, args...)...).CombinedOutput()
		return string(out), err
	}
	a, b := filepath.Join(dir, "a.onnx"), filepath.Join(dir, "b.onnx")
	args := []string{"--vocab", "300", "--length", "24", "--layers", "3", "--heads", "4", "--width", "32", "--classes", "7", "--seed", "11"}
	out, err := run(append([]string{"transformer_encoder", "--out", a}, args...)...)
	if err != nil || !strings.Contains(out, "inputs ids and mask (N,24) int64, 7 classes") {
		t.Fatalf("zoo transformer_encoder: %v\n%s", err, out)
	}
	if out, err := run(append(append([]string{"--out", b}, args...), "transformer_encoder")...); err != nil {
		t.Fatalf("zoo with the name last: %v\n%s", err, out)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Error("the same flags and seed wrote different files")
	}
	m, err := onnx.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	if len(g.Inputs) != 2 || g.Inputs[0].Name != "ids" || g.Inputs[1].Name != "mask" {
		t.Fatalf("inputs %+v", g.Inputs)
	}
	for _, in := range g.Inputs {
		if in.DType != onnx.Int64 || len(in.Dims) != 2 || in.Dims[0] != -1 || in.Dims[1] != 24 {
			t.Errorf("input %s: %v %v, want int64 (N, 24)", in.Name, in.DType, in.Dims)
		}
	}
	if o := g.Outputs[0]; o.Dims[1] != 7 || m.Opset != 17 {
		t.Errorf("output %v at opset %d, want (N, 7) at 17", o.Dims, m.Opset)
	}
	if w := g.Initializers["tok.weight"]; w == nil || w.Dims[0] != 300 || w.Dims[1] != 32 {
		t.Errorf("token embedding %v, want 300 x 32", w)
	}
	if s := g.Initializers["shape_heads"]; s == nil || s.I64[2] != 4 || s.I64[3] != 8 {
		t.Errorf("head shape %v, want 4 heads of 8", s)
	}
	norms := 0
	for _, n := range g.Nodes {
		if n.OpType == "LayerNormalization" {
			norms++
		}
	}
	if norms != 2*3+1 {
		t.Errorf("%d LayerNormalization nodes, want 7 (2 per layer of 3, and the last)", norms)
	}
	if out, err := run("transformer_encoder", "--out", a, "--seed", "12"); err != nil || !strings.Contains(out, "(N,128)") {
		t.Errorf("defaults: %v\n%s", err, out)
	} else if c, _ := os.ReadFile(a); bytes.Equal(c, ab) {
		t.Error("another seed and size wrote the same file")
	}
	for _, bad := range [][]string{
		{"transformer_encoder", "--out", a, "--heads", "3", "--width", "32"},
		{"transformer_encoder", "--out", a, "--input-shape", "3,32,32"},
		{"transformer_encoder", "--out", a, "--vocab", "1"},
		{"resnet18", "--out", a, "--vocab", "100"},
	} {
		if out, err := run(bad...); err == nil || !strings.Contains(out, "zoo") {
			t.Errorf("zoo %v: want an error, got %v\n%s", bad, err, out)
		}
	}
}
