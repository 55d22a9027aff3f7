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
	for _, bad := range [][]string{
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
