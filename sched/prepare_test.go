package sched

import (
	"context"
	"sync"
	"testing"
	"time"
)

// loadingExec is a FakeExecutor whose models take LoadTime to load on a node (one
// loadingExec per node) before they run, as the kernel's do: a Preparer.
type loadingExec struct {
	*FakeExecutor
	LoadTime map[string]time.Duration // model -> load time (missing: loaded at once)

	mu     sync.Mutex
	loaded map[string]bool
	wait   map[string]chan struct{}
}

func (l *loadingExec) Ready(spec JobSpec) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.LoadTime[spec.Model] == 0 || l.loaded[spec.Model]
}

func (l *loadingExec) Loaded() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []string{}
	for m := range l.FakeExecutor.Models {
		if l.LoadTime[m] == 0 || l.loaded[m] {
			out = append(out, m)
		}
	}
	return out
}

func (l *loadingExec) Prepare(ctx context.Context, spec JobSpec) error {
	l.mu.Lock()
	if l.LoadTime[spec.Model] == 0 || l.loaded[spec.Model] {
		l.mu.Unlock()
		return nil
	}
	ch, loading := l.wait[spec.Model]
	if !loading {
		ch = make(chan struct{})
		l.wait[spec.Model] = ch
	}
	l.mu.Unlock()
	if !loading {
		time.Sleep(l.LoadTime[spec.Model])
		l.mu.Lock()
		l.loaded[spec.Model] = true
		l.mu.Unlock()
		close(ch)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *loadingExec) Run(ctx context.Context, spec JobSpec, from, to int) ([]Prediction, []int64, error) {
	if err := l.Prepare(ctx, spec); err != nil { // a task of a job not ready loads it first
		return nil, nil, err
	}
	return l.FakeExecutor.Run(ctx, spec, from, to)
}

// whileLoading starts a coordinator and one worker whose model slow.onnx takes 5 s to
// load, adds the job "loads" of it, and once the worker loads it adds next (a job of
// fast.onnx, loaded at once). It returns the cluster and the worker's executor.
func whileLoading(t *testing.T, next JobSpec) (*memCluster, *loadingExec) {
	var execs sync.Map
	c := newMemClusterExec(t, 2, func(cfg *SchedConfig) {}, func(f *FakeExecutor, node string) Executor {
		l := &loadingExec{FakeExecutor: f, LoadTime: map[string]time.Duration{"slow.onnx": 5 * time.Second},
			loaded: map[string]bool{}, wait: map[string]chan struct{}{}}
		execs.Store(node, l)
		return l
	})
	co := c.waitCoordinator("")
	if err := c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	var r JobAddReply
	if err := c.callRetry("sched.job.add", JobSpec{Name: "loads", Model: "slow.onnx", Data: "small.idx", Batch: 10, TaskSize: 100}, &r); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the worker has the first task of it, express, and loads its model
	if err := c.callRetry("sched.job.add", next, &r); err != nil {
		t.Fatal(err)
	}
	var worker *loadingExec
	execs.Range(func(k, v any) bool {
		if k.(string) != co.name {
			worker = v.(*loadingExec)
		}
		return true
	})
	return c, worker
}

// TestWorkerRunsReadyJobsWhileAModelLoads: a worker given a task of a job whose model
// takes 5 s to load keeps running another job's tasks meanwhile (before, the load held
// its whole queue), and the coordinator leases it no second task of the loading job.
func TestWorkerRunsReadyJobsWhileAModelLoads(t *testing.T) {
	c, worker := whileLoading(t, JobSpec{Name: "ready", Model: "fast.onnx", Data: "small.idx", Batch: 10, TaskSize: 100})
	// While the model loads, the other job completes tasks on the same (only) worker.
	deadline := time.Now().Add(4 * time.Second)
	var js JobSummary
	for time.Now().Before(deadline) {
		if err := c.callRetry("sched.job.get", NameArgs{"ready"}, &js); err == nil && js.DoneTasks >= 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if worker.Ready(JobSpec{Model: "slow.onnx"}) {
		t.Fatal("the model loaded before the check: make the load longer")
	}
	if js.DoneTasks < 3 {
		t.Fatalf("the ready job completed %d tasks while the other job's model loaded", js.DoneTasks)
	}
	var lj JobSummary
	c.callRetry("sched.job.get", NameArgs{"loads"}, &lj)
	t.Logf("while the model loaded: ready job %d tasks done, loading job %d", js.DoneTasks, lj.DoneTasks)
	c.waitJob("ready", 30*time.Second)
	c.waitJob("loads", 30*time.Second)
	c.checkResult("ready", "small.idx", 2000)
	c.checkResult("loads", "small.idx", 2000)
}

// TestExpressTaskRunsWhileAnotherLoads: a worker runs express tasks (a new job's first, a
// cheap job's short ones) beside its queue. One whose model is still loading must not hold
// the others: a new job's first task on a worker that lacked the model held every LeNet-5
// task behind it for the 6.5 s ResNet-18 took to load, and LeNet-5's rate jumped 45% when
// they all completed at once (benchmarks/cluster manyjobs, 8 jobs).
func TestExpressTaskRunsWhileAnotherLoads(t *testing.T) {
	// One task: the job's first, so express, leased while the other's first still loads.
	c, worker := whileLoading(t, JobSpec{Name: "one", Model: "fast.onnx", Data: "small.idx", Batch: 10, TaskSize: 2000})
	deadline := time.Now().Add(3 * time.Second)
	var js JobSummary
	for time.Now().Before(deadline) {
		if err := c.callRetry("sched.job.get", NameArgs{"one"}, &js); err == nil && js.DoneTasks >= 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if worker.Ready(JobSpec{Model: "slow.onnx"}) {
		t.Fatal("the model loaded before the check: make the load longer")
	}
	if js.DoneTasks < 1 {
		t.Fatal("the new job's express task waited for another job's model to load")
	}
	c.waitJob("one", 30*time.Second)
	c.waitJob("loads", 30*time.Second)
	c.checkResult("one", "small.idx", 2000)
	c.checkResult("loads", "small.idx", 2000)
}
