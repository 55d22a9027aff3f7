package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// TestQuantizeCommand writes a QDQ LeNet-5 from 64 Fashion-MNIST images, checks that the
// file decodes as a quantized model, and that data of the wrong size and a float model run
// with --precision int8 fail with errors that say what to do.
func TestQuantizeCommand(t *testing.T) {
	bin := kernelBinary(t)
	dir := t.TempDir()
	m, err := zoo.Build("lenet5", zoo.Options{InputShape: []int64{1, 28, 28}, Classes: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	fm := filepath.Join(dir, "lenet5.onnx")
	if err := onnx.WriteFile(fm, m); err != nil {
		t.Fatal(err)
	}
	data := "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
	qm := filepath.Join(dir, "lenet5.int8.onnx")
	out, err := exec.Command(bin, "quantize", "--model", fm, "--calibration", data, "--samples", "64",
		"--scale", "1/255", "--out", qm, "--threads", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("quantize: %v\n%s", err, out)
	}
	q, err := onnx.ReadFile(qm)
	if err != nil {
		t.Fatal(err)
	}
	var dq int
	for _, n := range q.Graph.Nodes {
		if n.OpType == "DequantizeLinear" {
			dq++
		}
	}
	if dq != 10 { // 5 layers: weights and activations
		t.Errorf("%d DequantizeLinear nodes, want 10", dq)
	}
	out, err = exec.Command(bin, "quantize", "--model", fm, "--calibration", data, "--resize", "32x32", "--out", qm).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "does not fit input") {
		t.Errorf("calibration data of the wrong size: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "infer", "--model", fm, "--input", fm, "--output-dir", dir, "--precision", "int8").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "idunno quantize") {
		t.Errorf("--precision int8 on a float model: %v\n%s", err, out)
	}
}
