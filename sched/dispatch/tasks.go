package dispatch

import (
	"slices"
	"sort"
	"time"
)

// Tasks is one job's task list as the journal holds it. The core reads it and never
// changes it: a task becomes done, or the rest of the tasks are split smaller, when the
// caller applies a journal entry, and the core sees the change on its next call.
type Tasks interface {
	NumTasks() int
	TaskRange(i int) (from, to int) // the half-open range of query ids task i covers
	IsDone(i int) bool
	NumDone() int
	// Sizing says how the tasks not yet split off may be resized (see Core's resize).
	Sizing() Sizing
}

// Sizing is what the core needs to decide a job's task resize.
type Sizing struct {
	Batch, Queries int
	TaskSize       int // the size of the tasks not yet split off
	MaxSize        int // the largest task size a resize may choose (0: no bound)
	// Resizable: the caller chose the task size (not the client), and the job may be
	// resized again.
	Resizable bool
}

// TaskRef names one task.
type TaskRef struct {
	Job  string `json:"job"`
	Task int    `json:"task"`
}

// Lease is a task handed to a worker and not yet reported done.
type Lease struct {
	Job    string    `json:"job"`
	Task   int       `json:"task"`
	Worker string    `json:"worker"`
	Since  time.Time `json:"since"`
}

// TaskTable tracks which tasks of each job are leased to which worker. It is soft state:
// the journal holds which tasks are done, and a new coordinator rebuilds leases from what
// workers say they hold. Not safe for concurrent use.
type TaskTable struct {
	jobs     map[string]*taskQueue
	byWorker map[string]map[TaskRef]time.Time
}

type taskQueue struct {
	ts     Tasks
	next   int   // tasks below next were leased at least once (or are done)
	retry  []int // tasks given back by failed workers, ascending
	leased map[int]string
	// nextOK: task next is known to be neither leased nor done, so skip has nothing to
	// do (a pick asks every job whether it has a pending task). Cleared when task next is
	// leased, and by Touch when the journal marks a task done. A resize keeps it true: it
	// splits only from the frontier, at or after next, and keeps a task there.
	nextOK bool
}

// NewTaskTable returns an empty table.
func NewTaskTable() *TaskTable {
	return &TaskTable{jobs: map[string]*taskQueue{}, byWorker: map[string]map[TaskRef]time.Time{}}
}

// AddJob starts tracking a job; its done tasks are read from ts as they change.
func (t *TaskTable) AddJob(job string, ts Tasks) {
	t.RemoveJob(job)
	t.jobs[job] = &taskQueue{ts: ts, leased: map[int]string{}}
}

// RemoveJob forgets a job and its leases.
func (t *TaskTable) RemoveJob(job string) {
	q := t.jobs[job]
	if q == nil {
		return
	}
	for task, w := range q.leased {
		delete(t.byWorker[w], TaskRef{job, task})
	}
	delete(t.jobs, job)
}

// HasPending reports whether the job has a task that is neither done nor leased.
func (t *TaskTable) HasPending(job string) bool {
	q := t.jobs[job]
	if q == nil {
		return false
	}
	q.trimRetry()
	if len(q.retry) > 0 {
		return true
	}
	q.skip()
	return q.nextOK
}

func (q *taskQueue) skip() {
	if q.nextOK {
		return
	}
	n := q.ts.NumTasks()
	for q.next < n {
		if _, l := q.leased[q.next]; !l && !q.ts.IsDone(q.next) {
			q.nextOK = true
			return
		}
		q.next++
	}
}

// Touch tells the table that a task of job may have been marked done by the journal.
func (t *TaskTable) Touch(job string) {
	if q := t.jobs[job]; q != nil {
		q.nextOK = false
	}
}

func (q *taskQueue) trimRetry() {
	q.retry = slices.DeleteFunc(q.retry, func(i int) bool {
		_, l := q.leased[i]
		return l || q.ts.IsDone(i)
	})
}

// Lease hands the job's next pending task to worker: first tasks given back by failed
// workers, then the lowest never-leased task.
func (t *TaskTable) Lease(job, worker string, now time.Time) (int, bool) {
	if !t.HasPending(job) {
		return 0, false
	}
	q := t.jobs[job]
	var task int
	if len(q.retry) > 0 {
		task, q.retry = q.retry[0], q.retry[1:]
	} else {
		task = q.next
		q.next++
		q.nextOK = false
	}
	t.hold(q, job, task, worker, now)
	return task, true
}

func (t *TaskTable) hold(q *taskQueue, job string, task int, worker string, now time.Time) {
	if task == q.next {
		q.nextOK = false
	}
	q.leased[task] = worker
	m := t.byWorker[worker]
	if m == nil {
		m = map[TaskRef]time.Time{}
		t.byWorker[worker] = m
	}
	m[TaskRef{job, task}] = now
}

// Adopt records that worker holds a task (a worker tells a new coordinator what it is
// running). It returns false when the task is done, unknown or held by another worker.
func (t *TaskTable) Adopt(job string, task int, worker string, now time.Time) bool {
	q := t.jobs[job]
	if q == nil || task < 0 || task >= q.ts.NumTasks() || q.ts.IsDone(task) {
		return false
	}
	if w, ok := q.leased[task]; ok {
		return w == worker
	}
	t.hold(q, job, task, worker, now)
	return true
}

// Complete drops the lease of a finished task and returns who held it ("" if nobody).
func (t *TaskTable) Complete(job string, task int) string {
	q := t.jobs[job]
	if q == nil {
		return ""
	}
	w, ok := q.leased[task]
	if !ok {
		return ""
	}
	delete(q.leased, task)
	delete(t.byWorker[w], TaskRef{job, task})
	return w
}

// ExpireWorker takes back every task leased to worker (it failed) and returns them, in
// job and task order.
func (t *TaskTable) ExpireWorker(worker string) []Lease {
	out := t.takeBack(worker, nil)
	delete(t.byWorker, worker)
	return out
}

// Reconcile gives back the tasks leased to worker that it no longer holds (it gave up on
// them) and did not just report done: keep names what the worker still has.
func (t *TaskTable) Reconcile(worker string, keep map[TaskRef]bool) []Lease {
	return t.takeBack(worker, keep)
}

func (t *TaskTable) takeBack(worker string, keep map[TaskRef]bool) []Lease {
	var out []Lease
	for k, since := range t.byWorker[worker] {
		if keep[k] {
			continue
		}
		q := t.jobs[k.Job]
		delete(q.leased, k.Task)
		delete(t.byWorker[worker], k)
		if !q.ts.IsDone(k.Task) {
			q.retry = append(q.retry, k.Task)
			sort.Ints(q.retry)
		}
		out = append(out, Lease{Job: k.Job, Task: k.Task, Worker: worker, Since: since})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Job != out[j].Job {
			return out[i].Job < out[j].Job
		}
		return out[i].Task < out[j].Task
	})
	return out
}

// Held returns how many tasks worker holds.
func (t *TaskTable) Held(worker string) int { return len(t.byWorker[worker]) }

// Workers returns the names of workers holding at least one task, sorted.
func (t *TaskTable) Workers() []string {
	var ws []string
	for w, m := range t.byWorker {
		if len(m) > 0 {
			ws = append(ws, w)
		}
	}
	sort.Strings(ws)
	return ws
}

// LeaseOf returns the worker holding a task's lease, if it is leased.
func (t *TaskTable) LeaseOf(job string, task int) (string, bool) {
	q := t.jobs[job]
	if q == nil {
		return "", false
	}
	w, ok := q.leased[task]
	return w, ok
}

// Frontier returns the lowest task index from which on no task of job is leased or done
// (-1 for an unknown job): the tasks from there on can still be split differently.
func (t *TaskTable) Frontier(job string) int {
	q := t.jobs[job]
	if q == nil {
		return -1
	}
	q.skip()
	f := q.next
	for task := range q.leased {
		f = max(f, task+1)
	}
	for i := q.ts.NumTasks() - 1; i >= f; i-- {
		if q.ts.IsDone(i) {
			return i + 1
		}
	}
	return f
}
