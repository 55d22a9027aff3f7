package sched_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"idunno/demo/scenario"
	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/netfault"
	"idunno/rpc"
	"idunno/sched"
	"idunno/sched/dataset"
	"idunno/sched/train"
)

func (c *procCluster) trainProgress(job string) (sched.TrainSummary, bool) {
	var s sched.TrainSummary
	for _, n := range c.lc.Live() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.rc.CallJSON(ctx, n.RPCAddr, "sched.train.get", sched.NameArgs{Name: job}, &s)
		cancel()
		if err == nil {
			return s, true
		}
	}
	return s, false
}

// localTraining computes, in this process, what the cluster's training job must produce.
func localTraining(t *testing.T, epochs, batch, shards int) []byte {
	m, err := zoo.Build("lenet5", zoo.Options{InputShape: []int64{1, 28, 28}, Classes: 10, Seed: 1, Init: zoo.InitTorch})
	if err != nil {
		t.Fatal(err)
	}
	cfg := train.Config{Plan: train.Plan{Batch: batch, Shards: shards, Epochs: epochs, Seed: 1}, LR: 0.01,
		Optimizer: kernel.Optimizer{Kind: "sgd", Momentum: 0.9}, Schedule: train.Schedule{Kind: "constant"}, Threads: 2}
	out, _, err := train.Local(context.Background(), m, cfg, fmnistTestData(t), nil, train.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return onnx.Encode(out)
}

const fmnistTestLabels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"

// fmnistTestData is Fashion-MNIST's test set with its labels, scaled to [0, 1].
func fmnistTestData(t *testing.T) train.Data {
	t.Helper()
	f, err := os.Open(fmnistTest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := dataset.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	lf, err := os.Open(fmnistTestLabels)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	l32, err := dataset.ReadLabels(fmnistTestLabels, lf)
	if err != nil {
		t.Fatal(err)
	}
	labels := make([]int64, len(l32))
	for i, v := range l32 {
		labels[i] = int64(v)
	}
	return train.Data{Images: ds, Labels: labels, Prep: dataset.Preprocess{Scale: 1.0 / 255}}
}

// TestProcessTrainingSurvivesFailures trains LeNet-5 on a 6-node cluster of real processes
// while two workers are killed at once (kill -9), the coordinator is killed, and a worker is
// frozen (SIGSTOP) for longer than a shard takes; the trained model must be byte-identical to
// train.Local's with the same settings, and every epoch's record must show every step and
// every sample exactly once.
func TestProcessTrainingSurvivesFailures(t *testing.T) {
	needKernel(t)
	const epochs, batch, shards = 2, 64, 3
	want := localTraining(t, epochs, batch, shards)
	c := upProcCluster(t, 6)
	c.must("put", fmnistTest, "fm-test.gz")
	c.must("put", fmnistTestLabels, "fm-test-labels.gz")
	c.must("train", "start")
	if out, err := c.run("train", "add", "--name", "bad", "--model", "zoo:lenet5", "--input-shape", "1,28,28",
		"--data", "fm-test.gz", "--labels", "fm-missing.gz", "--scale", "1/255"); err == nil {
		t.Fatalf("a training job with missing labels was accepted: %s", out)
	}
	c.must("train", "add", "--name", "l5", "--model", "zoo:lenet5", "--input-shape", "1,28,28", "--data", "fm-test.gz",
		"--labels", "fm-test-labels.gz", "--epochs", strconv.Itoa(epochs), "--batch", strconv.Itoa(batch),
		"--shards", strconv.Itoa(shards), "--scale", "1/255", "--checkpoint-every", "25", "--threads", "2")
	if out, err := c.run("train", "add", "--name", "l5", "--model", "zoo:lenet5", "--input-shape", "1,28,28",
		"--data", "fm-test.gz", "--labels", "fm-test-labels.gz", "--scale", "1/255"); err == nil {
		t.Fatalf("a second job named l5 was accepted: %s", out)
	}
	total := 0
	stage := 0
	var killedCoordAt time.Time
	var coordKillStep, replaysAtKill int
	deadline := time.Now().Add(6 * time.Minute)
	for {
		if time.Now().After(deadline) {
			s, _ := c.trainProgress("l5")
			t.Fatalf("training not complete in time: %+v", s)
		}
		s, ok := c.trainProgress("l5")
		if !ok {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		total = s.StepsTotal
		if s.Complete {
			break
		}
		coord := c.coordinator()
		var workers []string
		for _, n := range c.lc.Live() {
			if n.Name != coord {
				workers = append(workers, n.Name)
			}
		}
		switch {
		case stage == 0 && s.Step >= 40 && len(workers) >= 3:
			t.Logf("step %d: kill -9 workers %s and %s", s.Step, workers[0], workers[1])
			if err := c.lc.Kill(workers[0], workers[1]); err != nil {
				t.Fatal(err)
			}
			stage++
		case stage == 1 && s.Step >= 120 && coord != "":
			t.Logf("step %d: kill -9 the coordinator %s", s.Step, coord)
			if err := c.lc.Kill(coord); err != nil {
				t.Fatal(err)
			}
			killedCoordAt, coordKillStep, replaysAtKill = time.Now(), s.Step, s.Replays
			stage++
		case stage == 2 && (s.Replays > replaysAtKill || s.Step > coordKillStep):
			// the first step committed by the new coordinator (a recomputed one after the checkpoint)
			t.Logf("coordinator kill -9 to the next committed step: %.2f s (resumed from checkpoint %d, %d steps to recompute)",
				time.Since(killedCoordAt).Seconds(), s.CheckpointStep, coordKillStep-s.CheckpointStep)
			stage++
		case stage == 3 && s.Step >= 200 && len(workers) >= 1:
			w := workers[len(workers)-1]
			t.Logf("step %d: SIGSTOP %s for 4 s", s.Step, w)
			if err := c.lc.Stop(w); err != nil {
				t.Fatal(err)
			}
			go func() { time.Sleep(4 * time.Second); c.lc.Cont(w) }()
			stage++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if stage < 4 {
		t.Logf("the run finished at fault stage %d", stage)
	}
	s, _ := c.trainProgress("l5")
	if s.Step != total || len(s.EpochRecords) != epochs {
		t.Fatalf("summary %+v", s)
	}
	for _, e := range s.EpochRecords {
		if !e.Complete || !e.ExactlyOnce || e.Samples != 10000 {
			t.Errorf("epoch %d record: %+v", e.Epoch, e)
		}
	}
	t.Logf("steps recomputed after the takeover: %d", s.Replays)
	got := filepath.Join(t.TempDir(), "l5.onnx")
	c.must("get", "idunno/models/l5.onnx", got)
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("the cluster's trained model (%d bytes) differs from train.Local's (%d bytes)", len(b), len(want))
	}
}

// TestProcessTrainingAllNodesRestart kills every node (kill -9) mid-training and restarts
// them all on the same addresses: training resumes from the journals on disk and the last
// checkpoint in SDFS, and the model is still byte-identical to train.Local's.
func TestProcessTrainingAllNodesRestart(t *testing.T) {
	needKernel(t)
	// one shard a step: a worker's replica takes each step it computed itself, and after
	// the restart every replica starts again from the state the new coordinator serves
	const epochs, batch, shards = 1, 64, 1
	want := localTraining(t, epochs, batch, shards)
	c := upProcCluster(t, 4)
	c.must("put", fmnistTest, "fm-test.gz")
	c.must("put", fmnistTestLabels, "fm-test-labels.gz")
	c.must("train", "start")
	c.must("train", "add", "--name", "l5", "--model", "zoo:lenet5", "--input-shape", "1,28,28", "--data", "fm-test.gz",
		"--labels", "fm-test-labels.gz", "--epochs", strconv.Itoa(epochs), "--batch", strconv.Itoa(batch),
		"--shards", strconv.Itoa(shards), "--scale", "1/255", "--checkpoint-every", "20", "--threads", "2",
		"--eval-data", "fm-test.gz", "--eval-labels", "fm-test-labels.gz")
	restarted := false
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if time.Now().After(deadline) {
			s, _ := c.trainProgress("l5")
			t.Fatalf("training not complete in time: %+v", s)
		}
		s, ok := c.trainProgress("l5")
		if ok && s.Complete {
			break
		}
		if ok && !restarted && s.Step >= 50 {
			var all []string
			for _, n := range c.lc.Nodes() {
				all = append(all, n.Name)
			}
			t.Logf("step %d (checkpoint %d): kill -9 every node, then restart them", s.Step, s.CheckpointStep)
			if err := c.lc.Kill(all...); err != nil {
				t.Fatal(err)
			}
			if err := c.lc.Restart(all...); err != nil {
				t.Fatal(err)
			}
			restarted = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !restarted {
		t.Fatal("training finished before the restart")
	}
	s, _ := c.trainProgress("l5")
	for _, e := range s.EpochRecords {
		if !e.Complete || !e.ExactlyOnce {
			t.Errorf("epoch %d record: %+v", e.Epoch, e)
		}
	}
	got := filepath.Join(t.TempDir(), "l5.onnx")
	c.must("get", "idunno/models/l5.onnx", got)
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatal("after a restart of every node the trained model differs from train.Local's")
	}
	// the trained model is registered: an inference job with labels reports its accuracy,
	// which must be what evaluating it here gives
	m, err := onnx.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	correct, n, err := train.Evaluate(m, fmnistTestData(t), 64, 2)
	if err != nil {
		t.Fatal(err)
	}
	// the evaluation at the epoch's end (on the coordinator, journaled with the checkpoint)
	if len(s.EvalHistory) != 1 || s.EvalHistory[0].Correct != int64(correct) || s.EvalHistory[0].Count != int64(n) ||
		s.EvalAccuracy == nil || *s.EvalAccuracy != s.EvalHistory[0].Accuracy {
		t.Fatalf("eval history %+v (accuracy %v), evaluating the model here gives %d of %d", s.EvalHistory, s.EvalAccuracy, correct, n)
	}
	c.must("train", "stop")
	c.must("inference", "start")
	c.must("job", "add", "--name", "eval", "--model", "l5", "--data", "fm-test.gz", "--labels", "fm-test-labels.gz",
		"--batch", "64", "--scale", "1/255")
	c.must("job", "wait", "eval", "--timeout", "3m")
	var st sched.JobStatsReport
	for _, nd := range c.lc.Live() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = c.rc.CallJSON(ctx, nd.RPCAddr, "sched.job.stats", sched.NameArgs{Name: "eval"}, &st)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil || st.Accuracy == nil {
		t.Fatalf("job stats: %v, accuracy %v", err, st.Accuracy)
	}
	if want := float64(correct) / float64(n); *st.Accuracy != want {
		t.Fatalf("the inference job's accuracy is %v, evaluating the model here gives %v", *st.Accuracy, want)
	}
	t.Logf("trained LeNet-5: accuracy %.2f%% on the test set, from the cluster's inference job", 100**st.Accuracy)
	if out, err := c.run("job", "add", "--name", "bad", "--model", "l5", "--data", "fm-test.gz", "--labels", "fm-nolabels.gz", "--batch", "64"); err == nil {
		t.Fatalf("a job with missing labels was accepted: %s", out)
	}
}

// TestProcessTwoTrainingJobs runs two training jobs at once on a 4-node cluster, one of two
// shards a step and one of a single shard (whose worker keeps the next step, see
// leaseNext): both must progress side by side (the workers are shared by worker time) and
// each model must equal train.Local's.
func TestProcessTwoTrainingJobs(t *testing.T) {
	needKernel(t)
	const epochs, batch = 1, 64
	shards := map[string]int{"a": 2, "b": 1}
	want := map[string][]byte{"a": localTraining(t, epochs, batch, 2), "b": localTraining(t, epochs, batch, 1)}
	c := upProcCluster(t, 4)
	c.must("put", fmnistTest, "fm-test.gz")
	c.must("put", fmnistTestLabels, "fm-test-labels.gz")
	c.must("train", "start")
	for _, name := range []string{"a", "b"} {
		c.must("train", "add", "--name", name, "--model", "zoo:lenet5", "--input-shape", "1,28,28", "--data", "fm-test.gz",
			"--labels", "fm-test-labels.gz", "--epochs", strconv.Itoa(epochs), "--batch", strconv.Itoa(batch),
			"--shards", strconv.Itoa(shards[name]), "--scale", "1/255", "--threads", "2")
	}
	together := 0
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the two training jobs did not complete in time")
		}
		a, okA := c.trainProgress("a")
		b, okB := c.trainProgress("b")
		if okA && okB && a.Complete && b.Complete {
			break
		}
		if okA && okB && a.Step > 0 && b.Step > 0 && !a.Complete && !b.Complete {
			together++
		}
		time.Sleep(200 * time.Millisecond)
	}
	if together == 0 {
		t.Error("the two jobs never ran at the same time (one waited for the other)")
	}
	out := c.must("train", "list")
	t.Logf("train list:\n%s", out)
	for _, name := range []string{"a", "b"} {
		got := filepath.Join(t.TempDir(), name+".onnx")
		c.must("get", "idunno/models/"+name+".onnx", got)
		b, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want[name]) {
			t.Fatalf("job %s's model differs from train.Local's", name)
		}
	}
}

// TestTrainEvalHistory: evaluations ride on the checkpoint entries at epochs' ends; a
// recomputed epoch end (after a resume from an earlier checkpoint) replaces its point
// instead of adding one, and a bad evaluation is refused by the journal.
func TestTrainEvalHistory(t *testing.T) {
	st := sched.NewState()
	seq := uint64(0)
	apply := func(e *sched.Entry) error {
		seq++
		e.Seq = seq
		e.Epoch = 1
		err := st.Apply(e)
		if err != nil {
			seq--
		}
		return err
	}
	must := func(e *sched.Entry) {
		t.Helper()
		if err := apply(e); err != nil {
			t.Fatal(err)
		}
	}
	must(&sched.Entry{Kind: sched.EntryEpoch, Node: "n0"})
	spec := sched.TrainSpec{Name: "j", Model: "m", Data: "d", Labels: "l", EvalData: "e", EvalLabels: "el", Epochs: 2, Batch: 10,
		Shards: 2, LR: 0.1, Optimizer: kernel.Optimizer{Kind: "sgd"}, Schedule: train.Schedule{Kind: "constant"}, Threads: 1, Samples: 30}
	must(&sched.Entry{Kind: sched.EntryTrainAdd, Train: &spec})
	step := func(i int) {
		t.Helper()
		must(&sched.Entry{Kind: sched.EntryTrainStep, Name: "j", Task: i, TrainStep: &sched.StepFacts{Loss: 1, Count: 10}})
	}
	for i := 0; i < 3; i++ {
		step(i)
	}
	if err := apply(&sched.Entry{Kind: sched.EntryTrainCkpt, Name: "j", Task: 3, Model: "c", TrainStep: &sched.StepFacts{Correct: 11, Count: 10}}); err == nil {
		t.Fatal("an evaluation with more right answers than samples was accepted")
	}
	must(&sched.Entry{Kind: sched.EntryTrainCkpt, Name: "j", Task: 3, Model: "c", TrainStep: &sched.StepFacts{Correct: 7, Count: 10}})
	for i := 3; i < 5; i++ {
		step(i)
	}
	if err := apply(&sched.Entry{Kind: sched.EntryTrainCkpt, Name: "j", Task: 5, Model: "c", TrainStep: &sched.StepFacts{Correct: 1, Count: 10}}); err == nil {
		t.Fatal("an evaluation in the middle of an epoch was accepted")
	}
	step(5)
	must(&sched.Entry{Kind: sched.EntryTrainCkpt, Name: "j", Task: 6, Model: "c", TrainStep: &sched.StepFacts{Correct: 8, Count: 10}})
	// a resume from checkpoint 6 that recomputes nothing, then a recomputed epoch end from 3
	// is not possible (checkpoints only move forward); the epoch-2 point is replaced when the
	// same step is checkpointed again
	must(&sched.Entry{Kind: sched.EntryTrainCkpt, Name: "j", Task: 6, Model: "c", TrainStep: &sched.StepFacts{Correct: 8, Count: 10}})
	ev := st.Trains["j"].Evals
	if len(ev) != 2 || ev[0].Epoch != 1 || ev[0].Accuracy != 0.7 || ev[1].Epoch != 2 || ev[1].Step != 6 || ev[1].Accuracy != 0.8 {
		t.Fatalf("eval history %+v", ev)
	}
	if c := st.Clone(); len(c.Trains["j"].Evals) != 2 {
		t.Fatal("Clone lost the eval history")
	}
}

var committedRE = regexp.MustCompile(`training job (\S+): step (\d+) of \d+ committed.*shards by \[([^\]]*)\]`)

// shardsBy reads every node's log for job's committed steps and who computed each shard
// (a step committed again after a resume keeps its last line).
func (c *procCluster) shardsBy(job string) map[int][]string {
	out := map[int][]string{}
	for _, n := range c.lc.Nodes() {
		b, err := os.ReadFile(filepath.Join(n.DataDir, "node.log"))
		if err != nil {
			continue
		}
		for _, m := range committedRE.FindAllStringSubmatch(string(b), -1) {
			if m[1] != job {
				continue
			}
			step, _ := strconv.Atoi(m[2])
			out[step] = strings.Fields(m[3])
		}
	}
	return out
}

// netSignal sends a node SIGUSR1 (cut it off the network) or SIGUSR2 (restore it); the
// nodes must have been started with netfault.EnvVar=1.
func (c *procCluster) netSignal(name string, sig syscall.Signal) {
	c.t.Helper()
	n, err := c.lc.Node(name)
	if err == nil {
		err = syscall.Kill(n.PID, sig)
	}
	if err != nil {
		c.t.Fatalf("signal %v to %s: %v", sig, name, err)
	}
}

// shardCounts counts the shards each worker computed in steps [from, to] (1-based steps).
func shardCounts(by map[int][]string, from, to int) map[string]int {
	n := map[string]int{}
	for s := from; s <= to; s++ {
		for _, w := range by[s] {
			n[w]++
		}
	}
	return n
}

// TestProcessTrainingElastic runs DLRover's and Cachew's remaining scenarios in one training
// job on 6 real processes: the job starts on fewer workers than the cluster has (two are
// down), a worker is made 2x slower by a SIGSTOP/SIGCONT duty cycle (a straggler), the two
// missing workers join mid-training (scale up), one leaves (SIGTERM) and one is kill -9'd
// (scale down, no restart of the job), a worker is killed and restarted on the same address,
// and every worker (all nodes but the coordinator, which computes shards too) is killed and
// restarted. Each joined or restarted worker must get shards afterwards; the model must be
// byte-identical to train.Local's and the epoch's record exactly-once.
func TestProcessTrainingElastic(t *testing.T) {
	needKernel(t)
	// more workers than shards: a slow worker loses the race for shards
	const epochs, batch, shards = 1, 64, 2
	want := localTraining(t, epochs, batch, shards)
	c := upProcCluster(t, 6)
	c.must("put", fmnistTest, "fm-test.gz")
	c.must("put", fmnistTestLabels, "fm-test-labels.gz")
	c.must("train", "start")
	coord := c.coordinator()
	var workers []string
	for _, n := range c.lc.Nodes() {
		if n.Name != coord {
			workers = append(workers, n.Name)
		}
	}
	late := workers[len(workers)-2:] // down at the start, they join mid-training
	t.Logf("coordinator %s; %v down before the job starts", coord, late)
	if err := c.lc.Kill(late...); err != nil {
		t.Fatal(err)
	}
	c.must("train", "add", "--name", "el", "--model", "zoo:lenet5", "--input-shape", "1,28,28", "--data", "fm-test.gz",
		"--labels", "fm-test-labels.gz", "--epochs", strconv.Itoa(epochs), "--batch", strconv.Itoa(batch),
		"--shards", strconv.Itoa(shards), "--scale", "1/255", "--checkpoint-every", "30", "--threads", "2")

	const (
		stStraggle = iota
		stStraggling
		stJoin
		stLeave
		stSameAddr
		stAllWorkers
		stDone
	)
	stage := stStraggle
	var (
		straggler            string
		stopDuty             chan struct{}
		dutyDone             chan struct{}
		straggleFrom, strTo  int
		joinedAt, restartAt  int
		sameAddr             string
		allAt, lastStageStep int
	)
	defer func() {
		if stopDuty != nil && stage == stStraggling {
			close(stopDuty)
			<-dutyDone
		}
	}()
	alive := func() []string {
		var w []string
		for _, n := range c.lc.Live() {
			if n.Name != coord {
				w = append(w, n.Name)
			}
		}
		return w
	}
	deadline := time.Now().Add(8 * time.Minute)
	for {
		if time.Now().After(deadline) {
			s, _ := c.trainProgress("el")
			t.Fatalf("training not complete in time (stage %d): %+v", stage, s)
		}
		s, ok := c.trainProgress("el")
		if !ok {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if s.Complete {
			break
		}
		if c.coordinator() != coord && c.coordinator() != "" {
			t.Fatalf("the coordinator changed from %s to %s: this test kills workers only", coord, c.coordinator())
		}
		switch {
		case stage == stStraggle && s.Step >= 10:
			w := alive()
			straggler = w[len(w)-1]
			t.Logf("step %d: %s runs at half speed (SIGSTOP 50 ms / SIGCONT 50 ms)", s.Step, straggler)
			stopDuty, dutyDone = make(chan struct{}), make(chan struct{})
			go func() {
				defer close(dutyDone)
				defer c.lc.Cont(straggler)
				for {
					c.lc.Stop(straggler)
					select {
					case <-stopDuty:
						return
					case <-time.After(50 * time.Millisecond):
					}
					c.lc.Cont(straggler)
					select {
					case <-stopDuty:
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}()
			straggleFrom = s.Step + 1
			stage++
		case stage == stStraggling && s.Step >= straggleFrom+30:
			close(stopDuty)
			<-dutyDone
			strTo = s.Step
			t.Logf("step %d: %s at full speed again", s.Step, straggler)
			stage++
		case stage == stJoin:
			t.Logf("step %d: %v join (scale up)", s.Step, late)
			if err := c.lc.Restart(late...); err != nil {
				t.Fatal(err)
			}
			s, _ = c.trainProgress("el")
			joinedAt = s.Step
			stage++
		case stage == stLeave && s.Step >= joinedAt+15:
			w := alive()
			leave, kill := late[0], w[0]
			if kill == leave {
				kill = w[1]
			}
			t.Logf("step %d: %s leaves (SIGTERM), %s is killed (kill -9): scale down", s.Step, leave, kill)
			if err := c.lc.Kill(kill); err != nil {
				t.Fatal(err)
			}
			if err := c.lc.Terminate(leave); err != nil {
				t.Fatal(err)
			}
			lastStageStep = s.Step
			stage++
		case stage == stSameAddr && s.Step >= lastStageStep+15:
			w := alive()
			sameAddr = w[len(w)-1]
			t.Logf("step %d: %s killed (kill -9) and restarted on the same address", s.Step, sameAddr)
			if err := c.lc.Kill(sameAddr); err != nil {
				t.Fatal(err)
			}
			if err := c.lc.Restart(sameAddr); err != nil {
				t.Fatal(err)
			}
			s, _ = c.trainProgress("el")
			restartAt = s.Step
			stage++
		case stage == stAllWorkers && s.Step >= restartAt+15:
			w := alive()
			t.Logf("step %d: every worker %v killed (kill -9), then restarted", s.Step, w)
			if err := c.lc.Kill(w...); err != nil {
				t.Fatal(err)
			}
			if err := c.lc.Restart(w...); err != nil {
				t.Fatal(err)
			}
			s, _ = c.trainProgress("el")
			allAt = s.Step
			stage++
		}
		time.Sleep(50 * time.Millisecond)
	}
	if stage != stDone {
		t.Fatalf("the job finished at stage %d of %d: the scenarios did not all run", stage, stDone)
	}
	s, _ := c.trainProgress("el")
	if len(s.EpochRecords) != epochs {
		t.Fatalf("summary %+v", s)
	}
	for _, e := range s.EpochRecords {
		if !e.Complete || !e.ExactlyOnce || e.Samples != 10000 {
			t.Errorf("epoch %d record: %+v", e.Epoch, e)
		}
	}
	by := c.shardsBy("el")
	strag := shardCounts(by, straggleFrom, strTo)
	fastest := ""
	for w, n := range strag {
		if w != straggler && (fastest == "" || n > strag[fastest]) {
			fastest = w
		}
	}
	// how many shards the straggler lost is timing (logged, not asserted); the twin decision
	// is tested on an injected clock (TestTrainLeaseStraggler)
	t.Logf("shards in steps %d-%d with %s at half speed: %v (fastest other worker %s)", straggleFrom, strTo, straggler, strag, fastest)
	total := s.StepsTotal
	for _, chk := range []struct {
		what   string
		worker string
		from   int
		to     int
	}{{"joined", late[1], joinedAt + 1, total}, {"restarted on its address", sameAddr, restartAt + 1, total}} {
		if n := shardCounts(by, chk.from, chk.to)[chk.worker]; n == 0 {
			t.Errorf("%s (%s after step %d) computed no shard", chk.worker, chk.what, chk.from-1)
		}
	}
	after := shardCounts(by, allAt+1, total)
	t.Logf("shards after every worker restarted (steps %d-%d): %v; replays %d", allAt+1, total, after, s.Replays)
	if len(after) == 0 {
		t.Error("no shard computed after every worker restarted")
	}
	got := filepath.Join(t.TempDir(), "el.onnx")
	c.must("get", "idunno/models/el.onnx", got)
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("the elastic run's model (%d bytes) differs from train.Local's (%d bytes)", len(b), len(want))
	}
}

// TestProcessTrainingNetworkCut is DLRover's "worker whose network is cut": a worker of a
// 5-node cluster keeps running but loses all its RPC and failure-detector traffic for 3 s
// (package netfault, switched by SIGUSR1/SIGUSR2). Training must go on without it, it must
// get shards again once back, the coordinator must stay the coordinator (the cut-off node,
// alone in its view, must not make itself one), and the model must be byte-identical to
// train.Local's with every sample exactly once.
func TestProcessTrainingNetworkCut(t *testing.T) {
	needKernel(t)
	const epochs, batch, shards = 2, 64, 2 // 314 steps: the job outlasts the cut on a quiet machine
	want := localTraining(t, epochs, batch, shards)
	t.Setenv(netfault.EnvVar, "1") // the nodes take SIGUSR1/SIGUSR2 as network cut/restore
	c := upProcCluster(t, 5)
	c.must("put", fmnistTest, "fm-test.gz")
	c.must("put", fmnistTestLabels, "fm-test-labels.gz")
	c.must("train", "start")
	coord := c.coordinator()
	c.must("train", "add", "--name", "nc", "--model", "zoo:lenet5", "--input-shape", "1,28,28", "--data", "fm-test.gz",
		"--labels", "fm-test-labels.gz", "--epochs", strconv.Itoa(epochs), "--batch", strconv.Itoa(batch),
		"--shards", strconv.Itoa(shards), "--scale", "1/255", "--checkpoint-every", "30", "--threads", "2")
	cutNode := c.lc.Nodes()[3].Name // neither the coordinator nor (at start) the standby
	var cutAt time.Time
	cutStep, restoreStep, stage := 0, 0, 0
	defer func() {
		if stage == 1 {
			c.netSignal(cutNode, syscall.SIGUSR2)
		}
	}()
	deadline := time.Now().Add(6 * time.Minute)
	for {
		if time.Now().After(deadline) {
			s, _ := c.trainProgress("nc")
			t.Fatalf("training not complete in time (stage %d): %+v", stage, s)
		}
		s, ok := c.trainProgress("nc")
		if !ok {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if s.Complete {
			break
		}
		if now := c.coordinator(); now != "" && now != coord {
			t.Fatalf("step %d: %s is coordinator now, not %s (stage %d)", s.Step, now, coord, stage)
		}
		switch {
		case stage == 0 && s.Step >= 10:
			t.Logf("step %d: %s cut off the network for 3 s (its RPC and failure-detector traffic dropped both ways)", s.Step, cutNode)
			c.netSignal(cutNode, syscall.SIGUSR1)
			cutAt, cutStep = time.Now(), s.Step
			stage++
		case stage == 1 && time.Since(cutAt) >= 3*time.Second:
			c.netSignal(cutNode, syscall.SIGUSR2)
			restoreStep = s.Step
			t.Logf("step %d: %s back on the network (%d steps committed without it)", s.Step, cutNode, restoreStep-cutStep)
			stage++
		}
		time.Sleep(50 * time.Millisecond)
	}
	if stage != 2 {
		t.Fatalf("the job finished at stage %d: the cut did not run", stage)
	}
	s, _ := c.trainProgress("nc")
	if len(s.EpochRecords) != epochs {
		t.Fatalf("summary %+v", s)
	}
	for _, e := range s.EpochRecords {
		if !e.Complete || !e.ExactlyOnce || e.Samples != 10000 {
			t.Errorf("epoch %d record: %+v", e.Epoch, e)
		}
	}
	by := c.shardsBy("nc")
	if restoreStep <= cutStep {
		t.Errorf("no step committed while %s was cut off (steps %d-%d)", cutNode, cutStep, restoreStep)
	}
	if n := shardCounts(by, cutStep+2, restoreStep)[cutNode]; n > 0 {
		t.Errorf("%s computed %d shards committed while it was cut off", cutNode, n)
	}
	after := shardCounts(by, restoreStep+1, s.StepsTotal)
	t.Logf("shards after the cut (steps %d-%d): %v", restoreStep+1, s.StepsTotal, after)
	if after[cutNode] == 0 {
		t.Errorf("%s computed no shard after it came back", cutNode)
	}
	got := filepath.Join(t.TempDir(), "nc.onnx")
	c.must("get", "idunno/models/nc.onnx", got)
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("after a network cut the model (%d bytes) differs from train.Local's (%d bytes)", len(b), len(want))
	}
}

// TestProcessTrainingLargeModel trains a model whose parameters (and gradients) are larger
// than one RPC body (LeNet-5 on 384x384 inputs: 16,978,826 parameters, 64.8 MiB), so both
// travel in checksummed chunks; 2 steps on 8 images, and the model must be byte-identical
// to train.Local's.
func TestProcessTrainingLargeModel(t *testing.T) {
	needKernel(t)
	dir := t.TempDir()
	imgs, labs := filepath.Join(dir, "img.idx"), filepath.Join(dir, "lab.idx")
	if err := scenario.IDXPrefix(fmnistTest, imgs, 8); err != nil {
		t.Fatal(err)
	}
	if err := scenario.LabelsPrefix(fmnistTestLabels, labs, 8); err != nil {
		t.Fatal(err)
	}
	m, err := zoo.Build("lenet5", zoo.Options{InputShape: []int64{1, 384, 384}, Classes: 10, Seed: 1, Init: zoo.InitTorch})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range m.Graph.Initializers {
		c := 1
		for _, d := range in.Dims {
			c *= int(d)
		}
		n += c
	}
	if 4*n <= rpc.MaxBody {
		t.Fatalf("the model's %d bytes of parameters fit one RPC body: the test tests nothing", 4*n)
	}
	data := loadLabelled(t, imgs, labs, dataset.Preprocess{Scale: 1.0 / 255, Resize: [2]int{384, 384}})
	cfg := train.Config{Plan: train.Plan{Batch: 4, Shards: 2, Epochs: 1, Seed: 1}, LR: 0.01,
		Optimizer: kernel.Optimizer{Kind: "sgd", Momentum: 0.9}, Schedule: train.Schedule{Kind: "constant"}, Threads: 2}
	out, _, err := train.Local(context.Background(), m, cfg, data, nil, train.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	want := onnx.Encode(out)
	c := upProcCluster(t, 3)
	c.must("put", imgs, "big-img.idx")
	c.must("put", labs, "big-lab.idx")
	c.must("train", "start")
	c.must("train", "add", "--name", "big", "--model", "zoo:lenet5", "--input-shape", "1,384,384", "--data", "big-img.idx",
		"--labels", "big-lab.idx", "--epochs", "1", "--batch", "4", "--shards", "2", "--scale", "1/255", "--resize", "384x384",
		"--threads", "2")
	c.must("train", "wait", "big", "--timeout", "5m")
	s, _ := c.trainProgress("big")
	if !s.Complete || len(s.EpochRecords) != 1 || !s.EpochRecords[0].ExactlyOnce {
		t.Fatalf("summary %+v", s)
	}
	got := filepath.Join(t.TempDir(), "big.onnx")
	c.must("get", "idunno/models/big.onnx", got)
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("the large model (%d bytes) differs from train.Local's (%d bytes)", len(b), len(want))
	}
}

// loadLabelled reads an image file and its labels as training data.
func loadLabelled(t *testing.T, images, labels string, pre dataset.Preprocess) train.Data {
	t.Helper()
	f, err := os.Open(images)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := dataset.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	lf, err := os.Open(labels)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	l32, err := dataset.ReadLabels(labels, lf)
	if err != nil {
		t.Fatal(err)
	}
	l := make([]int64, len(l32))
	for i, v := range l32 {
		l[i] = int64(v)
	}
	return train.Data{Images: ds, Labels: l, Prep: pre}
}
