package onnx

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testdataRoot = "/usr/share/libonnx-testdata/data"

var testdataDirs = []string{"node", "pytorch-converted", "pytorch-operator", "simple"}

// testdataCases lists every test case directory (holding model.onnx) of the ONNX backend test data.
func testdataCases(t testing.TB) []string {
	t.Helper()
	if _, err := os.Stat(testdataRoot); err != nil {
		t.Fatalf("ONNX backend test data missing (install Debian package libonnx-testdata): %v", err)
	}
	var cases []string
	for _, d := range testdataDirs {
		models, err := filepath.Glob(filepath.Join(testdataRoot, d, "*", "model.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range models {
			cases = append(cases, filepath.Dir(m))
		}
	}
	if len(cases) < 1000 {
		t.Fatalf("found only %d test cases under %s", len(cases), testdataRoot)
	}
	return cases
}

func usesOnlyDefaultDomain(g *Graph) bool {
	for _, n := range g.Nodes {
		if n.Domain != "" && n.Domain != "ai.onnx" {
			return false
		}
		for _, a := range n.Attrs {
			if a.G != nil && !usesOnlyDefaultDomain(a.G) {
				return false
			}
			for _, sg := range a.Graphs {
				if !usesOnlyDefaultDomain(sg) {
					return false
				}
			}
		}
	}
	return true
}

// TestDecodeBackendTestData decodes every model and every tensor .pb of the ONNX backend
// test data, checks that encode/decode round-trips, and that every model in the supported
// opset range validates.
func TestDecodeBackendTestData(t *testing.T) {
	var models, tensors, validated, outOfRange int
	for _, dir := range testdataCases(t) {
		name := strings.TrimPrefix(dir, testdataRoot+"/")
		m, err := ReadFile(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		models++
		m2, err := Decode(Encode(m))
		if err != nil {
			t.Errorf("%s: decoding the re-encoded model: %v", name, err)
		} else if !bytes.Equal(Encode(m2), Encode(m)) || !reflect.DeepEqual(m2, m) && !hasNaN(m) {
			t.Errorf("%s: model changed in an encode/decode round trip", name)
		}
		switch err := m.Validate(); {
		case m.Opset < MinOpset || m.Opset > MaxOpset || !usesOnlyDefaultDomain(m.Graph):
			outOfRange++
			if err == nil {
				t.Errorf("%s: opset %d / non-default domain accepted by Validate", name, m.Opset)
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
		default:
			validated++
		}
		tensors += checkCaseTensors(t, name, dir, m)
	}
	t.Logf("decoded %d models (%d validated, %d outside opsets %d..%d or with other domains) and %d tensors",
		models, validated, outOfRange, MinOpset, MaxOpset, tensors)
}

// checkCaseTensors decodes the input_N.pb / output_N.pb files of a case whose graph value is a tensor.
func checkCaseTensors(t *testing.T, name, dir string, m *Model) int {
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	n := 0
	for _, set := range sets {
		for _, kind := range []string{"input", "output"} {
			vis := m.Graph.Inputs
			if kind == "output" {
				vis = m.Graph.Outputs
			}
			// Inputs listed in the graph may include initializers; .pb inputs bind to the rest in order.
			var bound []ValueInfo
			for _, vi := range vis {
				if _, init := m.Graph.Initializers[vi.Name]; kind == "input" && init {
					continue
				}
				bound = append(bound, vi)
			}
			files, _ := filepath.Glob(filepath.Join(set, kind+"_*.pb"))
			for i, f := range files {
				if i < len(bound) && bound[i].NotTensor {
					continue // sequences and optionals are stored as other protos
				}
				tt, err := ReadTensorFile(f)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				n++
				back, err := DecodeTensor(EncodeTensor(tt))
				if err != nil {
					t.Errorf("%s: re-decoding %s: %v", name, f, err)
				} else if !bytes.Equal(EncodeTensor(back), EncodeTensor(tt)) || back.DType != tt.DType || !reflect.DeepEqual(back.Dims, tt.Dims) {
					t.Errorf("%s: %s changed in an encode/decode round trip", name, f)
				}
			}
		}
	}
	return n
}

// hasNaN reports whether a NaN anywhere in m makes reflect.DeepEqual unusable
// (the encoded bytes are still compared).
func hasNaN(m *Model) bool { return graphHasNaN(m.Graph) }

func graphHasNaN(g *Graph) bool {
	for _, t := range g.Initializers {
		if tensorHasNaN(t) {
			return true
		}
	}
	for _, n := range g.Nodes {
		for _, a := range n.Attrs {
			if a.F != a.F || a.T != nil && tensorHasNaN(a.T) || a.G != nil && graphHasNaN(a.G) {
				return true
			}
			for _, f := range a.Floats {
				if f != f {
					return true
				}
			}
		}
	}
	return false
}

func tensorHasNaN(t *Tensor) bool {
	for _, v := range t.F32 {
		if v != v {
			return true
		}
	}
	for _, v := range t.F64 {
		if v != v {
			return true
		}
	}
	return false
}
