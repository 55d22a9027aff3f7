// Command cluster runs the cluster benchmarks of `make bench` on a 10-node local cluster:
// fair-time convergence after a second job arrives, fair time for 4 and 8 jobs of very
// different cost (with the aggregate throughput against running them one after another),
// and the aggregate query rate around a worker crash, three simultaneous worker crashes and
// a coordinator crash. It writes CSV and
// PNG files under --out and prints the figures the README quotes.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"idunno/benchmarks/plot"
	"idunno/demo/scenario"
)

type options struct {
	bin, out, fmnist string
	nodes            int
	sample           time.Duration
	manyEvents       bool
	manyAlone        bool
	keep             bool
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/idunno", "the idunno binary")
	flag.StringVar(&o.out, "out", "benchmarks/out", "output directory")
	flag.StringVar(&o.fmnist, "fmnist", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "Fashion-MNIST images")
	flag.IntVar(&o.nodes, "nodes", 10, "cluster size")
	flag.DurationVar(&o.sample, "sample", 250*time.Millisecond, "sampling interval")
	which := flag.String("run", "fairtime,manyjobs,recovery", "scenarios to run (fairtime, manyjobs, recovery)")
	many := flag.String("many", "2,4,8", "manyjobs: job counts to run (2: ResNet-50 and LeNet-5 added together; multiples of 4: the four jobs, each n/4 times, added 3 s apart)")
	lenetBatch := flag.Int("many-lenet-batch", 64, "manyjobs: LeNet-5's batch (a task is at least one batch, so at a low rate one LeNet-5 task moves its 10 s rate by batch / (10 s x rate))")
	flag.BoolVar(&o.keep, "keep", false, "keep each run's cluster directory (node logs, SDFS data: about 1.6 GB for manyjobs) instead of removing it")
	flag.BoolVar(&o.manyAlone, "many-alone", true, "manyjobs: run each job alone before the runs together and after each, for the aggregate-throughput ratio")
	flag.BoolVar(&o.manyEvents, "many-events", false, "manyjobs: after the steady state, kill 2 workers, restart them, remove the last job, add one again, and report how long the spread takes to settle after each")
	weights := flag.String("many-weights", "1,1,1,1", "manyjobs: the fair-time weights (job add --weight) of ResNet-50, ResNet-18, MobileNetV2 and LeNet-5; the spread is of rate over weight")
	flag.Parse()
	for i := range manyConfigs {
		if manyConfigs[i].model == "lenet5" {
			manyConfigs[i].batch = *lenetBatch
		}
	}
	if ws := strings.Split(*weights, ","); len(ws) != len(manyConfigs) {
		fmt.Fprintf(os.Stderr, "bench cluster: --many-weights %q: want %d weights\n", *weights, len(manyConfigs))
		os.Exit(2)
	} else {
		for i, w := range ws {
			if _, err := fmt.Sscan(w, &manyConfigs[i].weight); err != nil || manyConfigs[i].weight <= 0 {
				fmt.Fprintf(os.Stderr, "bench cluster: --many-weights %q: %q is not a positive number\n", *weights, w)
				os.Exit(2)
			}
		}
	}
	for _, s := range strings.Split(*which, ",") {
		var err error
		switch s {
		case "fairtime":
			err = fairTime(o)
		case "recovery":
			err = recovery(o)
		case "manyjobs":
			var counts []int
			for _, f := range strings.Split(*many, ",") {
				var n int
				if _, err := fmt.Sscan(f, &n); err != nil || n <= 0 || (n%4 != 0 && n != 2) {
					fmt.Fprintf(os.Stderr, "bench cluster: --many %q: want 2 or multiples of 4\n", *many)
					os.Exit(2)
				}
				counts = append(counts, n)
			}
			err = manyJobs(o, counts)
		default:
			err = fmt.Errorf("unknown scenario %q", s)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench cluster:", err)
			os.Exit(1)
		}
	}
}

// setup starts a cluster, stores the dataset and the named zoo models (name:HxW), and starts
// the inference phase.
func setup(o options, models ...string) (*scenario.Driver, error) {
	return setupAs(o, nil, models...)
}

// setupAs is setup that also registers each model under the names alias gives for it
// (the same file).
func setupAs(o options, alias func(model string) []string, models ...string) (*scenario.Driver, error) {
	dir, err := os.MkdirTemp("", "idunno-bench-")
	if err != nil {
		return nil, err
	}
	d, err := scenario.Up(o.bin, dir, o.nodes, 0, false)
	if err != nil {
		return nil, err
	}
	steps := [][]string{{"put", o.fmnist, "fmnist.idx.gz"}, {"train", "start"}}
	for _, m := range models {
		name, size, _ := strings.Cut(m, ":")
		h, w, _ := strings.Cut(size, "x")
		file := filepath.Join(dir, name+".onnx")
		steps = append(steps, []string{"zoo", name, "--out", file, "--classes", "10", "--input-shape", channels(name) + "," + h + "," + w},
			[]string{"train", "add", "--name", name, "--model", file})
		if alias != nil {
			for _, a := range alias(name) {
				steps = append(steps, []string{"train", "add", "--name", a, "--model", file})
			}
		}
	}
	steps = append(steps, []string{"train", "stop"}, []string{"inference", "start"})
	if err := d.Steps(steps...); err != nil {
		down(o, d)
		return nil, err
	}
	return d, nil
}

// down stops the cluster and removes its directory, unless --keep.
func down(o options, d *scenario.Driver) {
	d.Down()
	if o.keep {
		fmt.Printf("bench cluster: kept %s\n", d.Dir)
		return
	}
	os.RemoveAll(d.Dir)
}

func channels(model string) string {
	if model == "lenet5" {
		return "1"
	}
	return "3"
}

func jobArgs(name, model, size string, batch int) []string {
	a := []string{"job", "add", "--name", name, "--model", model, "--data", "fmnist.idx.gz",
		"--batch", fmt.Sprint(batch), "--task-size", fmt.Sprint(batch * 4), "--scale", "0.003921569"}
	if model != "lenet5" {
		a = append(a, "--grey-to-rgb", "--resize", size)
	}
	return a
}

// sampler records each job's done count over time.
type sampler struct {
	d     *scenario.Driver
	jobs  []string
	start time.Time
	t     []float64
	done  [][]float64
}

func (s *sampler) sample() {
	s.t = append(s.t, time.Since(s.start).Seconds())
	for i, j := range s.jobs {
		st, err := s.d.Stats(j)
		v := 0.0
		if err == nil {
			v = float64(st.Done)
		} else if n := len(s.done[i]); n > 0 {
			v = s.done[i][n-1]
		}
		s.done[i] = append(s.done[i], v)
	}
}

// rates turns done counts into queries/s over a sliding window of w seconds.
func (s *sampler) rates(i int, w float64) []float64 {
	r := make([]float64, len(s.t))
	k := 0
	for j := range s.t {
		for s.t[j]-s.t[k] > w {
			k++
		}
		if dt := s.t[j] - s.t[k]; dt > 0 {
			r[j] = (s.done[i][j] - s.done[i][k]) / dt
		}
	}
	return r
}

// run samples until dur has passed since start, running each event once its time has come.
func (s *sampler) run(dur time.Duration, events map[time.Duration]func()) {
	for time.Since(s.start) < dur {
		next := time.Now().Add(250 * time.Millisecond)
		s.sample()
		for at, f := range events {
			if time.Since(s.start) >= at {
				f()
				delete(events, at)
			}
		}
		time.Sleep(time.Until(next))
	}
}

// fairTime runs a cheap job alone, adds an expensive one, and records both rates.
func fairTime(o options) error {
	d, err := setup(o, "lenet5:28x28", "resnet18:160x160")
	if err != nil {
		return err
	}
	defer down(o, d)
	// The costly job runs alone first; the cheap one arrives 15 s later. (The other order
	// measures nothing: alone, the cheap job finishes its 10,000 queries in a few seconds.)
	s := &sampler{d: d, jobs: []string{"costly-resnet18", "cheap-lenet5"}, start: time.Now(), done: make([][]float64, 2)}
	if _, err := d.Run(jobArgs(s.jobs[0], "resnet18", "160x160", 4)...); err != nil {
		return err
	}
	addAt := 0.0
	s.run(90*time.Second, map[time.Duration]func(){15 * time.Second: func() {
		addAt = time.Since(s.start).Seconds()
		if _, err := d.Run(jobArgs(s.jobs[1], "lenet5", "", 8)...); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}})
	r0, r1 := s.rates(0, 5), s.rates(1, 5)
	rows := make([][]float64, len(s.t))
	for i := range s.t {
		rows[i] = []float64{s.t[i], r0[i], r1[i]}
	}
	if err := plot.WriteCSV(filepath.Join(o.out, "fairtime.csv"), []string{"seconds", s.jobs[0] + "_qps", s.jobs[1] + "_qps"}, rows); err != nil {
		return err
	}
	err = plot.Chart{Title: "Fair-time convergence after a second job arrives (5 s window)", XLabel: "time (s)", YLabel: "queries/s",
		Series: []plot.Series{{Name: s.jobs[0], X: s.t, Y: r0}, {Name: s.jobs[1], X: s.t, Y: r1}},
		Marks:  []plot.Mark{{X: addAt, Label: "job 2 added"}}}.Save(filepath.Join(o.out, "fairtime.png"))
	if err != nil {
		return err
	}
	j1, _ := d.Job(s.jobs[1])
	// Steady state: from 20 s after the add until the first job finishes (each sample's
	// window looks back, so none of them spans a finished job's tail).
	end := math.Inf(1)
	for i := range s.t {
		last := len(s.t) - 1
		if s.done[0][i] >= s.done[0][last] || s.done[1][i] >= s.done[1][last] {
			end = s.t[i]
			break
		}
	}
	var gaps []float64
	for i := range s.t {
		if s.t[i] > addAt+20 && s.t[i] <= end && r0[i] > 0 && r1[i] > 0 {
			gaps = append(gaps, math.Abs(r0[i]-r1[i])/math.Max(r0[i], r1[i]))
		}
	}
	fmt.Printf("fairtime: split chosen when job 2 was added: %s; its first query ran %.0f ms after it was added\n", j1.SplitAtAdd, j1.FirstQueryMS)
	if len(gaps) > 0 {
		fmt.Printf("fairtime: from 20 s after the add, rates differ by mean %.1f%%, max %.1f%% (%d samples, 5 s window)\n",
			100*mean(gaps), 100*maxOf(gaps), len(gaps))
	}
	return nil
}

// recovery runs one job and crashes a worker, then three workers at once, then the coordinator.
func recovery(o options) error {
	// 112x112 keeps the job running through all three crashes (about 10,000 queries in 60 s).
	d, err := setup(o, "resnet18:112x112")
	if err != nil {
		return err
	}
	defer down(o, d)
	s := &sampler{d: d, jobs: []string{"steady-resnet18"}, start: time.Now(), done: make([][]float64, 1)}
	if _, err := d.Run(jobArgs(s.jobs[0], "resnet18", "112x112", 4)...); err != nil {
		return err
	}
	var marks []plot.Mark
	kill := func(label string, pick func() []string) func() {
		return func() {
			victims := pick()
			marks = append(marks, plot.Mark{X: time.Since(s.start).Seconds(), Label: label})
			if err := d.Cluster.Kill(victims...); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	}
	workers := func(n int) func() []string {
		return func() []string {
			ws, _ := d.Workers()
			return ws[:min(n, len(ws))]
		}
	}
	coordinator := func() []string {
		i, _ := d.Info()
		return []string{i.Coordinator}
	}
	s.run(60*time.Second, map[time.Duration]func(){
		15 * time.Second: kill("1 worker", workers(1)),
		30 * time.Second: kill("3 workers", workers(3)),
		45 * time.Second: kill("coordinator", coordinator),
	})
	r := s.rates(0, 2)
	rows := make([][]float64, len(s.t))
	for i := range s.t {
		rows[i] = []float64{s.t[i], r[i]}
	}
	if err := plot.WriteCSV(filepath.Join(o.out, "recovery.csv"), []string{"seconds", "qps"}, rows); err != nil {
		return err
	}
	err = plot.Chart{Title: "Aggregate query rate around crashes (2 s window)", XLabel: "time (s)", YLabel: "queries/s",
		Series: []plot.Series{{Name: s.jobs[0], X: s.t, Y: r}}, Marks: marks}.Save(filepath.Join(o.out, "recovery.png"))
	if err != nil {
		return err
	}
	for _, m := range marks {
		fmt.Printf("recovery: %s: %s\n", m.Label, recoveredAfter(s.t, r, m.X))
	}
	return nil
}

// recoveredAfter says how long after a crash at t0 the rate came back to 80% of its level in
// the 5 s before the crash, scaled by nothing: a lost worker's share is expected to come back
// through the others only partly, so the figure is conservative.
func recoveredAfter(t, r []float64, t0 float64) string {
	var before []float64
	low := math.Inf(1)
	for i := range t {
		if t[i] < t0 && t[i] >= t0-5 {
			before = append(before, r[i])
		}
	}
	base := mean(before)
	for i := range t {
		if t[i] <= t0 {
			continue
		}
		low = math.Min(low, r[i])
		if t[i] > t0+2 && r[i] >= 0.8*base {
			return fmt.Sprintf("rate %.1f q/s before, lowest %.1f after, back to 80%% %.2f s after the crash", base, low, t[i]-t0)
		}
	}
	return fmt.Sprintf("rate %.1f q/s before, lowest %.1f after, not back to 80%% before the run ended", base, low)
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / math.Max(1, float64(len(v)))
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}
