package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// TestInferMatchesBackendData runs `idunno infer` on an ONNX backend test case.
func TestInferMatchesBackendData(t *testing.T) {
	bin := kernelBinary(t)
	c := "/usr/share/libonnx-testdata/data/node/test_conv_with_strides_and_asymmetric_padding"
	out := t.TempDir()
	cmd := exec.Command(bin, "infer", "--model", filepath.Join(c, "model.onnx"),
		"--input", filepath.Join(c, "test_data_set_0/input_0.pb"),
		"--input", filepath.Join(c, "test_data_set_0/input_1.pb"),
		"--output-dir", out, "--threads", "1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("infer: %v\n%s", err, b)
	}
	got, err := onnx.ReadTensorFile(filepath.Join(out, "output_0.pb"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := onnx.ReadTensorFile(filepath.Join(c, "test_data_set_0/output_0.pb"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.F32) != len(want.F32) || len(got.F32) == 0 {
		t.Fatalf("got %d values, want %d", len(got.F32), len(want.F32))
	}
	for i := range want.F32 {
		if math.Abs(float64(got.F32[i]-want.F32[i])) > 1e-5+1e-3*math.Abs(float64(want.F32[i])) {
			t.Fatalf("value %d: %v, want %v", i, got.F32[i], want.F32[i])
		}
	}
}

func TestInferBadInputIsCleanError(t *testing.T) {
	bin := kernelBinary(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.onnx")
	os.WriteFile(bad, []byte("\x0a\xff\xff\xff\xff\x0f garbage"), 0o644)
	cmd := exec.Command(bin, "infer", "--model", bad, "--output-dir", dir)
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("want exit 1, got %v\n%s", err, b)
	}
}

func TestBenchKernelJSON(t *testing.T) {
	bin := kernelBinary(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "lenet5.onnx")
	if b, err := exec.Command(bin, "zoo", "lenet5", "--out", model).CombinedOutput(); err != nil {
		t.Fatalf("zoo: %v\n%s", err, b)
	}
	b, err := exec.Command(bin, "bench", "kernel", "--model", model, "--batch", "2", "--threads", "1",
		"--seconds", "0.2", "--json").Output()
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for _, k := range []string{"images_per_sec", "p50_ms", "p99_ms", "batch", "threads", "gflop_per_image", "peak_gflops", "fraction_of_peak"} {
		v, ok := r[k].(float64)
		if !ok || v <= 0 {
			t.Errorf("key %s = %v", k, r[k])
		}
	}
	if r["batch"].(float64) != 2 || r["threads"].(float64) != 1 {
		t.Errorf("batch/threads %v %v", r["batch"], r["threads"])
	}
	// a one-off command has the CPUs to itself: the long OpenMP spin (kernel.OwnMachine),
	// unless the environment running the test sets its own
	want := "GOMP_SPINCOUNT=300000"
	if v := os.Getenv("OMP_WAIT_POLICY"); v != "" {
		want = "OMP_WAIT_POLICY=" + v
	} else if v := os.Getenv("GOMP_SPINCOUNT"); v != "" {
		want = "GOMP_SPINCOUNT=" + v
	}
	if r["openmp_spin"] != want {
		t.Errorf("openmp_spin %v, want %s", r["openmp_spin"], want)
	}
}

// TestBenchKernelTextModel: bench kernel runs a model with int64 ids and mask inputs (the
// zoo's transformer_encoder) and reports its work.
func TestBenchKernelTextModel(t *testing.T) {
	bin := kernelBinary(t)
	model := filepath.Join(t.TempDir(), "text.onnx")
	if b, err := exec.Command(bin, "zoo", "transformer_encoder", "--vocab", "1000", "--length", "32", "--layers", "1",
		"--heads", "4", "--width", "64", "--out", model).CombinedOutput(); err != nil {
		t.Fatalf("zoo: %v\n%s", err, b)
	}
	b, err := exec.Command(bin, "bench", "kernel", "--model", model, "--batch", "2", "--threads", "1",
		"--seconds", "0.2", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, b)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for _, k := range []string{"images_per_sec", "p50_ms", "gflop_per_image"} {
		if v, ok := r[k].(float64); !ok || v <= 0 {
			t.Errorf("key %s = %v", k, r[k])
		}
	}
}

// TestBenchKernelServe: bench kernel --serve prints a ready line with the model's work,
// then one slice per line of stdin, each with at least one batch and a latency per batch;
// a line that is not a number of seconds ends it with a clear error.
func TestBenchKernelServe(t *testing.T) {
	bin := kernelBinary(t)
	model := filepath.Join(t.TempDir(), "lenet5.onnx")
	if b, err := exec.Command(bin, "zoo", "lenet5", "--out", model).CombinedOutput(); err != nil {
		t.Fatalf("zoo: %v\n%s", err, b)
	}
	serve := func(stdin string) ([]map[string]any, string, error) {
		cmd := exec.Command(bin, "bench", "kernel", "--model", model, "--batch", "3", "--threads", "1", "--serve")
		cmd.Stdin = strings.NewReader(stdin)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m map[string]any
			if jerr := json.Unmarshal([]byte(l), &m); jerr != nil {
				t.Fatalf("line %q: %v", l, jerr)
			}
			lines = append(lines, m)
		}
		return lines, stderr.String(), err
	}
	lines, stderr, err := serve("0.05\n\n0.001\n")
	if err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr)
	}
	if len(lines) != 3 || lines[0]["ready"] != true || lines[0]["gflop_per_image"].(float64) <= 0 {
		t.Fatalf("want a ready line and two slices, got %v", lines)
	}
	for _, l := range lines[1:] {
		runs, lat := l["runs"].(float64), l["lat_ms"].([]any)
		if runs < 1 || len(lat) != int(runs) || l["batch"].(float64) != 3 || l["seconds"].(float64) <= 0 {
			t.Errorf("slice %v", l)
		}
	}
	if lines[1]["seconds"].(float64) < 0.05 {
		t.Errorf("a 0.05 s slice lasted %v s", lines[1]["seconds"])
	}
	lines, stderr, err = serve("0.01\nfast\n")
	if err == nil || len(lines) != 2 || !strings.Contains(stderr, `want seconds in (0, 3600], got "fast"`) {
		t.Errorf("bad line: err %v, %d lines, stderr %q", err, len(lines), stderr)
	}
}
