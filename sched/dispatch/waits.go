package dispatch

// waits tracks the tasks workers report waiting for their job's model to load.
//
// A worker new to a job fetches its model from SDFS and builds its plan (seconds;
// ResNet-50 took 10-25 s on the benchmark's shared cores) in the background, while it
// runs the tasks of the jobs it has ready, and reports the tasks that wait for the load.
// The FairQueue is told (Wait, Unwait), so that the workers with the model take the job
// first, and the worker gets no second task of the job meanwhile. Before, a loading
// worker's whole queue waited, its leases counted as progress, and the other jobs ran
// ahead of the loading jobs' completions (measured: ResNet-50 at 79 q/s beside three
// jobs at 16-31 q/s for 10 s of a cold start).
type waits struct {
	byWorker map[string]map[TaskRef]int // worker -> its tasks waiting for a load: their queries
	perJob   map[string]int             // job -> its tasks waiting, on any worker
}

func newWaits() *waits {
	return &waits{byWorker: map[string]map[TaskRef]int{}, perJob: map[string]int{}}
}

// loaders is how many workers load job's model: a worker has at most one task of a job
// it loads, so it is the job's waiting tasks.
func (w *waits) loaders(job string) int { return w.perJob[job] }

// add records a task waiting on worker (leased to a worker known not to have the job's
// model: waiting before its first report says so) and reports whether it is new.
func (w *waits) add(worker string, r TaskRef, queries int) bool {
	if _, ok := w.byWorker[worker][r]; ok {
		return false
	}
	if w.byWorker[worker] == nil {
		w.byWorker[worker] = map[TaskRef]int{}
	}
	w.byWorker[worker][r] = queries
	w.perJob[r.Job]++
	return true
}

// loading reports whether worker has any task waiting for a load.
func (w *waits) loading(worker string) bool { return len(w.byWorker[worker]) > 0 }

// loads reports whether worker has a task of job waiting for a load.
func (w *waits) loads(worker, job string) bool {
	for r := range w.byWorker[worker] {
		if r.Job == job {
			return true
		}
	}
	return false
}

// report applies a worker's list of the tasks it holds that wait for a load (each leased
// to it: size gives its queries), calling wait for a task newly reported and unwait for
// one no longer reported.
func (w *waits) report(worker string, waiting []TaskRef, size func(TaskRef) (int, bool), wait, unwait func(job string, queries int)) {
	now := make(map[TaskRef]bool, len(waiting))
	for _, r := range waiting {
		now[r] = true
		if _, ok := w.byWorker[worker][r]; ok {
			continue
		}
		if q, ok := size(r); ok && w.add(worker, r, q) {
			wait(r.Job, q)
		}
	}
	for r, q := range w.byWorker[worker] {
		if !now[r] {
			w.drop(worker, r)
			unwait(r.Job, q)
		}
	}
}

// drop forgets a task (it is done, or given back) and returns its queries if it was
// waiting (0 if not).
func (w *waits) drop(worker string, r TaskRef) int {
	q, ok := w.byWorker[worker][r]
	if !ok {
		return 0
	}
	delete(w.byWorker[worker], r)
	if len(w.byWorker[worker]) == 0 {
		delete(w.byWorker, worker)
	}
	if w.perJob[r.Job]--; w.perJob[r.Job] <= 0 {
		delete(w.perJob, r.Job)
	}
	return q
}

// removeJob forgets the waiting tasks of a removed job.
func (w *waits) removeJob(job string) {
	for worker, ts := range w.byWorker {
		for r := range ts {
			if r.Job == job {
				w.drop(worker, r)
			}
		}
	}
}
