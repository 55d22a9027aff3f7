package kernel

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// testDataRoot is where Debian's libonnx-testdata installs the ONNX backend test data.
const testDataRoot = "/usr/share/libonnx-testdata/data"

// supportedOps are the operators the kernel implements (the list).
var supportedOps = map[string]bool{
	"Conv": true, "Relu": true, "LeakyRelu": true, "PRelu": true, "Clip": true, "Sigmoid": true, "Tanh": true,
	"Elu": true, "HardSigmoid": true, "HardSwish": true, "MaxPool": true, "AveragePool": true,
	"GlobalAveragePool": true, "GlobalMaxPool": true, "BatchNormalization": true, "Gemm": true, "MatMul": true,
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Concat": true, "Flatten": true, "Reshape": true,
	"Transpose": true, "Squeeze": true, "Unsqueeze": true, "Softmax": true, "LogSoftmax": true, "LRN": true,
	"Dropout": true, "Identity": true, "Constant": true, "Pad": true, "Shape": true, "Gather": true,
	"Slice": true, "ReduceMean": true,
	// issue 13: the ops of modern models, with integer and boolean tensors at run time
	"Cast": true, "Where": true, "Equal": true, "Less": true, "Greater": true, "LessOrEqual": true,
	"GreaterOrEqual": true, "Not": true, "And": true, "Or": true, "Xor": true, "Expand": true, "Range": true,
	"ConstantOfShape": true, "Tile": true, "CumSum": true, "Neg": true, "Abs": true, "Sign": true, "Pow": true,
	"Sqrt": true, "Reciprocal": true, "Exp": true, "Log": true, "Erf": true, "Gelu": true, "Floor": true,
	"Ceil": true, "Round": true, "Softplus": true, "Mish": true, "Max": true, "Min": true,
	"LayerNormalization": true, "ReduceSum": true, "ReduceMax": true, "ReduceMin": true, "ArgMax": true,
	"ReduceL1": true, "ReduceL2": true, "ReduceSumSquare": true, "ReduceProd": true,
	"ArgMin": true, "Split": true, "Mod": true,
	"TopK": true, "Resize": true, "Upsample": true, "Einsum": true,
	// issue 12: int8
	"QuantizeLinear": true, "DequantizeLinear": true, "QLinearConv": true, "QLinearMatMul": true,
	"MatMulInteger": true, "ConvInteger": true,
}

// readSkips reads testdata/conformance_skip.txt: "dir/case  reason" per line.
func readSkips(t *testing.T) map[string]string {
	f, err := os.Open("testdata/conformance_skip.txt")
	if err != nil {
		t.Fatalf("skip list: %v", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, ok := strings.Cut(line, " ")
		if !ok || strings.TrimSpace(reason) == "" {
			t.Fatalf("skip list line %q has no reason", line)
		}
		out[name] = strings.TrimSpace(reason)
	}
	return out
}

// TestConformance runs every ONNX backend test case whose operators the kernel supports
// and compares outputs with rtol 1e-3, atol 1e-5.
func TestConformance(t *testing.T) {
	if _, err := os.Stat(testDataRoot); err != nil {
		t.Fatalf("ONNX backend test data missing (%v): install libonnx-testdata (make test-deps)", err)
	}
	skips := readSkips(t)
	used := map[string]bool{}
	var passed, failed int
	var report []string
	for _, dir := range []string{"node", "pytorch-converted", "pytorch-operator", "simple"} {
		cases, _ := filepath.Glob(filepath.Join(testDataRoot, dir, "*"))
		sort.Strings(cases)
		var p, f, s, na int
		for _, c := range cases {
			name := dir + "/" + filepath.Base(c)
			m, err := onnx.ReadFile(filepath.Join(c, "model.onnx"))
			if err != nil {
				na++
				continue
			}
			if !opsSupported(m) {
				na++
				continue
			}
			if m.Opset > 0 && m.Opset < 7 {
				// IDunno reads opsets 7 to 21. These old cases use operators whose
				// semantics did not change at opset 7 except through attributes
				// (broadcast, is_test, consumed_inputs) that the compiler rejects,
				// so they run as opset 7.
				m.Opset = 7
			}
			if reason, ok := skips[name]; ok {
				used[name] = true
				s++
				_ = reason
				continue
			}
			if err := runCase(m, c); err != nil {
				f++
				t.Errorf("%s: %v", name, err)
				continue
			}
			p++
		}
		passed += p
		failed += f
		report = append(report, fmt.Sprintf("%-18s %4d passed %4d failed %4d skipped (listed) %4d not applicable (other operators)", dir, p, f, s, na))
	}
	for name := range skips {
		if !used[name] {
			t.Errorf("skip list names %s, which is not a supported case (remove it)", name)
		}
	}
	for _, r := range report {
		t.Log(r)
		fmt.Println(r)
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
}

func opsSupported(m *onnx.Model) bool {
	if m.Graph == nil {
		return false
	}
	for _, n := range m.Graph.Nodes {
		if n.Domain != "" && n.Domain != "ai.onnx" || !supportedOps[n.OpType] {
			return false
		}
	}
	return true
}

// runCase runs every test_data_set of one case.
func runCase(m *onnx.Model, dir string) error {
	md, err := loadModel(m, Options{Threads: 1}, false)
	if err != nil {
		return err
	}
	defer md.Close()
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	if len(sets) == 0 {
		return fmt.Errorf("no test data sets")
	}
	for _, set := range sets {
		var ins, wants []*onnx.Tensor
		for i := 0; ; i++ {
			t, err := onnx.ReadTensorFile(filepath.Join(set, fmt.Sprintf("input_%d.pb", i)))
			if os.IsNotExist(err) || (err != nil && strings.Contains(err.Error(), "no such file")) {
				break
			}
			if err != nil {
				return err
			}
			ins = append(ins, t)
		}
		for i := 0; ; i++ {
			t, err := onnx.ReadTensorFile(filepath.Join(set, fmt.Sprintf("output_%d.pb", i)))
			if os.IsNotExist(err) || (err != nil && strings.Contains(err.Error(), "no such file")) {
				break
			}
			if err != nil {
				return err
			}
			wants = append(wants, t)
		}
		got, err := md.Run(ins)
		if err != nil {
			return err
		}
		if len(got) != len(wants) {
			return fmt.Errorf("%d outputs, want %d", len(got), len(wants))
		}
		for i := range wants {
			if err := compare(got[i], wants[i]); err != nil {
				return fmt.Errorf("%s output %d: %v", filepath.Base(set), i, err)
			}
		}
	}
	return nil
}

// compare checks the element type, then |got-want| <= 1e-5 + 1e-3*|want| elementwise for
// floats (NaN must match NaN) and equality for integers and booleans.
func compare(got, want *onnx.Tensor) error {
	if volume(got.Dims) != volume(want.Dims) {
		return fmt.Errorf("dims %v, want %v", got.Dims, want.Dims)
	}
	if len(got.Dims) != len(want.Dims) {
		return fmt.Errorf("rank of %v, want %v", got.Dims, want.Dims)
	}
	for i := range got.Dims {
		if got.Dims[i] != want.Dims[i] {
			return fmt.Errorf("dims %v, want %v", got.Dims, want.Dims)
		}
	}
	if got.DType != want.DType {
		return fmt.Errorf("type %v, want %v", got.DType, want.DType)
	}
	if want.DType != onnx.Float {
		// integers and booleans: exactly (as float32 they would differ only above 2^24)
		if len(got.I64) != len(want.I64) {
			return fmt.Errorf("%d values, want %d", len(got.I64), len(want.I64))
		}
		for i := range want.I64 {
			if got.I64[i] != want.I64[i] {
				return fmt.Errorf("value %d: %d, want %d", i, got.I64[i], want.I64[i])
			}
		}
		return nil
	}
	wf := want.F32
	if want.DType == onnx.Int64 || want.I64 != nil {
		wf = make([]float32, len(want.I64))
		for i, v := range want.I64 {
			wf[i] = float32(v)
		}
	}
	gf := got.F32
	if got.I64 != nil {
		gf = make([]float32, len(got.I64))
		for i, v := range got.I64 {
			gf[i] = float32(v)
		}
	}
	if len(gf) != len(wf) {
		return fmt.Errorf("%d values, want %d", len(gf), len(wf))
	}
	for i := range wf {
		g, w := float64(gf[i]), float64(wf[i])
		if math.IsNaN(w) {
			if !math.IsNaN(g) {
				return fmt.Errorf("value %d: %v, want NaN", i, g)
			}
			continue
		}
		if math.IsInf(w, 0) && g == w {
			continue
		}
		if math.Abs(g-w) > 1e-5+1e-3*math.Abs(w) || math.IsNaN(g) {
			return fmt.Errorf("value %d: %v, want %v", i, g, w)
		}
	}
	return nil
}
