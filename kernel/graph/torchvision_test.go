package graph

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/kernel/onnx"
)

// exportScript writes torchvision models with torch.onnx.export: argv is the output
// directory followed by name:opset pairs.
const exportScript = `
import sys, warnings, torch, torchvision.models as tvm
warnings.filterwarnings("ignore")
torch.manual_seed(0)
for spec in sys.argv[2:]:
    name, opset = spec.split(":")
    m = getattr(tvm, name)(weights=None).eval()
    torch.onnx.export(m, torch.randn(1, 3, 96, 96), f"{sys.argv[1]}/{name}.onnx", opset_version=int(opset),
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
`

// TestTorchvisionExports compiles what PyTorch's exporter writes for torchvision models
// (Debian's python3-torch and python3-torchvision): batch-independent export, BN folded,
// residual adds and activations fused.
func TestTorchvisionExports(t *testing.T) {
	dir := t.TempDir()
	models := []struct {
		name  string
		opset string
		convs int
		sums  int
		acts  string // the activation every non-final conv carries at least once
		ops   string // node types that must not remain
	}{
		{"resnet18", "11", 20, 8, "relu", "BatchNormalization,Relu,Add,Identity,Shape,Gather"},
		{"mobilenet_v2", "13", 52, 10, "clip:0:6", "BatchNormalization,Clip,Add,Dropout"},
		{"squeezenet1_0", "12", 26, 0, "relu", "Relu,Dropout"},
	}
	args := []string{"-c", exportScript, dir}
	for _, m := range models {
		args = append(args, m.name+":"+m.opset)
	}
	out, err := exec.Command("/usr/bin/python3", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("torch export failed (needs Debian python3-torch, python3-torchvision): %v\n%s", err, out)
	}
	for _, tm := range models {
		m, err := onnx.ReadFile(filepath.Join(dir, tm.name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range []int64{1, 3} {
			g, err := Compile(m, map[string][]int64{"input": {batch, 3, 96, 96}}, nil)
			if err != nil {
				t.Fatalf("%s batch %d: %v", tm.name, batch, err)
			}
			checkComplete(t, g)
			if !dimsEqual(g.Outputs[0].Dims, []int64{batch, 1000}) {
				t.Fatalf("%s: output dims %v", tm.name, g.Outputs[0].Dims)
			}
			convs, sums, acts := 0, 0, 0
			for _, n := range g.Nodes {
				if strings.Contains(","+tm.ops+",", ","+n.OpType+",") {
					t.Errorf("%s: %s node %s left after compilation", tm.name, n.OpType, n.Name)
				}
				if n.OpType != "Conv" {
					continue
				}
				convs++
				p := postOps(n)
				if strings.HasPrefix(p, "sum:") {
					sums++
				}
				if strings.Contains(p, tm.acts) {
					acts++
				}
			}
			if convs != tm.convs || sums != tm.sums || acts == 0 {
				t.Errorf("%s: %d convs, %d with sum, %d with %s; want %d convs, %d sums", tm.name, convs, sums, acts, tm.acts, tm.convs, tm.sums)
			}
		}
		// what the exporter writes is provably batch-independent (kernel/split.go)
		whole, err := Compile(m, map[string][]int64{"input": {3, 3, 96, 96}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		axes, err := BatchAxes(whole, m.Opset, 3)
		if err != nil {
			t.Errorf("%s: not batch-independent: %v", tm.name, err)
			continue
		}
		for _, b := range []int64{1, 2} {
			sub, err := Compile(m, map[string][]int64{"input": {b, 3, 96, 96}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := SameUpToBatch(whole, sub, axes, 3, b); err != nil {
				t.Errorf("%s: batch %d: %v", tm.name, b, err)
			}
		}
	}
}
