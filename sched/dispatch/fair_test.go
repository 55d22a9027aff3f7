package dispatch

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"time"
)

func TestTaskTableLeaseExpireAdopt(t *testing.T) {
	ts := NewMemTasks(95, 5, 10, false) // 10 tasks; 0, 3 and 9 done
	for _, i := range []int{3, 9, 0} {
		ts.Done(i)
	}
	tt := NewTaskTable()
	tt.AddJob("a", ts)
	now := time.Unix(0, 0)
	var got []int
	for _, w := range []string{"w1", "w2", "w1", "w2"} {
		task, ok := tt.Lease("a", w, now)
		if !ok {
			t.Fatal("no task")
		}
		got = append(got, task)
	}
	if fmt.Sprint(got) != "[1 2 4 5]" { // 0 and 3 are done
		t.Fatalf("leased %v", got)
	}
	if !tt.Adopt("a", 7, "w3", now) || tt.Adopt("a", 7, "w1", now) || tt.Adopt("a", 0, "w1", now) {
		t.Fatal("adopt rules")
	}
	if w := tt.Complete("a", 2); w != "w2" {
		t.Fatalf("complete returned %q", w)
	}
	lost := tt.ExpireWorker("w1")
	if len(lost) != 2 || lost[0].Task != 1 || lost[1].Task != 4 {
		t.Fatalf("expired %+v", lost)
	}
	var rest []int
	for {
		task, ok := tt.Lease("a", "w9", now)
		if !ok {
			break
		}
		rest = append(rest, task)
	}
	// Given-back tasks first, then the rest; 7 is held by w3, 9 done, 2 finished by w2
	// (not yet journaled here, so the table would hand it again only if it were expired).
	if fmt.Sprint(rest) != "[1 4 6 8]" {
		t.Fatalf("remaining leases %v", rest)
	}
	if tt.HasPending("a") || tt.Held("w9") != 4 {
		t.Fatal("pending after draining")
	}
}

func TestFairSharesProportionalToCost(t *testing.T) {
	shares, _ := FairShares([]JobLoad{{Name: "lenet", Cost: 0.001}, {Name: "resnet", Cost: 0.019}})
	if math.Abs(shares[0]-0.05) > 1e-9 || math.Abs(shares[1]-0.95) > 1e-9 {
		t.Fatalf("shares %v", shares)
	}
	// A new job without a measured cost is assumed to cost the mean of the others.
	shares, _ = FairShares([]JobLoad{{Name: "a", Cost: 0.002}, {Name: "new"}})
	if math.Abs(shares[0]-0.5) > 1e-9 {
		t.Fatalf("shares with unknown cost %v", shares)
	}
	if s, _ := FairShares(nil); len(s) != 0 {
		t.Fatal("no jobs")
	}
}

// TestFairSharesConvergeOnUnequalWorkers simulates a cluster whose workers differ in speed
// and whose measured costs are biased, and checks the controller brings the query rates of
// three jobs within 3% of each other.
func TestFairSharesConvergeOnUnequalWorkers(t *testing.T) {
	workers := []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9"}
	speed := map[string]float64{"w0": 1.6, "w1": 1.5, "w2": 1.4, "w3": 1, "w4": 1, "w5": 1, "w6": 0.7, "w7": 0.6, "w8": 0.6, "w9": 0.5}
	trueCost := []float64{0.001, 0.02, 0.005}
	jobs := []JobLoad{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	names := []string{"a", "b", "c"}
	var spread float64
	for round := 0; round < 30; round++ {
		shares, gains := FairShares(jobs)
		assign := AssignWorkers(workers, names, shares)
		rates := make([]float64, 3)
		busy := make([]float64, 3)
		for w, ss := range assign {
			for _, s := range ss {
				i := map[string]int{"a": 0, "b": 1, "c": 2}[s.Job]
				rates[i] += s.Weight * speed[w] / trueCost[i]
				busy[i] += s.Weight
			}
		}
		lo, hi := math.Inf(1), 0.0
		for i := range jobs {
			jobs[i].Gain = gains[i]
			jobs[i].Rate = rates[i]
			jobs[i].Cost = busy[i] / rates[i] * 1.1 // measured cost: worker-seconds per query, biased
			lo, hi = math.Min(lo, rates[i]), math.Max(hi, rates[i])
		}
		spread = hi/lo - 1
	}
	if spread > 0.03 {
		t.Fatalf("rates still %.1f%% apart after 30 decisions", spread*100)
	}
}

func TestAssignWorkersPacksInOrder(t *testing.T) {
	a := AssignWorkers([]string{"n10", "n2", "n3", "n4"}, []string{"x", "y"}, []float64{0.375, 0.625})
	if fmt.Sprint(a["n2"]) != "[{x 1}]" || fmt.Sprint(a["n3"]) != "[{x 0.5} {y 0.5}]" ||
		fmt.Sprint(a["n4"]) != "[{y 1}]" || fmt.Sprint(a["n10"]) != "[{y 1}]" {
		t.Fatalf("assignment %v", a)
	}
}

// TestFairQueuePick: the rules of the dispatch, one at a time.
func TestFairQueuePick(t *testing.T) {
	all := func(string) bool { return true }
	only := func(names ...string) func(string) bool {
		return func(j string) bool { return slices.Contains(names, j) }
	}
	// aff: the jobs named are Assigned, the rest as other says.
	aff := func(other Affinity, names ...string) func(string) Affinity {
		return func(j string) Affinity {
			if slices.Contains(names, j) {
				return Assigned
			}
			return other
		}
	}
	none, allMine := aff(Other), aff(Assigned)
	q := NewFairQueue()
	if q.Pick(all, allMine, 10) != "" {
		t.Fatal("picked from an empty queue")
	}
	q.Add("a", 1)
	q.Add("b", 2)
	q.Leased("a", 100) // a: 100
	q.Leased("b", 100) // b: 50 (weight 2)
	if got := q.Pick(all, none, 0); got != "b" {
		t.Fatalf("furthest behind: got %q, want b", got)
	}
	// A worker assigned a prefers it while it is at most slack ahead.
	if got := q.Pick(all, aff(Other, "a"), 60); got != "a" {
		t.Fatalf("affinity within slack: got %q, want a", got)
	}
	if got := q.Pick(all, aff(Other, "a"), 40); got != "b" {
		t.Fatalf("affinity beyond slack: got %q, want b", got)
	}
	barB := func(j string) Affinity {
		if j == "b" {
			return Barred
		}
		return Other
	}
	if got := q.Pick(all, barB, 60); got != "a" {
		t.Fatalf("b furthest behind but barred: got %q, want a", got)
	}
	// A job added starts level with the furthest behind, not at zero.
	q.Add("c", 1)
	if q.Progress("c") != 50 {
		t.Fatalf("new job starts at %v, want 50", q.Progress("c"))
	}
	// A job whose tasks are all leased (b, in its tail) holds the others back to its level.
	q.Leased("c", 10) // c: 60
	if got := q.Pick(only("a", "c"), allMine, 1000); got != "" {
		t.Fatalf("ahead of a job in its tail: got %q, want none", got)
	}
	q.Returned("c", 20) // c: 40, a worker failed with its task
	if got := q.Pick(only("a", "c"), allMine, 1000); got != "c" {
		t.Fatalf("after a give-back: got %q, want c", got)
	}
	// Queries waiting for a load count for the limit, not for who is furthest behind.
	q.Add("d", 1)     // d: 40, level with c
	q.Leased("d", 10) // d: 50
	q.Wait("d", 10)   // d: 50, 10 of them waiting
	if got := q.Pick(only("c", "d"), none, 0); got != "c" {
		t.Fatalf("c and d level but for d's waiting queries: got %q, want c (earlier added)", got)
	}
	q.Leased("c", 5) // c: 45, d: 50 with 10 waiting
	if got := q.Pick(only("c", "d"), none, 20); got != "d" {
		t.Fatalf("d behind but for its waiting queries: got %q, want d", got)
	}
	q.Unwait("d", 10)
	if got := q.Pick(only("c", "d"), none, 20); got != "c" {
		t.Fatalf("after the load: got %q, want c", got)
	}
	q.Remove("d")
	q.Remove("b")
	if got := q.Jobs(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("jobs %v", got)
	}
	// Changing a weight keeps the queries leased: a's 100 queries over weight 4.
	q.Add("a", 4)
	if q.Progress("a") != 25 {
		t.Fatalf("progress after a weight change %v, want 25", q.Progress("a"))
	}
}

// TestFairSharesFLOPsPrior checks the cost prior from the models' FLOPs: before any cost
// is measured, and for a new job next to measured ones, shares come within a few percent
// of the true cost ratio (here cost = FLOPs × seconds per FLOP plus a small overhead).
func TestFairSharesFLOPsPrior(t *testing.T) {
	const spf = 2e-11
	trueCost := func(flops float64) float64 { return flops*spf*1.02 + 1e-7 }
	within := func(t *testing.T, shares []float64, flops []float64) {
		t.Helper()
		sum := 0.0
		for _, f := range flops {
			sum += trueCost(f)
		}
		for i, f := range flops {
			want := trueCost(f) / sum
			if math.Abs(shares[i]/want-1) > 0.03 {
				t.Fatalf("job %d: share %.6g, fair share %.6g (%.1f%% off)", i, shares[i], want, 100*(shares[i]/want-1))
			}
		}
	}
	lenet, resnet, mid := 4.6e5, 8.2e9, 6e8
	// Nothing measured: shares follow FLOPs, LeNet about 0.006% of worker time.
	shares, _ := FairShares([]JobLoad{{Name: "lenet", FLOPs: lenet}, {Name: "resnet", FLOPs: resnet}})
	within(t, shares, []float64{lenet, resnet})
	// The expensive job is measured; the cheap one arrives.
	shares, _ = FairShares([]JobLoad{{Name: "resnet", FLOPs: resnet, Cost: trueCost(resnet)}, {Name: "lenet", FLOPs: lenet}})
	within(t, shares, []float64{resnet, lenet})
	// Two measured, one new.
	shares, _ = FairShares([]JobLoad{{Name: "resnet", FLOPs: resnet, Cost: trueCost(resnet)},
		{Name: "mid", FLOPs: mid, Cost: trueCost(mid)}, {Name: "lenet", FLOPs: lenet}})
	within(t, shares, []float64{resnet, mid, lenet})
	// The mean-of-others rule is the fallback only where FLOPs are unknown: a measured job
	// without FLOPs gives no seconds per FLOP, so the new job gets its cost.
	shares, _ = FairShares([]JobLoad{{Name: "old", Cost: 0.004}, {Name: "new", FLOPs: lenet}})
	if math.Abs(shares[0]-0.5) > 1e-9 {
		t.Fatalf("fallback shares %v", shares)
	}
	// A job without FLOPs next to unmeasured jobs with FLOPs gets their mean prior.
	c := CostEstimates([]JobLoad{{Name: "a", FLOPs: 1e9}, {Name: "b", FLOPs: 3e9}, {Name: "c"}}, 0)
	if math.Abs(c[2]/c[0]-2) > 1e-9 || math.Abs(c[1]/c[0]-3) > 1e-9 {
		t.Fatalf("estimates %v", c)
	}
	// Garbage never leaks into shares.
	shares, _ = FairShares([]JobLoad{{Name: "a", FLOPs: math.NaN(), Cost: math.Inf(1)}, {Name: "b", FLOPs: -1}})
	for _, s := range shares {
		if !(s > 0 && s < 1) {
			t.Fatalf("shares %v", shares)
		}
	}
}

// BenchmarkFairDecision is one fair-time decision for 1,000 workers and 100 jobs: shares
// from measured costs, the fair rate and the per-worker split, then a round of picks, one
// for each of the 1,000 workers (each leasing a task of the job it picked).
func BenchmarkFairDecision(b *testing.B) {
	workers := make([]string, 1000)
	for i := range workers {
		workers[i] = fmt.Sprintf("node%d", i)
	}
	loads := make([]JobLoad, 100)
	names := make([]string, 100)
	q := NewFairQueue()
	for i := range loads {
		names[i] = fmt.Sprintf("job%d", i)
		loads[i] = JobLoad{Name: names[i], Cost: 0.001 * float64(1+i%17), Weight: float64(1 + i%3)}
		q.Add(names[i], loads[i].Weight)
	}
	pending := func(string) bool { return true }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		shares, _ := FairShares(loads)
		slack := 0.25 * FairRate(len(workers), loads, 0)
		assign := AssignWorkers(workers, names, shares)
		for _, w := range workers {
			mine := map[string]bool{}
			for _, sh := range assign[w] {
				mine[sh.Job] = true
			}
			job := q.Pick(pending, func(j string) Affinity {
				if mine[j] {
					return Assigned
				}
				return Other
			}, slack)
			q.Leased(job, 32)
		}
	}
}

// TestReassignWorkersMovesLittle: when 2 of 9 workers fail, the survivors keep their jobs
// where the shares allow, so at most half as many workers get a job new to them as packing
// anew gives (fewer when the 2 join back); every job keeps a worker and its share of the
// workers (but for slivers under minNewShare, left unassigned).
func TestReassignWorkersMovesLittle(t *testing.T) {
	ws := []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"}
	jobs := []string{"r50a", "r18a", "mba", "lea", "r50b", "r18b", "mbb", "leb"}
	shares := []float64{0.4, 0.04, 0.05, 0.01, 0.4, 0.04, 0.05, 0.01}
	a := ReassignWorkers(nil, ws, jobs, shares)
	newJobs := func(prev, next map[string][]Share) int {
		n := 0
		for w, shs := range next {
			for _, sh := range shs {
				if !slices.ContainsFunc(prev[w], func(p Share) bool { return p.Job == sh.Job }) {
					n++
				}
			}
		}
		return n
	}
	check := func(what string, workers []string, split map[string][]Share) {
		t.Helper()
		total := map[string]float64{}
		for w, shs := range split {
			if !slices.Contains(workers, w) {
				t.Fatalf("%s: %s is not a worker", what, w)
			}
			sum := 0.0
			for _, sh := range shs {
				total[sh.Job] += sh.Weight
				sum += sh.Weight
			}
			if sum > 1+1e-9 {
				t.Fatalf("%s: %s given %.3f of its time", what, w, sum)
			}
		}
		for i, j := range jobs {
			want := shares[i] * float64(len(workers))
			if total[j] <= 0 || total[j] > want+1e-9 || total[j] < want-minNewShare*float64(len(workers)) {
				t.Fatalf("%s: %s has %.3f workers, want %.3f", what, j, total[j], want)
			}
		}
	}
	survivors := ws[2:] // n1 and n2 fail: packing anew shifts every other worker
	kept := ReassignWorkers(a, survivors, jobs, shares)
	check("after the failure", survivors, kept)
	packed := AssignWorkers(survivors, jobs, shares)
	if k, p := newJobs(a, kept), newJobs(a, packed); k*2 > p {
		t.Fatalf("after the failure: %d workers' jobs new to them, against %d packing anew", k, p)
	}
	back := ReassignWorkers(kept, ws, jobs, shares)
	check("after the rejoin", ws, back)
	if k, p := newJobs(kept, back), newJobs(kept, AssignWorkers(ws, jobs, shares)); k >= p {
		t.Fatalf("after the rejoin: %d workers' jobs new to them, against %d packing anew", k, p)
	}
	t.Logf("new (worker, job) pairs: failure %d (packing anew %d), rejoin %d (%d)", newJobs(a, kept), newJobs(a, packed),
		newJobs(kept, back), newJobs(kept, AssignWorkers(ws, jobs, shares)))
}

// TestCoreWaitingTasks: a task a worker reports waiting for its model's load still counts
// in its job's progress (the others are not held back by the load), the worker gets no
// second task of that job meanwhile, and a failed worker's waiting task is given back
// once. (TestFairQueuePick: a waiting job goes first to the other workers.)
func TestCoreWaitingTasks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := New(DefaultConfig())
	for _, name := range []string{"a", "b"} {
		c.AddJob(Job{Name: name, Weight: 1, FLOPs: 1e6, Tasks: NewMemTasks(100000, 10, 10, false)})
	}
	c.Tick(t0, []string{"coord", "w1", "w2"}, "coord")
	// Both workers run a task of each job, so both have both models.
	for _, w := range []string{"w1", "w2"} {
		for _, name := range []string{"a", "b"} {
			task, ok := c.tasks.Lease(name, w, t0)
			if !ok {
				t.Fatal("no task")
			}
			c.fair.Leased(name, 10)
			c.Completed(t0, name, task, 1e-3)
		}
	}
	var a0 TaskRef
	var held []TaskRef
	for len(held) < 6 {
		os := c.Lease(t0, "w1", 1)
		if len(os) == 0 {
			t.Fatal("w1 got nothing")
		}
		for _, o := range os {
			if o.Job == "a" && a0.Job == "" {
				a0 = TaskRef{o.Job, o.Task}
			}
			held = append(held, TaskRef{o.Job, o.Task})
		}
	}
	if a0.Job == "" {
		t.Fatalf("w1 got no task of a: %v", held)
	}
	before := c.Progress("a")
	c.Heard(t0, "w1", held, nil, []TaskRef{a0})
	if got := c.Progress("a"); got != before {
		t.Fatalf("progress of a with a task waiting: %v, want %v", got, before)
	}
	for i := 0; i < 4; i++ {
		for _, o := range c.Lease(t0, "w1", 1) {
			if o.Job == "a" {
				t.Fatalf("w1 got task %d of a while a task of a waits for its load", o.Task)
			}
			held = append(held, TaskRef{o.Job, o.Task})
		}
	}
	ofA := 0
	for _, h := range held {
		if h.Job == "a" {
			ofA++
		}
	}
	before = c.Progress("a")
	c.Tick(t0.Add(time.Second), []string{"coord", "w2"}, "coord") // w1 fails: its leases are given back
	if got, want := c.Progress("a"), before-float64(10*ofA); got != want {
		t.Fatalf("progress after the failure: %v, want %v", got, want)
	}
	if c.fair.jobs["a"].waiting != 0 || c.waits.loads("w1", "a") {
		t.Fatalf("a still has a task waiting after the failure")
	}
}

// TestCoreMaxLoaders: with MaxLoaders 2, of six workers without a job's model that the
// split assigns to it, two get its tasks (and load it); the others get one when a loader
// has it. With no bound, every one of them gets a task at once.
func TestCoreMaxLoaders(t *testing.T) {
	t0 := time.Unix(1000, 0)
	workers := []string{"w1", "w2", "w3", "w4", "w5", "w6"}
	run := func(maxLoaders int) (*Core, map[string]TaskRef) {
		cfg := DefaultConfig()
		cfg.MaxLoaders = maxLoaders
		c := New(cfg)
		c.AddJob(Job{Name: "big", Model: "m", Weight: 1, FLOPs: 1e9, Tasks: NewMemTasks(100000, 8, 8, false)})
		c.Tick(t0, append([]string{"coord"}, workers...), "coord")
		got := map[string]TaskRef{}
		for _, w := range workers {
			c.Models(w, []string{})
			for _, o := range c.Lease(t0, w, 2) {
				if _, dup := got[w]; dup {
					t.Fatalf("%s got a second task of big while loading its model", w)
				}
				got[w] = TaskRef{o.Job, o.Task}
			}
		}
		return c, got
	}
	if _, got := run(0); len(got) != len(workers) {
		t.Fatalf("no bound: %d of %d workers got a task: %v", len(got), len(workers), got)
	}
	c, got := run(2)
	if len(got) != 2 {
		t.Fatalf("MaxLoaders 2: %d workers got a task: %v", len(got), got)
	}
	// One loader has the model: it reports it, and its task no longer waits.
	var loader string
	for w := range got {
		loader = w
		break
	}
	c.Models(loader, []string{"m"})
	c.Heard(t0, loader, []TaskRef{got[loader]}, nil, nil)
	more := 0
	for _, w := range workers {
		if _, ok := got[w]; !ok && len(c.Lease(t0, w, 1)) > 0 {
			more++
		}
	}
	if more != 1 {
		t.Fatalf("after one loader finished, %d more workers got a task, want 1", more)
	}
}

// TestCoreOneLoadPerWorker: a worker waiting for one model's load gets no task that needs
// another model it lacks, but still tasks of jobs whose model it has; once its load is
// done it takes the next cold job.
func TestCoreOneLoadPerWorker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := New(DefaultConfig())
	for _, j := range []string{"a", "b", "c"} {
		c.AddJob(Job{Name: j, Model: "m-" + j, Weight: 1, FLOPs: 1e6, Tasks: NewMemTasks(100000, 8, 8, false)})
	}
	c.Tick(t0, []string{"coord", "w1", "w2"}, "coord")
	// w1 has c's model; w2 has every model and runs the jobs' first tasks (their costs
	// are measured: no job is warming).
	c.Models("w2", []string{"m-a", "m-b", "m-c"})
	for _, o := range c.Lease(t0, "w2", 3) {
		c.Completed(t0, o.Job, o.Task, 1e-3)
	}
	c.Models("w1", []string{"m-c"})
	jobs := func(os []Order) map[string]int {
		n := map[string]int{}
		for _, o := range os {
			n[o.Job]++
		}
		return n
	}
	got := jobs(c.Lease(t0, "w1", 8))
	cold := got["a"] + got["b"]
	if cold != 1 || got["c"] == 0 {
		t.Fatalf("w1 got %v: want one task of one cold job (a or b) and tasks of c, whose model it has", got)
	}
	loading := "a"
	if got["b"] > 0 {
		loading = "b"
	}
	// Still loading: more pulls bring no task of the other cold job.
	for i := 0; i < 5; i++ {
		if n := jobs(c.Lease(t0, "w1", 8)); n["a"]+n["b"] > 0 {
			t.Fatalf("pull %d while loading %s: got %v", i, loading, n)
		}
	}
	// The load is done: w1 reports the model and nothing waiting; the other cold job is
	// open to it again.
	c.Models("w1", []string{"m-c", "m-" + loading})
	c.Heard(t0, "w1", nil, nil, nil)
	other := map[string]string{"a": "b", "b": "a"}[loading]
	seen := false
	for i := 0; i < 20 && !seen; i++ {
		seen = jobs(c.Lease(t0, "w1", 8))[other] > 0
	}
	if !seen {
		t.Fatalf("after loading %s, w1 never got a task of %s", loading, other)
	}
}

// TestCorePriorKeepsMeasuredSpeed: a job added when no running job has a measured cost
// gets its prior on the scale the cluster last measured, not the default: on the local
// cluster (ten nodes sharing two cores) the default's 100 GFLOP/s a worker was 8-10x too
// fast, and a ResNet-18 added while ResNet-50 was still loading got 120-query tasks at a
// prior fair rate of 1,200 queries/s against 119 measured a second later.
func TestCorePriorKeepsMeasuredSpeed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := New(DefaultConfig())
	c.Tick(t0, []string{"coord", "w1", "w2"}, "coord")
	if cost, _ := c.Prior(1e9, 1); math.Abs(cost/(1e9*defaultSecPerFLOP)-1) > 1e-9 {
		t.Fatalf("prior with nothing measured: %v, want the default scale %v", cost, 1e9*defaultSecPerFLOP)
	}
	tasks := NewMemTasks(20, 10, 10, false)
	c.AddJob(Job{Name: "a", Weight: 1, FLOPs: 1e9, Tasks: tasks})
	c.Control(t0)
	for i := 0; i < 2; i++ {
		task, ok := c.tasks.Lease("a", "w1", t0)
		if !ok {
			t.Fatal("no task")
		}
		c.fair.Leased("a", 10)
		tasks.Done(task)
		c.Completed(t0, "a", task, 0.1) // 1e-10 s per FLOP, 10x slower than the default
	}
	if got := c.Running(); len(got) != 0 {
		t.Fatalf("running %v, want a done", got)
	}
	cost, rate := c.Prior(2e9, 1)
	if math.Abs(cost/0.2-1) > 1e-9 {
		t.Fatalf("prior after a finished: %v, want 0.2 (its measured speed)", cost)
	}
	if math.Abs(rate/(2/0.2)-1) > 1e-9 {
		t.Fatalf("fair rate of the new job alone on 2 workers: %v, want 10", rate)
	}
	// The first tasks are sized by it: TaskSeconds (250 ms) at 0.2 s a query is one batch.
	if got := c.TaskTarget(2e9, 1, 1); got != 1 {
		t.Fatalf("task target %d, want 1", got)
	}
}
