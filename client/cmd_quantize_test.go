package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// writeInt64NPY writes v as a little-endian int64 .npy array of the given shape.
func writeInt64NPY(t *testing.T, path string, shape []int, v []int64) {
	t.Helper()
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	h := fmt.Sprintf("{'descr': '<i8', 'fortran_order': False, 'shape': (%s), }", strings.Join(dims, ", "))
	h += strings.Repeat(" ", (64-(10+len(h)+1)%64)%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestQuantizeCommandNamedInputs quantizes a small transformer encoder (int64 ids and mask)
// from --calibration NAME=FILE.npy arrays, runs the result with bench kernel --precision
// int8, and checks the errors for an unknown input name and an input without data.
func TestQuantizeCommandNamedInputs(t *testing.T) {
	bin := kernelBinary(t)
	dir := t.TempDir()
	const vocab, length, n = 100, 16, 6
	m, err := zoo.BuildText(zoo.TextOptions{Vocab: vocab, Length: length, Layers: 1, Heads: 2, Width: 32, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	fm := filepath.Join(dir, "text.onnx")
	if err := onnx.WriteFile(fm, m); err != nil {
		t.Fatal(err)
	}
	ids, mask := make([]int64, n*length), make([]int64, n*length)
	for i := range ids {
		ids[i] = int64(i*37) % vocab
		if i%length < length/2+i/length {
			mask[i] = 1
		}
	}
	idsFile, maskFile := filepath.Join(dir, "ids.npy"), filepath.Join(dir, "mask.npy")
	writeInt64NPY(t, idsFile, []int{n, length}, ids)
	writeInt64NPY(t, maskFile, []int{n, length}, mask)
	qm := filepath.Join(dir, "text.int8.onnx")
	out, err := exec.Command(bin, "quantize", "--model", fm, "--calibration", "ids="+idsFile, "--calibration", "mask="+maskFile,
		"--batch", "4", "--out", qm, "--threads", "1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "on 6 samples") {
		t.Fatalf("quantize: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "bench", "kernel", "--model", qm, "--precision", "int8", "--batch", "2", "--seconds", "0.1",
		"--threads", "1", "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"precision":"int8"`) {
		t.Errorf("bench kernel --precision int8: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--calibration", "idz=" + idsFile, "--calibration", "mask=" + maskFile}, `no input "idz" (its inputs: ids, mask)`},
		{[]string{"--calibration", "ids=" + idsFile}, `input "mask"`},
		{[]string{"--calibration", "ids=" + maskFile + ".missing", "--calibration", "mask=" + maskFile}, "no such file"},
	} {
		args := append([]string{"quantize", "--model", fm, "--out", qm}, c.args...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v, want an error with %q\n%s", c.args, err, c.want, out)
		}
	}
}
