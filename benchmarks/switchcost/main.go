// Command switchcost measures what running several models in turn costs one worker against
// running each alone: the kernel CPU per query of each model when its batches alternate
// with the others' (as a worker running every job's tasks in turn does) over the same
// model's batches back to back. Alone and in-turn phases alternate for --rounds rounds, so
// the machine's drift hits both alike.
//
//	go run ./benchmarks/switchcost --models a.onnx,b.onnx --batch 8 --seconds 2 --rounds 3 [--per 1]
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
)

func main() {
	models := flag.String("models", "", "ONNX files, comma-separated")
	batch := flag.Int("batch", 8, "batch size")
	seconds := flag.Float64("seconds", 2, "seconds per model per phase")
	rounds := flag.Int("rounds", 3, "alone/in-turn rounds")
	per := flag.Int("per", 1, "in turn: batches of one model before the next")
	threads := flag.Int("threads", 1, "kernel threads")
	flag.Parse()
	if err := run(strings.Split(*models, ","), *batch, *seconds, *rounds, *per, *threads); err != nil {
		fmt.Fprintln(os.Stderr, "switchcost:", err)
		os.Exit(1)
	}
}

type model struct {
	name string
	m    *kernel.Model
	in   []*onnx.Tensor
}

func run(paths []string, batch int, seconds float64, rounds, per, threads int) error {
	runtime.LockOSThread()
	var ms []model
	for _, p := range paths {
		m, err := kernel.Load(p, kernel.Options{Threads: threads})
		if err != nil {
			return err
		}
		in := m.Inputs()[0]
		dims := slices.Clone(in.Dims)
		dims[0] = int64(batch)
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		t := &onnx.Tensor{Name: in.Name, DType: onnx.Float, Dims: dims, F32: make([]float32, n)}
		r := rand.New(rand.NewSource(1))
		for i := range t.F32 {
			t.F32[i] = r.Float32()
		}
		if _, err := m.Run([]*onnx.Tensor{t}); err != nil {
			return err
		}
		ms = append(ms, model{name: p, m: m, in: []*onnx.Tensor{t}})
	}
	for r := 0; r < rounds; r++ {
		alone := make([]float64, len(ms)) // CPU seconds per batch
		for i, m := range ms {
			c0, n := kernel.CPUSeconds(), 0
			for end := time.Now().Add(time.Duration(seconds * float64(time.Second))); time.Now().Before(end); n++ {
				if _, err := m.m.Run(m.in); err != nil {
					return err
				}
			}
			alone[i] = (kernel.CPUSeconds() - c0) / float64(n)
		}
		cpu, n := make([]float64, len(ms)), make([]int, len(ms))
		for end := time.Now().Add(time.Duration(seconds * float64(len(ms)) * float64(time.Second))); time.Now().Before(end); {
			for i, m := range ms {
				for k := 0; k < per; k++ {
					c0 := kernel.CPUSeconds()
					if _, err := m.m.Run(m.in); err != nil {
						return err
					}
					cpu[i] += kernel.CPUSeconds() - c0
					n[i]++
				}
			}
		}
		var seqA, seqT float64
		for i := range ms {
			turn := cpu[i] / float64(n[i])
			fmt.Printf("round %d: %s: alone %.3f ms, in turn %.3f ms a batch (%+.1f%%)\n", r, ms[i].name, 1e3*alone[i], 1e3*turn, 100*(turn/alone[i]-1))
			// the same number of batches of every model: the mix's cost over running them alone
			seqA += alone[i]
			seqT += turn
		}
		fmt.Printf("round %d: one batch of each: alone %.3f ms, in turn %.3f ms: in turn at %.1f%% of alone's throughput\n", r, 1e3*seqA, 1e3*seqT, 100*seqA/seqT)
	}
	return nil
}
