package sched

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// coordTables is the coordinator's soft state, rebuilt on takeover: leases, measurements,
// the current split of workers, and each worker's virtual time per job (for interleaving
// the jobs a worker serves by weight).
type coordTables struct {
	tasks       *TaskTable
	stats       map[string]*JobStats
	assign      map[string][]Share
	shares      map[string]float64
	vt          map[string]map[string]float64 // worker -> job -> busy seconds / weight
	vclock      map[string]float64            // worker -> virtual time of the job it last picked
	vwall       map[string]float64            // worker -> the clock moved on by wall time too (see pickJob)
	vwallAt     map[string]time.Time          // worker -> when vwall was last moved
	estCost     map[string]float64            // job -> cost per query the controller assumed
	leaseCost   map[taskKey]float64           // estimated busy seconds charged at lease time
	workers     []string
	repl        *replicator // sends the journal to the standby (see replicate.go)
	lastControl time.Time
	assembling  map[string]bool
	since       time.Time
	lastGain    time.Time
	started     map[string]bool                 // jobs whose first task has been leased
	express     map[taskKey]bool                // leases sent as express tasks
	due         map[string]map[string]time.Time // worker -> paced job -> when its next task is due
	heard       map[string]time.Time            // worker -> its last pull
}

func newCoordTables(now time.Time) *coordTables {
	return &coordTables{tasks: NewTaskTable(), stats: map[string]*JobStats{}, assign: map[string][]Share{},
		shares: map[string]float64{}, vt: map[string]map[string]float64{}, vclock: map[string]float64{}, vwall: map[string]float64{}, vwallAt: map[string]time.Time{},
		estCost: map[string]float64{}, leaseCost: map[taskKey]float64{},
		assembling: map[string]bool{}, started: map[string]bool{}, express: map[taskKey]bool{}, due: map[string]map[string]time.Time{}, heard: map[string]time.Time{}, since: now}
}

// takeOver makes this node the coordinator with a new epoch. Called with s.mu held.
func (s *Scheduler) takeOver(why string) {
	epoch := max(s.st.Epoch, s.maxEpoch) + 1
	s.role = roleCoordinator
	s.co = newCoordTables(s.now())
	for _, n := range s.st.Order {
		js := s.st.Jobs[n]
		s.co.tasks.AddJob(js)
		s.jobStats(n) // kept from the standby's journal, or started afresh
	}
	if err := s.commit(&Entry{Kind: EntryEpoch, Epoch: epoch, Node: s.name}); err != nil {
		s.logf("sched: take over failed: %v", err)
		s.role, s.co = roleFollower, nil
		return
	}
	s.maxEpoch = epoch
	s.coordName, s.coordAddr, s.standbyOf = s.name, s.addr, ""
	s.co.repl = newReplicator(s, epoch, s.st.Seq)
	s.pickStandby(s.mem.Alive())
	s.wg.Add(1)
	go s.co.repl.run()
	s.logf("sched: became coordinator, epoch %d (%s); %d jobs in the journal", epoch, why, len(s.st.Jobs))
	s.w.wake()
}

// stepDown leaves the coordinator role. Called with s.mu held.
func (s *Scheduler) stepDown(why string) {
	s.logf("sched: stepping down as coordinator of epoch %d: %s", s.st.Epoch, why)
	if s.co != nil && s.co.repl != nil {
		s.co.repl.halt(fmt.Errorf("sched: %s stepped down: %s", s.name, why))
	}
	s.role, s.co = roleFollower, nil
	s.coordName, s.coordAddr, s.lostSince = "", "", s.now()
}

// pickStandby makes the first other live node (in the membership's order) the standby.
// Called with s.mu held.
func (s *Scheduler) pickStandby(alive []Peer) {
	for _, p := range alive {
		if p.Name != s.name {
			s.co.repl.setTarget(p.Name, p.RPCAddr)
			return
		}
	}
	s.co.repl.setTarget("", "")
}

// commit makes one state change: checked, written to the local journal, applied, and
// queued for the standby (replicator). It does not wait for the standby: a client's change
// is answered only after confirm; a worker's task-done report is acknowledged at once,
// since losing one only means running the task again. Called with s.mu held.
func (s *Scheduler) commit(e *Entry) error {
	e.Seq = s.st.Seq + 1
	if e.Epoch == 0 {
		e.Epoch = s.st.Epoch
	}
	e.Time = s.now().UnixNano()
	if err := s.st.Check(e); err != nil {
		return err
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("sched: journal: encode: %w", err)
	}
	if err := s.journal.AppendEncoded(raw); err != nil {
		return err
	}
	if err := s.st.Apply(e); err != nil {
		panic("sched: checked entry failed to apply: " + err.Error())
	}
	s.observe(e)
	if s.co != nil && s.co.repl != nil {
		s.co.repl.enqueue(e.Seq, raw)
	}
	if s.journal.NeedsCompaction() {
		if err := s.journal.ResetWithStats(s.st, s.statsSnapshot()); err != nil {
			s.logf("sched: journal compaction: %v", err)
		}
	}
	return nil
}

// observe keeps the job statistics in step with the journal: entry e was just applied.
// Called with s.mu held.
func (s *Scheduler) observe(e *Entry) {
	switch e.Kind {
	case EntryJobAdd:
		s.stats[e.Job.Name] = NewJobStats()
	case EntryJobRemove:
		delete(s.stats, e.Name)
	case EntryTaskDone:
		if j := s.st.Jobs[e.Name]; j != nil && e.Report != nil {
			s.jobStats(e.Name).Record(*e.Report, j.Spec.Batch, time.Unix(0, e.Time))
		}
	}
}

// statsSnapshot returns every job's statistics as snapshots. Called with s.mu held.
func (s *Scheduler) statsSnapshot() map[string]*StatsSnapshot {
	out := make(map[string]*StatsSnapshot, len(s.stats))
	for n, st := range s.stats {
		out[n] = st.Snapshot()
	}
	return out
}

// restoreStats rebuilds the job statistics from a journal read back at start: the
// statistics saved with its snapshot, then the entries after it. Called before Start.
func (s *Scheduler) restoreStats(rec Recovered) {
	for n, ss := range rec.Stats {
		if _, ok := s.st.Jobs[n]; !ok || ss == nil {
			continue
		}
		if st, err := ss.Restore(); err == nil {
			s.stats[n] = st
		}
	}
	for _, e := range rec.Entries {
		s.observe(e)
	}
}

// jobStats returns a job's statistics, created empty if this node has none (a journal
// recovered from disk). Called with s.mu held.
func (s *Scheduler) jobStats(job string) *JobStats {
	st := s.stats[job]
	if st == nil {
		st = NewJobStats()
		s.stats[job] = st
	}
	return st
}

// coordTick: expire leases of dead workers, keep a synced standby, run the controller and
// finish complete jobs. Called with s.mu held.
func (s *Scheduler) coordTick(alive []Peer, live map[string]string) {
	now := s.now()
	co := s.co
	s.expireLeases(live, now)
	// The replicator syncs a new standby, sends entries and heartbeats outside the lock.
	s.pickStandby(alive)
	workers := make([]string, 0, len(alive))
	for _, p := range alive {
		if p.Name != s.name {
			workers = append(workers, p.Name)
		}
	}
	if len(alive) == 1 {
		workers = []string{s.name} // a one-node cluster works on its own
	}
	if now.Sub(co.lastControl) >= s.cfg.ControlEvery || !equalStrings(workers, co.workers) {
		co.workers = workers
		s.control(now)
	}
	for _, n := range s.st.Order {
		j := s.st.Jobs[n]
		if !j.Complete && j.NDone == j.Spec.NumTasks() && !co.assembling[n] {
			co.assembling[n] = true
			go s.assemble(s.st.Epoch, j.Spec)
		}
	}
}

// expireLeases takes back the tasks of workers that failed (by the failure detector) or
// have not pulled for LeaseSilence although the detector still lists them: a frozen
// process, or a detector whose view lags. A task taken back while its worker still runs
// it is harmless: results are written under the task's name with the same bytes, and the
// journal commits a task once. Called with s.mu held.
func (s *Scheduler) expireLeases(live map[string]string, now time.Time) {
	co := s.co
	for _, w := range co.tasks.Workers() {
		why := ""
		if _, ok := live[w]; !ok {
			why = "failed"
		} else if h, ok := co.heard[w]; !ok {
			co.heard[w] = now // adopted at a takeover: the silence counts from here
		} else if d := now.Sub(h); d >= s.cfg.LeaseSilence {
			why = fmt.Sprintf("silent for %v", d.Round(time.Millisecond))
		}
		if why == "" {
			continue
		}
		for _, l := range co.tasks.ExpireWorker(w) {
			delete(co.leaseCost, taskKey{l.Job, l.Task})
			s.logf("sched: worker %s %s: task %s/%d goes back to the queue", w, why, l.Job, l.Task)
		}
	}
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

// running lists the jobs that still have work, in the order they were added.
func (s *Scheduler) running() []string {
	var out []string
	for _, n := range s.st.Order {
		j := s.st.Jobs[n]
		if !j.Complete && j.NDone < j.Spec.NumTasks() {
			out = append(out, n)
		}
	}
	return out
}

// control runs the fair-time controller and re-splits the workers. Called with s.mu held.
func (s *Scheduler) control(now time.Time) {
	co := s.co
	co.lastControl = now
	jobs := s.running()
	loads := make([]JobLoad, len(jobs))
	for i, n := range jobs {
		st := s.jobStats(n)
		loads[i] = JobLoad{Name: n, Cost: st.cost, FLOPs: s.st.Jobs[n].Spec.FLOPsPerQuery, Gain: st.gain}
		// Compare rates only once the job has run a whole window under the controller.
		if !st.firstDone.IsZero() && now.Sub(st.firstDone) >= s.cfg.RateWindow {
			loads[i].Rate = st.Rate(now, s.cfg.RateWindow)
		}
	}
	// Gains move once per rate window, on rates measured since the last move: correcting
	// again before the window reflects the previous correction would overshoot.
	if now.Sub(co.lastGain) < s.cfg.RateWindow {
		for i := range loads {
			loads[i].Rate = 0
		}
	} else {
		co.lastGain = now
	}
	for _, l := range loads {
		if l.Rate == 0 {
			for i := range loads {
				loads[i].Rate = 0 // all or nothing: a partial comparison would mislead
			}
			break
		}
	}
	shares, gains := FairShares(loads)
	costs := CostEstimates(loads)
	co.shares = map[string]float64{}
	co.estCost = map[string]float64{}
	for i, n := range jobs {
		s.jobStats(n).gain = gains[i]
		co.shares[n] = shares[i]
		co.estCost[n] = costs[i]
	}
	co.assign = AssignWorkers(co.workers, jobs, shares)
}

// costPrior is the cost per query the controller would assume for a job about to be added
// (0 when this node does not coordinate), and the query rate every running job would get
// with it under fair time: all rates equal, so rate = workers / the sum of the costs.
// Called with s.mu held.
func (s *Scheduler) costPrior(spec JobSpec) (cost, fairRate float64) {
	if s.co == nil {
		return 0, 0
	}
	var loads []JobLoad
	for _, n := range s.running() {
		if st := s.stats[n]; st != nil {
			loads = append(loads, JobLoad{Name: n, Cost: st.cost, FLOPs: s.st.Jobs[n].Spec.FLOPsPerQuery})
		}
	}
	loads = append(loads, JobLoad{Name: spec.Name, FLOPs: spec.FLOPsPerQuery})
	costs := CostEstimates(loads)
	sum := 0.0
	for _, c := range costs {
		sum += c
	}
	if sum > 0 {
		fairRate = float64(max(len(s.co.workers), 1)) / sum
	}
	return costs[len(costs)-1], fairRate
}

// splitString renders the current shares, e.g. "a=0.25 b=0.75".
func (s *Scheduler) splitString() string {
	var parts []string
	for _, n := range s.running() {
		parts = append(parts, fmt.Sprintf("%s=%.4g", n, s.co.shares[n]))
	}
	return strings.Join(parts, " ")
}

// pickJob chooses which job worker runs next: among the jobs it is assigned with pending
// work, the one furthest behind in busy time per unit of weight (stride scheduling).
//
// The worker's virtual clock is the virtual time of the job it last picked. A job's virtual
// time is lifted to the clock before comparing, so a job new to the worker, or one that
// had nothing pending for a while, starts level instead of running back to back on banked
// credit. While some assigned job is still running but has nothing pending (its remaining
// tasks run elsewhere), its weight is not handed to the others: a job may then only run if
// its virtual time is not ahead of the clock moved on by wall time (a worker busy all the
// time accrues one second of busy time per second, so busy/weight keeps pace with wall
// time for a job that gets exactly its weight); a cheap job stays at its share. Only when
// none of the worker's assigned jobs is still running (the split is stale) does the worker
// help any job with pending work. Called with s.mu held.
func (s *Scheduler) pickJob(worker string) string {
	co := s.co
	vt := co.vt[worker]
	if vt == nil {
		vt = map[string]float64{}
		co.vt[worker] = vt
	}
	clock := co.vclock[worker]
	best, bestVT := "", math.Inf(1)
	assigned, starved := false, false
	for _, sh := range co.assign[worker] {
		if sh.Weight <= 0 || !s.isRunning(sh.Job) || s.paced(worker, sh) {
			continue // a paced job is leased by leasePaced
		}
		assigned = true
		if !co.tasks.HasPending(sh.Job) {
			starved = true
			continue
		}
		v := math.Max(vt[sh.Job], clock)
		vt[sh.Job] = v
		if v < bestVT {
			best, bestVT = sh.Job, v
		}
	}
	// The wall-moved clock runs only while some job is starved here; otherwise it follows
	// the clock, so idle time never becomes credit.
	now, wall := s.now(), clock
	if starved {
		wall = math.Max(co.vwall[worker], clock)
		if at, ok := co.vwallAt[worker]; ok && now.After(at) {
			wall += now.Sub(at).Seconds()
		}
	}
	co.vwall[worker], co.vwallAt[worker] = wall, now
	if best != "" && starved && bestVT > wall {
		return "" // ahead of its weight, and the job it would take time from is only waiting
	}
	if best != "" {
		co.vclock[worker] = math.Max(clock, bestVT)
		return best
	}
	if assigned {
		return "" // its jobs' remaining tasks are running elsewhere: helping others would break fair time
	}
	for _, n := range s.running() {
		if co.tasks.HasPending(n) {
			return n
		}
	}
	return ""
}

// isRunning reports whether a job still has tasks that are not committed.
func (s *Scheduler) isRunning(job string) bool {
	j, ok := s.st.Jobs[job]
	return ok && !j.Complete && j.NDone < j.Spec.NumTasks()
}

func (s *Scheduler) weightOf(worker, job string) float64 {
	for _, sh := range s.co.assign[worker] {
		if sh.Job == job {
			return sh.Weight
		}
	}
	return 0
}

// charge adds busy seconds to a worker's virtual time for a job.
func (s *Scheduler) charge(worker, job string, secs float64) {
	w := s.weightOf(worker, job)
	if w <= 0 {
		return
	}
	if s.co.vt[worker] == nil {
		s.co.vt[worker] = map[string]float64{}
	}
	s.co.vt[worker][job] += secs / w
}

// TaskRef names one task.
type TaskRef struct {
	Job  string `json:"job"`
	Task int    `json:"task"`
}

// TaskOrder is a leased task as the worker receives it.
type TaskOrder struct {
	Spec  JobSpec `json:"spec"`
	Task  int     `json:"task"`
	Epoch uint64  `json:"epoch"`
	// Express: the first task of a newly added job, leased even to a worker whose queue is
	// full; the worker starts it at once beside the task it is running, so a new job's first
	// query does not wait behind a busy worker's queue of another job's long tasks.
	Express bool `json:"express,omitempty"`
}

// PullArgs is a worker's request for work, carrying what it holds and what it finished.
type PullArgs struct {
	Worker string       `json:"worker"`
	Want   int          `json:"want"`
	Held   []TaskRef    `json:"held"`
	Done   []TaskReport `json:"done"`
}

// PullReply hands out tasks and acknowledges reports.
type PullReply struct {
	Orders []TaskOrder `json:"orders"`
	Acked  []TaskRef   `json:"acked"`
	Jobs   []string    `json:"jobs"` // jobs still running: a worker drops queued tasks of others
}

// MaxPullItems bounds the lists in one pull.
const MaxPullItems = 4096

func (s *Scheduler) handlePull(epoch uint64, a PullArgs) (PullReply, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r PullReply
	if err := s.fenced(epoch); err != nil {
		return r, s.maxEpoch, err
	}
	if s.role != roleCoordinator {
		return r, s.maxEpoch, fmt.Errorf("sched: %s is not the coordinator", s.name)
	}
	if len(a.Held) > MaxPullItems || len(a.Done) > MaxPullItems || a.Want > 64 {
		return r, s.maxEpoch, fmt.Errorf("sched: pull from %s over the size limits", a.Worker)
	}
	now := s.now()
	co := s.co
	co.heard[a.Worker] = now
	keep := make(map[TaskRef]bool, len(a.Held)+len(a.Done))
	for _, h := range a.Held {
		co.tasks.Adopt(h.Job, h.Task, a.Worker, now)
		co.started[h.Job] = true
		keep[h] = true
	}
	for _, d := range a.Done {
		keep[TaskRef{d.Job, d.Task}] = true
	}
	for _, l := range co.tasks.Reconcile(a.Worker, keep) {
		delete(co.leaseCost, taskKey{l.Job, l.Task})
		s.logf("sched: worker %s gave up task %s/%d: back to the queue", a.Worker, l.Job, l.Task)
	}
	for _, d := range a.Done {
		if err := s.recordDone(d, now); err != nil {
			s.logf("sched: report of %s/%d from %s: %v", d.Job, d.Task, a.Worker, err)
			if s.role != roleCoordinator {
				return PullReply{}, s.maxEpoch, err
			}
			continue // not acknowledged: the worker reports it again
		}
		r.Acked = append(r.Acked, TaskRef{d.Job, d.Task})
	}
	if s.st.Phase == PhaseInference {
		if a.Want > 0 && !contains(co.workers, a.Worker) {
			co.workers = append(co.workers, a.Worker) // a worker that joined since the last split
			s.control(now)
		}
		// A job assigned here that has never had a task leased gets its first one now,
		// whatever the worker's queue holds (see TaskOrder.Express).
		for _, sh := range co.assign[a.Worker] {
			if sh.Weight > 0 && !co.started[sh.Job] && s.isRunning(sh.Job) && s.st.Jobs[sh.Job].NDone == 0 &&
				co.tasks.HasPending(sh.Job) {
				r.Orders = append(r.Orders, s.lease(a.Worker, sh.Job, now, true))
			}
		}
		s.leasePaced(a.Worker, now, &r)
		for i := 0; i < a.Want; i++ {
			job := s.pickJob(a.Worker)
			if job == "" {
				break
			}
			r.Orders = append(r.Orders, s.lease(a.Worker, job, now, false))
		}
	}
	r.Jobs = s.running()
	return r, s.st.Epoch, nil
}

// lease hands the job's next pending task to worker. Called with s.mu held.
func (s *Scheduler) lease(worker, job string, now time.Time, express bool) TaskOrder {
	co := s.co
	co.started[job] = true
	task, _ := co.tasks.Lease(job, worker, now)
	js := s.st.Jobs[job]
	f, t := js.Spec.TaskRange(task)
	// Charge what the controller assumes the task costs (a prior for a job not yet
	// measured, never zero: a free lease would let the job run back to back);
	// the completion report corrects it to the busy time measured.
	c := co.estCost[job]
	if c <= 0 {
		c = s.jobStats(job).cost
	}
	est := c * float64(t-f)
	co.leaseCost[taskKey{job, task}] = est
	s.charge(worker, job, est)
	s.logf("sched: scheduled task %s/%d (queries %d-%d) on %s", job, task, f, t-1, worker)
	if express {
		co.express[taskKey{job, task}] = true
	}
	return TaskOrder{Spec: js.Spec, Task: task, Epoch: s.st.Epoch, Express: express}
}

// Pacing of cheap jobs on shared workers.
const (
	pacedTaskMax   = 0.05                   // a job's tasks are short if they take under this many seconds (by its cost)
	pacedLongTask  = 0.5                    // ...and it is paced beside a job whose tasks take at least this long
	pacedWeightMax = 0.5                    // ...and it is paced on a worker where its weight is under this
	pacedSlack     = 500 * time.Millisecond // credit a paced job may bank while the worker could not take its tasks
	maxExpressHeld = 2                      // express tasks a worker holds at once
)

// paced reports whether job runs on worker paced by wall time: its tasks are short, its
// weight there is small, and the worker also serves a running job whose tasks are not
// short (pacedLongTask: beside tasks shorter than a few pulls, the queue interleaves finely
// enough). Placed in the worker's queue, such a job's tasks could only start between the
// other job's long tasks, a burst of them every second or so (a rate over a few seconds
// would see one burst more or less); paced, one of its tasks is leased as an express task
// (run at once, beside the long task) every task-cost/weight seconds, so it gets its weight
// of the worker's time in an even stream. Called with s.mu held.
func (s *Scheduler) paced(worker string, sh Share) bool {
	if sh.Weight <= 0 || sh.Weight >= pacedWeightMax || !s.isRunning(sh.Job) || s.taskSeconds(sh.Job) >= pacedTaskMax {
		return false
	}
	for _, o := range s.co.assign[worker] {
		if o.Job != sh.Job && o.Weight > 0 && s.isRunning(o.Job) && s.taskSeconds(o.Job) >= pacedLongTask {
			return true
		}
	}
	return false
}

// taskSeconds is the busy time the controller assumes one task of job takes.
func (s *Scheduler) taskSeconds(job string) float64 {
	c := s.co.estCost[job]
	if c <= 0 {
		if st := s.stats[job]; st != nil {
			c = st.cost
		}
	}
	return c * float64(s.st.Jobs[job].Spec.TaskSize)
}

// leasePaced leases the paced jobs' tasks that are due on worker, as express tasks.
// Called with s.mu held.
func (s *Scheduler) leasePaced(worker string, now time.Time, r *PullReply) {
	co := s.co
	held := 0
	for k := range co.express {
		if l, ok := co.tasks.LeaseOf(k.job, k.task); !ok {
			delete(co.express, k)
		} else if l == worker {
			held++
		}
	}
	due := co.due[worker]
	if due == nil {
		due = map[string]time.Time{}
		co.due[worker] = due
	}
	for _, sh := range co.assign[worker] {
		if !s.paced(worker, sh) {
			delete(due, sh.Job)
			continue
		}
		every := time.Duration(s.taskSeconds(sh.Job) / sh.Weight * float64(time.Second))
		next, ok := due[sh.Job]
		if !ok && held > 0 {
			next = now.Add(every) // the worker already runs an express task (the job's first)
		} else if !ok {
			next = now
		} else if floor := now.Add(-pacedSlack); next.Before(floor) {
			next = floor
		}
		for held < maxExpressHeld && !next.After(now) && co.tasks.HasPending(sh.Job) {
			r.Orders = append(r.Orders, s.lease(worker, sh.Job, now, true))
			next = next.Add(every)
			held++
		}
		due[sh.Job] = next
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// recordDone commits a finished task once; a repeat is acknowledged without effect.
// Called with s.mu held.
func (s *Scheduler) recordDone(d TaskReport, now time.Time) error {
	co := s.co
	js, ok := s.st.Jobs[d.Job]
	if !ok || d.JobID != js.Spec.ID || d.Task < 0 || d.Task >= js.Spec.NumTasks() {
		return nil // a removed job (or an older one of the same name): nothing to do
	}
	if js.IsDone(d.Task) {
		co.tasks.Complete(d.Job, d.Task)
		return nil // already committed: nothing to do
	}
	st := s.jobStats(d.Job)
	measured := st.cost > 0
	if err := s.commit(&Entry{Kind: EntryTaskDone, Name: d.Job, Task: d.Task, Node: d.Worker, Report: &d}); err != nil {
		return err
	}
	co.tasks.Complete(d.Job, d.Task)
	// The lease was charged the job's cost as the controller assumed it; the busy time
	// measured goes into that cost (JobStats.Record), not into this worker's virtual time:
	// on a loaded machine one cheap task's busy time is noise (0.4 to 55 ms for the same 32
	// LeNet-5 queries), and charging it would make the job's rate over a few seconds as
	// noisy as the few tasks it ran. Charged the smoothed cost, a job gets weight/cost tasks'
	// worth of turns, so its rate follows its share.
	delete(co.leaseCost, taskKey{d.Job, d.Task})
	// commit recorded d's measurements in the job's stats (observe).
	if (!measured && st.cost > 0) || js.NDone == js.Spec.NumTasks() {
		// A first measured cost replaces a prior, and a job out of tasks frees its share:
		// re-split now rather than at the next control period.
		s.control(now)
	}
	s.logf("sched: completed task %s/%d on %s (%d queries, %.1f ms); job %d/%d tasks",
		d.Job, d.Task, d.Worker, d.Queries, float64(d.BusyNanos)/1e6, js.NDone, js.Spec.NumTasks())
	return nil
}

// assemble concatenates a finished job's task results into its result CSV and commits
// the job as complete. Re-running it writes the same bytes.
func (s *Scheduler) assemble(epoch uint64, spec JobSpec) {
	err := s.writeResult(spec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator || s.st.Epoch != epoch {
		return
	}
	delete(s.co.assembling, spec.Name)
	if err != nil {
		s.logf("sched: job %s: result: %v (retrying)", spec.Name, err)
		return
	}
	if j, ok := s.st.Jobs[spec.Name]; !ok || j.Complete {
		return
	}
	if err := s.commit(&Entry{Kind: EntryJobComplete, Name: spec.Name}); err != nil {
		s.logf("sched: job %s: %v", spec.Name, err)
		return
	}
	j := s.st.Jobs[spec.Name]
	s.logf("sched: job %s completed: %d queries in %.2f s, result in SDFS as %s",
		spec.Name, spec.Queries, float64(j.Finished-j.Added)/1e9, JobResultName(spec.Name))
}

func (s *Scheduler) writeResult(spec JobSpec) error {
	n := spec.NumTasks()
	parts := make([][]byte, n)
	errs := make([]error, n)
	sem := make(chan struct{}, assembleParallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := s.blobs.Get(ctx, TaskResultName(spec.Name, spec.ID, i))
			if err != nil {
				errs[i] = fmt.Errorf("read task %d: %w", i, err)
				return
			}
			if f, t := spec.TaskRange(i); bytes.Count(b, []byte{'\n'}) != t-f {
				errs[i] = fmt.Errorf("task %d result has %d lines, want %d", i, bytes.Count(b, []byte{'\n'}), t-f)
				return
			}
			parts[i] = b
		}(i)
	}
	wg.Wait()
	var buf bytes.Buffer
	buf.WriteString(ResultHeader)
	for i := range parts {
		if errs[i] != nil {
			return errs[i]
		}
		buf.Write(parts[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.blobs.Put(ctx, JobResultName(spec.Name), buf.Bytes())
}

// assembleParallel bounds the task results read at once while assembling a job's result.
const assembleParallel = 16

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
