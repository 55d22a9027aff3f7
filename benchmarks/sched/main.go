// Command sched measures the whole inference path against the bare kernel: one node (the
// coordinator working alone, 2 kernel threads) runs a job end to end — dataset read from
// SDFS, preprocessing, kernel, results written to SDFS — and its query rate is compared
// with `idunno bench kernel` for the same model and batch.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"idunno/client/localcluster"
	"idunno/rpc"
	"idunno/sched"
)

type workload struct {
	name, zoo, shape string
	data             string // SDFS name of the dataset
	batch            int
	pre              []string
}

func main() {
	bin := flag.String("bin", "bin/idunno", "idunno binary")
	out := flag.String("out", "benchmarks/out/sched.csv", "CSV to write")
	test := flag.String("test", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "IDX dataset for the expensive model")
	train := flag.String("train", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "IDX dataset for the cheap model")
	reps := flag.Int("reps", 3, "runs of each job")
	only := flag.String("only", "", "run only the workload whose name starts with this")
	taskSize := flag.Int("task-size", 0, "queries per task (0: the coordinator chooses)")
	threads := flag.Int("threads", 2, "kernel threads of the worker and of bench kernel")
	flag.Parse()
	if err := run(*bin, *out, *test, *train, *threads, *reps, *only, *taskSize); err != nil {
		fmt.Fprintln(os.Stderr, "sched bench:", err)
		os.Exit(1)
	}
}

func run(bin, out, test, train string, threads, reps int, only string, taskSize int) error {
	bin, _ = filepath.Abs(bin)
	dir, err := os.MkdirTemp("", "idunno-sched-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lc, err := localcluster.Up(filepath.Join(dir, "cluster"), 1, 0, bin)
	if err != nil {
		return err
	}
	defer lc.Down()
	// One node with the kernel threads under test.
	cfgPath := filepath.Join(lc.Nodes()[0].DataDir, "config.json")
	var cfg sched.NodeConfig
	b, _ := os.ReadFile(cfgPath)
	json.Unmarshal(b, &cfg)
	cfg.Threads = threads
	b, _ = json.Marshal(cfg)
	os.WriteFile(cfgPath, b, 0o600)
	if err := lc.Restart("node0"); err != nil {
		return err
	}
	idn := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "IDUNNO_CLUSTER="+lc.Dir())
		o, err := cmd.CombinedOutput()
		if err != nil {
			return string(o), fmt.Errorf("idunno %s: %v: %s", strings.Join(args, " "), err, o)
		}
		return string(o), nil
	}
	steps := [][]string{{"put", test, "bench-test"}, {"put", train, "bench-train"}, {"train", "start"}}
	works := []workload{
		{"lenet5-b64", "lenet5", "", "bench-train", 64, []string{"--scale", "1/255"}},
		{"resnet18-64px-b8", "resnet18", "3,64,64", "bench-test", 8, []string{"--scale", "1/255", "--resize", "64x64", "--grey-to-rgb"}},
	}
	for _, w := range works {
		model := filepath.Join(dir, w.name+".onnx")
		zooArgs := []string{"zoo", w.zoo, "--out", model}
		if w.shape != "" {
			zooArgs = append(zooArgs, "--input-shape", w.shape)
		}
		if _, err := idn(zooArgs...); err != nil {
			return err
		}
		steps = append(steps, []string{"train", "add", "--name", w.name, "--model", model})
	}
	steps = append(steps, []string{"train", "stop"}, []string{"inference", "start"})
	for _, s := range steps {
		if _, err := idn(s...); err != nil {
			return err
		}
	}
	rc := rpc.NewClient([]byte(lc.Secret()))
	defer rc.Close()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintln(f, "workload,batch,threads,queries,path_qps,kernel_qps,ratio,end_to_end_qps,end_to_end_ratio,first_query_ms")
	for _, w := range works {
		if !strings.HasPrefix(w.name, only) {
			continue
		}
		if taskSize > 0 {
			w.pre = append(w.pre, "--task-size", fmt.Sprint(taskSize))
		}
		// Each repetition runs the job and then bench kernel for 5 s, so the two rates
		// of a ratio are measured close together on this shared machine; the median
		// ratio is reported.
		var ratios, e2es []float64
		for r := 1; r <= reps; r++ {
			name := fmt.Sprintf("%s-r%d", w.name, r)
			args := append([]string{"job", "add", "--name", name, "--model", w.name, "--data", w.data,
				"--batch", fmt.Sprint(w.batch)}, w.pre...)
			if _, err := idn(args...); err != nil {
				return err
			}
			if _, err := idn("job", "wait", name, "--timeout", "30m"); err != nil {
				return err
			}
			var js sched.JobSummary
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := rc.CallJSON(ctx, lc.Nodes()[0].RPCAddr, "sched.job.get", sched.NameArgs{Name: name}, &js)
			cancel()
			if err != nil {
				return err
			}
			// The path's rate: from the first task's start (the model is already loaded by
			// the job's validation) to the last task's result committed (read, preprocess,
			// kernel, result written to SDFS, completion journaled). End to end adds the
			// job's one-off step at its end: the result CSV assembled and written.
			path := float64(js.Queries) / (js.LastDoneMS/1000 - js.FirstQueryMS/1000)
			e2e := float64(js.Queries) / (js.Seconds - js.FirstQueryMS/1000)
			o, err := idn("bench", "kernel", "--model", filepath.Join(dir, w.name+".onnx"), "--batch", fmt.Sprint(w.batch),
				"--threads", fmt.Sprint(threads), "--seconds", "5", "--json")
			if err != nil {
				return err
			}
			var k struct {
				ImagesPerSec float64 `json:"images_per_sec"`
			}
			if err := json.Unmarshal([]byte(o[strings.Index(o, "{"):]), &k); err != nil {
				return fmt.Errorf("bench kernel output %q: %w", o, err)
			}
			fmt.Fprintf(f, "%s,%d,%d,%d,%.1f,%.1f,%.3f,%.1f,%.3f,%.0f\n", name, w.batch, threads, js.Queries, path, k.ImagesPerSec,
				path/k.ImagesPerSec, e2e, e2e/k.ImagesPerSec, js.FirstQueryMS)
			load, _ := os.ReadFile("/proc/loadavg")
			fmt.Printf("%-21s batch %-3d %6d queries: whole path %8.1f q/s, bench kernel %8.1f images/s: %5.1f%%; with the result CSV %8.1f q/s: %5.1f%% (first query %.0f ms; load %s)\n",
				name, w.batch, js.Queries, path, k.ImagesPerSec, 100*path/k.ImagesPerSec, e2e, 100*e2e/k.ImagesPerSec, js.FirstQueryMS, strings.Fields(string(load))[0])
			ratios, e2es = append(ratios, path/k.ImagesPerSec), append(e2es, e2e/k.ImagesPerSec)
		}
		fmt.Printf("%-21s median of %d: whole path %.1f%% of bench kernel; with the result CSV %.1f%%\n",
			w.name, reps, 100*median(ratios), 100*median(e2es))
	}
	return nil
}

func median(xs []float64) float64 {
	ys := append([]float64(nil), xs...)
	sort.Float64s(ys)
	return ys[len(ys)/2]
}
