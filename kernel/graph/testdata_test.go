package graph

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

const backendData = "/usr/share/libonnx-testdata/data"

// loadCase reads a backend test case and splits its test_data_set_0 inputs into the
// shapes and constants Compile takes.
func loadCase(dir string) (*onnx.Model, map[string][]int64, map[string]*onnx.Tensor, []*onnx.Tensor, error) {
	m, err := onnx.ReadFile(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if m.Opset > 0 && m.Opset < MinOpset {
		// As the kernel's conformance test does: old cases run as opset 7; the opset-6
		// attributes whose meaning changed (broadcast, is_test, consumed_inputs) are
		// rejected by the compiler.
		m.Opset = MinOpset
	}
	if err := m.Validate(); err != nil {
		return nil, nil, nil, nil, err
	}
	var names []string
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; !init {
			names = append(names, in.Name)
		}
	}
	need := ConstantInputs(m)
	shapes := map[string][]int64{}
	consts := map[string]*onnx.Tensor{}
	data := filepath.Join(dir, "test_data_set_0")
	for i, name := range names {
		t, err := onnx.ReadTensorFile(filepath.Join(data, fmt.Sprintf("input_%d.pb", i)))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if need[name] {
			consts[name] = t
		} else {
			shapes[name] = t.Dims
		}
	}
	var outs []*onnx.Tensor
	for i := range m.Graph.Outputs {
		t, err := onnx.ReadTensorFile(filepath.Join(data, fmt.Sprintf("output_%d.pb", i)))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		outs = append(outs, t)
	}
	return m, shapes, consts, outs, nil
}

// unsupportedOps returns the operators of m that the compiler does not know.
func unsupportedOps(m *onnx.Model) []string {
	var out []string
	for _, n := range m.Graph.Nodes {
		if s, ok := ops[n.OpType]; !ok || s.foldOnly || (n.Domain != "" && n.Domain != "ai.onnx") {
			out = append(out, n.OpType)
		}
	}
	return out
}

// readExpectedErrors reads testdata/backend_errors.txt: "dir/case: reason substring".
func readExpectedErrors(t *testing.T) map[string]string {
	f, err := os.Open("testdata/backend_errors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		out[k] = v
	}
	return out
}

// TestBackendData compiles every ONNX backend test case: cases with only supported ops
// compile (or fail with the reason listed in testdata/backend_errors.txt) and their
// inferred output shapes equal the expected outputs'; the rest fail with a clear error.
func TestBackendData(t *testing.T) {
	if _, err := os.Stat(backendData); err != nil {
		t.Fatalf("ONNX backend test data missing (Debian package libonnx-testdata): %v", err)
	}
	expected := readExpectedErrors(t)
	seen := map[string]bool{}
	var report []string
	for _, dir := range []string{"node", "pytorch-converted", "pytorch-operator", "simple"} {
		cases, err := os.ReadDir(filepath.Join(backendData, dir))
		if err != nil {
			t.Fatal(err)
		}
		var compiled, listed, unsupported, rejected int
		for _, c := range cases {
			key := dir + "/" + c.Name()
			m, shapes, consts, outs, err := loadCase(filepath.Join(backendData, dir, c.Name()))
			if err != nil {
				// The decoder and validator reject opsets outside 7..21, sequence and
				// optional types, training domains: a clear error, not the compiler's.
				rejected++
				if !strings.HasPrefix(err.Error(), "onnx: ") {
					t.Errorf("%s: load error without the onnx prefix: %v", key, err)
				}
				continue
			}
			g, cerr := Compile(m, shapes, consts)
			if bad := unsupportedOps(m); len(bad) > 0 {
				unsupported++
				// Fold-only operators compile when their inputs are constant.
				if (cerr == nil && !knownOps(m)) || (cerr != nil && !strings.HasPrefix(cerr.Error(), "graph: ")) {
					t.Errorf("%s: ops %v unsupported but Compile gave %v", key, bad, cerr)
				}
				continue
			}
			if reason, ok := expected[key]; ok {
				seen[key] = true
				listed++
				if cerr == nil {
					t.Errorf("%s: listed as failing (%s) but compiles", key, reason)
				} else if !strings.Contains(cerr.Error(), reason) {
					t.Errorf("%s: error %q does not contain listed reason %q", key, cerr, reason)
				}
				continue
			}
			if cerr != nil {
				t.Errorf("%s: %v", key, cerr)
				continue
			}
			compiled++
			for i, want := range outs {
				got := g.Outputs[i]
				if !dimsEqual(got.Dims, want.Dims) || got.DType != want.DType {
					t.Errorf("%s: output %s: got %s %v, want %s %v", key, got.Name, got.DType, got.Dims, want.DType, want.Dims)
				}
			}
		}
		report = append(report, fmt.Sprintf("%s: %d compiled, %d listed errors, %d with unsupported ops, %d rejected by the onnx reader",
			dir, compiled, listed, unsupported, rejected))
	}
	var stale []string
	for k := range expected {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		t.Errorf("%s: listed in testdata/backend_errors.txt but not a supported-op case", k)
	}
	for _, r := range report {
		t.Log(r)
	}
}

// TestBackendDataFolded checks the constant evaluator against the backend test data:
// with every input given as a constant, cases whose ops the evaluator handles fold
// completely, and the folded outputs must equal the expected outputs.
func TestBackendDataFolded(t *testing.T) {
	folded := 0
	for _, dir := range []string{"node", "pytorch-converted", "pytorch-operator", "simple"} {
		cases, err := os.ReadDir(filepath.Join(backendData, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			key := dir + "/" + c.Name()
			m, shapes, consts, outs, err := loadCase(filepath.Join(backendData, dir, c.Name()))
			if err != nil || !knownOps(m) {
				continue
			}
			data := filepath.Join(backendData, dir, c.Name(), "test_data_set_0")
			skip := false
			for name := range shapes {
				for i, in := range inputOrder(m) {
					if in != name {
						continue
					}
					v, err := onnx.ReadTensorFile(filepath.Join(data, fmt.Sprintf("input_%d.pb", i)))
					if err != nil {
						t.Fatal(err)
					}
					if v.DType != onnx.Float {
						skip = true
					}
					consts[name] = v
				}
			}
			if skip {
				continue
			}
			g, err := Compile(m, nil, consts)
			if err != nil || len(g.Nodes) > 0 {
				continue // an op the evaluator does not fold, or a listed error
			}
			folded++
			for i, want := range outs {
				got := g.Initializers[g.Outputs[i].Name]
				if msg := compareTensors(got, want); msg != "" {
					t.Errorf("%s output %d: %s", key, i, msg)
				}
			}
		}
	}
	t.Logf("%d cases folded completely and matched", folded)
	if folded < 50 {
		t.Errorf("only %d cases folded", folded)
	}
}

func knownOps(m *onnx.Model) bool {
	for _, n := range m.Graph.Nodes {
		if _, ok := ops[n.OpType]; !ok {
			return false
		}
	}
	return true
}

func inputOrder(m *onnx.Model) []string {
	var names []string
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; !init {
			names = append(names, in.Name)
		}
	}
	return names
}

func compareTensors(got, want *onnx.Tensor) string {
	if got == nil {
		return "not folded"
	}
	if !dimsEqual(got.Dims, want.Dims) || got.DType != want.DType {
		return fmt.Sprintf("got %s %v, want %s %v", got.DType, got.Dims, want.DType, want.Dims)
	}
	if len(got.F32) != len(want.F32) || len(got.I64) != len(want.I64) {
		return "element count differs"
	}
	for i, w := range want.F32 {
		if d := got.F32[i] - w; d > 1e-5+1e-5*abs32(w) || -d > 1e-5+1e-5*abs32(w) {
			return fmt.Sprintf("element %d: %g, want %g", i, got.F32[i], w)
		}
	}
	for i, w := range want.I64 {
		if got.I64[i] != w {
			return fmt.Sprintf("element %d: %d, want %d", i, got.I64[i], w)
		}
	}
	return ""
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}
