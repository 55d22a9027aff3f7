// Command recovery measures how long a training job on a local cluster stalls after a
// kill -9: the time from killing a worker (or the coordinator) to the next committed step,
// failure detection and takeover included. Each step has one shard per node (the
// coordinator computes shards too) and the kill comes just after a step was committed, so
// the victim holds a shard of the next step: the step waits for the victim's failure to be
// detected and its shard to be computed again elsewhere. It prints one JSON line per trial and a summary.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"idunno/demo/scenario"
	"idunno/sched"
)

type trial struct {
	Kind        string  `json:"kind"` // worker or coordinator
	Node        string  `json:"node"`
	StepAtKill  int     `json:"step_at_kill"`
	Seconds     float64 `json:"seconds"`      // kill -9 to the next committed step
	StepSeconds float64 `json:"step_seconds"` // median step interval just before the kill
	Recomputed  int     `json:"recomputed"`   // steps after the checkpoint the new coordinator redoes
	Load1       float64 `json:"load1"`
}

func main() {
	bin := flag.String("bin", "bin/idunno", "the idunno binary")
	nodes := flag.Int("nodes", 5, "cluster size")
	workerTrials := flag.Int("worker-trials", 3, "worker kills")
	coordTrials := flag.Int("coord-trials", 2, "coordinator kills")
	batch := flag.Int("batch", 1280, "global batch (cut into one shard per node, so every node holds one when a step starts)")
	images := flag.String("images", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "training images")
	labels := flag.String("labels", "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "training labels")
	flag.Parse()
	if err := run(*bin, *nodes, *batch, *workerTrials, *coordTrials, *images, *labels); err != nil {
		fmt.Fprintln(os.Stderr, "recovery:", err)
		os.Exit(1)
	}
}

func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

func run(bin string, nodes, batch, workerTrials, coordTrials int, images, labels string) error {
	dir, err := os.MkdirTemp("", "idunno-recovery-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d, err := scenario.Up(bin, dir, nodes, 0, false)
	if err != nil {
		return err
	}
	defer d.Down()
	if err := d.Steps([]string{"put", images, "images.gz"}, []string{"put", labels, "labels.gz"}, []string{"train", "start"},
		[]string{"train", "add", "--name", "rec", "--model", "zoo:lenet5", "--input-shape", "1,28,28", "--data", "images.gz",
			"--labels", "labels.gz", "--epochs", "20", "--batch", strconv.Itoa(batch), "--shards", strconv.Itoa(nodes), "--scale", "1/255",
			"--checkpoint-every", "20", "--threads", "1"}); err != nil {
		return err
	}
	get := func() (sched.TrainSummary, bool) {
		var s sched.TrainSummary
		return s, d.Call("sched.train.get", sched.NameArgs{Name: "rec"}, &s) == nil
	}
	// stepTimes watches n committed steps and returns the median interval between them.
	stepTimes := func(n int) (sched.TrainSummary, float64, error) {
		var last sched.TrainSummary
		var at time.Time
		var gaps []float64
		deadline := time.Now().Add(5 * time.Minute)
		for len(gaps) < n {
			if time.Now().After(deadline) {
				return last, 0, fmt.Errorf("training does not progress (step %d)", last.Step)
			}
			s, ok := get()
			if ok && s.Complete {
				return s, 0, fmt.Errorf("training finished before the trials did")
			}
			if ok && s.Step != last.Step {
				if !at.IsZero() && s.Step == last.Step+1 {
					gaps = append(gaps, time.Since(at).Seconds())
				}
				at, last = time.Now(), s
			}
			time.Sleep(5 * time.Millisecond)
		}
		slices.Sort(gaps)
		return last, gaps[len(gaps)/2], nil
	}
	var trials []trial
	kill := func(kind string) error {
		info, err := d.Info()
		if err != nil {
			return err
		}
		victim := info.Coordinator
		if kind == "worker" {
			ws, err := d.Workers()
			if err != nil || len(ws) == 0 {
				return fmt.Errorf("no worker to kill: %v", err)
			}
			victim = ws[len(trials)%len(ws)]
		}
		s, med, err := stepTimes(10)
		if err != nil {
			return err
		}
		// a step was just committed and its successor's shards leased: the victim (every
		// node computes) holds one that is not back yet
		time.Sleep(time.Duration(med * 0.2 * float64(time.Second)))
		t0 := time.Now()
		if err := d.Cluster.Kill(victim); err != nil {
			return err
		}
		tr := trial{Kind: kind, Node: victim, StepAtKill: s.Step, StepSeconds: med, Load1: load1()}
		for {
			if time.Since(t0) > 2*time.Minute {
				return fmt.Errorf("no step committed for 2 minutes after killing %s", victim)
			}
			n, ok := get()
			if ok && (n.Step > s.Step || n.Replays > s.Replays) {
				tr.Seconds = time.Since(t0).Seconds()
				tr.Recomputed = s.Step - n.CheckpointStep
				if kind == "worker" {
					tr.Recomputed = 0
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		trials = append(trials, tr)
		b, _ := json.Marshal(tr)
		fmt.Println(string(b))
		for try := 0; ; try++ { // its ports may take a moment to be free again
			err := d.Cluster.Restart(victim)
			if err == nil || try == 10 {
				return err
			}
			time.Sleep(time.Second)
		}
	}
	for i := 0; i < workerTrials; i++ {
		if err := kill("worker"); err != nil {
			return err
		}
	}
	for i := 0; i < coordTrials; i++ {
		if err := kill("coordinator"); err != nil {
			return err
		}
	}
	for _, kind := range []string{"worker", "coordinator"} {
		var v []float64
		for _, t := range trials {
			if t.Kind == kind {
				v = append(v, t.Seconds)
			}
		}
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		fmt.Printf("# %s kill -9 to the next committed step: median %s s, max %s s over %d trials (load %.1f)\n", kind,
			strconv.FormatFloat(med, 'f', 2, 64), strconv.FormatFloat(v[len(v)-1], 'f', 2, 64), len(v), load1())
	}
	return nil
}
