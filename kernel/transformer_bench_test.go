package kernel

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"

	"idunno/kernel/graph"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// BenchmarkTransformerFusion runs zoo transformer_encoders (BERT-style: int64 ids and
// mask, attention with a padding mask, Erf GELU) with the transformer fusions (fused
// attention and GELU) and without them (graph.NoFusionEnv=1), in the same process, at 2
// threads. It reports sequences/s and the CPU time per batch (all threads), which load on
// the machine disturbs less than wall time. Run with -count 3 to interleave the variants.
func BenchmarkTransformerFusion(b *testing.B) {
	configs := []struct {
		name string
		opt  zoo.TextOptions
		n    int64
	}{
		{"bert_base_L128", zoo.TextOptions{Vocab: 30522, Length: 128, Layers: 2, Heads: 12, Width: 768}, 4},
		{"long_L512_w256", zoo.TextOptions{Vocab: 8000, Length: 512, Layers: 2, Heads: 4, Width: 256}, 2},
	}
	for _, c := range configs {
		m, err := zoo.BuildText(c.opt)
		if err != nil {
			b.Fatal(err)
		}
		ids := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{c.n, c.opt.Length}, I64: make([]int64, c.n*c.opt.Length)}
		mask := &onnx.Tensor{DType: onnx.Int64, Dims: []int64{c.n, c.opt.Length}, I64: make([]int64, c.n*c.opt.Length)}
		for i := range ids.I64 {
			ids.I64[i] = int64(i*7919) % c.opt.Vocab
			if i%int(c.opt.Length) < int(c.opt.Length)*3/4 { // the last quarter is padding
				mask.I64[i] = 1
			}
		}
		for _, fused := range []bool{true, false} {
			name := fmt.Sprintf("%s/fused=%v", c.name, fused)
			b.Run(name, func(b *testing.B) {
				if !fused {
					b.Setenv(graph.NoFusionEnv, "1")
				} else {
					b.Setenv(graph.NoFusionEnv, "0")
				}
				md, err := LoadModel(m, Options{Threads: 2})
				if err != nil {
					b.Fatal(err)
				}
				defer md.Close()
				in := []*onnx.Tensor{ids, mask}
				if _, err := md.Run(in); err != nil {
					b.Fatal(err)
				}
				var r0, r1 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
				for b.Loop() {
					if _, err := md.Run(in); err != nil {
						b.Fatal(err)
					}
				}
				syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
				cpu := float64(r1.Utime.Nano()-r0.Utime.Nano()+r1.Stime.Nano()-r0.Stime.Nano()) / 1e6
				b.ReportMetric(cpu/float64(b.N), "cpu-ms/op")
				b.ReportMetric(float64(c.n)*float64(b.N)/b.Elapsed().Seconds(), "seq/s")
			})
		}
	}
}

// BenchmarkModelFileFusion is BenchmarkTransformerFusion for any model file: set
// IDUNNO_BENCH_MODEL (and IDUNNO_BENCH_BATCH, default 1) to run it, e.g. on an exported
// ViT-B/16. Float inputs are filled with a fixed pattern, integer ones with zeros.
func BenchmarkModelFileFusion(b *testing.B) {
	path := os.Getenv("IDUNNO_BENCH_MODEL")
	if path == "" {
		b.Skip("IDUNNO_BENCH_MODEL not set")
	}
	batch, _ := strconv.Atoi(os.Getenv("IDUNNO_BENCH_BATCH"))
	batch = max(batch, 1)
	m, err := onnx.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, fused := range []bool{true, false} {
		b.Run(fmt.Sprintf("fused=%v", fused), func(b *testing.B) {
			b.Setenv(graph.NoFusionEnv, map[bool]string{true: "0", false: "1"}[fused])
			md, err := LoadModel(m, Options{Threads: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer md.Close()
			var in []*onnx.Tensor
			for _, vi := range md.Inputs() {
				d := append([]int64(nil), vi.Dims...)
				if len(d) > 0 && d[0] < 0 {
					d[0] = int64(batch)
				}
				t := &onnx.Tensor{DType: vi.DType, Dims: d}
				n := volume(d)
				if vi.DType == onnx.Float {
					t.F32 = make([]float32, n)
					for i := range t.F32 {
						t.F32[i] = float32(i%17)/8 - 1
					}
				} else {
					t.I64 = make([]int64, n)
				}
				in = append(in, t)
			}
			if _, err := md.Run(in); err != nil {
				b.Fatal(err)
			}
			var r0, r1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
			for b.Loop() {
				if _, err := md.Run(in); err != nil {
					b.Fatal(err)
				}
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
			cpu := float64(r1.Utime.Nano()-r0.Utime.Nano()+r1.Stime.Nano()-r0.Stime.Nano()) / 1e6
			b.ReportMetric(cpu/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(in[0].Dims[0])*float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}
