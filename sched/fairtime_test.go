package sched

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"idunno/rpc"
)

// simWorker is one worker of the simulated cluster: it holds up to depth tasks (one
// running), pulls whenever a task finishes and every PullEvery, like worker.go; an express
// task starts at once in a second slot, beside the running one, which waits for it (one CPU).
type simWorker struct {
	name     string
	queue    []TaskOrder
	slots    [2]simSlot // the running task, the express task
	done     []TaskReport
	lastPull time.Time
}

type simSlot struct {
	o            *TaskOrder
	start, until time.Time
}

type simCompletion struct {
	at      time.Time
	job     string
	queries int
}

// fairSim drives a real coordinator (handlePull, the controller, leases, the journal) with
// simulated workers on a fake clock: task durations are exactly the cost the test sets.
type fairSim struct {
	t       *testing.T
	s       *Scheduler
	now     time.Time
	workers []*simWorker
	cost    map[string]time.Duration // model -> true busy time per query
	done    []simCompletion
	depth   int
	epoch   uint64
	picks   map[string][]string      // worker -> jobs in the order it started them
	slow    map[string]float64       // worker -> factor on every task's duration (missing: 1)
	jitter  func(job string) float64 // factor on one task's duration (nil: 1)
}

func newFairSim(t *testing.T, nWorkers int, exec *FakeExecutor) *fairSim {
	f := &fairSim{t: t, now: time.Unix(1_000_000, 0), cost: exec.Models, picks: map[string][]string{}}
	cfg := DefaultSchedConfig()
	f.depth = cfg.Depth
	cli := rpc.NewClient(testSecret)
	t.Cleanup(func() { cli.Close() })
	s, err := NewScheduler(Deps{Name: "coord", RPCAddr: "127.0.0.1:1", DataDir: t.TempDir(),
		Membership: NewStaticMembership(), Blobs: NewMemBlobs(), Executor: exec, Client: cli,
		Now: func() time.Time { return f.now }}, cfg, rpc.NewServer(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.mu.Lock(); s.journal.Close(); s.mu.Unlock() })
	s.mu.Lock()
	s.takeOver("simulation")
	f.epoch = s.st.Epoch
	s.mu.Unlock()
	f.s = s
	for i := 0; i < nWorkers; i++ {
		f.workers = append(f.workers, &simWorker{name: fmt.Sprintf("w%d", i)})
	}
	if _, err := s.apiPhase(context.Background(), PhaseArgs{PhaseInference}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fairSim) add(spec JobSpec) JobAddReply {
	r, err := f.s.apiJobAdd(context.Background(), spec)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fairSim) pull(w *simWorker) {
	held := len(w.queue)
	var refs []TaskRef
	for _, o := range w.queue {
		refs = append(refs, TaskRef{o.Spec.Name, o.Task})
	}
	for i, sl := range w.slots {
		if sl.o != nil {
			if i == 0 {
				held++
			}
			refs = append(refs, TaskRef{sl.o.Spec.Name, sl.o.Task})
		}
	}
	r, _, err := f.s.handlePull(f.epoch, PullArgs{Worker: w.name, Want: f.depth - held, Held: refs, Done: w.done})
	if err != nil {
		f.t.Fatal(err)
	}
	acked := map[TaskRef]bool{}
	for _, a := range r.Acked {
		acked[a] = true
	}
	var left []TaskReport
	for _, d := range w.done {
		if acked[TaskRef{d.Job, d.Task}] {
			f.done = append(f.done, simCompletion{f.now, d.Job, d.Queries})
		} else {
			left = append(left, d)
		}
	}
	w.done = left
	for _, o := range r.Orders {
		if o.Express && w.slots[1].o == nil {
			f.start(w, 1, o)
		} else if o.Express {
			w.queue = append([]TaskOrder{o}, w.queue...)
		} else {
			w.queue = append(w.queue, o)
		}
	}
	w.lastPull = f.now
}

// start runs o in one of w's slots.
func (f *fairSim) start(w *simWorker, slot int, o TaskOrder) {
	from, to := o.Spec.TaskRange(o.Task)
	d := time.Duration(to-from) * f.cost[o.Spec.Model]
	if k, ok := f.slow[w.name]; ok {
		d = time.Duration(float64(d) * k)
	}
	if f.jitter != nil {
		d = time.Duration(float64(d) * f.jitter(o.Spec.Name))
	}
	w.slots[slot] = simSlot{o: &o, start: f.now, until: f.now.Add(d)}
	// One CPU: while the express task runs, the other slot's task waits for it.
	if other := &w.slots[1-slot]; other.o != nil {
		if slot == 1 {
			other.until = other.until.Add(d)
		} else {
			w.slots[0].until = w.slots[0].until.Add(other.until.Sub(f.now))
		}
	}
	f.picks[w.name] = append(f.picks[w.name], o.Spec.Name)
}

// run advances the simulation to end, event by event.
func (f *fairSim) run(end time.Time) {
	every := f.s.cfg.PullEvery
	for {
		var next *simWorker
		var at time.Time
		for _, w := range f.workers {
			e := w.lastPull.Add(every)
			for _, sl := range w.slots {
				if sl.o != nil && sl.until.Before(e) {
					e = sl.until
				}
			}
			if next == nil || e.Before(at) {
				next, at = w, e
			}
		}
		if at.After(end) {
			f.now = end
			return
		}
		if at.After(f.now) {
			f.now = at
		}
		// The controller's period, as coordTick runs it.
		f.s.mu.Lock()
		if f.now.Sub(f.s.co.core.LastControl()) >= f.s.cfg.ControlEvery {
			f.s.control(f.now)
		}
		f.s.mu.Unlock()
		w := next
		for i, sl := range w.slots {
			if sl.o != nil && !sl.until.After(f.now) {
				o := sl.o
				from, to := o.Spec.TaskRange(o.Task)
				w.done = append(w.done, TaskReport{Job: o.Spec.Name, JobID: o.Spec.ResultID(o.Task), Task: o.Task, Worker: w.name, Queries: to - from,
					BusyNanos: sl.until.Sub(sl.start).Nanoseconds(), Epoch: o.Epoch, StartNanos: sl.start.UnixNano()})
				w.slots[i] = simSlot{}
			}
		}
		f.pull(w)
		if w.slots[0].o == nil && len(w.queue) > 0 {
			o := w.queue[0]
			w.queue = w.queue[1:]
			f.start(w, 0, o)
		}
	}
}

// windowRates returns each job's completed queries per second in consecutive windows
// starting at from.
func (f *fairSim) windowRates(from time.Time, window time.Duration, n int) map[string][]float64 {
	out := map[string][]float64{}
	for _, c := range f.done {
		i := int(c.at.Sub(from) / window)
		if c.at.Before(from) || i >= n {
			continue
		}
		if out[c.job] == nil {
			out[c.job] = make([]float64, n)
		}
		out[c.job][i] += float64(c.queries) / window.Seconds()
	}
	return out
}

// TestFairTimeFromTheStart adds two jobs whose costs per query differ 1000:1 at the same
// moment on a simulated 5-worker cluster and checks their completed-query rates are
// within 10% of each other from the first rate window on — the prior from the models'
// FLOPs gets the split right before anything is measured, and the cheap job's tiny share
// is enforced (it never runs back to back on a worker it shares).
func TestFairTimeFromTheStart(t *testing.T) {
	exec := &FakeExecutor{
		Datasets: map[string]int{"long": 100000},
		Models:   map[string]time.Duration{"tiny.onnx": 20 * time.Microsecond, "huge.onnx": 20 * time.Millisecond},
		// The fake's true costs are FLOPs × 2e-11 s, a little off for the tiny model
		// (overhead the FLOPs don't count).
		FLOPs: map[string]float64{"tiny.onnx": 0.95e6, "huge.onnx": 1e9},
	}
	f := newFairSim(t, 5, exec)
	f.run(f.now.Add(time.Second)) // the workers ask for work, so the split spans all of them
	t0 := f.now
	rt := f.add(JobSpec{Name: "tiny", Model: "tiny.onnx", Data: "long", Batch: 10, TaskSize: 10})
	rh := f.add(JobSpec{Name: "huge", Model: "huge.onnx", Data: "long", Batch: 5, TaskSize: 5})
	t.Logf("split at add: %s then %s", rt.Split, rh.Split)
	f.run(t0.Add(20 * time.Second))
	const window = 2 * time.Second
	rates := f.windowRates(t0, window, 10)
	for i := range rates["huge"] {
		a, b := rates["tiny"][i], rates["huge"][i]
		spread := math.Abs(a-b) / math.Min(a, b)
		t.Logf("window %2d: tiny %6.1f q/s, huge %6.1f q/s (%.1f%% apart)", i, a, b, 100*spread)
		if !(spread <= 0.10) {
			t.Errorf("window %d: rates %.1f and %.1f are %.1f%% apart", i, a, b, 100*spread)
		}
	}
	// The tiny job's share is enforced: however many workers would take its 0.2 ms tasks,
	// it never completes more than FairSlack at the fair rate (62 queries), plus the tasks
	// in flight, ahead of the huge job.
	n := map[string]int{}
	for _, c := range f.done {
		n[c.job] += c.queries
		if c.at.Sub(t0) > time.Second && n["tiny"]-n["huge"] > 62+5*5 {
			t.Fatalf("at %v tiny has %d queries done, huge %d", c.at.Sub(t0), n["tiny"], n["huge"])
		}
	}
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.summary("huge", f.now)
	if sum.FirstQueryMS < 0 || sum.FirstQueryMS > 500 {
		t.Fatalf("first query of the second job after %.0f ms", sum.FirstQueryMS)
	}
	if got := s.st.Jobs["tiny"].Spec.FLOPsPerQuery; got != 0.95e6 {
		t.Fatalf("FLOPs per query not recorded in the journaled spec: %v", got)
	}
}

// TestPickJobNoBankedCredit checks that a job that had nothing pending for a while (or is
// new to a worker) does not then run back to back on credit banked while it was absent.
func TestPickJobNoBankedCredit(t *testing.T) {
	exec := &FakeExecutor{Datasets: map[string]int{"d": 100000},
		Models: map[string]time.Duration{"a.onnx": time.Millisecond, "b.onnx": time.Millisecond}}
	f := newFairSim(t, 1, exec)
	f.add(JobSpec{Name: "a", Model: "a.onnx", Data: "d", Batch: 10, TaskSize: 10})
	f.run(f.now.Add(5 * time.Second)) // a alone: its virtual time grows
	f.add(JobSpec{Name: "b", Model: "b.onnx", Data: "d", Batch: 10, TaskSize: 10})
	start := len(f.picks["w0"])
	f.run(f.now.Add(2 * time.Second))
	ps := f.picks["w0"][start:]
	n := map[string]int{}
	for _, p := range ps {
		n[p]++
	}
	if len(ps) < 50 || math.Abs(float64(n["a"]-n["b"])) > 0.1*float64(len(ps)) {
		t.Fatalf("after b arrived, w0 ran %v (want about half each)", n)
	}
	// Deterministic order check: never more than a few of one job in a row.
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	run := 1
	for i := 1; i < len(ps); i++ {
		if ps[i] == ps[i-1] {
			run++
		} else {
			run = 1
		}
		if run > 3 {
			t.Fatalf("%d tasks of %s in a row: %v", run, ps[i], ps)
		}
	}
}

// TestIdleWorkersKeepFairTime: once every remaining task of the expensive job is leased,
// its workers wait for it instead of running the cheap job at full speed, so the cheap
// job is not finished ahead of the expensive one by "idle help".
func TestIdleWorkersKeepFairTime(t *testing.T) {
	exec := &FakeExecutor{
		Datasets: map[string]int{"long": 100000, "short": 60},
		Models:   map[string]time.Duration{"tiny.onnx": 20 * time.Microsecond, "huge.onnx": 20 * time.Millisecond},
		FLOPs:    map[string]float64{"tiny.onnx": 1e6, "huge.onnx": 1e9},
	}
	f := newFairSim(t, 5, exec)
	f.run(f.now.Add(time.Second))
	t0 := f.now
	f.add(JobSpec{Name: "tiny", Model: "tiny.onnx", Data: "long", Batch: 10, TaskSize: 10})
	f.add(JobSpec{Name: "huge", Model: "huge.onnx", Data: "short", Batch: 5, TaskSize: 5})
	f.run(t0.Add(2 * time.Second))
	var hugeEnd time.Time
	hugeN := 0
	for _, c := range f.done {
		if c.job == "huge" {
			hugeEnd, hugeN = c.at, hugeN+c.queries
		}
	}
	if hugeN != 60 {
		t.Fatalf("huge did %d of 60 queries", hugeN)
	}
	tinyN := 0
	for _, c := range f.done {
		if c.job == "tiny" && !c.at.After(hugeEnd) {
			tinyN += c.queries
		}
	}
	t.Logf("by the time huge finished (%v), tiny did %d queries", hugeEnd.Sub(t0), tinyN)
	if tinyN > hugeN+20 {
		t.Fatalf("tiny did %d queries while huge did %d: idle workers ran it past its share", tinyN, hugeN)
	}
	// Once huge is done, tiny gets the whole cluster.
	if n := len(f.done); f.done[n-1].job != "tiny" {
		t.Fatal("tiny stopped after huge finished")
	}
}

// TestExpensiveJobGetsShortTasks: a job whose cost prior says a task of the usual size
// would run long gets tasks of about TaskSeconds (whole batches), so its cost is measured
// soon and jobs sharing a worker interleave finely; a cheap job keeps the usual size.
func TestExpensiveJobGetsShortTasks(t *testing.T) {
	exec := &FakeExecutor{Datasets: map[string]int{"d": 10000},
		Models: map[string]time.Duration{"tiny.onnx": 0, "huge.onnx": 0, "plain.onnx": 0},
		FLOPs:  map[string]float64{"tiny.onnx": 1e6, "huge.onnx": 1e10}}
	f := newFairSim(t, 2, exec)
	tiny := f.add(JobSpec{Name: "tiny", Model: "tiny.onnx", Data: "d", Batch: 8})
	huge := f.add(JobSpec{Name: "huge", Model: "huge.onnx", Data: "d", Batch: 4})
	plain := f.add(JobSpec{Name: "plain", Model: "plain.onnx", Data: "d", Batch: 8})
	// Nothing measured: 1e10 FLOPs at the default 1e-11 s per FLOP is 0.1 s per query,
	// so a TaskSeconds task is TaskSeconds/0.1 s queries, rounded down to whole batches of 4.
	// The cheap jobs get the usual size: MaxTaskBatches batches, within the query bounds.
	cfg := DefaultSchedConfig()
	usual := min(cfg.TaskQueries, max(8*cfg.MaxTaskBatches, cfg.MinTaskQueries))
	short := max(4, int(cfg.TaskSeconds.Seconds()/0.1)/4*4)
	if tiny.TaskSize != usual || huge.TaskSize != short || plain.TaskSize != usual {
		t.Fatalf("task sizes tiny %d, huge %d, plain %d", tiny.TaskSize, huge.TaskSize, plain.TaskSize)
	}
}

// TestJobStatsCostSkipsOneOffLoad: a fresh worker's first task pays for loading the model;
// the cost per query the controller uses is its batches' time, not the load.
func TestJobStatsCostSkipsOneOffLoad(t *testing.T) {
	s := NewJobStats()
	now := time.Unix(100, 0)
	s.Record(TaskReport{Queries: 8, BusyNanos: 3e9, BatchUS: []int64{200_000, 200_000}}, 4, now)
	if math.Abs(s.cost-0.05) > 1e-9 { // 0.4 s of batches for 8 queries
		t.Fatalf("cost after a loading task %v, want 0.05", s.cost)
	}
	s.Record(TaskReport{Queries: 8, BusyNanos: 0.5e9, BatchUS: []int64{200_000, 200_000}}, 4, now)
	if want := (0.4 + 0.5) / 16; math.Abs(s.cost-want) > 1e-9 { // the rest of a task's time counts
		t.Fatalf("cost %v, want %v", s.cost, want)
	}
}

// TestJobStatsCostResistsOutliers: the cost is an average over about costTau of completions:
// one stalled task moves it little, a heavy-tailed stream of busy times (a cheap job on a
// loaded machine) gives a steady cost near the stream's mean, and a real change is followed
// within a few costTau.
func TestJobStatsCostResistsOutliers(t *testing.T) {
	s := NewJobStats()
	now := time.Unix(100, 0)
	step := func(busy time.Duration) {
		now = now.Add(100 * time.Millisecond)
		s.Record(TaskReport{Queries: 10, BusyNanos: busy.Nanoseconds()}, 10, now)
	}
	for range 100 {
		step(time.Millisecond) // 0.1 ms per query, ten tasks a second
	}
	step(5 * time.Second) // a paused process
	if s.cost > 1.3e-4 {
		t.Fatalf("cost after one stalled task %v, want under 1.3e-4", s.cost)
	}
	// Heavy-tailed busy times (median 1 ms, mean 3.1 ms per task): the cost stays within
	// 40% of the mean however the tail falls (an average over the last few tasks swings by
	// several times).
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 600 {
		step(time.Duration(float64(time.Millisecond) * math.Exp(1.5*rng.NormFloat64())))
		if i >= 300 && math.Abs(s.cost/3.08e-4-1) > 0.4 {
			t.Fatalf("task %d: cost %v, mean 3.08e-4", i, s.cost)
		}
	}
	for range 300 {
		step(20 * time.Millisecond) // really 2 ms per query now
	}
	if math.Abs(s.cost/2e-3-1) > 0.05 {
		t.Fatalf("cost %v did not follow a real change to 2e-3 within 30 s", s.cost)
	}
}

// TestFairTimeCheapJobJoins is the benchmark's scenario on a fake clock: an expensive job
// (90 ms per query, tasks of 16 queries, about 1.4 s) runs alone on 9 workers; 15 s later
// a job about 1000 times cheaper per query is added. As on the benchmark's loaded 2-core
// machine, the cheap job's task durations are heavy-tailed: most are fast, some are
// descheduled for 20 times as long (busy times of 32-query LeNet-5 tasks there range from
// 0.4 to 55 ms), and the workers run at unequal speeds.
// Its first query starts within 0.5 s of the add, and from 10 s after the add the two
// jobs' rates over every 5 s window are within 10% of each other.
func TestFairTimeCheapJobJoins(t *testing.T) {
	exec := &FakeExecutor{
		Datasets: map[string]int{"long": 1_000_000},
		Models:   map[string]time.Duration{"tiny.onnx": 25 * time.Microsecond, "huge.onnx": 90 * time.Millisecond},
		FLOPs:    map[string]float64{"tiny.onnx": 0.5e6, "huge.onnx": 1e9},
	}
	f := newFairSim(t, 9, exec)
	// Workers of unequal speed (up to 16% slower), as on a shared machine: their tasks do
	// not finish in lockstep, and measured costs are averages the gain must correct.
	f.slow = map[string]float64{}
	for i, w := range f.workers {
		f.slow[w.name] = 1 + 0.02*float64(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	f.jitter = func(job string) float64 {
		if job == "tiny" {
			return math.Exp(1.5 * rng.NormFloat64()) // median 1, mean 3.1, 1 in 100 over 33
		}
		return 1 + 0.05*rng.NormFloat64()
	}
	f.add(JobSpec{Name: "huge", Model: "huge.onnx", Data: "long", Batch: 4, TaskSize: 16})
	f.run(f.now.Add(15 * time.Second))
	t0 := f.now
	f.add(JobSpec{Name: "tiny", Model: "tiny.onnx", Data: "long", Batch: 8, TaskSize: 32})
	const window, settle, windows = 5 * time.Second, 10 * time.Second, 8
	f.run(t0.Add(settle + windows*window))
	fine := f.windowRates(t0, time.Second, int(settle/time.Second)+windows*5)
	for i := range fine["huge"] {
		t.Logf("second %2d: tiny %6.1f q/s, huge %6.1f q/s", i, fine["tiny"][i], fine["huge"][i])
	}
	rates := f.windowRates(t0.Add(settle), window, windows)
	for i := range windows {
		a, b := rates["tiny"][i], rates["huge"][i]
		spread := math.Abs(a-b) / math.Max(a, b)
		t.Logf("window %d (from %v): tiny %6.1f q/s, huge %6.1f q/s (%.1f%% apart)", i, settle+time.Duration(i)*window, a, b, 100*spread)
		if !(spread <= 0.10) {
			t.Errorf("window %d: rates %.1f and %.1f are %.1f%% apart", i, a, b, 100*spread)
		}
	}
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if sum := s.summary("tiny", f.now); sum.FirstQueryMS < 0 || sum.FirstQueryMS > 500 {
		t.Errorf("first query of the added job after %.0f ms, want < 500", sum.FirstQueryMS)
	}
}

// TestSilentWorkerLosesLeases: a worker that stops pulling while the failure detector
// still lists it (a frozen process, a lagging view) loses its tasks after LeaseSilence;
// another worker finishes them, and the frozen worker's late reports change nothing.
func TestSilentWorkerLosesLeases(t *testing.T) {
	exec := &FakeExecutor{Datasets: map[string]int{"d": 40}, Models: map[string]time.Duration{"m.onnx": time.Millisecond}}
	f := newFairSim(t, 2, exec)
	f.add(JobSpec{Name: "j", Model: "m.onnx", Data: "d", Batch: 10, TaskSize: 10})
	s := f.s
	pull := func(w string, held []TaskRef, done []TaskReport) PullReply {
		r, _, err := s.handlePull(f.epoch, PullArgs{Worker: w, Want: 2, Held: held, Done: done})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	frozen := pull("w1", nil, nil).Orders
	if len(frozen) == 0 {
		t.Fatal("w1 got no task")
	}
	var frozenRefs []TaskRef
	for _, o := range frozen {
		frozenRefs = append(frozenRefs, TaskRef{o.Spec.Name, o.Task})
	}
	tick := func() {
		s.mu.Lock()
		_, rs := s.co.core.Tick(f.now, []string{s.name, "w0", "w1"}, s.name)
		s.applyResizes(rs)
		s.mu.Unlock()
	}
	// w0 keeps pulling and finishing what it gets; w1 says nothing.
	finished := map[int]bool{}
	var held []TaskRef
	var done []TaskReport
	for step := 0; step < 200 && len(finished) < 4; step++ {
		f.now = f.now.Add(100 * time.Millisecond)
		tick()
		r := pull("w0", held, done)
		held, done = nil, nil
		for _, o := range r.Orders {
			from, to := o.Spec.TaskRange(o.Task)
			done = append(done, TaskReport{Job: "j", JobID: o.Spec.ID, Task: o.Task, Worker: "w0", Queries: to - from, BusyNanos: 1e6})
			finished[o.Task] = true
		}
		if f.now.Sub(time.Unix(1_000_000, 0)) < s.cfg.LeaseSilence-time.Second {
			for _, o := range frozen {
				if finished[o.Task] {
					t.Fatalf("task %d of the silent worker re-leased before LeaseSilence", o.Task)
				}
			}
		}
	}
	pull("w0", nil, done)
	if len(finished) != 4 || s.st.Jobs["j"].NDone != 4 {
		t.Fatalf("w0 finished %v, journal has %d of 4 tasks", finished, s.st.Jobs["j"].NDone)
	}
	// w1 thaws and reports its (identical) results: acknowledged, nothing counted twice.
	var late []TaskReport
	for _, o := range frozen {
		from, to := o.Spec.TaskRange(o.Task)
		late = append(late, TaskReport{Job: "j", JobID: o.Spec.ID, Task: o.Task, Worker: "w1", Queries: to - from, BusyNanos: 1e6})
	}
	r := pull("w1", frozenRefs, late)
	if len(r.Acked) != len(late) || s.st.Jobs["j"].NDone != 4 {
		t.Fatalf("late reports: acked %v, %d tasks done", r.Acked, s.st.Jobs["j"].NDone)
	}
}

// TestCheapJobBesideExpensiveGetsSmallTasks: a cheap job alone gets the usual large tasks
// (per-task costs amortise), but added beside an expensive job it will run at that job's
// rate under fair time, so its tasks are kept to about TaskSeconds of that rate (whole
// batches) and its rate over a window moves in small steps.
func TestCheapJobBesideExpensiveGetsSmallTasks(t *testing.T) {
	exec := &FakeExecutor{Datasets: map[string]int{"d": 100000},
		Models: map[string]time.Duration{"tiny.onnx": time.Microsecond, "huge.onnx": 10 * time.Millisecond},
		FLOPs:  map[string]float64{"tiny.onnx": 1e6, "huge.onnx": 1e10}}
	cfg := DefaultSchedConfig()
	usual := min(cfg.TaskQueries, max(64*cfg.MaxTaskBatches, cfg.MinTaskQueries))
	f := newFairSim(t, 4, exec)
	f.run(f.now.Add(time.Second)) // the workers ask for work
	if r := f.add(JobSpec{Name: "alone", Model: "tiny.onnx", Data: "d", Batch: 64}); r.TaskSize != usual {
		t.Fatalf("cheap job alone: tasks of %d, want %d", r.TaskSize, usual)
	}
	f.s.apiJobRemove(context.Background(), NameArgs{"alone"})
	f.add(JobSpec{Name: "huge", Model: "huge.onnx", Data: "d", Batch: 4})
	// 4 workers over 0.1 s + 1e-5 s per query of the two jobs: about 40 queries/s each,
	// so a FairTaskSeconds task is just under 40*FairTaskSeconds queries, in whole batches
	// of 8 (at least one), or one batch of 64.
	want := max(8, int(40*cfg.FairTaskSeconds.Seconds()-0.01)/8*8)
	if r := f.add(JobSpec{Name: "beside", Model: "tiny.onnx", Data: "d", Batch: 8}); r.TaskSize != want {
		t.Fatalf("cheap job beside an expensive one: tasks of %d, want %d", r.TaskSize, want)
	}
	if r := f.add(JobSpec{Name: "beside64", Model: "tiny.onnx", Data: "d", Batch: 64}); r.TaskSize != 64 {
		t.Fatalf("cheap job of batch 64 beside an expensive one: tasks of %d, want 64", r.TaskSize)
	}
}
