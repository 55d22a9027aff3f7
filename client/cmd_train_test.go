package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/sched/dataset"
)

// TestTrainLocalProgress trains LeNet-5 for two epochs of 256 synthetic images: on a real
// terminal (a pseudo-terminal from util-linux's script) a bar of the steps is redrawn in
// place and cleared for each epoch's line; in a pipe there are only the epoch lines, with
// no control characters.
func TestTrainLocalProgress(t *testing.T) {
	bin := kernelBinary(t)
	dir := t.TempDir()
	const n = 256
	pixels := make([]uint8, n*28*28)
	labels := make([]uint8, n)
	for i := range labels {
		labels[i] = uint8(i % 10)
		for j := 0; j < 28*28; j += 7 + i%10 { // a pattern per class
			pixels[i*28*28+j] = 200
		}
	}
	for name, npy := range map[string]struct {
		shape []int
		data  []uint8
	}{"images.npy": {[]int{n, 1, 28, 28}, pixels}, "labels.npy": {[]int{n}, labels}} {
		var buf bytes.Buffer
		if err := dataset.WriteNPY(&buf, npy.shape, npy.data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := func(out string) []string {
		return []string{"train", "local", "--model", "zoo:lenet5", "--input-shape", "1,28,28",
			"--data", filepath.Join(dir, "images.npy"), "--labels", filepath.Join(dir, "labels.npy"),
			"--epochs", "2", "--batch", "32", "--lr", "0.01", "--scale", "1/255", "--threads", "1", "--out", filepath.Join(dir, out)}
	}

	cmd := exec.Command(bin, args("pipe.onnx")...)
	out, err := cmd.CombinedOutput() // stdout and stderr are pipes
	if err != nil {
		t.Fatalf("train local: %v\n%s", err, out)
	}
	if bytes.ContainsAny(out, "\x1b\r") {
		t.Errorf("train local in a pipe wrote terminal control characters: %q", out)
	}
	if !bytes.Contains(out, []byte("epoch 1/2  loss ")) || !bytes.Contains(out, []byte("epoch 2/2  loss ")) {
		t.Errorf("train local in a pipe printed no epoch lines: %q", out)
	}

	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script (util-linux) to give train local a terminal: progress on a terminal not checked")
	}
	line := "'" + bin + "'"
	for _, a := range args("tty.onnx") {
		line += " '" + a + "'"
	}
	out, err = exec.Command(script, "-q", "-e", "-c", line, "/dev/null").CombinedOutput()
	if err != nil {
		t.Fatalf("train local on a terminal: %v\n%q", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "\r[") || !strings.Contains(s, "] step 16/16  epoch 2  loss ") {
		t.Errorf("train local on a terminal drew no progress bar of its 16 steps: %q", s)
	}
	if !strings.Contains(s, "\r\033[Kepoch 2/2  loss ") {
		t.Errorf("train local on a terminal did not clear the bar for the epoch line: %q", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "tty.onnx")); err != nil {
		t.Errorf("no trained model written: %v", err)
	}
}
