package dispatch

// warmth tracks which workers have run which jobs (their models are loaded there), and the
// tasks workers report waiting for a load.
//
// A worker new to a job fetches its model from SDFS and builds its plan (seconds;
// ResNet-50 took 10-25 s on the benchmark's shared cores) in the background, while it
// runs the tasks of the jobs it has ready, and reports the tasks that wait for the load.
// The FairQueue is told (Wait, Unwait), so that the workers with the model take the job
// first, and the worker gets no second task of the job meanwhile. Before, a loading
// worker's whole queue waited, its leases counted as progress, and the other jobs ran
// ahead of the loading jobs' completions (measured: ResNet-50 at 79 q/s beside three
// jobs at 16-31 q/s for 10 s of a cold start).
//
// A worker is warm for a job once it has completed a task of it under this core (a
// restarted worker is a fresh process: it forgets).
type warmth struct {
	warm    map[string]map[string]bool // worker -> jobs it has completed a task of
	waiting map[string]map[TaskRef]int // worker -> its tasks waiting for a load: their queries
	loading map[string]int             // job -> its tasks waiting for a load, on any worker
	slow    map[string]bool            // jobs a worker ever reported a task of waiting
}

func newWarmth() *warmth {
	return &warmth{warm: map[string]map[string]bool{}, waiting: map[string]map[TaskRef]int{}, loading: map[string]int{},
		slow: map[string]bool{}}
}

// isWarm reports whether worker can run a task of job without a load that matters: it
// has completed one, or no worker ever reported a task of job waiting for its model (the
// model loads between two pulls, or the executor loads nothing).
func (w *warmth) isWarm(worker, job string) bool { return w.warm[worker][job] || !w.slow[job] }

// isLoading reports whether a task of job waits for a load on some worker.
func (w *warmth) isLoading(job string) bool { return w.loading[job] > 0 }

// loads reports whether worker has a task of job waiting for a load.
func (w *warmth) loads(worker, job string) bool {
	for r := range w.waiting[worker] {
		if r.Job == job {
			return true
		}
	}
	return false
}

// report applies a worker's list of the tasks it holds that wait for a load (each leased
// to it: size gives its queries), calling wait for a task newly reported and unwait for
// one no longer reported.
func (w *warmth) report(worker string, waiting []TaskRef, size func(TaskRef) (int, bool), wait, unwait func(job string, queries int)) {
	now := make(map[TaskRef]bool, len(waiting))
	for _, r := range waiting {
		now[r] = true
		if _, ok := w.waiting[worker][r]; ok {
			continue
		}
		q, ok := size(r)
		if !ok {
			continue
		}
		if w.waiting[worker] == nil {
			w.waiting[worker] = map[TaskRef]int{}
		}
		w.waiting[worker][r] = q
		w.loading[r.Job]++
		w.slow[r.Job] = true
		wait(r.Job, q)
	}
	for r, q := range w.waiting[worker] {
		if !now[r] {
			w.drop(worker, r)
			unwait(r.Job, q)
		}
	}
}

// drop forgets a waiting task (done, or given back) and returns its queries (0 if it was
// not waiting).
func (w *warmth) drop(worker string, r TaskRef) int {
	q, ok := w.waiting[worker][r]
	if !ok {
		return 0
	}
	delete(w.waiting[worker], r)
	if len(w.waiting[worker]) == 0 {
		delete(w.waiting, worker)
	}
	if w.loading[r.Job]--; w.loading[r.Job] <= 0 {
		delete(w.loading, r.Job)
	}
	return q
}

// completed records that worker completed r, and returns r's queries if it was waiting
// (the report that it no longer waited came with its completion).
func (w *warmth) completed(worker string, r TaskRef) int {
	if w.warm[worker] == nil {
		w.warm[worker] = map[string]bool{}
	}
	w.warm[worker][r.Job] = true
	return w.drop(worker, r)
}

// forget drops what is known of a worker that failed (its leases were given back first).
func (w *warmth) forget(worker string) { delete(w.warm, worker) }

// removeJob drops what is known of a removed job.
func (w *warmth) removeJob(job string) {
	for worker, ts := range w.waiting {
		for r := range ts {
			if r.Job == job {
				w.drop(worker, r)
			}
		}
	}
	for _, js := range w.warm {
		delete(js, job)
	}
	delete(w.slow, job)
}
