package sched

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idunno/rpc"
)

// memCluster is an in-process cluster: real RPC on loopback, a shared membership view
// standing in for the failure detector, a shared in-memory store and a fake executor.
type memCluster struct {
	t     *testing.T
	mem   *StaticMembership
	blobs *MemBlobs
	exec  *FakeExecutor
	// execFor, if set, gives each node an executor of its own (else exec serves all).
	execFor func(node string) Executor
	cfg     SchedConfig
	nodes   map[string]*memNode
	mu      sync.Mutex
	logs    bytes.Buffer
}

type memNode struct {
	name, addr, dir string
	srv             *rpc.Server
	ln              net.Listener
	cli             *rpc.Client
	s               *Scheduler
	running         bool
}

var testSecret = []byte("test-secret")

func newMemCluster(t *testing.T, n int) *memCluster {
	return newMemClusterConfig(t, n, func(*SchedConfig) {})
}

func newMemClusterConfig(t *testing.T, n int, set func(*SchedConfig)) *memCluster {
	return newMemClusterExec(t, n, set, nil)
}

// newMemClusterExec is newMemClusterConfig whose nodes get executors of their own from
// execFor (given the shared FakeExecutor and the node's name), if it is not nil.
func newMemClusterExec(t *testing.T, n int, set func(*SchedConfig), execFor func(f *FakeExecutor, node string) Executor) *memCluster {
	cfg := DefaultSchedConfig()
	cfg.TakeoverGrace = 500 * time.Millisecond
	cfg.PullEvery = 50 * time.Millisecond
	cfg.ControlEvery = 200 * time.Millisecond
	set(&cfg)
	c := &memCluster{t: t, mem: NewStaticMembership(), blobs: NewMemBlobs(), cfg: cfg, nodes: map[string]*memNode{},
		exec: &FakeExecutor{
			Datasets: map[string]int{"small.idx": 2000, "big.npy": 3001},
			Models:   map[string]time.Duration{"fast.onnx": 200 * time.Microsecond, "slow.onnx": 2 * time.Millisecond},
		}}
	if execFor != nil {
		c.execFor = func(node string) Executor { return execFor(c.exec, node) }
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("node%d", i)
		c.nodes[name] = &memNode{name: name, dir: t.TempDir()}
		c.start(name)
	}
	t.Cleanup(func() {
		for name, nd := range c.nodes {
			if nd.running {
				c.kill(name)
			}
		}
		if t.Failed() {
			t.Logf("logs:\n%s", c.logs.String())
		}
	})
	return c
}

func (c *memCluster) logf(node string) func(string, ...any) {
	return func(f string, a ...any) {
		c.mu.Lock()
		defer c.mu.Unlock()
		fmt.Fprintf(&c.logs, "%s %s "+f+"\n", append([]any{time.Now().Format("15:04:05.000"), node}, a...)...)
	}
}

func (c *memCluster) start(name string) {
	nd := c.nodes[name]
	addr := "127.0.0.1:0"
	if nd.addr != "" {
		addr = nd.addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.ln, nd.addr = ln, ln.Addr().String()
	nd.srv = rpc.NewServer(testSecret)
	nd.srv.Logf = func(string, ...any) {}
	nd.cli = rpc.NewClient(testSecret)
	var exec Executor = c.exec
	if c.execFor != nil {
		exec = c.execFor(name)
	}
	s, err := NewScheduler(Deps{Name: name, RPCAddr: nd.addr, DataDir: nd.dir, Membership: c.mem, Blobs: c.blobs,
		Executor: exec, Client: nd.cli, Logf: c.logf(name)}, c.cfg, nd.srv)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.s = s
	go nd.srv.Serve(ln)
	s.Start()
	nd.running = true
	c.mem.Set(Peer{Name: name, RPCAddr: nd.addr}, true)
}

// kill stops a node abruptly (its journal stays on disk) and the detector reports it.
func (c *memCluster) kill(name string) {
	nd := c.nodes[name]
	c.mem.Set(Peer{Name: name}, false)
	nd.srv.Close()
	nd.s.Stop()
	nd.cli.Close()
	nd.running = false
}

func (c *memCluster) coordinator() *memNode {
	for _, nd := range c.nodes {
		if nd.running && nd.s.IsCoordinator() {
			return nd
		}
	}
	return nil
}

func (c *memCluster) waitCoordinator(not string) *memNode {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if nd := c.coordinator(); nd != nil && nd.name != not {
			return nd
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no coordinator elected")
	return nil
}

// call runs a client method through any running node.
func (c *memCluster) call(via, method string, args, reply any) error {
	nd := c.nodes[via]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return nd.cli.CallJSON(ctx, nd.addr, method, args, reply)
}

func (c *memCluster) callRetry(method string, args, reply any) error {
	var err error
	for i := 0; i < 100; i++ {
		for name, nd := range c.nodes {
			if !nd.running {
				continue
			}
			if err = c.call(name, method, args, reply); err == nil {
				return nil
			}
			if rpc.IsRemote(err) && !Retryable(err) {
				return err
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (c *memCluster) waitJob(name string, timeout time.Duration) JobSummary {
	deadline := time.Now().Add(timeout)
	var js JobSummary
	for time.Now().Before(deadline) {
		if err := c.callRetry("sched.job.get", NameArgs{name}, &js); err == nil && js.Complete {
			return js
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("job %s not complete: %+v", name, js)
	return js
}

func expectedResult(data string, n int) []byte {
	preds := make([]Prediction, n)
	for q := range preds {
		preds[q] = FakePrediction(data, q)
	}
	return append([]byte(ResultHeader), FormatResultLines(0, preds)...)
}

func (c *memCluster) checkResult(job, data string, n int) {
	got, err := c.blobs.Get(context.Background(), JobResultName(job))
	if err != nil {
		c.t.Fatal(err)
	}
	if want := expectedResult(data, n); !bytes.Equal(got, want) {
		c.t.Fatalf("job %s result differs from the direct computation (%d vs %d bytes)", job, len(got), len(want))
	}
}

func TestClusterTwoJobsWithWorkerAndCoordinatorFailures(t *testing.T) {
	c := newMemCluster(t, 6)
	co := c.waitCoordinator("")
	if err := c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	var r JobAddReply
	if err := c.callRetry("sched.job.add", JobSpec{Name: "fast", Model: "fast.onnx", Data: "small.idx", Batch: 10}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Queries != 2000 || r.TaskSize%10 != 0 {
		t.Fatalf("add reply %+v", r)
	}
	if err := c.callRetry("sched.job.add", JobSpec{Name: "slow", Model: "slow.onnx", Data: "big.npy", Batch: 7}, &r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Split, "fast=") || !strings.Contains(r.Split, "slow=") {
		t.Fatalf("split %q", r.Split)
	}
	time.Sleep(300 * time.Millisecond)
	// Kill a worker, then the coordinator, while both jobs run.
	for name, nd := range c.nodes {
		if name != co.name && nd.running {
			c.kill(name)
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	var before JobSummary
	c.callRetry("sched.job.get", NameArgs{"slow"}, &before)
	if before.Complete {
		t.Fatal("job finished before the coordinator was killed; make it longer")
	}
	c.kill(co.name)
	t0 := time.Now()
	co2 := c.waitCoordinator(co.name)
	if d := time.Since(t0); d > time.Second {
		t.Errorf("standby took %v to take over", d)
	}
	// The old coordinator comes back and becomes a follower (or the standby).
	c.start(co.name)
	c.waitJob("fast", 30*time.Second)
	c.waitJob("slow", 30*time.Second)
	c.checkResult("fast", "small.idx", 2000)
	c.checkResult("slow", "big.npy", 3001)
	if c.nodes[co.name].s.IsCoordinator() || !co2.s.IsCoordinator() {
		t.Fatal("old coordinator took the role back")
	}
	var st JobStatsReport
	if err := c.callRetry("sched.job.stats", NameArgs{"slow"}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Done != 3001 || st.Total != 3001 {
		t.Fatalf("stats %+v", st)
	}
	// Every job's statistics in one call (the dashboard sampler's) are the per-job ones,
	// in the job list's order (the 10 s rates move with the clock between the calls).
	var all []JobStatsReport
	if err := c.callRetry("sched.job.stats.all", struct{}{}, &all); err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Job != "fast" || all[1].Job != "slow" {
		t.Fatalf("stats of all jobs: %+v", all)
	}
	for _, r := range all {
		var one JobStatsReport
		if err := c.callRetry("sched.job.stats", NameArgs{r.Job}, &one); err != nil {
			t.Fatal(err)
		}
		r.Rate10s, r.RateRatio, one.Rate10s, one.RateRatio = 0, 0, 0, 0
		if diff := cmp.Diff(one, r); diff != "" {
			t.Fatalf("job %s: stats.all differs from stats (-one +all):\n%s", r.Job, diff)
		}
	}
	// The statistics survive takeovers: the new coordinator has every query's latency
	// (measured by workers of either epoch), and the split and first-query time the old
	// coordinator recorded at the add. The second takeover's standby got them in the
	// snapshot that made it the standby, not entry by entry.
	checkStats := func() {
		t.Helper()
		for job, n := range map[string]int64{"fast": 2000, "slow": 3001} {
			var h LatencyHistogram
			var sum JobSummary
			if err := c.callRetry("sched.job.histogram", NameArgs{job}, &h); err != nil {
				t.Fatal(err)
			}
			if err := c.callRetry("sched.job.get", NameArgs{job}, &sum); err != nil {
				t.Fatal(err)
			}
			if h.Count != n {
				t.Errorf("job %s: latencies of %d queries after the takeover, want %d", job, h.Count, n)
			}
			if !strings.Contains(sum.SplitAtAdd, job+"=") || sum.FirstQueryMS < 0 || sum.LastDoneMS < sum.FirstQueryMS || sum.LastDoneMS > 1000*sum.Seconds {
				t.Errorf("job %s: split %q, first query %.0f ms, last task %.0f ms of %.1f s: lost in the takeover", job, sum.SplitAtAdd, sum.FirstQueryMS, sum.LastDoneMS, sum.Seconds)
			}
		}
	}
	checkStats()
	c.kill(co2.name)
	c.waitCoordinator(co2.name)
	checkStats()
	// Every task committed exactly once: the journal's state says so, on the standby too.
	co2.s.mu.Lock()
	for _, n := range []string{"fast", "slow"} {
		j := co2.s.st.Jobs[n]
		if j.NDone != j.Spec.NumTasks() {
			t.Errorf("job %s: %d of %d tasks done", n, j.NDone, j.Spec.NumTasks())
		}
	}
	co2.s.mu.Unlock()
}

func TestClusterBadInput(t *testing.T) {
	c := newMemCluster(t, 3)
	c.waitCoordinator("")
	add := func(spec JobSpec) error { return c.callRetry("sched.job.add", spec, nil) }
	// Training phase: register a model, refuse an unknown one, remove it.
	c.callRetry("sched.phase", PhaseArgs{PhaseTraining}, nil)
	var info ClusterInfo
	if err := c.callRetry("sched.model.add", ModelArgs{Name: "fast", Model: "fast.onnx"}, &info); err != nil || info.Models["fast"] != "fast.onnx" {
		t.Fatalf("model add: %v %+v", err, info)
	}
	if err := c.callRetry("sched.model.add", ModelArgs{Name: "x", Model: "nope.onnx"}, nil); err == nil {
		t.Fatal("unknown model file accepted")
	}
	var after ClusterInfo
	if err := c.callRetry("sched.model.remove", NameArgs{"fast"}, &after); err != nil || len(after.Models) != 0 {
		t.Fatalf("model remove: %v %+v", err, after)
	}
	if err := c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("inference while training: %v", err)
	}
	c.callRetry("sched.phase", PhaseArgs{PhaseIdle}, nil)
	if err := add(JobSpec{Name: "a", Model: "fast.onnx", Data: "small.idx", Batch: 1}); err == nil || !strings.Contains(err.Error(), "inference phase") {
		t.Fatalf("add before the phase: %v", err)
	}
	c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil)
	for _, tc := range []struct {
		spec JobSpec
		want string
	}{
		{JobSpec{Name: "a", Model: "nope.onnx", Data: "small.idx", Batch: 1}, "model \"nope.onnx\" not found"},
		{JobSpec{Name: "a", Model: "fast.onnx", Data: "nope", Batch: 1}, "dataset \"nope\" not found"},
		{JobSpec{Name: "a", Model: "fast.onnx", Data: "small.idx", Batch: 0}, "batch size must be at least 1"},
		{JobSpec{Name: "a/b", Model: "fast.onnx", Data: "small.idx", Batch: 1}, "job name"},
		{JobSpec{Name: "a", Model: "fast.onnx", Data: "small.idx", Batch: 4, TaskSize: 6}, "whole number of batches"},
	} {
		if err := add(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.spec, err, tc.want)
		}
	}
	var list []JobSummary
	c.callRetry("sched.job.list", struct{}{}, &list)
	if len(list) != 0 {
		t.Fatalf("refused jobs left something behind: %+v", list)
	}
	if err := add(JobSpec{Name: "a", Model: "fast.onnx", Data: "small.idx", Batch: 5}); err != nil {
		t.Fatal(err)
	}
	if err := add(JobSpec{Name: "a", Model: "fast.onnx", Data: "small.idx", Batch: 5}); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("duplicate: %v", err)
	}
	if err := c.callRetry("sched.job.remove", NameArgs{"zzz"}, nil); !IsNoJob(err) || !strings.Contains(err.Error(), "no job") {
		t.Fatalf("remove unknown: %v", err)
	}
	// Removing a running job stops it and frees its name.
	if err := c.callRetry("sched.job.remove", NameArgs{"a"}, nil); err != nil {
		t.Fatal(err)
	}
	c.callRetry("sched.job.list", struct{}{}, &list)
	if len(list) != 0 {
		t.Fatalf("removed job still listed: %+v", list)
	}
	if err := add(JobSpec{Name: "a", Model: "fast.onnx", Data: "small.idx", Batch: 5}); err != nil {
		t.Fatalf("re-adding a removed name: %v", err)
	}
	c.waitJob("a", 30*time.Second)
	c.checkResult("a", "small.idx", 2000)
}

// TestClusterRestartAll kills every node mid-job and restarts them: the job resumes from
// the journals and committed tasks are not computed again.
func TestClusterRestartAll(t *testing.T) {
	c := newMemCluster(t, 4)
	c.waitCoordinator("")
	c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil)
	if err := c.callRetry("sched.job.add", JobSpec{Name: "j", Model: "slow.onnx", Data: "small.idx", Batch: 10, TaskSize: 50}, nil); err != nil {
		t.Fatal(err)
	}
	var js JobSummary
	for js.DoneTasks < 10 {
		time.Sleep(20 * time.Millisecond)
		c.callRetry("sched.job.get", NameArgs{"j"}, &js)
	}
	for name := range c.nodes {
		c.kill(name)
	}
	putsBefore := c.blobs.Puts
	for name := range c.nodes {
		c.start(name)
	}
	c.waitCoordinator("")
	done := c.waitJob("j", 30*time.Second)
	c.checkResult("j", "small.idx", 2000)
	// Tasks committed before the crash are not recomputed: at most the ones in flight are.
	recomputed := c.blobs.Puts - putsBefore - 1 - (done.Tasks - js.DoneTasks)
	if recomputed > 4*2 {
		t.Fatalf("%d tasks recomputed after the restart", recomputed)
	}
	// The latency statistics are rebuilt from the journals: every query's latency counts
	// once, those measured before the restart included.
	var h LatencyHistogram
	if err := c.callRetry("sched.job.histogram", NameArgs{"j"}, &h); err != nil {
		t.Fatal(err)
	}
	if h.Count != 2000 {
		t.Fatalf("latencies of %d queries after a restart of every node, want 2000", h.Count)
	}
}

// TestClusterFairTime is the fair-time plumbing end to end (real RPC, real time): two jobs
// whose queries cost 10x apart run together on 5 workers, both make progress, each gets a
// share, and the split chosen at the second job's add is recorded. The decisions (rates
// level, the new job's first query within 0.5 s) are tested on a fake clock, where the
// machine's load cannot move them: TestFairTimeCheapJobJoins, TestFairTimeFromTheStart and
// the scenario tests of package dispatch.
func TestClusterFairTime(t *testing.T) {
	c := newMemCluster(t, 6)
	c.exec.Datasets["long"] = 200000
	c.waitCoordinator("")
	c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil)
	if err := c.callRetry("sched.job.add", JobSpec{Name: "cheap", Model: "fast.onnx", Data: "long", Batch: 10, TaskSize: 100}, nil); err != nil {
		t.Fatal(err)
	}
	var r JobAddReply
	if err := c.callRetry("sched.job.add", JobSpec{Name: "costly", Model: "slow.onnx", Data: "long", Batch: 5, TaskSize: 20}, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("split at add: %s", r.Split)
	var a, b JobSummary
	for deadline := time.Now().Add(time.Minute); a.Done == 0 || b.Done == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no progress in a minute: cheap %d, costly %d queries done", a.Done, b.Done)
		}
		c.callRetry("sched.job.get", NameArgs{"cheap"}, &a)
		c.callRetry("sched.job.get", NameArgs{"costly"}, &b)
	}
	t.Logf("done %d and %d queries, shares %.3f/%.3f", a.Done, b.Done, a.Share, b.Share)
	if !(a.Share > 0 && b.Share > a.Share) {
		t.Fatalf("shares %.3f (cheap) and %.3f (costly)", a.Share, b.Share)
	}
	if b.SplitAtAdd == "" || !strings.Contains(b.SplitAtAdd, "costly=") {
		t.Fatalf("split at add not recorded: %q", b.SplitAtAdd)
	}
}
