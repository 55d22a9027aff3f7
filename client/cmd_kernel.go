package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
)

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// ownMachine tells the kernel that this command's process has the CPUs to itself, unlike a
// node's (kernel.OwnMachine: its OpenMP workers spin longer before they sleep). In a shell
// session after the kernel was loaded it changes nothing.
func ownMachine() { kernel.OwnMachine() }

func runInfer(args []string) error {
	ownMachine()
	fs := newFlags("infer")
	model := fs.String("model", "", "ONNX model file")
	var inputs multiFlag
	fs.Var(&inputs, "input", "input TensorProto file (repeat, in the model's input order)")
	outDir := fs.String("output-dir", "", "directory for output_<i>.pb")
	threads := fs.Int("threads", 0, "kernel threads (0: one per CPU)")
	precision := precisionFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *outDir == "" || fs.NArg() > 0 {
		return usageErrorf("usage: idunno infer --model M.onnx --input input_0.pb [--input ...] --output-dir DIR [--threads N] [--precision fp32|bf16|int8]")
	}
	prec, err := kernel.ParsePrecision(*precision)
	if err != nil {
		return err
	}
	m, err := kernel.Load(*model, kernel.Options{Threads: *threads, Precision: prec})
	if err != nil {
		return err
	}
	defer m.Close()
	var ins []*onnx.Tensor
	for _, p := range inputs {
		t, err := onnx.ReadTensorFile(p)
		if err != nil {
			return err
		}
		ins = append(ins, t)
	}
	outs, err := m.Run(ins)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	for i, t := range outs {
		p := filepath.Join(*outDir, fmt.Sprintf("output_%d.pb", i))
		if err := onnx.WriteTensorFile(p, t); err != nil {
			return err
		}
		fmt.Printf("%s: %s %v\n", p, t.Name, t.Dims)
	}
	return nil
}

// benchResult is what `idunno bench kernel --json` prints.
type benchResult struct {
	Model          string  `json:"model"`
	ImagesPerSec   float64 `json:"images_per_sec"`
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`
	Batch          int     `json:"batch"`
	Threads        int     `json:"threads"`
	GFLOPPerImage  float64 `json:"gflop_per_image"`
	PeakGFLOPS     float64 `json:"peak_gflops"`
	FractionOfPeak float64 `json:"fraction_of_peak"`
	Runs           int     `json:"runs"`
	MinMs          float64 `json:"min_ms"` // the fastest batch: the least disturbed on a shared machine
	// Precision is what the model computed in; PeakGFLOPS and the fractions are against that
	// precision's peak (bf16: the AMX tile peak where oneDNN has AMX, else AVX512_BF16's;
	// int8: AMX's tdpbusd where oneDNN has AMX, else VNNI's vpdpbusd, in giga-ops).
	Precision    string  `json:"precision"`
	BF16ISA      string  `json:"bf16_isa,omitempty"` // "amx", "avx512_bf16"
	ImagesPerCPU float64 `json:"images_per_cpu_second"`
	// Load-independent view (the machine is shared): GFLOP per CPU-second the run used,
	// against one core's FMA peak per CPU-second.
	CPUGFLOPS     float64 `json:"gflops_per_cpu_second"`
	CPUPeakGFLOPS float64 `json:"peak_gflops_per_cpu_second"`
	CPUFraction   float64 `json:"fraction_of_peak_cpu"`
	// The rate of a median batch against the peak: less hurt by other processes' bursts.
	P50Fraction float64 `json:"fraction_of_peak_p50"`
	// OpenMPSpin is how long the kernel's OpenMP workers spin before they sleep
	// (kernel.OpenMPSpin; this command has the CPUs to itself, kernel.OwnMachine).
	OpenMPSpin string `json:"openmp_spin"`
}

func runBench(args []string) error {
	ownMachine()
	if len(args) > 0 && args[0] == "train" {
		return runBenchTrain(args[1:])
	}
	if len(args) == 0 || (args[0] != "kernel" && !wantsHelp(args[:1])) {
		return usageErrorf("usage: idunno bench kernel --model M.onnx --batch B --threads T --seconds S [--json]")
	}
	fs := newFlags("bench kernel")
	model := fs.String("model", "", "ONNX model file")
	batch := fs.Int("batch", 1, "batch size")
	threads := fs.Int("threads", 2, "kernel threads")
	seconds := fs.Float64("seconds", 10, "how long to run")
	asJSON := fs.Bool("json", false, "print one JSON object")
	serve := fs.Bool("serve", false, "load, warm up and print a ready line, then for each line of stdin holding seconds S run for S seconds (at least one batch) and print one JSON line (benchmarks/ort --interleave)")
	precision := precisionFlag(fs)
	rest := args[1:]
	if wantsHelp(args[:1]) {
		rest = args // idunno bench --help: the flags of bench kernel
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if *model == "" || *batch < 1 || *threads < 1 || *seconds <= 0 || fs.NArg() > 0 {
		return usageErrorf("usage: idunno bench kernel --model M.onnx --batch B --threads T --seconds S [--precision fp32|bf16|int8] [--json | --serve]")
	}
	prec, err := kernel.ParsePrecision(*precision)
	if err != nil {
		return err
	}
	if *serve {
		return benchServe(*model, *batch, *threads, prec, os.Stdin, os.Stdout)
	}
	r, err := benchKernel(*model, *batch, *threads, prec, time.Duration(*seconds*float64(time.Second)))
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("model %s, batch %d, threads %d, precision %s, %d runs\n", r.Model, r.Batch, r.Threads, r.Precision, r.Runs)
	fmt.Printf("throughput      %.1f images/s\n", r.ImagesPerSec)
	fmt.Printf("batch latency   p50 %.2f ms, p99 %.2f ms, min %.2f ms\n", r.P50ms, r.P99ms, r.MinMs)
	fmt.Printf("work            %.3f GFLOP/image\n", r.GFLOPPerImage)
	fmt.Printf("%-15s %.1f GFLOP/s (%d threads, measured now)\n", peakName(r), r.PeakGFLOPS, r.Threads)
	fmt.Printf("reached         %.1f GFLOP/s = %.1f%% of peak\n", r.ImagesPerSec*r.GFLOPPerImage, 100*r.FractionOfPeak)
	fmt.Printf("median batch    %.1f%% of peak\n", 100*r.P50Fraction)
	fmt.Printf("per CPU-second  %.1f GFLOP vs %.1f peak per core = %.1f%% (independent of other load)\n",
		r.CPUGFLOPS, r.CPUPeakGFLOPS, 100*r.CPUFraction)
	fmt.Printf("OpenMP spin     %s\n", r.OpenMPSpin)
	return nil
}

// precisionFlag registers --precision on fs (parsed with kernel.ParsePrecision).
func precisionFlag(fs *flag.FlagSet) *string {
	return fs.String("precision", "fp32", "compute precision: fp32, bf16 (CPUs with AVX512_BF16) or int8 (quantized QDQ models)")
}

func peakName(r *benchResult) string {
	switch r.Precision {
	case "bf16":
		return "BF16 peak (" + r.BF16ISA + ")"
	case "int8":
		return "INT8 peak"
	}
	return "FP32 FMA peak"
}

// benchInputs makes seeded inputs of the model's shapes at this batch size: uniform
// floats, and 1 in every integer or boolean input (a valid token id of any vocabulary, a
// mask of real tokens everywhere: masks of zeros would time fully padded rows).
func benchInputs(m *kernel.Model, batch int) ([]*onnx.Tensor, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ins []*onnx.Tensor
	for _, vi := range m.Inputs() {
		dims := append([]int64(nil), vi.Dims...)
		if len(dims) == 0 {
			return nil, fmt.Errorf("input %s has no shape", vi.Name)
		}
		dims[0] = int64(batch)
		n := int64(1)
		for i, d := range dims {
			if d < 0 {
				return nil, fmt.Errorf("input %s: dim %d is symbolic", vi.Name, i)
			}
			n *= d
		}
		t := &onnx.Tensor{Name: vi.Name, DType: vi.DType, Dims: dims}
		if vi.DType == onnx.Float {
			t.F32 = make([]float32, n)
			for i := range t.F32 {
				t.F32[i] = rng.Float32()
			}
		} else {
			t.I64 = make([]int64, n)
			for i := range t.I64 {
				t.I64[i] = 1
			}
		}
		ins = append(ins, t)
	}
	return ins, nil
}

// openBench loads the model for a benchmark and makes its inputs at this batch size.
func openBench(path string, batch, threads int, prec kernel.Precision) (*kernel.Model, []*onnx.Tensor, error) {
	m, err := kernel.Load(path, kernel.Options{Threads: threads, Precision: prec})
	if err != nil {
		return nil, nil, err
	}
	ins, err := benchInputs(m, batch)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, ins, nil
}

// warmUp runs the model twice: builds the plan for this batch, faults in the arena.
func warmUp(m *kernel.Model, ins []*onnx.Tensor) error {
	for range 2 {
		if _, err := m.Run(ins); err != nil {
			return err
		}
	}
	return nil
}

// timedRuns runs batches for dur and at least minRuns of them: each one's latency in ms,
// the seconds they took in all and the process's CPU seconds meanwhile.
func timedRuns(m *kernel.Model, ins []*onnx.Tensor, dur time.Duration, minRuns int) (lat []float64, secs, cpu float64, err error) {
	cpu0 := kernel.CPUSeconds()
	start := time.Now()
	for time.Since(start) < dur || len(lat) < minRuns {
		t0 := time.Now()
		if _, err := m.Run(ins); err != nil {
			return nil, 0, 0, err
		}
		lat = append(lat, float64(time.Since(t0))/1e6)
	}
	return lat, time.Since(start).Seconds(), kernel.CPUSeconds() - cpu0, nil
}

// peakFunc is the measurement of the precision's peak on some threads (GFLOP/s; int8:
// giga-ops).
func peakFunc(prec kernel.Precision) func(threads int) float64 {
	switch prec {
	case kernel.BF16:
		return kernel.PeakBF16GFLOPS
	case kernel.INT8:
		return kernel.PeakInt8KernelGOPS
	}
	return kernel.PeakGFLOPS
}

// cpuPeak is one core's peak per CPU-second in the precision: FP32 FMA's, int8's, or for
// bf16 FP32's scaled by the measured bf16/fp32 peak ratio (bf16Peak, the bf16 peak on
// threads; 0: not measured, FP32's).
func cpuPeak(prec kernel.Precision, threads int, bf16Peak float64) float64 {
	switch {
	case prec == kernel.INT8:
		return kernel.PeakInt8KernelGOPSPerCPUSecond()
	case prec == kernel.BF16 && bf16Peak > 0:
		return kernel.PeakGFLOPSPerCPUSecond() * bf16Peak / max(kernel.PeakGFLOPS(threads), 1e-9)
	}
	return kernel.PeakGFLOPSPerCPUSecond()
}

func benchKernel(path string, batch, threads int, prec kernel.Precision, dur time.Duration) (*benchResult, error) {
	m, ins, err := openBench(path, batch, threads, prec)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	peak := peakFunc(prec)
	peakBefore := peak(threads)
	if err := warmUp(m, ins); err != nil {
		return nil, err
	}
	lat, total, cpu, err := timedRuns(m, ins, dur, 3)
	if err != nil {
		return nil, err
	}
	sort.Float64s(lat)
	pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	r := &benchResult{
		Model: filepath.Base(path), Batch: batch, Threads: threads, Runs: len(lat), MinMs: lat[0],
		Precision:     prec.String(),
		ImagesPerSec:  float64(len(lat)*batch) / total,
		P50ms:         pct(0.50),
		P99ms:         pct(0.99),
		GFLOPPerImage: m.FLOPs(batch) / float64(batch) / 1e9,
		// the machine is shared: take the better of two peak readings, so the fraction
		// errs low rather than high
		PeakGFLOPS: max(peakBefore, peak(threads)),
		OpenMPSpin: kernel.OpenMPSpin(),
	}
	if prec == kernel.BF16 {
		r.BF16ISA = kernel.BF16Support()
	}
	if r.PeakGFLOPS > 0 {
		r.FractionOfPeak = r.ImagesPerSec * r.GFLOPPerImage / r.PeakGFLOPS
		r.P50Fraction = float64(batch) * r.GFLOPPerImage / (r.P50ms / 1e3) / r.PeakGFLOPS
	}
	if cpu > 0 {
		r.ImagesPerCPU = float64(len(lat)*batch) / cpu
		r.CPUGFLOPS = float64(len(lat)*batch) * r.GFLOPPerImage / cpu
		bf16Peak := 0.0
		if peakBefore > 0 {
			bf16Peak = r.PeakGFLOPS
		}
		r.CPUPeakGFLOPS = cpuPeak(prec, threads, bf16Peak)
		if r.CPUPeakGFLOPS > 0 {
			r.CPUFraction = r.CPUGFLOPS / r.CPUPeakGFLOPS
		}
	}
	return r, nil
}

// sliceResult is one slice of `idunno bench kernel --serve`, and of benchmarks/ort/bench.js
// in its serve mode: the batches run in the slice and their latencies.
type sliceResult struct {
	Runs       int       `json:"runs"`
	Batch      int       `json:"batch"`
	Seconds    float64   `json:"seconds"`
	CPUSeconds float64   `json:"cpu_seconds"`
	LatMs      []float64 `json:"lat_ms"`
}

// serveReady is the first line of `idunno bench kernel --serve`: the model is loaded and
// warmed up; the work and peak let the caller compute the fraction of peak.
type serveReady struct {
	Ready         bool    `json:"ready"`
	GFLOPPerImage float64 `json:"gflop_per_image"`
	CPUPeakGFLOPS float64 `json:"peak_gflops_per_cpu_second"`
	OpenMPSpin    string  `json:"openmp_spin"`
}

// benchServe loads the model, warms it up and prints a ready line, then for each line of
// in holding a number of seconds S runs batches for S seconds (at least one) and prints a
// sliceResult line, until in ends. A harness alternating it with another system's slices
// (benchmarks/ort --interleave) exposes both to the same moments of a noisy machine.
func benchServe(path string, batch, threads int, prec kernel.Precision, in io.Reader, out io.Writer) error {
	m, ins, err := openBench(path, batch, threads, prec)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := warmUp(m, ins); err != nil {
		return err
	}
	bf16Peak := 0.0
	if prec == kernel.BF16 {
		bf16Peak = kernel.PeakBF16GFLOPS(threads)
	}
	enc := json.NewEncoder(out)
	if err := enc.Encode(serveReady{true, m.FLOPs(batch) / float64(batch) / 1e9, cpuPeak(prec, threads, bf16Peak), kernel.OpenMPSpin()}); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		secs, err := strconv.ParseFloat(line, 64)
		if err != nil || secs <= 0 || secs > 3600 {
			return fmt.Errorf("bench kernel --serve: want seconds in (0, 3600], got %q", line)
		}
		lat, total, cpu, err := timedRuns(m, ins, time.Duration(secs*float64(time.Second)), 1)
		if err != nil {
			return err
		}
		if err := enc.Encode(sliceResult{Runs: len(lat), Batch: batch, Seconds: total, CPUSeconds: cpu, LatMs: lat}); err != nil {
			return err
		}
	}
	return sc.Err()
}
