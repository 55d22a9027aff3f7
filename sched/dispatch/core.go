package dispatch

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Config gathers the core's timings, with defaults from DefaultConfig.
type Config struct {
	// LeaseSilence: a worker that has not pulled for this long loses its tasks, although
	// the failure detector still lists it (a frozen process, a lagging view). Default 10 s.
	LeaseSilence time.Duration
	// ControlEvery is the fair-time controller's period: the split of workers and the fair
	// rate are recomputed this often (and at once when jobs or workers change). Default 1 s.
	ControlEvery time.Duration
	// FairSlack is how far (in seconds at the fair rate) a job may lease ahead of the job
	// furthest behind: what a worker's preference for its own jobs may cost (see
	// FairQueue). Default 100 ms.
	FairSlack time.Duration
	// FairTaskSeconds bounds a task of a job that runs at the pace of others: at most this
	// long at the job's fair rate, so one completion moves its rate over a 10 s window by
	// about FairTaskSeconds / 10 s. Default 100 ms.
	FairTaskSeconds time.Duration
	// TaskSeconds bounds the worker time of one task of a resized job (at its measured
	// cost), so an expensive job's tasks stay short and jobs sharing a worker interleave
	// finely. Default 250 ms.
	TaskSeconds time.Duration
	// ExpressSeconds: a task that takes at most this long by its job's measured cost, but
	// is longer than FairTaskSeconds at its job's fair rate, is leased as express, and the
	// worker runs it at once beside its current task instead of queueing it. Such a task is
	// a cheap job's whole batch (LeNet-5's 64 queries, a few ms), too small in worker time
	// to matter and too large in its job's 10 s count at the pace of expensive jobs to
	// queue: behind an expensive task it would complete after a variable wait, and its
	// job's rate would move by whole tasks at random. Default 25 ms; 0 turns it off.
	ExpressSeconds time.Duration
	// MaxLoaders bounds how many workers load one job's model at once (0: no bound). A
	// worker without the model that the split assigns to the job waits, barred from it,
	// while that many load it; one not assigned to it helps only while none does. At a
	// cold start of the benchmark's 10-node local cluster every worker was assigned
	// ResNet-50 and all nine fetched and loaded it at once on the two shared cores: the
	// first was ready 17 s after the add, the last 20 s, and the job produced nothing
	// until then. Default 0; the local cluster sets its machine's cores.
	MaxLoaders int
	// A new job's tasks are about TaskQueries queries, but at most MaxTaskBatches batches
	// and at least MinTaskQueries queries (large tasks amortise a cheap job's per-task
	// costs), unless TaskSeconds or FairTaskSeconds ask for fewer (see TaskTarget).
	// Defaults 1,024, 16 and 64.
	TaskQueries, MaxTaskBatches, MinTaskQueries int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		LeaseSilence:    10 * time.Second,
		ControlEvery:    time.Second,
		FairSlack:       100 * time.Millisecond,
		FairTaskSeconds: 100 * time.Millisecond,
		TaskSeconds:     250 * time.Millisecond,
		ExpressSeconds:  25 * time.Millisecond,
		MaxLoaders:      0,
		TaskQueries:     1024,
		MaxTaskBatches:  16,
		MinTaskQueries:  64,
	}
}

// Job is a job as the core needs it.
type Job struct {
	Name   string
	Weight float64 // fair-time weight (<= 0 means 1)
	FLOPs  float64 // the model's compute per query (0: unknown), the cost prior
	// Model names the job's model as workers report the models they have loaded (Models);
	// jobs of one model share it. "": every worker counts as having it.
	Model string
	Tasks Tasks
}

// Order is a task leased to a worker.
type Order struct {
	Job  string
	Task int
	// Express: the first task of a newly added job, leased even to a worker whose queue
	// is full; the worker starts it at once beside the task it is running.
	Express bool
}

// Resize is a decision to split a job's tasks from task From on into tasks of Size
// queries. The caller journals it; the core reads the new split through the job's Tasks.
type Resize struct {
	Job        string
	From, Size int
	Was        int     // the task size before
	Rate       float64 // the job's fair rate that asked for it, queries per second
}

// Expiry is a lease taken back from a worker, and why.
type Expiry struct {
	Lease
	Why string
}

type coreJob struct {
	Job
	cost      float64 // measured worker-seconds per query (0: unknown)
	started   bool    // a task has been leased
	producing bool    // a task has completed (under this core): not warming (FairQueue.Warm)
}

// Core is the inference scheduler's decision state on the coordinator: the jobs, their
// leases, the split of workers and the fair-time dispatch. It is pure: no I/O, no clock
// (every call that needs the time takes it), no locking; the caller (sched's coordinator,
// under its mutex) journals what must be durable and does the RPC. A new coordinator
// builds a fresh Core from the journal; leases come back as workers report what they hold.
type Core struct {
	cfg         Config
	jobs        map[string]*coreJob
	order       []*coreJob // in the order they were added
	tasks       *TaskTable
	fair        *FairQueue
	workers     []string
	heard       map[string]time.Time // worker -> its last pull
	assign      map[string][]Share
	shares      map[string]float64
	fairRate    float64 // queries per second per unit of weight each running job gets
	secPerFLOP  float64 // the cluster's speed as last measured (SecPerFLOP), for priors
	slack       float64 // FairQueue's slack: FairSlack at the fair rate, at least a task
	lastControl time.Time
	waits       *waits                     // tasks workers report waiting for their job's model to load
	models      map[string]map[string]bool // worker -> the models it has loaded, if it reports them
}

// New returns a Core with no jobs and no workers.
func New(cfg Config) *Core {
	return &Core{cfg: cfg, jobs: map[string]*coreJob{}, tasks: NewTaskTable(), fair: NewFairQueue(),
		heard: map[string]time.Time{}, assign: map[string][]Share{}, shares: map[string]float64{},
		waits: newWaits(), models: map[string]map[string]bool{}}
}

// AddJob starts scheduling a job (at its add, or every job of the journal at a takeover).
// Call Control afterwards to give it a share.
func (c *Core) AddJob(j Job) {
	c.RemoveJob(j.Name)
	cj := &coreJob{Job: j}
	c.jobs[j.Name] = cj
	c.order = append(c.order, cj)
	c.tasks.AddJob(j.Name, j.Tasks)
}

// RemoveJob stops scheduling a job and forgets its leases. Call Control afterwards to
// give its share to the others.
func (c *Core) RemoveJob(name string) {
	if c.jobs[name] == nil {
		return
	}
	delete(c.jobs, name)
	for i, j := range c.order {
		if j.Name == name {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	c.tasks.RemoveJob(name)
	c.fair.Remove(name)
	c.waits.removeJob(name)
}

// SetCost records a job's measured cost per query in worker-seconds (the caller's
// statistics). It reports whether this is the job's first measured cost, which replaces
// its prior: the caller should then run Control.
func (c *Core) SetCost(name string, cost float64) bool {
	j := c.jobs[name]
	if j == nil || !usable(cost) {
		return false
	}
	first := !usable(j.cost)
	j.cost = cost
	return first
}

func (c *Core) isRunning(j *coreJob) bool { return j.Tasks.NumDone() < j.Tasks.NumTasks() }

// Running lists the jobs that still have tasks not done, in the order they were added.
func (c *Core) Running() []string {
	var out []string
	for _, j := range c.order {
		if c.isRunning(j) {
			out = append(out, j.Name)
		}
	}
	return out
}

func (c *Core) loads() ([]*coreJob, []JobLoad) {
	var js []*coreJob
	var loads []JobLoad
	for _, j := range c.order {
		if c.isRunning(j) {
			js = append(js, j)
			loads = append(loads, JobLoad{Name: j.Name, Cost: j.cost, FLOPs: j.FLOPs, Weight: j.Weight})
		}
	}
	return js, loads
}

// Tick is the core's periodic step: it takes back the tasks of workers that failed (not
// in alive) or went silent for LeaseSilence, and runs the controller when its period is
// up or the workers changed. alive lists the live nodes, self among them: the workers are
// the others, or self alone in a one-node cluster.
func (c *Core) Tick(now time.Time, alive []string, self string) ([]Expiry, []Resize) {
	live := make(map[string]bool, len(alive))
	workers := make([]string, 0, len(alive))
	for _, n := range alive {
		live[n] = true
		if n != self {
			workers = append(workers, n)
		}
	}
	if len(alive) == 1 {
		workers = []string{self}
	}
	var out []Expiry
	for _, w := range c.tasks.Workers() {
		why := ""
		if !live[w] {
			why = "failed"
		} else if h, ok := c.heard[w]; !ok {
			c.heard[w] = now // adopted at a takeover: the silence counts from here
		} else if d := now.Sub(h); d >= c.cfg.LeaseSilence {
			why = fmt.Sprintf("silent for %v", d.Round(time.Millisecond))
		}
		if why == "" {
			continue
		}
		for _, l := range c.tasks.ExpireWorker(w) {
			c.gaveBack(l)
			out = append(out, Expiry{Lease: l, Why: why})
		}
	}
	for w := range c.heard {
		if !live[w] {
			delete(c.heard, w)
		}
	}
	for w := range c.models {
		if !live[w] {
			delete(c.models, w) // back, it is a fresh process with no model loaded
		}
	}
	var rs []Resize
	if now.Sub(c.lastControl) >= c.cfg.ControlEvery || !equalStrings(workers, c.workers) {
		c.workers = workers
		rs = c.Control(now)
	}
	return out, rs
}

func (c *Core) gaveBack(l Lease) {
	c.unwait(l.Worker, TaskRef{l.Job, l.Task})
	if j := c.jobs[l.Job]; j != nil {
		f, t := j.Tasks.TaskRange(l.Task)
		c.fair.Returned(l.Job, t-f)
	}
}

// Heard is a worker's pull: it holds held (running or queued; waiting among them wait for
// their job's model to load) and reports done. Tasks leased to it that it neither holds
// nor reports are taken back (it gave up on them) and returned. Call Completed for each
// done task the caller commits.
func (c *Core) Heard(now time.Time, worker string, held, done, waiting []TaskRef) []Lease {
	c.heard[worker] = now
	keep := make(map[TaskRef]bool, len(held)+len(done))
	for _, h := range held {
		c.tasks.Adopt(h.Job, h.Task, worker, now)
		if j := c.jobs[h.Job]; j != nil {
			j.started = true
		}
		keep[h] = true
	}
	for _, d := range done {
		keep[d] = true
	}
	out := c.tasks.Reconcile(worker, keep)
	for _, l := range out {
		c.gaveBack(l)
	}
	c.waits.report(worker, waiting, func(r TaskRef) (int, bool) {
		j := c.jobs[r.Job]
		if w, ok := c.tasks.LeaseOf(r.Job, r.Task); !ok || w != worker || j == nil {
			return 0, false
		}
		f, t := j.Tasks.TaskRange(r.Task)
		return t - f, true
	}, c.fair.Wait, c.fair.Unwait)
	return out
}

// Completed drops the lease of a task the caller has committed as done (or found done).
// cost is the job's measured cost per query after it (0: unchanged). A first measured
// cost, or a job out of tasks, re-splits the workers at once (the decisions returned).
func (c *Core) Completed(now time.Time, job string, task int, cost float64) []Resize {
	worker := c.tasks.Complete(job, task)
	c.tasks.Touch(job)
	j := c.jobs[job]
	if j == nil {
		return nil
	}
	j.producing = true
	c.fair.Started(job)
	c.unwait(worker, TaskRef{job, task})
	if c.SetCost(job, cost) || !c.isRunning(j) {
		return c.Control(now)
	}
	return nil
}

// unwait forgets r's lease to worker ("" for none): if the task waited for a load, the
// FairQueue no longer counts it as waiting.
func (c *Core) unwait(worker string, r TaskRef) {
	if q := c.waits.drop(worker, r); q > 0 {
		c.fair.Unwait(r.Job, q)
	}
}

// Models records the models worker has loaded (Job.Model names), as its pull reports
// them; nil: it does not report them (every model counts as loaded there).
func (c *Core) Models(worker string, models []string) {
	if models == nil {
		delete(c.models, worker)
		return
	}
	set := make(map[string]bool, len(models))
	for _, m := range models {
		set[m] = true
	}
	c.models[worker] = set
}

// cold reports whether worker is known not to have job's model loaded.
func (c *Core) cold(worker string, j *coreJob) bool {
	set, known := c.models[worker]
	return known && j.Model != "" && !set[j.Model]
}

// Release drops the lease of a task found done already (a repeated report).
func (c *Core) Release(job string, task int) {
	c.unwait(c.tasks.Complete(job, task), TaskRef{job, task})
	c.tasks.Touch(job)
}

// Join adds a worker that pulls for work to the split, if the split has not seen it yet
// (it joined since the last Tick). Call it before Lease, and journal the decisions first.
func (c *Core) Join(now time.Time, worker string) []Resize {
	if contains(c.workers, worker) {
		return nil
	}
	c.workers = append(c.workers, worker)
	return c.Control(now)
}

// Lease hands worker up to want tasks, by the fair dispatch (Pick), plus an express task
// of each job assigned to it that has not started yet. A task short enough by its job's
// measured cost (ExpressSeconds) is express too.
func (c *Core) Lease(now time.Time, worker string, want int) []Order {
	var out []Order
	for _, sh := range c.assign[worker] {
		j := c.jobs[sh.Job]
		if sh.Weight > 0 && j != nil && !j.started && c.isRunning(j) && j.Tasks.NumDone() == 0 {
			if o, ok := c.lease(now, worker, j, true); ok {
				out = append(out, o)
			}
		}
	}
	for i := 0; i < want; i++ {
		name := c.Pick(worker)
		if name == "" {
			break
		}
		o, ok := c.lease(now, worker, c.jobs[name], false)
		if !ok {
			break // Pick saw a pending task Lease did not find: a broken invariant, not a worker's fault
		}
		out = append(out, o)
	}
	return out
}

func (c *Core) lease(now time.Time, worker string, j *coreJob, express bool) (Order, bool) {
	task, ok := c.tasks.Lease(j.Name, worker, now)
	if !ok {
		return Order{}, false
	}
	j.started = true
	f, t := j.Tasks.TaskRange(task)
	c.fair.Leased(j.Name, t-f)
	if c.cold(worker, j) && c.waits.add(worker, TaskRef{j.Name, task}, t-f) {
		c.fair.Wait(j.Name, t-f) // it waits for the load until the worker says otherwise
	}
	if q := float64(t - f); usable(j.cost) && q*j.cost <= c.cfg.ExpressSeconds.Seconds() &&
		q > c.cfg.FairTaskSeconds.Seconds()*c.fairRate*(JobLoad{Weight: j.Weight}).weight() {
		express = true // a cheap task that its batch keeps larger than FairTaskSeconds
	}
	return Order{Job: j.Name, Task: task, Express: express}, true
}

// Pick chooses the job worker runs next ("" for none): the job furthest behind in queries
// leased over weight (less those waiting for loads), preferring the worker's assigned
// jobs by FairSlack (see FairQueue). A worker with a task of a job waiting for the job's
// model gets no other task of that job until it is loaded, and a worker without the
// model (Models) helps a job only while no other worker is loading it: else, at a cold
// start, every worker pulling while a job was behind took one of its tasks and loaded
// its model, seven ResNet-18 loads at once taking 7-8 s each on the shared cores. A
// worker assigned to the job loads it only while fewer than MaxLoaders others do. And a
// worker loads one model at a time: one that waits for a load gets no task that needs
// another. Else a worker that rejoined a busy cluster took a task of each job behind
// and loaded three models at once, each load a thread: on the local cluster's shared
// cores the two rejoined workers took 0.4 cores each and the seven others 0.13, and
// every job's rate fell by half for 10 s (the spread was back within 15% after 28 s).
func (c *Core) Pick(worker string) string {
	mine := c.assign[worker]
	return c.fair.Pick(c.tasks.HasPending, func(job string) Affinity {
		if c.waits.loads(worker, job) {
			return Barred
		}
		a := Other
		for _, sh := range mine {
			if sh.Job == job && sh.Weight > 0 {
				a = Assigned
			}
		}
		if j := c.jobs[job]; j != nil && c.cold(worker, j) {
			n := c.waits.loaders(job)
			if (a == Other && n > 0) || (c.cfg.MaxLoaders > 0 && n >= c.cfg.MaxLoaders) || c.waits.loading(worker) {
				return Barred
			}
		}
		return a
	}, c.slack)
}

// Control runs the fair-time controller: it re-splits the workers by the jobs' costs
// (which workers each job's model lives on), sets the fair rate the dispatch's slack is
// measured in, and decides which jobs' remaining tasks to make smaller (resize).
func (c *Core) Control(now time.Time) []Resize {
	c.lastControl = now
	js, loads := c.loads()
	shares, _ := FairShares(loads)
	c.shares = make(map[string]float64, len(js))
	names := make([]string, len(js))
	for i, j := range js {
		c.shares[j.Name] = shares[i]
		names[i] = j.Name
		c.fair.Add(j.Name, loads[i].Weight)
		if !j.producing && j.Tasks.NumDone() == 0 {
			c.fair.Warm(j.Name) // its model is still loading on its workers
		}
	}
	for _, n := range c.fair.Jobs() {
		if j := c.jobs[n]; j == nil || !c.isRunning(j) {
			c.fair.Remove(n)
		}
	}
	if spf, ok := SecPerFLOP(loads); ok {
		c.secPerFLOP = spf // kept when those jobs end: the next job's prior starts from it
	}
	c.fairRate = FairRate(len(c.workers), loads, c.secPerFLOP)
	// The slack is at least the largest task (over its job's weight): with less, a job of
	// large tasks could lease only when the others had caught up a whole task, and its
	// rate would move in bursts.
	c.slack = c.cfg.FairSlack.Seconds() * c.fairRate
	for i, j := range js {
		c.slack = math.Max(c.slack, 0.5*float64(j.Tasks.Sizing().TaskSize)/loads[i].weight())
	}
	c.assign = ReassignWorkers(c.assign, c.workers, names, shares)
	costs := CostEstimates(loads, c.secPerFLOP)
	var out []Resize
	for i, j := range js {
		if r, ok := c.resize(j, costs[i], loads[i].weight()); ok {
			out = append(out, r)
		}
	}
	return out
}

// resize: the rest of a job's tasks are split differently when their size is off the
// size that takes FairTaskSeconds at the rate fair time now gives the job (its cost
// measured) by more than half as much again (or 2.5 times too small). The rates fair time
// gives change with every arrival and departure: a cheap job added alone gets large tasks
// (their fixed costs amortise), and when expensive jobs join, its rate falls to theirs and
// each completion would step its rate over a 10 s window by a large fraction; when they
// leave, its small tasks would cost more in per-task overhead than they compute. Tasks
// from the frontier on (none leased or done) are split into whole batches; it is worth it
// only for a job with many queries left. cost is the job's cost per query, measured or
// (before its first task completes) its prior: two jobs added at the same moment are sized
// for each other before either leases a task.
func (c *Core) resize(j *coreJob, cost, weight float64) (Resize, bool) {
	sz := j.Tasks.Sizing()
	rate := c.fairRate * weight
	if !usable(cost) || !sz.Resizable || rate <= 0 || sz.Batch <= 0 {
		return Resize{}, false
	}
	q := c.cfg.FairTaskSeconds.Seconds() * rate
	if c.cfg.TaskSeconds > 0 {
		q = math.Min(q, c.cfg.TaskSeconds.Seconds()/cost)
	}
	want := max(1, int(q)/sz.Batch) * sz.Batch
	if sz.MaxSize > 0 {
		want = min(want, max(sz.MaxSize/sz.Batch, 1)*sz.Batch)
	}
	if 2*sz.TaskSize < 3*want && 5*sz.TaskSize > 2*want {
		return Resize{}, false // near enough
	}
	from := c.tasks.Frontier(j.Name)
	if from < 0 || from >= j.Tasks.NumTasks() {
		return Resize{}, false
	}
	start, _ := j.Tasks.TaskRange(from)
	if sz.Queries-start < 8*want {
		return Resize{}, false
	}
	return Resize{Job: j.Name, From: from, Size: want, Was: sz.TaskSize, Rate: rate}, true
}

// Prior is the cost per query the controller would assume for a job about to be added
// (flops and weight as its Job's), and the query rate fair time would give it beside the
// running jobs.
func (c *Core) Prior(flops, weight float64) (cost, rate float64) {
	_, loads := c.loads()
	loads = append(loads, JobLoad{Name: "", FLOPs: flops, Weight: weight})
	costs := CostEstimates(loads, c.secPerFLOP)
	return costs[len(costs)-1], FairRate(max(len(c.workers), 1), loads, c.secPerFLOP) * loads[len(loads)-1].weight()
}

// TaskTarget is about how many queries the tasks of a job about to be added should have
// (flops and weight as its Job's; batch its batch size): TaskQueries, at most
// MaxTaskBatches batches and at least MinTaskQueries; fewer for an expensive job (by its
// model's FLOPs), so a task takes about TaskSeconds by the cost prior, its cost is
// measured when the first one completes, and the tasks of jobs sharing a worker interleave
// finely; and fewer for a job that will run at the pace of expensive ones (fair time gives
// every job the same rate), so a task is about FairTaskSeconds at that rate and one
// completion moves its rate over a 10 s window by little: LeNet-5 beside ResNet-50 runs
// at ResNet's few hundred queries per second. At that pace a task's fixed costs are
// negligible, so MinTaskQueries does not apply. Whole batches are the caller's to round to.
func (c *Core) TaskTarget(flops, weight float64, batch int) int {
	target := min(c.cfg.TaskQueries, max(batch*c.cfg.MaxTaskBatches, c.cfg.MinTaskQueries))
	if !usable(flops) {
		return max(target, batch)
	}
	cost, rate := c.Prior(flops, weight)
	if q := c.cfg.TaskSeconds.Seconds() / cost; cost > 0 && q < float64(target) {
		target = max(batch, int(q))
	}
	if q := c.cfg.FairTaskSeconds.Seconds() * rate; rate > 0 && q < float64(target) {
		target = max(int(q), batch)
	}
	return max(target, batch)
}

// Share is a job's share of worker time in the current split (0 if not running).
func (c *Core) Share(job string) float64 { return c.shares[job] }

// Assignment returns the current split: each worker's jobs and the fraction of its time
// each gets. The caller must not change it.
func (c *Core) Assignment() map[string][]Share { return c.assign }

// Workers returns the workers of the current split. The caller must not change it.
func (c *Core) Workers() []string { return c.workers }

// FairRate is the query rate per unit of weight every running job gets under fair time.
func (c *Core) FairRate() float64 { return c.fairRate }

// Progress is a job's leased queries over its weight (see FairQueue).
func (c *Core) Progress(job string) float64 { return c.fair.Progress(job) }

// LastControl is when the controller last ran.
func (c *Core) LastControl() time.Time { return c.lastControl }

// LeaseOf returns the worker holding a task's lease, if it is leased.
func (c *Core) LeaseOf(job string, task int) (string, bool) { return c.tasks.LeaseOf(job, task) }

// HasPending reports whether a job has a task neither done nor leased.
func (c *Core) HasPending(job string) bool { return c.tasks.HasPending(job) }

// Held returns how many tasks a worker holds.
func (c *Core) Held(worker string) int { return c.tasks.Held(worker) }

// SplitString renders the current shares, e.g. "a=0.25 b=0.75".
func (c *Core) SplitString() string {
	var parts []string
	for _, n := range c.Running() {
		parts = append(parts, fmt.Sprintf("%s=%.4g", n, c.shares[n]))
	}
	return strings.Join(parts, " ")
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
