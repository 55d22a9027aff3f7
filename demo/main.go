// Command demo is `make demo`: it starts a 10-node local cluster, stores Fashion-MNIST and two
// models in SDFS, runs two inference jobs of very different cost side by side, kills a worker
// and then the coordinator mid-run, and ends with a checked summary.
//
// Every user-visible step runs the real `idunno` command and prints it; the demo itself only
// watches (through the scheduler's client API) to time recoveries and check results.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"idunno/demo/scenario"
	"idunno/sched"
)

type config struct {
	fmnistLabels, fmnistTrain, fmnistTrainLabels string
	trainEpochs                                  int
	bin, dir                                     string
	nodes, basePort                              int
	queries                                      int
	bigModel, bigShape                           string
	fmnist                                       string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin/idunno", "the idunno binary")
	flag.StringVar(&c.dir, "dir", "", "working directory (default: a new temporary one)")
	flag.IntVar(&c.nodes, "nodes", 10, "cluster size")
	flag.IntVar(&c.basePort, "base-port", 0, "first port (0: a free one)")
	flag.IntVar(&c.queries, "queries", 2000, "queries per job (a prefix of Fashion-MNIST's test set)")
	flag.StringVar(&c.bigModel, "big", "resnet50", "the expensive model (from idunno zoo)")
	flag.StringVar(&c.bigShape, "big-shape", "224x224", "input size of the expensive model")
	flag.StringVar(&c.fmnist, "fmnist", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "Fashion-MNIST images (IDX)")
	flag.StringVar(&c.fmnistLabels, "fmnist-labels", "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "Fashion-MNIST test labels")
	flag.StringVar(&c.fmnistTrain, "fmnist-train", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "Fashion-MNIST training images")
	flag.StringVar(&c.fmnistTrainLabels, "fmnist-train-labels", "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz", "Fashion-MNIST training labels")
	flag.IntVar(&c.trainEpochs, "train-epochs", 1, "epochs of the training act")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demo is one run: the cluster driver and what was measured.
type demo struct {
	config
	*scenario.Driver
	summary   []string
	rateGaps  []float64 // |r1-r2|/max(r1,r2) of the two jobs' 10 s rates while both ran
	lastFault time.Time // rate windows within 12 s of a crash are not fair-time samples
	started   time.Time
}

func run(c config) error {
	var err error
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "idunno-demo-"); err != nil {
			return err
		}
	}
	d := &demo{config: c, started: time.Now()}
	say("1. Start a %d-node cluster on 127.0.0.1 (failure detector, SDFS, coordinator + hot standby, workers)", c.nodes)
	if d.Driver, err = scenario.Up(c.bin, c.dir, c.nodes, c.basePort, true); err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.script() }()
	select {
	case err = <-done:
	case s := <-stop:
		err = fmt.Errorf("stopped by %v", s)
	}
	say("Stopping the cluster")
	d.Down()
	if err == nil {
		say("Summary")
		for _, l := range d.summary {
			fmt.Println("  " + l)
		}
		fmt.Printf("  demo took %.0f s; working directory %s\n", time.Since(d.started).Seconds(), c.dir)
	}
	return err
}

func (d *demo) script() error {
	small, big := "lenet", d.bigModel
	say("2. Store the dataset (the first %d images of Fashion-MNIST's test set) and two models in SDFS", d.queries)
	data := filepath.Join(d.dir, "fmnist.idx")
	if err := scenario.IDXPrefix(d.fmnist, data, d.queries); err != nil {
		return err
	}
	smallFile, bigFile := filepath.Join(d.dir, "lenet5.onnx"), filepath.Join(d.dir, big+".onnx")
	h, w, _ := strings.Cut(d.bigShape, "x")
	if err := d.Steps(
		[]string{"put", data, "fmnist-test.idx"},
		[]string{"zoo", "lenet5", "--out", smallFile, "--classes", "10"},
		[]string{"zoo", big, "--out", bigFile, "--input-shape", "3," + h + "," + w, "--classes", "10"},
	); err != nil {
		return err
	}
	labels := filepath.Join(d.dir, "fmnist-labels.idx")
	if err := scenario.LabelsPrefix(d.fmnistLabels, labels, d.queries); err != nil {
		return err
	}
	say("3. Training phase: train LeNet-5 on Fashion-MNIST's %d training images on the cluster (data-parallel, %d shards a step), killing a worker mid-training", 60000, 4)
	if err := d.Steps(
		[]string{"put", d.fmnistTrain, "fmnist-train.gz"},
		[]string{"put", d.fmnistTrainLabels, "fmnist-train-labels.gz"},
		[]string{"put", labels, "fmnist-test-labels.idx"},
		[]string{"train", "start"},
		[]string{"train", "add", "--name", small, "--model", "zoo:lenet5", "--input-shape", "1,28,28",
			"--data", "fmnist-train.gz", "--labels", "fmnist-train-labels.gz", "--epochs", strconv.Itoa(d.trainEpochs),
			"--batch", "64", "--shards", "4", "--lr", "0.02", "--momentum", "0.9", "--scale", "0.003921569", "--checkpoint-every", "100"},
	); err != nil {
		return err
	}
	if err := d.trainWithFault(small); err != nil {
		return err
	}
	if err := d.Steps(
		[]string{"train", "stats", small},
		[]string{"train", "add", "--name", big, "--model", bigFile},
		[]string{"train", "stop"},
		[]string{"inference", "start"},
	); err != nil {
		return err
	}
	jobs := []string{"fashion-lenet", "fashion-" + big}
	say("4. Two inference jobs side by side: %s at 28x28 and %s at %s", small, big, d.bigShape)
	// The expensive job goes first: added second, it would find the cheap one already done
	// (LeNet-5 answers a thousand queries in well under a second when it has the cluster).
	// The cheap one joins once the first has measured its cost (1 -> 2 jobs, as the spec's
	// fair-time scenario has it): the controller then splits from a measured cost, not only
	// from the models' FLOPs.
	if err := d.Steps([]string{"job", "add", "--name", jobs[1], "--model", big, "--data", "fmnist-test.idx",
		"--batch", "4", "--scale", "0.003921569", "--grey-to-rgb", "--resize", d.bigShape}); err != nil {
		return err
	}
	if _, err := scenario.WaitUntil(2*time.Minute, func() bool {
		st, err := d.Stats(jobs[1])
		return err == nil && st.Done > 0
	}); err != nil {
		return fmt.Errorf("%s never finished a task: %w", jobs[1], err)
	}
	if err := d.Steps([]string{"job", "add", "--name", jobs[0], "--model", small, "--data", "fmnist-test.idx",
		"--labels", "fmnist-test-labels.idx", "--batch", "8", "--scale", "0.003921569"}); err != nil {
		return err
	}
	say("5. Live statistics (what idunno job stats and idunno top show), then faults")
	steps := []struct {
		frac  float64
		fault func([]string) error
	}{{0.25, d.killWorker}, {0.55, d.killCoordinator}, {1, nil}}
	for i, s := range steps {
		if err := d.watchUntil(jobs, s.frac); err != nil {
			return err
		}
		if i == 0 {
			d.noteStart(jobs)
		}
		if s.fault != nil {
			d.lastFault = time.Now()
			if err := s.fault(jobs); err != nil {
				return err
			}
		}
	}
	say("6. Results: fetch each job's CSV from SDFS and check every query is answered exactly once")
	for _, j := range jobs {
		local := filepath.Join(d.dir, j+".csv")
		// Every query done is not yet the job complete: the result CSV is assembled last.
		if err := d.Steps([]string{"job", "wait", j, "--timeout", "2m"}, []string{"job", "stats", j},
			[]string{"job", "result", j, local}); err != nil {
			return err
		}
		n, lost, dup, err := scenario.CheckResult(local, d.queries)
		if err != nil {
			return err
		}
		if st, err := d.Stats(j); err == nil && st.Accuracy != nil {
			d.note("%s: accuracy of the trained model against the test labels: %.2f%%", j, 100**st.Accuracy)
		}
		s, _ := d.Job(j)
		d.note("%s: %d of %d queries answered, %d lost, %d duplicated (checked in the CSV); result in SDFS as %s, copy at %s",
			j, n, d.queries, lost, dup, s.Result, local)
		if lost+dup > 0 {
			return fmt.Errorf("%s: %d lost and %d duplicated queries", j, lost, dup)
		}
	}
	if len(d.rateGaps) > 0 {
		slices.Sort(d.rateGaps)
		d.note("fair time: while both jobs ran (away from the crashes), their 10 s query rates differed by %.1f%% (median) and %.1f%% (worst) over %d one-second samples",
			100*d.rateGaps[len(d.rateGaps)/2], 100*d.rateGaps[len(d.rateGaps)-1], len(d.rateGaps))
	} else {
		d.note("fair time: no sample with both jobs running past their first 10 s")
	}
	return nil
}

// noteStart records, before any fault, how each job was split and started (the scheduler's
// statistics are not journaled, so a new coordinator would not know).
func (d *demo) noteStart(jobs []string) {
	for _, j := range jobs {
		if s, err := d.Job(j); err == nil {
			d.note("%s: first query ran %.0f ms after the job was added; split chosen when it was added: %s", j, s.FirstQueryMS, s.SplitAtAdd)
		}
	}
}

// watchUntil prints both jobs' stats every second until the slowest has done frac of its queries.
func (d *demo) watchUntil(jobs []string, frac float64) error {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		var line []string
		slowest := 1.0
		var rates []float64
		for _, j := range jobs {
			st, err := d.Stats(j)
			if err != nil {
				line = append(line, fmt.Sprintf("%s: (%v)", j, err))
				slowest = 0
				continue
			}
			f := float64(st.Done) / math.Max(1, float64(st.Total))
			slowest = math.Min(slowest, f)
			if st.Done < st.Total {
				rates = append(rates, st.Rate10s)
			}
			line = append(line, fmt.Sprintf("%-16s %5d/%-5d %6.1f q/s p50 %7.1f ms p99 %7.1f ms, %d workers",
				j, st.Done, st.Total, st.Rate10s, st.LatencyMS.P50, st.LatencyMS.P99, len(st.Workers)))
		}
		// A fair-time sample needs both jobs running and a full 10 s rate window behind them.
		if len(rates) == 2 && rates[0] > 0 && rates[1] > 0 && d.pastWarmup(jobs) && time.Since(d.lastFault) > 12*time.Second {
			d.rateGaps = append(d.rateGaps, math.Abs(rates[0]-rates[1])/math.Max(rates[0], rates[1]))
		}
		fmt.Printf("  [%5.1fs] %s\n", time.Since(d.started).Seconds(), strings.Join(line, " | "))
		if slowest >= frac {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("jobs did not reach %.0f%% within 10 minutes", 100*frac)
}

// pastWarmup reports whether every job has been running for more than its 10 s rate window.
func (d *demo) pastWarmup(jobs []string) bool {
	for _, j := range jobs {
		s, err := d.Job(j)
		if err != nil || s.Seconds < 12 {
			return false
		}
	}
	return true
}

// killWorker kills (SIGKILL) a worker serving a job and times how long until the coordinator
// has taken it off every job.
func (d *demo) killWorker(jobs []string) error {
	ws, err := d.Workers()
	if err != nil {
		return err
	}
	victim := ""
	for _, w := range ws {
		if d.Serves(w, jobs...) {
			victim = w
		}
	}
	if victim == "" {
		return fmt.Errorf("no worker to kill")
	}
	say("Killing worker %s (kill -9) mid-run", victim)
	if _, err := d.Run("cluster", "kill", "--dir", d.Cluster.Dir(), victim); err != nil {
		return err
	}
	el, err := scenario.WaitUntil(30*time.Second, func() bool { return !d.Serves(victim, jobs...) })
	if err != nil {
		return fmt.Errorf("worker %s still assigned: %w", victim, err)
	}
	fmt.Printf("  %s off the jobs after %.2f s\n", victim, el.Seconds())
	d.note("worker crash: %s was taken off every job and its tasks handed to others %.2f s after kill -9", victim, el.Seconds())
	return nil
}

// killCoordinator kills the coordinator, times how long until its hot standby answers as
// coordinator with a higher epoch, and restarts the old one (it rejoins as standby).
func (d *demo) killCoordinator([]string) error {
	before, err := d.Info()
	if err != nil {
		return err
	}
	say("Killing the coordinator %s (kill -9) mid-run; %s is its hot standby", before.Coordinator, before.Standby)
	if _, err := d.Run("cluster", "kill", "--dir", d.Cluster.Dir(), before.Coordinator); err != nil {
		return err
	}
	var now coordinator
	el, err := scenario.WaitUntil(30*time.Second, func() bool {
		i, err := d.Info()
		now = coordinator{i.Coordinator, i.Epoch}
		return err == nil && i.Epoch > before.Epoch && i.Coordinator != before.Coordinator
	})
	if err != nil {
		return fmt.Errorf("no new coordinator after %s was killed: %w", before.Coordinator, err)
	}
	fmt.Printf("  %s is coordinator (epoch %d) after %.2f s\n", now.name, now.epoch, el.Seconds())
	d.note("coordinator crash: %s took over from %s (epoch %d -> %d) %.2f s after kill -9; workers kept processing",
		now.name, before.Coordinator, before.Epoch, now.epoch, el.Seconds())
	say("Restarting %s: it rejoins as standby", before.Coordinator)
	_, err = d.Run("cluster", "restart", "--dir", d.Cluster.Dir(), before.Coordinator)
	return err
}

// trainWithFault follows a training job, kills a worker that computed shards a third of the
// way through, and waits for the job to complete.
func (d *demo) trainWithFault(job string) error {
	var s sched.TrainSummary
	killed := false
	var killedAt time.Time
	var recovered bool
	shown := -1
	_, err := scenario.WaitUntil(8*time.Minute, func() bool {
		if err := d.Call("sched.train.get", sched.NameArgs{Name: job}, &s); err != nil {
			return false
		}
		if s.Step/100 != shown {
			shown = s.Step / 100
			fmt.Printf("  step %d/%d  epoch %d/%d  loss %s\n", s.Step, s.StepsTotal, s.Epoch+1, s.Epochs, lossString(s.Loss))
		}
		if !killed && s.Step >= s.StepsTotal/3 && len(s.Workers) > 0 {
			info, _ := d.Info()
			for _, w := range s.Workers {
				if w.Name != info.Coordinator {
					fmt.Println()
					say("Killing worker %s (kill -9) mid-training, at step %d", w.Name, s.Step)
					if _, err := d.Run("cluster", "kill", "--dir", d.Cluster.Dir(), w.Name); err == nil {
						killed, killedAt = true, time.Now()
					}
					break
				}
			}
			return false
		}
		if killed && !recovered {
			var now sched.TrainSummary
			if d.Call("sched.train.get", sched.NameArgs{Name: job}, &now) == nil && now.Step > s.Step {
				recovered = true
			}
		}
		return s.Complete
	})
	fmt.Println()
	if err != nil {
		return fmt.Errorf("training job %s did not complete: %w", job, err)
	}
	for _, e := range s.EpochRecords {
		if !e.ExactlyOnce {
			return fmt.Errorf("training job %s: epoch %d's record does not show every sample exactly once: %+v", job, e.Epoch, e)
		}
	}
	if killed {
		d.note("training: %s trained on the cluster in %d steps (%d epochs, %.0f samples/s) with a worker killed at %s; every epoch used every one of the 60,000 samples exactly once (per-epoch records); final loss %s; model registered as %s",
			job, s.StepsTotal, s.Epochs, s.SamplesPerSec, killedAt.Format("15:04:05"), lossString(s.Loss), s.Output)
	}
	return nil
}

func lossString(l *float64) string {
	if l == nil {
		return "-"
	}
	return strconv.FormatFloat(*l, 'f', 4, 64)
}

type coordinator struct {
	name  string
	epoch uint64
}

func (d *demo) note(format string, args ...any) {
	d.summary = append(d.summary, fmt.Sprintf(format, args...))
}

func say(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }
