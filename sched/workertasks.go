package sched

// WorkerTasks is what this node's worker is doing with inference tasks (the dashboard's
// node table): running now (the run loop's task and an express one), leased to it and
// waiting, and done (computed and written to SDFS) since the node started. Training steps
// are not counted here.
type WorkerTasks struct {
	Running int `json:"running"`
	Queued  int `json:"queued"`
	Done    int `json:"done"`
}

// WorkerTasks returns this node's worker's task counts.
func (s *Scheduler) WorkerTasks() WorkerTasks {
	w := &s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	t := WorkerTasks{Queued: len(w.queue) + len(w.side), Done: w.done}
	if w.running != nil {
		t.Running++
	}
	if w.sideRun != nil {
		t.Running++
	}
	return t
}
