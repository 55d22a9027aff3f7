package sched

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"idunno/sched/dataset"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// coordTables is the coordinator's soft state, rebuilt on takeover: leases, measurements,
// the current split of workers, and each job's progress (the FairQueue that picks which
// job a worker runs next).
type coordTables struct {
	tasks       *TaskTable
	stats       map[string]*JobStats
	assign      map[string][]Share
	shares      map[string]float64
	fair        *FairQueue
	fairRate    float64            // queries per second per unit of weight every running job would get
	estCost     map[string]float64 // job -> cost per query the controller assumed
	workers     []string
	repl        *replicator // sends the journal to the standby (see replicate.go)
	lastControl time.Time
	assembling  map[string]bool
	since       time.Time
	lastGain    time.Time
	started     map[string]bool      // jobs whose first task has been leased
	heard       map[string]time.Time // worker -> its last pull
}

func newCoordTables(now time.Time) *coordTables {
	return &coordTables{tasks: NewTaskTable(), stats: map[string]*JobStats{}, assign: map[string][]Share{},
		shares: map[string]float64{}, fair: NewFairQueue(), estCost: map[string]float64{},
		assembling: map[string]bool{}, started: map[string]bool{}, heard: map[string]time.Time{}, since: now}
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
	s.coordName, s.coordAddr, s.standbyOf, s.released = s.name, s.addr, "", false
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
	go s.dropRuns()
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
			s.gaveBack(l)
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

// control runs the fair-time controller: it re-splits the workers by the jobs' costs
// (which workers each job's model lives on) and sets the fair rate the dispatch's slack is
// measured in. Which job a worker runs next is the FairQueue's (pickJob). Called with
// s.mu held.
func (s *Scheduler) control(now time.Time) {
	co := s.co
	co.lastControl = now
	jobs := s.running()
	loads := make([]JobLoad, len(jobs))
	for i, n := range jobs {
		st := s.jobStats(n)
		spec := s.st.Jobs[n].Spec
		// No rates: the dispatch levels the rates itself, so a gain would only chase noise.
		loads[i] = JobLoad{Name: n, Cost: st.cost, FLOPs: spec.FLOPsPerQuery, Weight: spec.RateWeight()}
	}
	shares, _ := FairShares(loads)
	costs := CostEstimates(loads)
	co.shares = map[string]float64{}
	co.estCost = map[string]float64{}
	running := map[string]bool{}
	for i, n := range jobs {
		co.shares[n] = shares[i]
		co.estCost[n] = costs[i]
		running[n] = true
		co.fair.Add(n, loads[i].Weight)
	}
	for _, n := range co.fair.Jobs() {
		if !running[n] {
			co.fair.Remove(n)
		}
	}
	co.fairRate = FairRate(len(co.workers), loads)
	co.assign = AssignWorkers(co.workers, jobs, shares)
	for _, l := range loads {
		if usable(l.Cost) && s.co == co { // a failed commit may have made us step down
			s.resizeTasks(l.Name, l.Weight)
		}
	}
}

// resizeTasks makes the rest of a job's tasks smaller once, when they are more than twice
// FairTaskSeconds at the rate fair time now gives the job: a cheap job added alone gets
// large tasks (their fixed costs amortise), and when expensive jobs join, its rate falls
// to theirs and each completion would step its rate over a 10 s window by a third.
// Tasks from the frontier on (none leased or done) are split into whole batches; it is
// worth it only for a job with many queries left. Called with s.mu held, by control.
func (s *Scheduler) resizeTasks(job string, weight float64) {
	js := s.st.Jobs[job]
	sp := js.Spec
	rate := s.co.fairRate * weight
	if sp.resized() || !sp.SizeChosen || rate <= 0 {
		return // a task size the client chose is kept
	}
	want := max(sp.Batch, int(s.cfg.FairTaskSeconds.Seconds()*rate)/sp.Batch*sp.Batch)
	from := s.co.tasks.Frontier(job)
	if from < 0 || sp.TaskSize < 2*want || sp.Queries-from*sp.TaskSize < 8*want {
		return
	}
	if err := s.commit(&Entry{Kind: EntryJobResize, Name: job, Task: from, Size: want}); err != nil {
		s.logf("sched: job %s: resizing its tasks: %v", job, err)
		return
	}
	s.logf("sched: job %s: tasks from %d on are %d queries (were %d): its fair rate is now %.0f queries/s",
		job, from, want, sp.TaskSize, rate)
}

// costPrior is the cost per query the controller would assume for a job about to be added
// (0 when this node does not coordinate), and the query rate it would get under fair
// time beside the running jobs (FairRate times its weight). Called with s.mu held.
func (s *Scheduler) costPrior(spec JobSpec) (cost, fairRate float64) {
	if s.co == nil {
		return 0, 0
	}
	var loads []JobLoad
	for _, n := range s.running() {
		if st := s.stats[n]; st != nil {
			js := s.st.Jobs[n].Spec
			loads = append(loads, JobLoad{Name: n, Cost: st.cost, FLOPs: js.FLOPsPerQuery, Weight: js.RateWeight()})
		}
	}
	loads = append(loads, JobLoad{Name: spec.Name, FLOPs: spec.FLOPsPerQuery, Weight: spec.RateWeight()})
	costs := CostEstimates(loads)
	return costs[len(costs)-1], FairRate(max(len(s.co.workers), 1), loads) * spec.RateWeight()
}

// splitString renders the current shares, e.g. "a=0.25 b=0.75".
func (s *Scheduler) splitString() string {
	var parts []string
	for _, n := range s.running() {
		parts = append(parts, fmt.Sprintf("%s=%.4g", n, s.co.shares[n]))
	}
	return strings.Join(parts, " ")
}

// pickJob chooses which job worker runs next: the job furthest behind in queries leased
// over weight, preferring the worker's assigned jobs by FairSlack (see FairQueue).
// Called with s.mu held.
func (s *Scheduler) pickJob(worker string) string {
	co := s.co
	mine := map[string]bool{}
	for _, sh := range co.assign[worker] {
		if sh.Weight > 0 {
			mine[sh.Job] = true
		}
	}
	return co.fair.Pick(co.tasks.HasPending, func(job string) bool { return mine[job] }, s.fairSlack())
}

// fairSlack is FairSlack in the FairQueue's unit: queries over weight at the fair rate.
// Called with s.mu held.
func (s *Scheduler) fairSlack() float64 {
	return s.cfg.FairSlack.Seconds() * s.co.fairRate
}

// gaveBack accounts for a lease taken back: its queries will be leased again.
// Called with s.mu held.
func (s *Scheduler) gaveBack(l Lease) {
	if js := s.st.Jobs[l.Job]; js != nil {
		f, t := js.Spec.TaskRange(l.Task)
		s.co.fair.Returned(l.Job, t-f)
	}
}

// isRunning reports whether a job still has tasks that are not committed.
func (s *Scheduler) isRunning(job string) bool {
	j, ok := s.st.Jobs[job]
	return ok && !j.Complete && j.NDone < j.Spec.NumTasks()
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
		s.gaveBack(l)
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
	co.fair.Leased(job, t-f)
	s.logf("sched: scheduled task %s/%d (queries %d-%d) on %s", job, task, f, t-1, worker)
	return TaskOrder{Spec: js.Spec, Task: task, Epoch: s.st.Epoch, Express: express}
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
	if !ok || d.Task < 0 || d.Task >= js.Spec.NumTasks() || d.JobID != js.Spec.ResultID(d.Task) {
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
	// The job's progress was counted when the task was leased (FairQueue); the busy time
	// measured goes into the job's cost (JobStats.Record), which only splits the workers
	// and sizes tasks. On a loaded machine one cheap task's busy time is noise (0.4 to 55
	// ms for the same 32 LeNet-5 queries); counting queries instead keeps the rates level.
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
	correct, err := s.writeResult(spec)
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
	e := &Entry{Kind: EntryJobComplete, Name: spec.Name}
	if spec.Labels != "" {
		e.Size = 1 + correct
	}
	if err := s.commit(e); err != nil {
		s.logf("sched: job %s: %v", spec.Name, err)
		return
	}
	j := s.st.Jobs[spec.Name]
	s.logf("sched: job %s completed: %d queries in %.2f s, result in SDFS as %s",
		spec.Name, spec.Queries, float64(j.Finished-j.Added)/1e9, JobResultName(spec.Name))
}

func (s *Scheduler) writeResult(spec JobSpec) (int, error) {
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
			b, err := s.blobs.Get(ctx, TaskResultName(spec.Name, spec.ResultID(i), i))
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
			return 0, errs[i]
		}
		buf.Write(parts[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	correct := 0
	if spec.Labels != "" {
		lb, err := s.blobs.Get(ctx, spec.Labels)
		if err != nil {
			return 0, fmt.Errorf("labels %s: %w", spec.Labels, err)
		}
		labels, err := dataset.ReadLabels(spec.Labels, bytes.NewReader(lb))
		if err != nil {
			return 0, err
		}
		if correct, err = CountCorrect(buf.Bytes(), labels); err != nil {
			return 0, err
		}
	}
	return correct, s.blobs.Put(ctx, JobResultName(spec.Name), buf.Bytes())
}

// CountCorrect counts the result lines (query,top1,score) whose top-1 class is the
// query's label.
func CountCorrect(result []byte, labels []int32) (int, error) {
	n := 0
	for i, line := range bytes.Split(result, []byte{'\n'}) {
		if i == 0 || len(line) == 0 {
			continue // the header
		}
		f := bytes.Split(line, []byte{','})
		if len(f) < 2 {
			return 0, fmt.Errorf("sched: result line %d malformed", i)
		}
		q, err1 := strconv.Atoi(string(f[0]))
		c, err2 := strconv.Atoi(string(f[1]))
		if err1 != nil || err2 != nil || q < 0 || q >= len(labels) {
			return 0, fmt.Errorf("sched: result line %d malformed or beyond the %d labels", i, len(labels))
		}
		if int32(c) == labels[q] {
			n++
		}
	}
	return n, nil
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
