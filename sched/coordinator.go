package sched

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"idunno/sched/dataset"
	"idunno/sched/dispatch"
	"sort"
	"strconv"
	"sync"
	"time"
)

// coordTables is the coordinator's soft state, rebuilt on takeover: the dispatch core
// (leases, the split of workers, each job's progress; pure, see package dispatch), the
// replicator, and the results being assembled.
type coordTables struct {
	core       *dispatch.Core
	repl       *replicator // sends the journal to the standby (see replicate.go)
	assembling map[string]bool
	downSince  map[string]time.Time // failed members, since when this coordinator has seen them failed
}

func newCoordTables(cfg SchedConfig) *coordTables {
	return &coordTables{core: dispatch.New(cfg.Dispatch()), assembling: map[string]bool{}, downSince: map[string]time.Time{}}
}

// jobTasks shows a journaled job's tasks to the dispatch core, which reads them live: a
// task-done or job-resize entry applied to the JobState is what the core sees next.
type jobTasks struct {
	js      *JobState
	maxSize int // the largest task size a resize may choose (SchedConfig.TaskQueries)
}

func (t jobTasks) NumTasks() int                  { return t.js.Spec.NumTasks() }
func (t jobTasks) TaskRange(i int) (from, to int) { return t.js.Spec.TaskRange(i) }
func (t jobTasks) IsDone(i int) bool              { return t.js.IsDone(i) }
func (t jobTasks) NumDone() int {
	if t.js.Complete {
		return t.js.Spec.NumTasks()
	}
	return t.js.NDone
}
func (t jobTasks) Sizing() dispatch.Sizing {
	sp := t.js.Spec
	return dispatch.Sizing{Batch: sp.Batch, Queries: sp.Queries, TaskSize: sp.CurrentTaskSize(), MaxSize: t.maxSize,
		Resizable: sp.SizeChosen && len(sp.splits()) < MaxSplits}
}

// coreAdd hands a journaled job to the dispatch core, with its measured cost if any.
// Called with s.mu held.
func (s *Scheduler) coreAdd(js *JobState) {
	n := js.Spec.Name
	s.co.core.AddJob(dispatch.Job{Name: n, Weight: js.Spec.RateWeight(), FLOPs: js.Spec.FLOPsPerQuery, Model: ModelKey(js.Spec),
		Tasks: jobTasks{js, s.cfg.TaskQueries}})
	s.co.core.SetCost(n, s.jobStats(n).cost)
}

func (s *Scheduler) takeOver(why string) {
	epoch := max(s.st.Epoch, s.maxEpoch) + 1
	s.role = roleCoordinator
	s.co = newCoordTables(s.cfg)
	for _, n := range s.st.Order {
		s.coreAdd(s.st.Jobs[n]) // its stats kept from the standby's journal, or started afresh
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
	s.role, s.co, s.removed = roleFollower, nil, nil
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
			st := s.jobStats(e.Name)
			st.costTau = s.cfg.CostTau
			st.Record(*e.Report, j.Spec.Batch, time.Unix(0, e.Time))
			st.RecordTimes(*e.Report, j.Added)
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
// coordTick: expire leases of dead workers, keep a synced standby, run the controller and
// finish complete jobs. Called with s.mu held.
func (s *Scheduler) coordTick(alive []Peer, live map[string]string) {
	names := make([]string, len(alive))
	for i, p := range alive {
		names[i] = p.Name
	}
	exp, rs := s.co.core.Tick(s.now(), names, s.name)
	// A task taken back while its worker still runs it is harmless: results are written
	// under the task's name with the same bytes, and the journal commits a task once.
	for _, e := range exp {
		s.logf("sched: worker %s %s: task %s/%d goes back to the queue", e.Worker, e.Why, e.Job, e.Task)
	}
	s.applyResizes(rs)
	if s.co == nil {
		return // a failed commit made us step down
	}
	// The replicator syncs a new standby, sends entries and heartbeats outside the lock.
	s.pickStandby(alive)
	s.removed = removals(s.co.downSince, s.mem.Failed(), s.now(), s.cfg.RemoveAfter, s.removed, len(alive), s.mem.Known())
	s.co.repl.setRemoved(s.removed)
	for _, n := range s.st.Order {
		j := s.st.Jobs[n]
		if !j.Complete && j.NDone == j.Spec.NumTasks() && !s.co.assembling[n] {
			s.co.assembling[n] = true
			go s.assemble(s.st.Epoch, j.Spec)
		}
	}
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

// control runs the fair-time controller now (see dispatch.Core.Control) and journals the
// task resizes it decides. Called with s.mu held.
func (s *Scheduler) control(now time.Time) { s.applyResizes(s.co.core.Control(now)) }

// applyResizes journals the dispatch core's decisions to split jobs' remaining tasks
// smaller. Called with s.mu held.
func (s *Scheduler) applyResizes(rs []dispatch.Resize) {
	for _, r := range rs {
		if s.co == nil {
			return // a failed commit made us step down
		}
		if err := s.commit(&Entry{Kind: EntryJobResize, Name: r.Job, Task: r.From, Size: r.Size}); err != nil {
			s.logf("sched: job %s: resizing its tasks: %v", r.Job, err)
			continue
		}
		s.logf("sched: job %s: tasks from %d on are %d queries (were %d): its fair rate is now %.0f queries/s",
			r.Job, r.From, r.Size, r.Was, r.Rate)
	}
}

// splitString renders the current shares, e.g. "a=0.25 b=0.75".
func (s *Scheduler) splitString() string { return s.co.core.SplitString() }

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
	// Express: the worker starts it at once beside the task it is running, instead of
	// queueing it. The first task of a newly added job (leased even to a worker whose queue
	// is full, so a new job's first query does not wait behind a busy worker's queue of
	// another job's long tasks), and a cheap job's task that its batch keeps longer than
	// FairTaskSeconds at its fair rate (dispatch.Config.ExpressSeconds).
	Express bool `json:"express,omitempty"`
}

// PullArgs is a worker's request for work, carrying what it holds and what it finished.
type PullArgs struct {
	Worker string       `json:"worker"`
	Want   int          `json:"want"`
	Held   []TaskRef    `json:"held"`
	Done   []TaskReport `json:"done"`
	// Waiting lists the held tasks that wait for their job's model to load (see Preparer).
	Waiting []TaskRef `json:"waiting,omitempty"`
	// Models lists the models the worker has loaded (ModelKey); null if it does not say.
	Models []string `json:"models"`
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
	if len(a.Held) > MaxPullItems || len(a.Done) > MaxPullItems || len(a.Waiting) > MaxPullItems || len(a.Models) > MaxPullItems || a.Want > 64 {
		return r, s.maxEpoch, fmt.Errorf("sched: pull from %s over the size limits", a.Worker)
	}
	now := s.now()
	held := make([]dispatch.TaskRef, len(a.Held))
	for i, h := range a.Held {
		held[i] = dispatch.TaskRef(h)
	}
	done := make([]dispatch.TaskRef, len(a.Done))
	for i, d := range a.Done {
		done[i] = dispatch.TaskRef{Job: d.Job, Task: d.Task}
	}
	waiting := make([]dispatch.TaskRef, len(a.Waiting))
	for i, h := range a.Waiting {
		waiting[i] = dispatch.TaskRef(h)
	}
	s.co.core.Models(a.Worker, a.Models)
	for _, l := range s.co.core.Heard(now, a.Worker, held, done, waiting) {
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
		r.Acked = append(r.Acked, TaskRef{Job: d.Job, Task: d.Task})
	}
	if s.st.Phase == PhaseInference && s.co != nil {
		if a.Want > 0 {
			s.applyResizes(s.co.core.Join(now, a.Worker)) // a worker that joined since the last split
		}
		if s.co == nil {
			return PullReply{}, s.maxEpoch, fmt.Errorf("sched: %s stopped coordinating", s.name)
		}
		for _, o := range s.co.core.Lease(now, a.Worker, a.Want) {
			js := s.st.Jobs[o.Job]
			f, t := js.Spec.TaskRange(o.Task)
			s.logf("sched: scheduled task %s/%d (queries %d-%d) on %s", o.Job, o.Task, f, t-1, a.Worker)
			r.Orders = append(r.Orders, TaskOrder{Spec: js.Spec, Task: o.Task, Epoch: s.st.Epoch, Express: o.Express})
		}
	}
	r.Jobs = s.running()
	return r, s.st.Epoch, nil
}

// recordDone commits a finished task once; a repeat is acknowledged without effect.
// Called with s.mu held.
func (s *Scheduler) recordDone(d TaskReport, now time.Time) error {
	js, ok := s.st.Jobs[d.Job]
	if !ok || d.Task < 0 || d.Task >= js.Spec.NumTasks() || d.JobID != js.Spec.ResultID(d.Task) {
		return nil // a removed job (or an older one of the same name): nothing to do
	}
	if js.IsDone(d.Task) {
		s.co.core.Release(d.Job, d.Task)
		return nil // already committed: nothing to do
	}
	if err := s.commit(&Entry{Kind: EntryTaskDone, Name: d.Job, Task: d.Task, Node: d.Worker, Report: &d}); err != nil {
		return err
	}
	// The job's progress was counted when the task was leased (dispatch.FairQueue); the
	// busy time measured (commit recorded it in the job's stats, see observe) goes into the
	// job's cost, which only splits the workers and sizes tasks. On a loaded machine one
	// cheap task's busy time is noise (0.4 to 55 ms for the same 32 LeNet-5 queries);
	// counting queries instead keeps the rates level.
	s.applyResizes(s.co.core.Completed(now, d.Job, d.Task, s.jobStats(d.Job).cost))
	s.logf("sched: completed task %s/%d on %s (%d queries, %.1f ms); job %d/%d tasks",
		d.Job, d.Task, d.Worker, d.Queries, float64(d.BusyNanos)/1e6, js.NDone, js.Spec.NumTasks())
	return nil
}

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
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReadTimeout)
			defer cancel()
			b, err := s.blobs.GetResult(ctx, TaskResultName(spec.Name, spec.ResultID(i), i))
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
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
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
