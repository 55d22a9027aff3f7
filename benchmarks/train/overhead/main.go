// Command overhead measures the per-step cost of training on the cluster over training on
// one machine: the same model, data, batch, shards and thread count run as `train local`
// would (train.Local, in this process) and as a training job on a local cluster of a
// coordinator and one worker, alternating rounds so both see the same machine load. It
// prints one JSON line per round and the ratio of the medians.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"idunno/demo/scenario"
	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/sched"
	"idunno/sched/dataset"
	"idunno/sched/train"
)

type round struct {
	Where       string  `json:"where"` // local or cluster
	Round       int     `json:"round"`
	Steps       int     `json:"steps"`        // steps timed (after the warm-up ones)
	StepSeconds float64 `json:"step_seconds"` // median step time
	MeanSeconds float64 `json:"mean_seconds"` // mean step time
	Load1       float64 `json:"load1"`
	// CPUSeconds is the CPU time (user + system) per step after the warm-up: the benchmark
	// process for local rounds, both nodes' processes for cluster rounds (read when the
	// poll, every 250 ms, first sees a step past the warm-up and when it sees the last).
	// Load from elsewhere does not move it the way it moves step times.
	CPUSeconds float64 `json:"cpu_seconds_per_step"`
	// NodeCPUSeconds splits a cluster round's CPUSeconds by node (node0 first).
	NodeCPUSeconds []float64 `json:"node_cpu_seconds_per_step,omitempty"`
	// cluster rounds: medians from the nodes' logs of the worker's shard time (parameters
	// in, gradients out, compute) and the coordinator's reduce and optimizer step
	ShardMillis  float64 `json:"shard_ms,omitempty"`  // worker: ComputeShard (replica caught up, batch, compute)
	FetchMillis  float64 `json:"fetch_ms,omitempty"`  // worker: of it, the replica catching up (0 when it took the step itself)
	PushMillis   float64 `json:"push_ms,omitempty"`   // worker: the result RPC (includes the coordinator's reduce and journal)
	ReduceMillis float64 `json:"reduce_ms,omitempty"` // coordinator: sum and optimizer step
	CommitMillis float64 `json:"commit_ms,omitempty"` // coordinator: journal entry
}

var (
	shardRE  = regexp.MustCompile(`training job (\S+): step (\d+) shard \d+ computed \((\d+) ms`)
	fetchRE  = regexp.MustCompile(`training job (\S+): step (\d+) shard \d+ computed .*catching up (\d+) ms`)
	pushRE   = regexp.MustCompile(`training job (\S+): step (\d+) shard \d+ computed .*result out (\d+) ms`)
	reduceRE = regexp.MustCompile(`training job (\S+): step (\d+) of \d+ committed.*reduce (\d+) ms`)
	commitRE = regexp.MustCompile(`training job (\S+): step (\d+) of \d+ committed.*journal (\d+) ms`)
)

var commitAtRE = regexp.MustCompile(`(?m)^(\S+) \S+ \S+: sched: training job (\S+): step (\d+) of \d+ committed`)

// commitTimes reads the log stamps (millisecond resolution) of job's first n step commits
// from the nodes' logs; a step committed twice (by a new coordinator) counts its first.
func commitTimes(d *scenario.Driver, job string, n int) ([]time.Time, error) {
	at := make([]time.Time, n)
	for _, nd := range d.Cluster.Nodes() {
		b, _ := os.ReadFile(filepath.Join(nd.DataDir, "node.log"))
		for _, m := range commitAtRE.FindAllStringSubmatch(string(b), -1) {
			step, _ := strconv.Atoi(m[3])
			t, err := time.Parse("2006-01-02T15:04:05.000Z07:00", m[1])
			if m[2] != job || step < 1 || step > n || err != nil {
				continue
			}
			if at[step-1].IsZero() || t.Before(at[step-1]) {
				at[step-1] = t
			}
		}
	}
	for i, t := range at {
		if t.IsZero() {
			return nil, fmt.Errorf("cluster job %s: no commit of step %d in the logs", job, i+1)
		}
	}
	return at, nil
}

// breakdown reads job's shard and reduce times (after the warm-up steps) from the logs.
func breakdown(d *scenario.Driver, job string, warm int, r *round) {
	med := func(re *regexp.Regexp) float64 {
		var v []float64
		for _, n := range d.Cluster.Nodes() {
			b, _ := os.ReadFile(filepath.Join(n.DataDir, "node.log"))
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				step, _ := strconv.Atoi(m[2])
				ms, _ := strconv.ParseFloat(m[3], 64)
				if m[1] == job && step > warm {
					v = append(v, ms)
				}
			}
		}
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	r.ShardMillis, r.FetchMillis, r.PushMillis = med(shardRE), med(fetchRE), med(pushRE)
	r.ReduceMillis, r.CommitMillis = med(reduceRE), med(commitRE)
}

func main() {
	bin := flag.String("bin", "bin/idunno", "the idunno binary")
	model := flag.String("model", "resnet18", "zoo model")
	shape := flag.String("input-shape", "1,32,32", "model input shape")
	resize := flag.String("resize", "32x32", "resize the images to HxW")
	batch := flag.Int("batch", 256, "global batch")
	threads := flag.Int("threads", 2, "kernel threads (both sides)")
	steps := flag.Int("steps", 20, "steps timed per round")
	warm := flag.Int("warmup", 2, "steps not timed at the start of each round")
	rounds := flag.Int("rounds", 2, "rounds (local then cluster)")
	keep := flag.Bool("keep", false, "keep the cluster's folder (the nodes' logs) afterwards")
	images := flag.String("images", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "training images")
	labels := flag.String("labels", "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "training labels")
	flag.Parse()
	o := opts{bin: *bin, model: *model, shape: *shape, resize: *resize, batch: *batch, threads: *threads, steps: *steps,
		warm: *warm, rounds: *rounds, keep: *keep, images: *images, labels: *labels}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

type opts struct {
	bin, model, shape, resize, images, labels string
	batch, threads, steps, warm, rounds       int
	keep                                      bool
}

func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

// summarize turns step completion times into a round's figures.
func summarize(where string, r int, at []time.Time, warm int) round {
	var d []float64
	for i := warm + 1; i < len(at); i++ {
		d = append(d, at[i].Sub(at[i-1]).Seconds())
	}
	var sum float64
	for _, x := range d {
		sum += x
	}
	slices.Sort(d)
	return round{Where: where, Round: r, Steps: len(d), StepSeconds: d[len(d)/2], MeanSeconds: sum / float64(len(d)), Load1: load1()}
}

func run(o opts) error {
	var shape []int64
	for _, f := range strings.Split(o.shape, ",") {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return fmt.Errorf("--input-shape %q", o.shape)
		}
		shape = append(shape, n)
	}
	var pre dataset.Preprocess
	if _, err := fmt.Sscanf(o.resize, "%dx%d", &pre.Resize[0], &pre.Resize[1]); err != nil {
		return fmt.Errorf("--resize %q", o.resize)
	}
	pre.Scale = 1.0 / 255
	m, err := zoo.Build(o.model, zoo.Options{InputShape: shape, Classes: 10, Seed: 1, Init: zoo.InitTorch})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "idunno-overhead-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "overhead: keeping", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	modelFile := filepath.Join(dir, "init.onnx")
	if err := os.WriteFile(modelFile, onnx.Encode(m), 0o644); err != nil {
		return err
	}
	data, err := loadData(o.images, o.labels, pre)
	if err != nil {
		return err
	}
	d, err := scenario.Up(o.bin, dir, 2, 0, false) // a coordinator and one worker
	if err != nil {
		return err
	}
	defer d.Down()
	if err := d.Steps([]string{"put", o.images, "images.gz"}, []string{"put", o.labels, "labels.gz"},
		[]string{"put", modelFile, "init.onnx"}, []string{"train", "start"}); err != nil {
		return err
	}
	var res []round
	emit := func(r round) {
		res = append(res, r)
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}
	n := o.warm + o.steps + 1
	for r := 1; r <= o.rounds; r++ {
		// local: train.Local with the same settings, stopped after n steps
		cfg := train.Config{Plan: train.Plan{Batch: o.batch, Shards: 1, Epochs: 1, Seed: 1}, LR: 0.01,
			Optimizer: kernel.Optimizer{Kind: "sgd", Momentum: 0.9}, Schedule: train.Schedule{Kind: "constant"}, Threads: o.threads}
		ctx, cancel := context.WithCancel(context.Background())
		var cpu0, cpu1 float64
		var at []time.Time
		_, _, err := train.Local(ctx, m, cfg, data, nil, train.Hooks{Step: func(p train.Progress) {
			at = append(at, time.Now())
			switch len(at) {
			case o.warm + 1:
				cpu0 = selfCPU()
			case n:
				cpu1 = selfCPU()
				cancel()
			}
		}})
		cancel()
		if len(at) < n {
			return fmt.Errorf("local run stopped after %d steps: %v", len(at), err)
		}
		lr := summarize("local", r, at, o.warm)
		lr.CPUSeconds = (cpu1 - cpu0) / float64(n-o.warm-1)
		emit(lr)

		// cluster: the same job on the coordinator + worker, removed after n steps
		name := fmt.Sprintf("ovh%d", r)
		if err := d.Steps([]string{"train", "add", "--name", name, "--model", "init.onnx", "--data", "images.gz", "--labels", "labels.gz",
			"--epochs", "1", "--batch", strconv.Itoa(o.batch), "--shards", "1", "--lr", "0.01", "--momentum", "0.9",
			"--scale", "1/255", "--resize", o.resize, "--threads", strconv.Itoa(o.threads)}); err != nil {
			return err
		}
		var ccpu0, ccpu1 float64
		var ncpu0, ncpu1 []float64
		seen0 := 0 // the step count when ccpu0 was read
		// Poll slowly (a fast poll is CPU the job shares the machine with) and take the
		// steps' times from the coordinator's log stamps of their commits.
		last := 0
		deadline := time.Now().Add(30 * time.Minute)
		for last < n {
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster job %s: %d steps in 30 minutes", name, last)
			}
			var s sched.TrainSummary
			if d.Call("sched.train.get", sched.NameArgs{Name: name}, &s) == nil {
				if s.Step > o.warm && ccpu0 == 0 {
					ncpu0, seen0 = nodeCPUs(d), s.Step
					ccpu0 = sum(ncpu0)
				} else if s.Step >= n && last < n {
					ncpu1 = nodeCPUs(d)
					ccpu1 = sum(ncpu1)
				}
				last = s.Step
			}
			time.Sleep(250 * time.Millisecond)
		}
		if _, err := d.Run("train", "remove", name); err != nil {
			return err
		}
		at, err = commitTimes(d, name, n)
		if err != nil {
			return err
		}
		cr := summarize("cluster", r, at, o.warm)
		if last > seen0 {
			cr.CPUSeconds = (ccpu1 - ccpu0) / float64(last-seen0)
			for i := range min(len(ncpu0), len(ncpu1)) {
				cr.NodeCPUSeconds = append(cr.NodeCPUSeconds, (ncpu1[i]-ncpu0[i])/float64(last-seen0))
			}
		}
		breakdown(d, name, o.warm, &cr)
		emit(cr)
	}
	var l, c, lc, cc []float64
	for _, r := range res {
		if r.Where == "local" {
			l, lc = append(l, r.StepSeconds), append(lc, r.CPUSeconds)
		} else {
			c, cc = append(c, r.StepSeconds), append(cc, r.CPUSeconds)
		}
	}
	ml, mc := median(l), median(c)
	mlc, mcc := median(lc), median(cc)
	fmt.Printf("# %s batch %d, %d threads: local %.3f s/step, cluster %.3f s/step: overhead %+.1f%%; CPU per step local %.3f s, cluster %.3f s: %+.1f%% (load %.1f)\n",
		o.model, o.batch, o.threads, ml, mc, 100*(mc/ml-1), mlc, mcc, 100*(mcc/mlc-1), load1())
	return nil
}

func loadData(images, labels string, pre dataset.Preprocess) (train.Data, error) {
	f, err := os.Open(images)
	if err != nil {
		return train.Data{}, err
	}
	defer f.Close()
	ds, err := dataset.Open(f)
	if err != nil {
		return train.Data{}, err
	}
	lf, err := os.Open(labels)
	if err != nil {
		return train.Data{}, err
	}
	defer lf.Close()
	l32, err := dataset.ReadLabels(labels, lf)
	if err != nil {
		return train.Data{}, err
	}
	l := make([]int64, len(l32))
	for i, v := range l32 {
		l[i] = int64(v)
	}
	return train.Data{Images: ds, Labels: l, Prep: pre}, nil
}

// selfCPU is this process's CPU time so far, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// nodeCPUs is the CPU time so far of each of the cluster's node processes, in seconds.
func nodeCPUs(d *scenario.Driver) []float64 {
	var out []float64
	for _, nd := range d.Cluster.Nodes() {
		var sum float64
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", nd.PID))
		if err != nil {
			out = append(out, 0)
			continue
		}
		// fields after the command's closing parenthesis: state is field 3, utime 14, stime 15
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			out = append(out, 0)
			continue
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		sum += (u + st) / 100 // USER_HZ, 100 on Linux
		out = append(out, sum)
	}
	return out
}

func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}
