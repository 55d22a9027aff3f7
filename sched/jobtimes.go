package sched

// TaskTimeBucketsMS are the upper bounds (milliseconds) of a job's task queue and compute
// time histograms; the last bucket (+Inf) is implied.
var TaskTimeBucketsMS = []float64{1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 30000, 60000, 300000, 1800000}

// TimeHistogram is a distribution of durations as cumulative counts at upper bounds (ms).
type TimeHistogram struct {
	BoundsMS []float64 `json:"bounds_ms"`
	Counts   []int64   `json:"counts"` // Counts[i]: observations <= BoundsMS[i]
	Count    int64     `json:"count"`  // all observations (the +Inf bucket)
	SumMS    float64   `json:"sum_ms"`
}

func newTimeHistogram() TimeHistogram {
	return TimeHistogram{BoundsMS: TaskTimeBucketsMS, Counts: make([]int64, len(TaskTimeBucketsMS))}
}

func (h *TimeHistogram) observe(ms float64) {
	ms = max(ms, 0)
	for i, b := range h.BoundsMS {
		if ms <= b {
			h.Counts[i]++
		}
	}
	h.Count++
	h.SumMS += ms
}

// taskTimes is a job's per-task queue and compute times: a task's queue time runs from the
// job's submission to a worker starting it (the coordinator's and the worker's clocks:
// skew between hosts shows in it), its compute time is the worker time it took.
type taskTimes struct {
	Queue   TimeHistogram `json:"queue"`
	Compute TimeHistogram `json:"compute"`
}

func newTaskTimes() *taskTimes {
	return &taskTimes{Queue: newTimeHistogram(), Compute: newTimeHistogram()}
}

// RecordTimes adds a finished task's queue and compute times; added is the job's
// submission time (unix nanoseconds). A report without a start time adds no queue time.
func (s *JobStats) RecordTimes(r TaskReport, added int64) {
	if s.times == nil {
		s.times = newTaskTimes()
	}
	if r.StartNanos > 0 && added > 0 {
		s.times.Queue.observe(float64(r.StartNanos-added) / 1e6)
	}
	if r.BusyNanos > 0 {
		s.times.Compute.observe(float64(r.BusyNanos) / 1e6)
	}
}

// Times returns copies of the job's task queue and compute time histograms.
func (s *JobStats) Times() (queue, compute TimeHistogram) {
	t := s.times
	if t == nil {
		t = newTaskTimes()
	}
	cp := func(h TimeHistogram) TimeHistogram {
		h.Counts = append([]int64(nil), h.Counts...)
		return h
	}
	return cp(t.Queue), cp(t.Compute)
}
