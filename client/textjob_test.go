package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/sched/dataset"
)

// npyInt64 is a C-order little-endian int64 .npy array.
func npyInt64(shape []int, v []int64) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	h := fmt.Sprintf("{'descr': '<i8', 'fortran_order': False, 'shape': (%s,), }", strings.Join(dims, ", "))
	h += strings.Repeat(" ", (64-(10+len(h)+1)%64)%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	b = append(b, h...)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// TestTextJobFromTokenArrays runs the text job through the command line on a live
// cluster: `idunno zoo transformer_encoder`, token ids (int64 .npy) and a padding mask
// (uint8 .npy) put in SDFS, `job add --input ids=... --input mask=...`, and the result's
// classes are the kernel's on the same rows. A job that leaves an input unbound is refused.
func TestTextJobFromTokenArrays(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	bin := kernelBinary(t)
	dir := t.TempDir()
	_, run := cliCluster(t, bin, dir)
	const rows, length, vocab = 10, 16, 500
	model := filepath.Join(dir, "te.onnx")
	if code, out := run("zoo", "transformer_encoder", "--vocab", strconv.Itoa(vocab), "--length", strconv.Itoa(length),
		"--layers", "2", "--heads", "4", "--width", "32", "--classes", "6", "--seed", "4", "--out", model); code != 0 {
		t.Fatalf("zoo: %d %s", code, out)
	}
	ids := make([]int64, rows*length)
	mask := make([]uint8, rows*length)
	for i := range ids {
		ids[i] = int64(i*131+7) % vocab
		if i%length < length-i/length { // row r ends in r padding tokens
			mask[i] = 1
		}
	}
	var mb bytes.Buffer
	if err := dataset.WriteNPY(&mb, []int{rows, length}, mask); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ids.npy": npyInt64([]int{rows, length}, ids), "mask.npy": mb.Bytes()}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range [][]string{
		{"put", model, "te.onnx"}, {"put", filepath.Join(dir, "ids.npy"), "tokens.npy"},
		{"put", filepath.Join(dir, "mask.npy"), "mask.npy"}, {"inference", "start"},
	} {
		if code, out := run(c...); code != 0 {
			t.Fatalf("%v: %d %s", c, code, out)
		}
	}
	if code, out := run("job", "add", "--name", "half", "--model", "te.onnx", "--input", "ids=tokens.npy", "--batch", "4"); code == 0 {
		t.Fatalf("a job with the mask input unbound was added: %s", out)
	}
	code, out := run("job", "add", "--name", "t1", "--model", "te.onnx", "--input", "ids=tokens.npy", "--input", "mask=mask.npy",
		"--batch", "4", "--wait", "--timeout", "3m")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("job t1 complete: %d queries", rows)) {
		t.Fatalf("job add: exit %d, %s", code, out)
	}
	csv := filepath.Join(dir, "t1.csv")
	if code, out := run("job", "result", "t1", csv); code != 0 {
		t.Fatalf("job result: %d %s", code, out)
	}
	b, err := os.ReadFile(csv)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != rows+1 || lines[0] != "query,top1,score" {
		t.Fatalf("result:\n%s", b)
	}

	km, err := kernel.Load(model, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer km.Close()
	mask64 := make([]int64, len(mask))
	for i, v := range mask {
		mask64[i] = int64(v)
	}
	outs, err := km.Run([]*onnx.Tensor{
		{DType: onnx.Int64, Dims: []int64{rows, length}, I64: ids},
		{DType: onnx.Int64, Dims: []int64{rows, length}, I64: mask64},
	})
	if err != nil {
		t.Fatal(err)
	}
	logits := outs[0].F32
	for r := 0; r < rows; r++ {
		best := 0
		for c := 1; c < 6; c++ {
			if logits[r*6+c] > logits[r*6+best] {
				best = c
			}
		}
		f := strings.Split(lines[r+1], ",")
		if len(f) != 3 || f[0] != strconv.Itoa(r) || f[1] != strconv.Itoa(best) {
			t.Errorf("query %d: result line %q, the kernel's class is %d", r, lines[r+1], best)
		}
	}
}
