package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"idunno/kernel/onnx"
	"idunno/sched"
)

// runTrainJobAdd is `idunno train add ... --data`: a training job on the cluster.
func runTrainJobAdd(args []string) error {
	fs := newFlags("train add")
	t := addTargetFlags(fs)
	name := fs.String("name", "", "training job name (also the trained model's name)")
	tf := addTrainFlags(fs, "SDFS name of the ")
	threads := fs.Int("threads", 2, "kernel threads of every shard computation")
	ckEvery := fs.Int("checkpoint-every", 0, "checkpoint every N steps (besides every epoch's end)")
	if pos, err := parseInterleaved(fs, args); err != nil {
		return err
	} else if len(pos) > 0 || *name == "" || *tf.model == "" || *tf.data == "" || *tf.labels == "" {
		return usageError("usage: idunno train add --name NAME --model INIT.onnx|SDFSNAME|zoo:NAME --data SDFS_IMAGES --labels SDFS_LABELS --epochs E --batch B [--shards S] [--lr --momentum --weight-decay --optimizer --schedule --seed --threads] [preprocessing flags] [--eval-data SDFS_IMAGES --eval-labels SDFS_LABELS]")
	}
	opt, sc, err := tf.optimizer()
	if err != nil {
		return err
	}
	spec := sched.TrainSpec{Name: *name, Model: *tf.model, Data: *tf.data, Labels: *tf.labels, EvalData: *tf.evalData,
		EvalLabels: *tf.evalLabels, Pre: tf.prep, Epochs: *tf.epochs, Batch: *tf.batch, Shards: *tf.shards, LR: *tf.lr,
		Optimizer: opt, Schedule: sc, Seed: *tf.seed, Threads: *threads, CheckpointEvery: *ckEvery}
	if err := spec.ValidateRequest(); err != nil {
		return err
	}
	// a local file or a zoo model goes to SDFS first
	var mb []byte
	if strings.HasPrefix(*tf.model, "zoo:") {
		m, err := tf.loadModel()
		if err != nil {
			return err
		}
		mb = onnx.Encode(m)
	} else if b, err := os.ReadFile(*tf.model); err == nil {
		if _, err := onnx.Decode(b); err != nil {
			return fmt.Errorf("%s: %w", *tf.model, err)
		}
		mb = b
	}
	if mb != nil {
		c, err := jobSDFS(t)
		if err != nil {
			return err
		}
		spec.Model = "idunno/train/" + *name + "/init.onnx"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		_, err = c.Put(ctx, spec.Model, bytes.NewReader(mb))
		cancel()
		if err != nil {
			return err
		}
	}
	var sum sched.TrainSummary
	if err := schedCall(t, "sched.train.add", spec, &sum); err != nil {
		return err
	}
	fmt.Printf("training job %s added: %d steps (%d epochs), %d shards a step\n", sum.Name, sum.StepsTotal, sum.Epochs, sum.Shards)
	return nil
}

// runTrainJobCmd handles train list|stats|wait|remove for training jobs; handled reports
// whether args named a training job command.
func runTrainJobCmd(sub string, args []string) (handled bool, err error) {
	fs := newFlags("train " + sub)
	t := addTargetFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 0, "train wait: give up after this long (0: never)")
	name := fs.String("name", "", "job name")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return true, err
	}
	if *name == "" && len(pos) > 0 {
		*name = pos[0]
	}
	switch sub {
	case "list":
		var l []sched.TrainSummary
		if err := schedCall(t, "sched.train.list", struct{}{}, &l); err != nil {
			return true, err
		}
		if *asJSON {
			return true, json.NewEncoder(os.Stdout).Encode(l)
		}
		var info sched.ClusterInfo
		if err := schedCall(t, "sched.info", struct{}{}, &info); err != nil {
			return true, err
		}
		for _, s := range l {
			printTrainLine(s)
		}
		for _, n := range sortedNames(info.Models) {
			fmt.Printf("model %s\t%s\n", n, info.Models[n])
		}
		return true, nil
	case "stats", "wait":
		if *name == "" {
			return true, usageErrorf("usage: idunno train %s NAME", sub)
		}
		var deadline time.Time
		if *timeout > 0 {
			deadline = time.Now().Add(*timeout)
		}
		tty := isTerminal(os.Stdout) && sub == "wait" && !*asJSON
		var lastPlain time.Time
		for {
			var s sched.TrainSummary
			err := schedCall(t, "sched.train.get", sched.NameArgs{Name: *name}, &s)
			if err != nil && sub == "stats" {
				return true, err
			}
			if err == nil && (sub == "stats" || s.Complete) {
				if tty {
					fmt.Print("\r\033[K")
				}
				if *asJSON { // losses and eval_history included: a dashboard's curves
					return true, json.NewEncoder(os.Stdout).Encode(s)
				}
				printTrainLine(s)
				for _, e := range s.EpochRecords {
					fmt.Printf("  epoch %d: %d steps, %d samples, complete %v, every sample exactly once %v\n", e.Epoch, e.Steps, e.Samples, e.Complete, e.ExactlyOnce)
				}
				for _, p := range s.EvalHistory {
					fmt.Printf("  eval after epoch %d (step %d): %d of %d right, %.2f%%\n", p.Epoch, p.Step, p.Correct, p.Count, 100*p.Accuracy)
				}
				return true, nil
			}
			if err == nil && (tty || sub == "wait" && !*asJSON && time.Since(lastPlain) >= plainEvery) {
				l := 0.0
				if s.Loss != nil {
					l = *s.Loss
				}
				line := fmt.Sprintf("step %d/%d  epoch %d/%d  loss %.4f  %.0f samples/s", s.Step, s.StepsTotal, s.Epoch+1, s.Epochs, l, s.SamplesPerSec)
				if tty {
					fmt.Printf("\r%s ", line)
				} else { // a pipe or a log: a plain line every few seconds
					fmt.Fprintln(os.Stderr, line)
					lastPlain = time.Now()
				}
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				return true, timeoutErrorf("training job %s not complete after %v", *name, *timeout)
			}
			time.Sleep(500 * time.Millisecond)
		}
	case "remove":
		if *name == "" {
			return false, nil
		}
		err := schedCall(t, "sched.train.remove", sched.NameArgs{Name: *name}, nil)
		if sched.IsNoJob(err) {
			return false, nil // a registered model: the older meaning
		}
		if err == nil {
			fmt.Printf("training job %s removed\n", *name)
		}
		return true, err
	}
	return false, nil
}

func printTrainLine(s sched.TrainSummary) { printTrainLineTo(os.Stdout, s) }

// printTrainLineTo writes one line about a training job.
func printTrainLineTo(w io.Writer, s sched.TrainSummary) {
	l := "-"
	if s.Loss != nil {
		l = fmt.Sprintf("%.4f", *s.Loss)
	}
	state := "running"
	if s.Complete {
		state = "complete: " + s.Output
	}
	fmt.Fprintf(w, "%s\tstep %d/%d\tepoch %d/%d\tloss %s\t%.0f samples/s\tcheckpoint %d\t%s\n", s.Name, s.Step, s.StepsTotal, s.Epoch+1, s.Epochs, l, s.SamplesPerSec, s.CheckpointStep, state)
}

// sparkline draws the loss curve: the losses averaged into at most width buckets, each a
// block from ▁ to █ scaled between the smallest and largest bucket.
func sparkline(v []float32, width int) string {
	if len(v) == 0 {
		return ""
	}
	n := min(width, len(v))
	b := make([]float64, n)
	for i := range b {
		lo, hi := i*len(v)/n, (i+1)*len(v)/n
		for _, x := range v[lo:hi] {
			b[i] += float64(x)
		}
		b[i] /= float64(hi - lo)
	}
	mn, mx := b[0], b[0]
	for _, x := range b {
		mn, mx = min(mn, x), max(mx, x)
	}
	bars := []rune("▁▂▃▄▅▆▇█")
	var sb strings.Builder
	for _, x := range b {
		k := 0
		if mx > mn {
			k = int((x - mn) / (mx - mn) * float64(len(bars)-1))
		}
		sb.WriteRune(bars[k])
	}
	return fmt.Sprintf("%s  %.3f -> %.3f", sb.String(), v[0], v[len(v)-1])
}
