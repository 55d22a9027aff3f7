package torchcheck

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idunno/kernel/onnx"
)

// TestNoReferenceKernels runs every torchvision export and zoo case once through
// `idunno bench kernel` with oneDNN's verbose log on, and fails on any primitive oneDNN ran
// with its reference implementation ("ref:..." or "simple:..." for a reorder is fine;
// "ref" is not): a reference kernel is plain C loops, 10-100x slower than the jit kernels,
// and choosing one is silent. ResNeXt's grouped convolutions and RegNet's
// squeeze-excitation multiplies fell back to them (0.02x and 0.01x ONNX Runtime's speed)
// until a speed comparison found them; this finds such a fallback without timing
// anything. Batch 1 (or the batch an export fixed), 2 threads, fp32.
func TestNoReferenceKernels(t *testing.T) {
	bin := os.Getenv("IDUNNO_BIN")
	if bin == "" {
		t.Skip("IDUNNO_BIN is not set (make test sets it)")
	}
	tvDir, zooDir := references(t)
	var models []string
	for _, c := range readManifest(t, tvDir) {
		models = append(models, filepath.Join(tvDir, c.Dir, "model.onnx"))
	}
	for _, zc := range zooCases {
		models = append(models, filepath.Join(zooDir, zc.name, "model.onnx"))
	}
	for _, m := range models {
		name := filepath.Base(filepath.Dir(m))
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(m); err != nil {
				t.Skip(err)
			}
			batch := int64(1) // or the batch an export fixed
			if src, err := onnx.ReadFile(m); err != nil {
				t.Fatal(err)
			} else if in := src.Graph.Inputs; len(in) > 0 && len(in[0].Dims) > 0 && in[0].Dims[0] > 0 {
				batch = in[0].Dims[0]
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "bench", "kernel", "--model", m, "--batch", fmt.Sprint(batch), "--threads", "2", "--seconds", "0.01")
			cmd.Env = append(os.Environ(), "DNNL_VERBOSE=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("bench kernel: %v\n%s", err, tail(out))
			}
			execs, refs, tiny := 0, map[string]int{}, map[string]int{}
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Split(line, ",")
				if len(f) < 6 || !strings.HasSuffix(f[0], "_verbose") || f[1] != "exec" {
					continue
				}
				execs++
				if !strings.HasPrefix(f[4], "ref") {
					continue
				}
				what := f[3] + " " + f[4] + " " + strings.Join(f[6:len(f)-1], " ")
				if n := largestTensor(f[len(f)-2]); n < tinyTensor {
					if tiny[what]++; tiny[what] == 1 {
						t.Logf("reference kernel on a tensor of %d elements (let pass): %s", n, what)
					}
					continue
				}
				refs[what]++
			}
			if execs == 0 {
				t.Fatalf("no oneDNN primitive ran (no verbose exec lines)\n%s", tail(out))
			}
			for k, n := range refs {
				t.Errorf("reference kernel, %d executions: %s", n, k)
			}
		})
	}
}

// tinyTensor: a reference kernel over fewer elements than this (a squeeze-excitation's
// 1xCx1x1 gate) costs microseconds, and is let pass.
const tinyTensor = 1024

// largestTensor is the element count of the largest tensor in a verbose line's shape field
// ("1x64x3x49x49:1x64x1x49x49", "mb1_ic3oc64_ih224oh112kh7..." counts as large).
func largestTensor(field string) int64 {
	best := int64(0)
	for _, tok := range strings.FieldsFunc(field, func(r rune) bool { return r == ':' || r == ' ' }) {
		n := int64(1)
		for _, d := range strings.Split(tok, "x") {
			var v int64
			if _, err := fmt.Sscan(d, &v); err != nil || v <= 0 {
				return math.MaxInt64 // not a plain shape: count it as large
			}
			n *= v
		}
		best = max(best, n)
	}
	return best
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
