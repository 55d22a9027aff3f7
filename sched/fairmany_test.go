package sched

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// manyJob is one job of a many-jobs scenario: its true cost per query, the FLOPs its cost
// prior reads (off from the truth by up to 2x either way, as the zoo models' priors are),
// its batch and its weight.
type manyJob struct {
	name   string
	cost   time.Duration
	flops  float64
	batch  int
	weight float64
}

// drawJobs draws n jobs whose costs per query are spread log-uniformly over three orders
// of magnitude (20 µs to 20 ms, LeNet-5 to ResNet-50 on one core), always including both
// ends, with priors off by up to 2x.
func drawJobs(rng *rand.Rand, n int) []manyJob {
	out := make([]manyJob, n)
	for i := range out {
		u := rng.Float64()
		switch i {
		case 0:
			u = 1
		case 1:
			u = 0
		}
		cost := 20e-6 * math.Pow(1000, u)
		batch := 4
		if cost < 1e-3 {
			batch = 32
		}
		out[i] = manyJob{name: fmt.Sprintf("job%02d", i), cost: time.Duration(cost * 1e9),
			flops: cost / 2e-11 * math.Pow(2, 2*rng.Float64()-1), batch: batch, weight: 1}
	}
	return out
}

// manySim is a fairSim scripted for many jobs: events at given times, and the spread of
// the running jobs' 10 s rates sampled every second.
type manySim struct {
	*fairSim
	t0     time.Time
	jobs   map[string]manyJob
	added  map[string]time.Time
	gone   map[string]time.Time
	events []time.Duration // when something changed (add, remove, failure, join)
}

func newManySim(t *testing.T, workers int, seed uint64) *manySim {
	exec := &FakeExecutor{Datasets: map[string]int{"huge": 1_000_000}, Models: map[string]time.Duration{}, FLOPs: map[string]float64{}}
	f := newFairSim(t, workers, exec)
	rng := rand.New(rand.NewPCG(seed, 7))
	// Workers of unequal speed (up to 20% apart) and task times with some noise, as on a
	// shared machine.
	f.slow = map[string]float64{}
	for _, w := range f.workers {
		f.slow[w.name] = 1 + 0.2*rng.Float64()
	}
	f.jitter = func(string) float64 { return math.Exp(0.15 * rng.NormFloat64()) }
	f.run(f.now.Add(time.Second)) // the workers ask for work, so the split spans all of them
	return &manySim{fairSim: f, t0: f.now, jobs: map[string]manyJob{}, added: map[string]time.Time{}, gone: map[string]time.Time{}}
}

func (m *manySim) at(d time.Duration) { m.run(m.t0.Add(d)) }

func (m *manySim) addJob(j manyJob) {
	m.cost[j.name+".onnx"] = j.cost
	m.fairSim.s.exec.(*FakeExecutor).FLOPs[j.name+".onnx"] = j.flops
	m.jobs[j.name] = j
	m.add(JobSpec{Name: j.name, Model: j.name + ".onnx", Data: "huge", Batch: j.batch, Weight: j.weight})
	m.added[j.name] = m.now
	m.events = append(m.events, m.now.Sub(m.t0))
}

func (m *manySim) removeJob(name string) {
	if _, err := m.s.apiJobRemove(context.Background(), NameArgs{name}); err != nil {
		m.t.Fatal(err)
	}
	m.gone[name] = m.now
	m.events = append(m.events, m.now.Sub(m.t0))
}

// failWorkers stops n workers for good: the coordinator takes their tasks back as when
// the failure detector reports them.
func (m *manySim) failWorkers(n int) {
	m.workers = m.workers[:len(m.workers)-n]
	s := m.s
	names := []string{s.name}
	for _, w := range m.workers {
		names = append(names, w.name)
	}
	s.mu.Lock()
	_, rs := s.co.core.Tick(m.now, names, s.name)
	s.applyResizes(rs)
	s.control(m.now)
	s.mu.Unlock()
	m.events = append(m.events, m.now.Sub(m.t0))
}

// joinWorkers adds n fresh workers; they join the split on their first pull.
func (m *manySim) joinWorkers(n int, slow float64) {
	for range n {
		w := &simWorker{name: fmt.Sprintf("x%d", len(m.picks)+len(m.workers)), lastPull: m.now}
		m.slow[w.name] = slow
		m.workers = append(m.workers, w)
	}
	m.events = append(m.events, m.now.Sub(m.t0))
}

// spreadSample is the spread of the 10 s rates of the running jobs at one second.
type spreadSample struct {
	at     time.Duration
	spread float64
	rates  map[string]float64
}

// spreads samples every second from 'from' to 'to' (since t0) the spread (fastest /
// slowest - 1, each rate divided by the job's weight) of the 10 s rates of the jobs that
// ran through the whole window, leaving out samples less than settle after an event.
func (m *manySim) spreads(from, to, settle time.Duration) []spreadSample {
	const window = 10 * time.Second
	done := slices.Clone(m.done)
	sort.Slice(done, func(i, j int) bool { return done[i].at.Before(done[j].at) })
	var out []spreadSample
	for at := from; at <= to; at += time.Second {
		quiet := true
		for _, e := range m.events {
			if at >= e && at < e+settle {
				quiet = false
			}
		}
		if !quiet {
			continue
		}
		end := m.t0.Add(at)
		rates := map[string]float64{}
		for name, a := range m.added {
			g, gone := m.gone[name]
			if a.After(end.Add(-window)) || (gone && !g.After(end)) {
				continue
			}
			rates[name] = 0
		}
		for _, c := range done {
			if _, ok := rates[c.job]; ok && c.at.After(end.Add(-window)) && !c.at.After(end) {
				rates[c.job] += float64(c.queries) / window.Seconds() / m.jobs[c.job].weight
			}
		}
		if len(rates) < 2 {
			continue
		}
		lo, hi := math.Inf(1), 0.0
		for _, r := range rates {
			lo, hi = math.Min(lo, r), math.Max(hi, r)
		}
		out = append(out, spreadSample{at: at, spread: hi/lo - 1, rates: rates})
	}
	return out
}

// checkSpread asserts the median and worst spread of the samples, and logs them.
func checkSpread(t *testing.T, samples []spreadSample, median, worst float64) {
	t.Helper()
	if len(samples) == 0 {
		t.Fatal("no samples")
	}
	sp := make([]float64, len(samples))
	wi := 0
	for i, s := range samples {
		sp[i] = s.spread
		if s.spread > samples[wi].spread {
			wi = i
		}
	}
	sorted := slices.Clone(sp)
	slices.Sort(sorted)
	med := sorted[len(sorted)/2]
	w := samples[wi]
	t.Logf("%d samples: median spread %.1f%%, worst %.1f%% at %v", len(samples), 100*med, 100*w.spread, w.at)
	if testing.Verbose() {
		names := make([]string, 0, len(w.rates))
		for n := range w.rates {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			t.Logf("  at the worst sample: %s %.1f q/s", n, w.rates[n])
		}
	}
	if med > median || w.spread > worst {
		t.Errorf("median spread %.1f%% (bound %.0f%%), worst %.1f%% (bound %.0f%%)", 100*med, 100*median, 100*w.spread, 100*worst)
	}
}

// TestFairTimeFourJobs: four jobs whose costs per query span 1,000x arrive 3 s apart on
// 9 simulated workers (the 10-node benchmark cluster); later two workers fail, one joins,
// a job is removed and another arrives. The 10 s rates of the running jobs, sampled every
// second from 10 s after each change on, are within 5% of each other (median) and 15%
// (worst sample).
func TestFairTimeFourJobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	jobs := drawJobs(rng, 5)
	m := newManySim(t, 9, 4)
	for i, j := range jobs[:4] {
		m.at(time.Duration(i) * 3 * time.Second)
		m.addJob(j)
	}
	m.at(50 * time.Second)
	m.failWorkers(2)
	m.at(70 * time.Second)
	m.joinWorkers(1, 1.1)
	m.at(90 * time.Second)
	m.removeJob(jobs[1].name)
	m.at(100 * time.Second)
	m.addJob(jobs[4])
	m.at(130 * time.Second)
	m.logRates(5 * time.Second)
	checkSpread(t, m.spreads(19*time.Second, 130*time.Second, 10*time.Second), 0.05, 0.15)
}

// logRates logs every job's rate per window, and its task size, for a reader of -v.
func (m *manySim) logRates(window time.Duration) {
	if !testing.Verbose() {
		return
	}
	n := int(m.now.Sub(m.t0) / window)
	r := m.windowRates(m.t0, window, n)
	names := make([]string, 0, len(m.jobs))
	for name := range m.jobs {
		names = append(names, name)
	}
	sort.Strings(names)
	m.s.mu.Lock()
	for _, name := range names {
		if j := m.s.st.Jobs[name]; j != nil {
			m.t.Logf("%s: cost %v, task size %d (now %d), weight %g", name, m.jobs[name].cost, j.Spec.TaskSize, j.Spec.CurrentTaskSize(), j.Spec.RateWeight())
		}
	}
	m.s.mu.Unlock()
	for i := range n {
		line := fmt.Sprintf("%4v", time.Duration(i)*window)
		for _, name := range names {
			line += fmt.Sprintf(" %8.1f", r[name][i]/m.jobs[name].weight)
		}
		m.t.Log(line)
	}
}

// TestFairTimeEightJobs: eight jobs (costs over 1,000x) on 20 simulated workers, added
// 2 s apart; three workers fail, two join, two jobs leave and one arrives. Median spread
// of the 10 s rates within 10%, and (a tighter check than the issue asks) worst 20%.
func TestFairTimeEightJobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	jobs := drawJobs(rng, 9)
	m := newManySim(t, 20, 8)
	for i, j := range jobs[:8] {
		m.at(time.Duration(i) * 2 * time.Second)
		m.addJob(j)
	}
	m.at(45 * time.Second)
	m.failWorkers(3)
	m.at(60 * time.Second)
	m.joinWorkers(2, 1.05)
	m.at(75 * time.Second)
	m.removeJob(jobs[2].name)
	m.removeJob(jobs[5].name)
	m.at(90 * time.Second)
	m.addJob(jobs[8])
	m.at(120 * time.Second)
	m.logRates(5 * time.Second)
	checkSpread(t, m.spreads(24*time.Second, 120*time.Second, 10*time.Second), 0.10, 0.20)
}

// TestFairTimeThirtyTwoJobs: 32 jobs (costs over 1,000x) on 64 simulated workers, all
// added within 3 s; then 8 workers fail, 4 jobs leave and 4 arrive, 8 workers join. The
// bounds are the 8-job ones.
func TestFairTimeThirtyTwoJobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 32))
	jobs := drawJobs(rng, 36)
	m := newManySim(t, 64, 32)
	for i, j := range jobs[:32] {
		m.at(time.Duration(i) * 100 * time.Millisecond)
		m.addJob(j)
	}
	m.at(40 * time.Second)
	m.failWorkers(8)
	m.at(55 * time.Second)
	for i := range 4 {
		m.removeJob(jobs[3+5*i].name)
		m.addJob(jobs[32+i])
	}
	m.at(70 * time.Second)
	m.joinWorkers(8, 1.1)
	m.at(100 * time.Second)
	m.logRates(5 * time.Second)
	checkSpread(t, m.spreads(14*time.Second, 100*time.Second, 10*time.Second), 0.10, 0.20)
}

// TestFairTimeWeights: three jobs of weights 1, 2 and 4 (and costs 100x apart) on 9
// simulated workers: their rates stay in those ratios (the spread is of rate / weight).
func TestFairTimeWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	jobs := drawJobs(rng, 3)
	jobs[1].weight, jobs[2].weight = 2, 4
	m := newManySim(t, 9, 5)
	for _, j := range jobs {
		m.addJob(j)
	}
	m.at(60 * time.Second)
	m.logRates(5 * time.Second)
	checkSpread(t, m.spreads(10*time.Second, 60*time.Second, 10*time.Second), 0.05, 0.15)
	// job stats shows the weight and the ratio achieved; the weight is journaled with
	// the spec, so a standby's snapshot (and a restart) has it.
	r, err := m.s.apiJobStats(context.Background(), NameArgs{jobs[2].name})
	if err != nil || r.Weight != 4 || math.Abs(r.RateRatio/4-1) > 0.1 {
		t.Fatalf("stats of the weight-4 job: weight %v, rate ratio %.3f (%v)", r.Weight, r.RateRatio, err)
	}
	t.Logf("weight-4 job: %.1f q/s, %.2fx the others' rate per unit of weight", r.Rate10s, r.RateRatio)
	m.s.mu.Lock()
	b, _ := appendLine(nil, 'S', m.s.st)
	m.s.mu.Unlock()
	if st, _, _, err := DecodeJournal(b); err != nil || st.Jobs[jobs[1].name].Spec.RateWeight() != 2 {
		t.Fatalf("weight after a snapshot round trip: %v", err)
	}
	if err := (JobSpec{Name: "w", Model: "m", Data: "d", Batch: 1, Weight: -1}).ValidateRequest(); err == nil {
		t.Fatal("a negative weight was accepted")
	}
}

// TestJobResize: the journal splits a job's untouched tasks smaller: the ranges still cover
// every query once, in order; done tasks stay done; results from then on are named by the
// new ID; and bad resizes are refused.
func TestJobResize(t *testing.T) {
	s := NewState()
	spec := testSpec("a", 100, 5, 20) // 5 tasks of 20
	spec.ID = 7
	for i, e := range []*Entry{
		{Kind: EntryEpoch, Epoch: 1, Node: "n0"},
		{Kind: EntryJobAdd, Epoch: 1, Job: spec},
		{Kind: EntryTaskDone, Epoch: 1, Name: "a", Task: 0},
		{Kind: EntryTaskDone, Epoch: 1, Name: "a", Task: 1},
	} {
		e.Seq = uint64(i + 1)
		if err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	next := func(e Entry) *Entry { e.Seq, e.Epoch = s.Seq+1, 1; return &e }
	for _, b := range []struct {
		e    Entry
		want string
	}{
		{Entry{Kind: EntryJobResize, Name: "a", Task: 1, Size: 5, Time: 9}, "task 1 is done"},
		{Entry{Kind: EntryJobResize, Name: "a", Task: 2, Size: 6, Time: 9}, "bad resize"},
		{Entry{Kind: EntryJobResize, Name: "a", Task: 5, Size: 5, Time: 9}, "bad resize"},
		{Entry{Kind: EntryJobResize, Name: "a", Task: 2, Size: 5, Time: 7}, "result ID"}, // same ID
		{Entry{Kind: EntryJobResize, Name: "b", Task: 2, Size: 5, Time: 9}, "no job"},
	} {
		if err := s.Apply(next(b.e)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want %q", b.e, err, b.want)
		}
	}
	if err := s.Apply(next(Entry{Kind: EntryJobResize, Name: "a", Task: 2, Size: 5, Time: 9})); err != nil {
		t.Fatal(err)
	}
	j := s.Jobs["a"]
	sp := j.Spec
	if sp.NumTasks() != 14 || sp.CurrentTaskSize() != 5 || !j.IsDone(1) || j.IsDone(2) || doneQueries(j) != 40 {
		t.Fatalf("after the resize: %d tasks of %d, done %v, %d queries done", sp.NumTasks(), sp.CurrentTaskSize(), j.Done, doneQueries(j))
	}
	end := 0
	for i := range sp.NumTasks() {
		f, to := sp.TaskRange(i)
		if f != end || to <= f {
			t.Fatalf("task %d covers %d-%d after %d", i, f, to, end)
		}
		end = to
		if want := map[bool]int64{true: 7, false: 9}[i < 2]; sp.ResultID(i) != want {
			t.Fatalf("task %d named by ID %d, want %d", i, sp.ResultID(i), want)
		}
	}
	if end != 100 {
		t.Fatalf("tasks end at %d", end)
	}
	// A second resize from a later task: tasks 2-3 stay 5 queries (40-49), then 10s.
	for _, b := range []struct {
		e    Entry
		want string
	}{
		{Entry{Kind: EntryJobResize, Name: "a", Task: 1, Size: 10, Time: 10}, "before the last"},
		{Entry{Kind: EntryJobResize, Name: "a", Task: 4, Size: 10, Time: 9}, "result ID"},
	} {
		if err := s.Apply(next(b.e)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want %q", b.e, err, b.want)
		}
	}
	if err := s.Apply(next(Entry{Kind: EntryJobResize, Name: "a", Task: 4, Size: 10, Time: 10})); err != nil {
		t.Fatal(err)
	}
	if f, to := sp.TaskRange(3); f != 45 || to != 50 {
		t.Fatalf("stale spec changed: task 3 %d-%d", f, to)
	}
	sp = s.Jobs["a"].Spec
	if f, to := sp.TaskRange(4); sp.NumTasks() != 9 || f != 50 || to != 60 || sp.ResultID(4) != 10 || sp.ResultID(3) != 9 {
		t.Fatalf("second resize: %d tasks, task 4 %d-%d", sp.NumTasks(), f, to)
	}
	if err := s.Apply(next(Entry{Kind: EntryJobResize, Name: "a", Task: 3, Size: 5, Time: 11})); err == nil {
		t.Fatal("a resize before the last one was accepted")
	}
	for k := 2; k < MaxSplits; k++ {
		if err := s.Apply(next(Entry{Kind: EntryJobResize, Name: "a", Task: 4, Size: 5 * (k%2 + 1), Time: int64(20 + k)})); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Apply(next(Entry{Kind: EntryJobResize, Name: "a", Task: 4, Size: 5, Time: 40})); err == nil {
		t.Fatalf("resize %d accepted", MaxSplits+1)
	}
	last := s.Jobs["a"].Spec.NumTasks() - 1
	if err := s.Apply(next(Entry{Kind: EntryTaskDone, Name: "a", Task: last})); err != nil {
		t.Fatal(err)
	}
	// A snapshot of the resized job reads back; a corrupt resize is refused.
	b, _ := appendLine(nil, 'S', s)
	st, _, _, err := DecodeJournal(b)
	if err != nil || st.Jobs["a"].Spec.NumTasks() != last+1 || doneQueries(st.Jobs["a"]) != 40+10 {
		t.Fatalf("snapshot: %v", err)
	}
	s.Jobs["a"].Spec.Splits[0].From = 99
	if err := s.validate(); err == nil {
		t.Fatal("a resize beyond the queries validated")
	}
}

// TestCheapJobResizedWhenExpensiveJoins: a cheap job alone gets large tasks; when an
// expensive job joins, the rest of its tasks are split to FairTaskSeconds at its new fair
// rate, a stale report of an old-size task is ignored, and the two rates are level.
func TestCheapJobResizedWhenExpensiveJoins(t *testing.T) {
	m := newManySim(t, 9, 11)
	cheap := manyJob{name: "cheap", cost: 20 * time.Microsecond, flops: 1e6, batch: 32, weight: 1}
	costly := manyJob{name: "costly", cost: 20 * time.Millisecond, flops: 1e9, batch: 4, weight: 1}
	m.addJob(cheap)
	m.at(2 * time.Second)
	s := m.s
	s.mu.Lock()
	old := s.st.Jobs["cheap"].Spec
	s.mu.Unlock()
	m.addJob(costly)
	m.at(5 * time.Second)
	s.mu.Lock()
	sp := s.st.Jobs["cheap"].Spec
	s.mu.Unlock()
	if !sp.resized() || sp.ResizeSize >= old.TaskSize/2 {
		t.Fatalf("cheap job's tasks: %d, then %d from task %d", old.TaskSize, sp.ResizeSize, sp.ResizeFrom)
	}
	t.Logf("cheap job's tasks: %d queries, from task %d on %d", old.TaskSize, sp.ResizeFrom, sp.ResizeSize)
	// A worker that still ran task ResizeFrom with the old size reports it: ignored.
	f, to := old.TaskRange(sp.ResizeFrom)
	stale := TaskReport{Job: "cheap", JobID: old.ID, Task: sp.ResizeFrom, Worker: "w0", Queries: to - f, BusyNanos: 1e6}
	s.mu.Lock()
	done := s.st.Jobs["cheap"].IsDone(sp.ResizeFrom)
	err := s.recordDone(stale, m.now)
	after := s.st.Jobs["cheap"].IsDone(sp.ResizeFrom)
	s.mu.Unlock()
	if err != nil || (!done && after) {
		t.Fatalf("stale report of an old-size task: %v, committed %v", err, after)
	}
	m.at(40 * time.Second)
	m.logRates(5 * time.Second)
	// From 11 s after the add: the tasks the cheap job's workers held when the costly job
	// arrived (18 of 512 queries) complete in its first fraction of a second, so the window
	// ending exactly 10 s after the add still holds them.
	checkSpread(t, m.spreads(13*time.Second, 40*time.Second, 11*time.Second), 0.05, 0.15)
}

// TestJobResizeAfterOldJournal: a job resized once by a journal written before Splits
// (ResizeFrom, ResizeSize, ResizeID) reads the same, and can be resized again on top.
func TestJobResizeAfterOldJournal(t *testing.T) {
	s := NewState()
	spec := testSpec("a", 100, 5, 20) // 5 tasks of 20
	spec.ID = 7
	for i, e := range []*Entry{
		{Kind: EntryEpoch, Epoch: 1, Node: "n0"},
		{Kind: EntryJobAdd, Epoch: 1, Job: spec},
		{Kind: EntryTaskDone, Epoch: 1, Name: "a", Task: 0},
	} {
		e.Seq = uint64(i + 1)
		if err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	// As an old journal held it: from task 1 on, tasks of 10 (8 more tasks), ID 8.
	j := s.Jobs["a"]
	j.Spec.ResizeFrom, j.Spec.ResizeSize, j.Spec.ResizeID = 1, 10, 8
	j.Done = make([]byte, (j.Spec.NumTasks()+7)/8)
	j.Done[0] = 1
	b, _ := appendLine(nil, 'S', s)
	st, _, _, err := DecodeJournal(b)
	if err != nil {
		t.Fatal(err)
	}
	sp := st.Jobs["a"].Spec
	if f, to := sp.TaskRange(3); sp.NumTasks() != 9 || f != 40 || to != 50 || sp.ResultID(3) != 8 || sp.ResultID(0) != 7 {
		t.Fatalf("old resize reads %d tasks, task 3 %d-%d", sp.NumTasks(), f, to)
	}
	if err := st.Apply(&Entry{Seq: st.Seq + 1, Epoch: 1, Kind: EntryJobResize, Name: "a", Task: 5, Size: 20, Time: 9}); err != nil {
		t.Fatal(err)
	}
	sp = st.Jobs["a"].Spec
	end := 0
	for i := range sp.NumTasks() {
		f, to := sp.TaskRange(i)
		if f != end || to <= f {
			t.Fatalf("task %d covers %d-%d after %d", i, f, to, end)
		}
		end = to
	}
	if f, _ := sp.TaskRange(5); end != 100 || f != 60 || sp.NumTasks() != 7 || sp.ResultID(4) != 8 || sp.ResultID(5) != 9 {
		t.Fatalf("second resize: %d tasks ending at %d, task 5 from %d", sp.NumTasks(), end, f)
	}
}
