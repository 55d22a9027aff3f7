package sched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// workerState is the worker executor's queue: tasks leased to this node (one running, the
// rest prefetched) and completions not yet acknowledged by a coordinator. Its own mutex
// guards it, so the worker keeps running and buffering while the coordinator is away.
type workerState struct {
	mu      sync.Mutex
	queue   []TaskOrder
	running *TaskOrder
	side    []TaskOrder // express tasks (TaskOrder.Express): run at once, beside the queue
	sideRun *TaskOrder
	writing map[TaskRef]bool // computed, result being written to SDFS
	writeQ  chan computed    // to the writer: one waits while one is written
	reports []TaskReport
	unsent  int           // reports appended since the last pull took them (see reportDelay)
	done    int           // tasks computed and written since the node started (WorkerTasks)
	kick    chan struct{} // wakes the pull loop
	work    chan struct{} // wakes the run loop
	sideW   chan struct{} // wakes the side run loop
	depth   int
	bound   int
	// preparing holds the jobs being made ready in the background (see Preparer), by
	// prepKey; prepErr the ones that failed to, whose tasks run (and report the error).
	preparing map[string]bool
	prepErr   map[string]bool
}

func (w *workerState) init(cfg SchedConfig) {
	w.kick, w.work, w.sideW = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	w.writing, w.writeQ = map[TaskRef]bool{}, make(chan computed, max(cfg.Writers, 1))
	w.depth, w.bound = max(cfg.Depth, 1), max(cfg.MaxBuffered, 1)
	w.preparing, w.prepErr = map[string]bool{}, map[string]bool{}
}

// prepKey names what Preparer.Prepare makes ready for spec.
func prepKey(spec JobSpec) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%s\x00%s", spec.Model, spec.Precision, spec.Batch, spec.Format, spec.Data)
}

// ready reports whether o can start computing at once. Called with w.mu held.
func (s *Scheduler) ready(o TaskOrder) bool {
	p, ok := s.exec.(Preparer)
	return !ok || s.w.prepErr[prepKey(o.Spec)] || p.Ready(o.Spec)
}

// runnable returns the index in q of the first task that can start computing at once
// (-1: none), and has the ones before it prepared in the background: a worker keeps
// running the jobs it has ready while it loads new ones. Each job loads on its own
// goroutine, so a small model (LeNet-5, 50 ms) does not wait behind a large one
// (ResNet-50 took 10-15 s at a cold start on the benchmark's shared cores). Called with
// w.mu held.
func (s *Scheduler) runnable(ctx context.Context, q []TaskOrder) int {
	for i, o := range q {
		if s.ready(o) {
			return i
		}
		s.prepare(ctx, o.Spec)
	}
	return -1
}

// prepare starts making spec's job ready in the background unless that runs already.
// Called with w.mu held.
func (s *Scheduler) prepare(ctx context.Context, spec JobSpec) {
	w := &s.w
	p, ok := s.exec.(Preparer)
	key := prepKey(spec)
	if !ok || w.preparing[key] || ctx.Err() != nil {
		return
	}
	w.preparing[key] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		start := time.Now()
		err := p.Prepare(ctx, spec)
		w.mu.Lock()
		delete(w.preparing, key)
		if err != nil && ctx.Err() == nil {
			w.prepErr[key] = true
		}
		w.mu.Unlock()
		if err != nil {
			s.logf("sched: worker %s preparing job %s: %v (its task will report it)", s.name, spec.Name, err)
		} else {
			s.logf("sched: worker %s has job %s ready (model %s loaded, plan for batch %d) in %.2f s",
				s.name, spec.Name, spec.Model, spec.Batch, time.Since(start).Seconds())
		}
		w.wakeRunner()
		w.wakeSide()
	}()
}

func (w *workerState) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *workerState) wakeRunner() {
	select {
	case w.work <- struct{}{}:
	default:
	}
}

func (w *workerState) wakeSide() {
	select {
	case w.sideW <- struct{}{}:
	default:
	}
}

// coordinator returns whom to pull from, and the epoch to present.
func (s *Scheduler) coordinator() (name, addr string, epoch uint64, self bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coordName, s.coordAddr, s.maxEpoch, s.role == roleCoordinator
}

func (s *Scheduler) forgetCoordinator(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.coordName == name && s.role != roleCoordinator {
		s.coordName, s.coordAddr, s.lostSince = "", "", s.now()
	}
}

func (s *Scheduler) workerPullLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.PullEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.w.kick:
		}
		s.pullOnce()
	}
}

// pullOnce reports finished tasks and asks for enough tasks to fill the queue.
func (s *Scheduler) pullOnce() {
	name, addr, epoch, self := s.coordinator()
	if name == "" {
		return
	}
	w := &s.w
	w.mu.Lock()
	// A task waiting for its job's model to load does not fill the queue: the worker asks
	// for work it can run meanwhile (the coordinator leases no second task of a job to a
	// worker loading it).
	args := PullArgs{Worker: s.name, Want: w.depth}
	for _, o := range w.queue {
		if s.ready(o) {
			args.Want--
		} else {
			args.Waiting = append(args.Waiting, TaskRef{o.Spec.Name, o.Task})
		}
	}
	if p, ok := s.exec.(Preparer); ok {
		args.Models = p.Loaded()
	}
	if w.running != nil {
		args.Want--
		args.Held = append(args.Held, TaskRef{w.running.Spec.Name, w.running.Task})
	}
	for _, o := range w.queue {
		args.Held = append(args.Held, TaskRef{o.Spec.Name, o.Task})
	}
	// Express tasks are held but do not count against the queue's depth.
	if w.sideRun != nil {
		args.Held = append(args.Held, TaskRef{w.sideRun.Spec.Name, w.sideRun.Task})
	}
	for _, o := range w.side {
		args.Held = append(args.Held, TaskRef{o.Spec.Name, o.Task})
	}
	for r := range w.writing {
		args.Held = append(args.Held, r)
	}
	if len(w.reports) >= w.bound || (self && len(s.mem.Alive()) > 1) {
		args.Want = 0 // the coordinator leaves the work to the workers
	}
	args.Done = append(args.Done, w.reports[:min(len(w.reports), MaxPullItems)]...)
	w.unsent = max(0, len(w.reports)-len(args.Done))
	w.mu.Unlock()
	// A task that failed here is simply no longer held: the coordinator gives it back.
	args.Want = max(args.Want, 0)

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
	var r PullReply
	rEpoch, err := s.callEpoch(ctx, addr, "sched.pull", epoch, args, &r)
	cancel()
	if err != nil {
		if IsFenced(err) {
			s.mu.Lock()
			if rEpoch > s.maxEpoch {
				s.maxEpoch = rEpoch
			}
			s.mu.Unlock()
		}
		s.forgetCoordinator(name)
		return
	}
	s.mu.Lock()
	if rEpoch < s.maxEpoch {
		s.mu.Unlock()
		s.forgetCoordinator(name)
		return
	}
	s.maxEpoch = rEpoch
	s.mu.Unlock()

	w.mu.Lock()
	defer w.mu.Unlock()
	acked := map[TaskRef]bool{}
	for _, a := range r.Acked {
		acked[a] = true
	}
	kept := w.reports[:0]
	for _, rep := range w.reports {
		if !acked[TaskRef{rep.Job, rep.Task}] {
			kept = append(kept, rep)
		}
	}
	w.reports = kept
	jobs := map[string]bool{}
	for _, j := range r.Jobs {
		jobs[j] = true
	}
	q := w.queue[:0]
	for _, o := range w.queue {
		if jobs[o.Spec.Name] {
			q = append(q, o)
		}
	}
	w.queue = q
	side := w.side[:0]
	for _, o := range w.side {
		if jobs[o.Spec.Name] {
			side = append(side, o)
		}
	}
	w.side = side
	for _, o := range r.Orders {
		if o.Express {
			w.side = append(w.side, o)
		} else {
			w.queue = append(w.queue, o)
		}
	}
	if len(w.queue) > 0 {
		w.wakeRunner()
	}
	if len(w.side) > 0 {
		w.wakeSide()
	}
}

func (s *Scheduler) workerRunLoop(ctx context.Context) { s.runLoop(ctx, false) }

// workerSideLoop runs express tasks (TaskOrder.Express) as they arrive, beside the task
// the run loop is running: a new job's first task, and the short tasks of a cheap job paced
// on a worker it shares with a job of long tasks. Like the run loop, it takes the first
// whose job is ready and has the ones before it prepared in the background.
func (s *Scheduler) workerSideLoop(ctx context.Context) { s.runLoop(ctx, true) }

// runLoop takes tasks from the queue (or, for side, the express list) and runs them one at a time.
func (s *Scheduler) runLoop(ctx context.Context, side bool) {
	defer s.wg.Done()
	w := &s.w
	queue, running, wakeup := &w.queue, &w.running, w.work
	if side {
		queue, running, wakeup = &w.side, &w.sideRun, w.sideW
	}
	for {
		w.mu.Lock()
		// Express tasks too: one whose model is still loading would hold every express task
		// behind it (a cheap job's, paced to complete at once) for the whole load.
		i := s.runnable(ctx, *queue)
		if len(*queue) == 0 || i < 0 {
			w.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-wakeup:
			}
			continue
		}
		o := (*queue)[i]
		*queue = append((*queue)[:i:i], (*queue)[i+1:]...)
		delete(w.prepErr, prepKey(o.Spec))
		*running = &o
		w.mu.Unlock()
		w.wake() // ask for the next task while this one runs

		c, err := s.computeTask(ctx, o)
		w.mu.Lock()
		*running = nil
		if err == nil {
			w.writing[TaskRef{o.Spec.Name, o.Task}] = true
		}
		w.mu.Unlock()
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return
			}
			s.logf("sched: task %s/%d failed: %v", o.Spec.Name, o.Task, err)
			w.wake()
			continue
		}
		select { // the next task computes while this one's result is written
		case w.writeQ <- c:
		case <-s.stop:
			return
		}
		w.mu.Lock()
		full := len(w.reports) >= w.bound
		idle := len(*queue) == 0
		w.mu.Unlock()
		if idle {
			// Nothing queued: ask for work now. Otherwise the next task's start asks (a wake
			// here too would cost a second pull: the pull loop takes the first at once).
			w.wake()
		}
		for full {
			// Too many unacknowledged completions: stop taking work until a coordinator answers.
			select {
			case <-s.stop:
				return
			case <-time.After(s.cfg.PullEvery):
			}
			w.mu.Lock()
			full = len(w.reports) >= w.bound
			w.mu.Unlock()
		}
	}
}

// computed is a task's result on its way to SDFS.
type computed struct {
	rep   TaskReport
	lines []byte
}

// computeTask runs the model over one task's queries.
func (s *Scheduler) computeTask(ctx context.Context, o TaskOrder) (computed, error) {
	from, to := o.Spec.TaskRange(o.Task)
	s.logf("sched: worker %s starting task %s/%d (queries %d-%d)", s.name, o.Spec.Name, o.Task, from, to-1)
	start := time.Now()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return computed{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * s.cfg.RetryBackoff):
			}
		}
		preds, lat, err := s.exec.Run(ctx, o.Spec, from, to)
		if err != nil {
			lastErr = err
			continue
		}
		return computed{
			rep: TaskReport{Job: o.Spec.Name, JobID: o.Spec.ResultID(o.Task), Task: o.Task, Worker: s.name, Queries: to - from,
				BusyNanos: time.Since(start).Nanoseconds(), BatchUS: lat, Epoch: o.Epoch, StartNanos: start.UnixNano()},
			lines: FormatResultLines(from, preds),
		}, nil
	}
	return computed{}, lastErr
}

// writerLoop (Writers of them) writes computed results to SDFS (the same bytes under the same name, however
// often a task runs) and queues their reports.
func (s *Scheduler) writerLoop(ctx context.Context) {
	defer s.wg.Done()
	w := &s.w
	for {
		var c computed
		select {
		case <-s.stop:
			return
		case c = <-w.writeQ:
		}
		ref := TaskRef{c.rep.Job, c.rep.Task}
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			// A put skips a replica that does not answer its version query within SDFS's
			// StatTimeout (a frozen node the failure detector still lists), so the deadline
			// leaves room for that and the write; a put stuck anyway is retried.
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PutTimeout)
			err = s.blobs.PutResult(pctx, TaskResultName(c.rep.Job, c.rep.JobID, c.rep.Task), c.lines)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Duration(attempt+1) * s.cfg.RetryBackoff)
		}
		w.mu.Lock()
		delete(w.writing, ref)
		if err == nil {
			w.reports = append(w.reports, c.rep)
			w.unsent++
			w.done++
		}
		w.mu.Unlock()
		if err != nil {
			s.logf("sched: task %s/%d: writing the result: %v", ref.Job, ref.Task, err)
			w.wake()
			continue
		}
		time.AfterFunc(reportDelay, func() {
			w.mu.Lock()
			unsent := w.unsent > 0
			w.mu.Unlock()
			if unsent {
				w.wake()
			}
		})
	}
}

// reportDelay is how long a written result's report waits for a pull to carry it before it
// asks for one of its own. A worker pulls when it starts a task (for the next), so the
// report of a cheap task rides on the next task's pull: one pull per task instead of two
// (each a call to the coordinator and a journal entry for the standby). A long task's
// report leaves after this delay, which is small against the 10 s over which fair time
// compares rates.
const reportDelay = 20 * time.Millisecond
