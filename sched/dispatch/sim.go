package dispatch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// MemTasks is an in-memory Tasks: a job of Queries queries in tasks of TaskSize (whole
// batches of Batch), which Resize can split smaller once from a task on, as the journal's
// job-resize entry does. Sim's jobs use it; tests can too.
type MemTasks struct {
	Batch, Queries, TaskSize int
	Chosen                   bool     // the task size may be resized (the coordinator chose it)
	splits                   [][2]int // (from task, size) of each resize
	done                     []bool
	nDone                    int
}

// NewMemTasks returns a job's task list with nothing done.
func NewMemTasks(queries, batch, taskSize int, chosen bool) *MemTasks {
	t := &MemTasks{Batch: batch, Queries: queries, TaskSize: taskSize, Chosen: chosen}
	t.done = make([]bool, t.NumTasks())
	return t
}

func (t *MemTasks) layout(i int) (start, from, size int) {
	size = t.TaskSize
	for _, sp := range t.splits {
		if sp[0] > i {
			break
		}
		start += (sp[0] - from) * size
		from, size = sp[0], sp[1]
	}
	return start, from, size
}

// NumTasks is how many tasks the job splits into.
func (t *MemTasks) NumTasks() int {
	start, from, size := t.layout(math.MaxInt)
	return from + (max(t.Queries-start, 0)+size-1)/size
}

// TaskRange is the half-open range of query ids task i covers.
func (t *MemTasks) TaskRange(i int) (from, to int) {
	start, first, size := t.layout(i)
	from = start + (i-first)*size
	return from, min(from+size, t.Queries)
}

// IsDone reports whether task i is done.
func (t *MemTasks) IsDone(i int) bool { return i >= 0 && i < len(t.done) && t.done[i] }

// NumDone counts the done tasks.
func (t *MemTasks) NumDone() int { return t.nDone }

// Sizing says how the job may be resized.
func (t *MemTasks) Sizing() Sizing {
	size := t.TaskSize
	if len(t.splits) > 0 {
		size = t.splits[len(t.splits)-1][1]
	}
	return Sizing{Batch: t.Batch, Queries: t.Queries, TaskSize: size, MaxSize: 1024, Resizable: t.Chosen && len(t.splits) < 8}
}

// Done marks task i done; it reports false if it was done already or out of range.
func (t *MemTasks) Done(i int) bool {
	if i < 0 || i >= len(t.done) || t.done[i] {
		return false
	}
	t.done[i] = true
	t.nDone++
	return true
}

// Resize splits the tasks from task from on (none of them done) into tasks of size queries.
func (t *MemTasks) Resize(from, size int) error {
	if len(t.splits) >= 8 || size <= 0 || size%t.Batch != 0 || from < 0 || from > t.NumTasks() {
		return fmt.Errorf("dispatch: resize from %d to %d refused", from, size)
	}
	for i := from; i < len(t.done); i++ {
		if t.done[i] {
			return fmt.Errorf("dispatch: resize from %d: task %d is done", from, i)
		}
	}
	t.splits = append(t.splits, [2]int{from, size})
	done := make([]bool, t.NumTasks())
	copy(done, t.done[:from])
	t.done = done
	return nil
}

// SimJob is a job of a simulation.
type SimJob struct {
	Name    string
	Cost    time.Duration // true worker time per query
	FLOPs   float64       // the prior the core reads (0: none)
	Weight  float64
	Queries int
	Batch   int
	// TaskSize 0: the core's usual choice for a job added beside the running ones (about
	// FairTaskSeconds at its fair rate by its prior, at most 1,024 queries), resizable.
	TaskSize int
	// LoadTime is how long a worker new to the job takes to fetch its model from SDFS and
	// build its plan (ResNet-50 took 15-25 s on the benchmark's shared cores). As sched's
	// worker does, it loads in the background while it runs the tasks of loaded jobs.
	LoadTime time.Duration
}

// SimWorker is one simulated worker: it holds up to Depth tasks (one running), pulls
// whenever a task finishes and every PullEvery, and reports a task ReportDelay after it
// finished computing (the result's write), as sched's worker does.
type SimWorker struct {
	Name    string
	Slow    float64 // factor on every task's duration (0: 1)
	queue   []Order
	run     *simRun
	side    []Order // express tasks: run one at a time beside run, as sched's worker does
	srun    *simRun // sharing the worker's one CPU with run: run is delayed by srun's time
	done    []TaskRef
	ready   []simReady // computed, being written
	next    time.Time  // its next periodic pull
	dead    bool
	loaded  map[string]bool      // jobs whose model it has loaded (SimJob.LoadTime)
	loading map[string]time.Time // jobs whose model it is loading, and when it is done
	// loadLeft is what remains of each load, in time on a core of its own (LoadCores).
	loadLeft map[string]time.Duration
	Loads    int // models it loaded
}

type simRun struct {
	o     Order
	until time.Time
}

type simReady struct {
	ref TaskRef
	at  time.Time
}

// Completion is one task committed in a simulation.
type Completion struct {
	At      time.Time
	Job     string
	Queries int
}

// Sim runs a Core with simulated workers on a fake clock, event by event: task durations
// are the jobs' true costs (times the worker's Slow and Jitter), RPC is instant, and every
// Tick (TickEvery) the core sees the live workers. Jobs, failures and joins are scripted by
// the caller between calls to RunUntil. Deterministic for a given seed.
type Sim struct {
	Core        *Core
	Now         time.Time
	Start       time.Time
	Depth       int           // tasks a worker holds (default 2)
	PullEvery   time.Duration // default 200 ms
	TickEvery   time.Duration // default 50 ms
	ReportDelay time.Duration // from computed to reported (the result's write); default 0
	// TaskOverhead is worker time every task costs beyond its queries (reading inputs,
	// writing results); default 0.
	TaskOverhead time.Duration
	// Jitter, if set, is a factor on one task's duration (a loaded machine's stalls).
	Jitter func(rng *rand.Rand, job string) float64
	// LoadCores, if set, is the cores all workers' model loads share, as on the
	// benchmark's local cluster (10 nodes on 2 cores): n loads in flight each progress at
	// min(1, LoadCores/n) of a core, so nine ResNet-50 loads at once take 4.5 times as long
	// as one. 0: every load takes its LoadTime whatever else loads.
	LoadCores float64
	Workers   []*SimWorker
	Jobs      map[string]*SimJob
	Tasks     map[string]*MemTasks
	Done      []Completion
	Self      string // the coordinator's node name (not a worker)
	rng       *rand.Rand
	nextTic   time.Time
	Leases    int // tasks leased, for benchmarks
	// Busy is the worker time spent running tasks (overhead included) since the last
	// ResetUtilization; workerT the live workers' time since then.
	Busy    time.Duration
	workerT time.Duration
}

// NewSim returns a simulation of workers named w0, w1, ... with a Core of cfg.
func NewSim(cfg Config, workers int, seed uint64) *Sim {
	t0 := time.Unix(1_000_000, 0)
	s := &Sim{Core: New(cfg), Now: t0, Start: t0, Depth: 2, PullEvery: 200 * time.Millisecond,
		TickEvery: 50 * time.Millisecond, Jobs: map[string]*SimJob{}, Tasks: map[string]*MemTasks{},
		Self: "coord", rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), nextTic: t0}
	s.JoinWorkers(workers, 1)
	return s
}

// JoinWorkers adds n fresh workers of the given slowness; they join the split on their
// first pull (Core.Join) or at the next Tick.
func (s *Sim) JoinWorkers(n int, slow float64) {
	base := len(s.Workers)
	for i := 0; i < n; i++ {
		w := &SimWorker{Name: fmt.Sprintf("w%d", base+i), Slow: slow, next: s.Now}
		s.Workers = append(s.Workers, w)
	}
}

// FailWorkers stops the first n live workers for good: they stop pulling and are gone from
// the live list at the next Tick, as when the failure detector reports them.
func (s *Sim) FailWorkers(n int) {
	for _, w := range s.Workers {
		if n == 0 {
			return
		}
		if !w.dead {
			w.dead, w.run, w.queue, w.ready, w.done, w.side, w.srun, w.loading, w.loadLeft = true, nil, nil, nil, nil, nil, nil, nil, nil
			n--
		}
	}
	s.retimeLoads() // the loads left share the cores
}

// AddJob adds a job now.
func (s *Sim) AddJob(j SimJob) {
	if j.Batch <= 0 {
		j.Batch = 1
	}
	size, chosen := j.TaskSize, false
	if size <= 0 {
		chosen = true
		size = max(1, s.Core.TaskTarget(j.FLOPs, j.Weight, j.Batch)/j.Batch) * j.Batch
	}
	ts := NewMemTasks(j.Queries, j.Batch, size, chosen)
	s.Jobs[j.Name], s.Tasks[j.Name] = &j, ts
	s.Core.AddJob(Job{Name: j.Name, Weight: j.Weight, FLOPs: j.FLOPs, Model: j.Name, Tasks: ts})
	s.apply(s.Core.Control(s.Now))
}

// RemoveJob removes a job now.
func (s *Sim) RemoveJob(name string) {
	s.Core.RemoveJob(name)
	delete(s.Jobs, name)
	delete(s.Tasks, name)
	s.apply(s.Core.Control(s.Now))
}

func (s *Sim) apply(rs []Resize) {
	for _, r := range rs {
		if err := s.Tasks[r.Job].Resize(r.From, r.Size); err != nil {
			panic(err) // the core decided a resize its own rules forbid
		}
	}
}

func (s *Sim) alive() []string {
	out := []string{s.Self}
	for _, w := range s.Workers {
		if !w.dead {
			out = append(out, w.Name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return NameLess(out[i], out[j]) })
	return out
}

// pull is one worker's pull: reports, then leases to fill its queue.
func (s *Sim) pull(w *SimWorker) {
	var held []TaskRef
	if w.run != nil {
		held = append(held, TaskRef{w.run.o.Job, w.run.o.Task})
	}
	if w.srun != nil {
		held = append(held, TaskRef{w.srun.o.Job, w.srun.o.Task})
	}
	for _, o := range append(w.queue, w.side...) {
		held = append(held, TaskRef{o.Job, o.Task})
	}
	for _, r := range w.ready {
		held = append(held, r.ref)
	}
	var waiting []TaskRef
	for _, o := range append(w.queue, w.side...) {
		if !s.ready(w, o.Job) {
			waiting = append(waiting, TaskRef{o.Job, o.Task})
		}
	}
	s.Core.Heard(s.Now, w.Name, held, w.done, waiting)
	models := []string{}
	for name, j := range s.Jobs {
		if j.LoadTime <= 0 || w.loaded[name] {
			models = append(models, name)
		}
	}
	s.Core.Models(w.Name, models)
	for _, d := range w.done {
		ts := s.Tasks[d.Job]
		if ts == nil || !ts.Done(d.Task) {
			s.Core.Release(d.Job, d.Task)
			continue
		}
		f, t := ts.TaskRange(d.Task)
		s.Done = append(s.Done, Completion{At: s.Now, Job: d.Job, Queries: t - f})
		j := s.Jobs[d.Job]
		s.apply(s.Core.Completed(s.Now, d.Job, d.Task, j.Cost.Seconds()))
	}
	w.done = w.done[:0]
	want := s.Depth
	for _, o := range w.queue {
		if s.ready(w, o.Job) {
			want-- // a task waiting for its model's load does not fill the queue
		}
	}
	if w.run != nil {
		want--
	}
	if want > 0 {
		s.apply(s.Core.Join(s.Now, w.Name))
	}
	orders := s.Core.Lease(s.Now, w.Name, max(want, 0))
	s.Leases += len(orders)
	for _, o := range orders {
		if o.Express {
			w.side = append(w.side, o)
		} else {
			w.queue = append(w.queue, o)
		}
	}
	s.startNext(w)
	s.startSide(w)
	w.next = s.Now.Add(s.PullEvery)
}

// ready reports whether w has job's model loaded, starting the load if it has not.
func (s *Sim) ready(w *SimWorker, job string) bool {
	j := s.Jobs[job]
	if j == nil || j.LoadTime <= 0 || w.loaded[job] {
		return true
	}
	if _, ok := w.loading[job]; !ok {
		if w.loading == nil {
			w.loading = map[string]time.Time{}
		}
		d := float64(j.LoadTime)
		if w.Slow > 0 {
			d *= w.Slow
		}
		w.loading[job] = s.Now.Add(time.Duration(d))
		if w.loadLeft == nil {
			w.loadLeft = map[string]time.Duration{}
		}
		w.loadLeft[job] = time.Duration(d)
		w.Loads++
		s.retimeLoads()
	}
	return false
}

// nextReady takes the first order of q whose model is loaded (ok false: none).
func (s *Sim) nextReady(w *SimWorker, q *[]Order) (Order, bool) {
	for i, o := range *q {
		if s.ready(w, o.Job) {
			*q = append((*q)[:i:i], (*q)[i+1:]...)
			return o, true
		}
	}
	return Order{}, false
}

func (s *Sim) startNext(w *SimWorker) {
	if w.run != nil {
		return
	}
	o, ok := s.nextReady(w, &w.queue)
	if !ok {
		return
	}
	if w.run = s.runTask(w, o); w.run == nil {
		s.startNext(w) // a removed job's task: dropped
		return
	}
	if w.srun != nil { // one CPU: the express task beside it finishes first
		w.run.until = w.run.until.Add(w.srun.until.Sub(s.Now))
	}
}

func (s *Sim) startSide(w *SimWorker) {
	if w.srun != nil {
		return
	}
	o, ok := s.nextReady(w, &w.side)
	if !ok {
		return
	}
	if w.srun = s.runTask(w, o); w.srun == nil {
		s.startSide(w)
		return
	}
	if w.run != nil { // one CPU: the queued task waits while the express one runs
		w.run.until = w.run.until.Add(w.srun.until.Sub(s.Now))
	}
}

// runTask starts o on w now (nil for a removed job's task).
func (s *Sim) runTask(w *SimWorker, o Order) *simRun {
	j := s.Jobs[o.Job]
	ts := s.Tasks[o.Job]
	if j == nil || ts == nil {
		return nil
	}
	f, t := ts.TaskRange(o.Task)
	d := float64(time.Duration(t-f)*j.Cost + s.TaskOverhead)
	if w.Slow > 0 {
		d *= w.Slow
	}
	if s.Jitter != nil {
		d *= s.Jitter(s.rng, o.Job)
	}
	r := &simRun{o: o, until: s.Now.Add(time.Duration(math.Max(d, 1)))}
	s.Busy += r.until.Sub(s.Now)
	return r
}

// RunUntil advances the simulation to end, event by event.
func (s *Sim) RunUntil(end time.Time) {
	for {
		// The next event: a tick, a task's end, a result written, or a periodic pull.
		at, kind, who := s.nextTic, 0, (*SimWorker)(nil)
		for _, w := range s.Workers {
			if w.dead {
				continue
			}
			if w.run != nil && w.run.until.Before(at) {
				at, kind, who = w.run.until, 1, w
			}
			if w.srun != nil && w.srun.until.Before(at) {
				at, kind, who = w.srun.until, 4, w
			}
			if len(w.ready) > 0 && w.ready[0].at.Before(at) {
				at, kind, who = w.ready[0].at, 2, w
			}
			if w.next.Before(at) {
				at, kind, who = w.next, 3, w
			}
			for _, t := range w.loading {
				if t.Before(at) {
					at, kind, who = t, 5, w
				}
			}
		}
		if at.After(end) {
			s.advance(end)
			return
		}
		s.advance(at)
		switch kind {
		case 0:
			exp, rs := s.Core.Tick(s.Now, s.alive(), s.Self)
			_ = exp
			s.apply(rs)
			s.nextTic = s.Now.Add(s.TickEvery)
		case 1:
			r := who.run
			who.run = nil
			who.ready = append(who.ready, simReady{TaskRef{r.o.Job, r.o.Task}, s.Now.Add(s.ReportDelay)})
			s.startNext(who)
			if s.ReportDelay == 0 {
				continue // reported at once (kind 2, same instant)
			}
			s.pull(who) // ask for the next task while this one's result is written
		case 4:
			r := who.srun
			who.srun = nil
			who.ready = append(who.ready, simReady{TaskRef{r.o.Job, r.o.Task}, s.Now.Add(s.ReportDelay)})
			s.startSide(who)
		case 2:
			who.done = append(who.done, who.ready[0].ref)
			who.ready = who.ready[1:]
			s.pull(who)
		case 3:
			s.pull(who)
		case 5:
			for job, t := range who.loading {
				if !t.After(s.Now) {
					delete(who.loading, job)
					delete(who.loadLeft, job)
					if who.loaded == nil {
						who.loaded = map[string]bool{}
					}
					who.loaded[job] = true
				}
			}
			s.retimeLoads()
			s.startNext(who)
			s.startSide(who)
		}
	}
}

// loadRate is the share of a core each load in flight gets (LoadCores), 1 without it.
func (s *Sim) loadRate() float64 {
	if s.LoadCores <= 0 {
		return 1
	}
	n := 0
	for _, w := range s.Workers {
		n += len(w.loadLeft)
	}
	return math.Min(1, s.LoadCores/float64(max(n, 1)))
}

// retimeLoads sets each load's end from what remains of it at the current share of a
// core (the number of loads in flight changed).
func (s *Sim) retimeLoads() {
	if s.LoadCores <= 0 {
		return
	}
	r := s.loadRate()
	for _, w := range s.Workers {
		for job, left := range w.loadLeft {
			w.loading[job] = s.Now.Add(time.Duration(math.Ceil(float64(left) / r)))
		}
	}
}

// advance moves the clock to t, counting the live workers' time.
func (s *Sim) advance(t time.Time) {
	live := 0
	for _, w := range s.Workers {
		if !w.dead {
			live++
		}
	}
	s.workerT += time.Duration(live) * t.Sub(s.Now)
	if s.LoadCores > 0 && t.After(s.Now) {
		done := time.Duration(float64(t.Sub(s.Now)) * s.loadRate())
		for _, w := range s.Workers {
			for job, left := range w.loadLeft {
				if w.loading[job].After(t) {
					w.loadLeft[job] = max(left-done, 1)
				} else {
					w.loadLeft[job] = 0 // ends now (kind 5)
				}
			}
		}
	}
	s.Now = t
}

// Utilization is the share of the live workers' time spent running tasks since the last
// ResetUtilization (a task counts in full when it starts).
func (s *Sim) Utilization() float64 {
	if s.workerT <= 0 {
		return 0
	}
	return s.Busy.Seconds() / s.workerT.Seconds()
}

// ResetUtilization starts counting Utilization afresh.
func (s *Sim) ResetUtilization() { s.Busy, s.workerT = 0, 0 }

// At runs the simulation to d after its start.
func (s *Sim) At(d time.Duration) { s.RunUntil(s.Start.Add(d)) }

// Rates returns each job's committed queries per second over the window ending at t.
func (s *Sim) Rates(t time.Time, window time.Duration) map[string]float64 {
	out := map[string]float64{}
	from := t.Add(-window)
	for i := len(s.Done) - 1; i >= 0 && s.Done[i].At.After(from); i-- {
		if !s.Done[i].At.After(t) {
			out[s.Done[i].Job] += float64(s.Done[i].Queries)
		}
	}
	for k := range out {
		out[k] /= window.Seconds()
	}
	return out
}

// ReviveWorkers restarts the first n failed workers under their old names, as fresh
// processes: no task, no model loaded. They rejoin at the next Tick or their first pull.
func (s *Sim) ReviveWorkers(n int) {
	for _, w := range s.Workers {
		if n == 0 {
			return
		}
		if w.dead {
			w.dead, w.loaded, w.loading, w.loadLeft, w.next = false, nil, nil, nil, s.Now
			n--
		}
	}
}
