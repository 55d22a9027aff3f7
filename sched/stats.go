package sched

import (
	"fmt"
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// TaskReport is what a worker says about one task it finished.
type TaskReport struct {
	Job        string  `json:"job"`
	Task       int     `json:"task"`
	JobID      int64   `json:"job_id"` // the job's ID: a report for an older job of the same name is ignored
	Worker     string  `json:"worker"`
	Queries    int     `json:"queries"`
	BusyNanos  int64   `json:"busy_ns"`  // worker time the task took, read to write
	BatchUS    []int64 `json:"batch_us"` // latency of each batch, preprocessing and kernel
	Epoch      uint64  `json:"epoch"`    // the epoch that leased it
	StartNanos int64   `json:"start_ns"` // when the worker started it, unix nanoseconds
}

// rateWindow is the window of stats' query rate: not a knob, `job stats` reports the rate
// over 10 s (rate_10s).
const rateWindow = 10 * time.Second

// JobStats measures one job for the stats command and the fair-time controller.
// The Coordinator's mutex guards it.
type JobStats struct {
	hist      *hdrhistogram.Histogram // per-query latency in microseconds
	events    []rateEvent             // completions within rateWindow, oldest first
	cost      float64                 // worker-seconds per query: busySum / querySum
	busySum   float64                 // busy seconds of recent tasks, decayed by costTau
	querySum  float64                 // their queries, decayed alike
	lastCost  time.Time               // when busySum and querySum were last decayed
	gain      float64                 // fair-time correction carried between decisions
	firstDone time.Time
	times     *taskTimes    // task queue and compute times (jobtimes.go); nil until a task is done
	latency   *Latency      // Latency's answer until the next Record (nil: to compute)
	costTau   time.Duration // time constant of cost (0: DefaultCostTau); SchedConfig.CostTau
}

type rateEvent struct {
	at time.Time
	n  int
}

const maxRateEvents = 1 << 14

// outlierFactor bounds how far one task's measurement moves a job's cost, and what a task
// is charged against the worker's weights relative to the cost assumed when it was leased.
const outlierFactor = 4

// DefaultCostTau is the default time constant of a job's measured cost (SchedConfig.CostTau): the cost is the busy time over
// the queries of the tasks completed in about the last costTau, each older task weighing
// exp(-age/costTau). An average over time, not over a count of tasks: a cheap job's 32-query
// tasks finish several times a second and on a loaded machine their busy times range over
// two orders of magnitude (a task descheduled for a few ms costs 50 times one that was not),
// so an average over the last few tasks swings by several times from one second to the
// next, and the job's share of worker time, proportional to it, would swing with it.
const DefaultCostTau = 10 * time.Second

// costOutlierFactor bounds what one task adds to the cost sums, relative to the current
// cost: a paused process's task is not the job's cost, but the heavy tail of a loaded
// machine (tasks 10 or 20 times the median) is, so the bound is wider than outlierFactor.
const costOutlierFactor = 16

// oneOffSeconds: a task that spent longer than this outside its batches (and most of its
// time) paid a one-off load; see Record.
const oneOffSeconds = 0.02

// NewJobStats returns empty stats.
func NewJobStats() *JobStats {
	return &JobStats{hist: hdrhistogram.New(1, 3600_000_000, 3)}
}

// Record adds a finished task.
func (s *JobStats) Record(r TaskReport, batch int, now time.Time) {
	// Every query of a batch has the batch's latency; a task's last batch may be short.
	left := r.Queries
	for _, us := range r.BatchUS {
		n := min(batch, left)
		if n <= 0 {
			break
		}
		s.hist.RecordValues(max(us, 1), int64(n))
		left -= n
	}
	s.latency = nil
	if s.firstDone.IsZero() {
		s.firstDone = now
	}
	if len(s.events) >= maxRateEvents {
		s.events = s.events[1:]
	}
	s.events = append(s.events, rateEvent{now, r.Queries})
	if r.Queries > 0 && r.BusyNanos > 0 {
		busy := float64(r.BusyNanos) / 1e9
		// A task whose batches took under half its time, and that spent over oneOffSeconds
		// outside them, paid a one-off (a fresh worker
		// loading the model and the dataset) that later tasks won't: its cost per query
		// is its batches' time, or the first measurement would overstate the cost for
		// many control periods.
		var batches float64
		for _, us := range r.BatchUS {
			batches += float64(us) / 1e6
		}
		if batches > 0 && batches < busy/2 && busy-batches > oneOffSeconds {
			busy = batches
		}
		q := float64(r.Queries)
		if s.cost > 0 {
			busy = min(busy, costOutlierFactor*s.cost*q) // one stalled task is not a new cost
		}
		d := 0.0
		if !s.lastCost.IsZero() {
			tau := s.costTau
			if tau <= 0 {
				tau = DefaultCostTau
			}
			d = math.Exp(-max(now.Sub(s.lastCost).Seconds(), 0) / tau.Seconds())
		}
		s.busySum, s.querySum, s.lastCost = d*s.busySum+busy, d*s.querySum+q, now
		s.cost = s.busySum / s.querySum
	}
}

// Rate is queries per second over the last window (or since the first completion, if
// that is more recent, so a young job's rate is not understated).
func (s *JobStats) Rate(now time.Time, window time.Duration) float64 {
	cut := now.Add(-window)
	n := 0
	for i := len(s.events) - 1; i >= 0 && s.events[i].at.After(cut); i-- {
		n += s.events[i].n
	}
	span := window
	if !s.firstDone.IsZero() && now.Sub(s.firstDone) < window {
		span = max(now.Sub(s.firstDone), time.Second)
	}
	for len(s.events) > 0 && now.Sub(s.events[0].at) > rateWindow {
		s.events = s.events[1:]
	}
	return float64(n) / span.Seconds()
}

// Latency is the latency summary in the stats JSON.
type Latency struct {
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
}

// Latency returns the job's per-query latency in milliseconds.
func (s *JobStats) Latency() Latency {
	// Kept until the next task is recorded: every node's dashboard sampler asks the
	// coordinator for every job's stats, finished jobs' too, every 2 s, and reading the
	// histogram was a quarter of an idle coordinator's CPU.
	if s.latency != nil {
		return *s.latency
	}
	ms := func(us float64) float64 { return math.Round(us) / 1000 }
	// One scan of the buckets for the four percentiles: the same values as
	// ValueAtQuantile's four scans.
	q := s.hist.ValueAtPercentilesSlice([]float64{50, 90, 95, 99})
	l := Latency{Mean: ms(s.hist.Mean()), Stddev: ms(s.hist.StdDev()),
		P50: ms(float64(q[0])), P90: ms(float64(q[1])), P95: ms(float64(q[2])), P99: ms(float64(q[3]))}
	s.latency = &l
	return l
}

// LatencyBucketsMS are the upper bounds (milliseconds) of the per-job latency histogram that
// /metrics exports; the last bucket (+Inf) is implied.
var LatencyBucketsMS = []float64{1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}

// LatencyHistogram is a job's per-query latency as cumulative bucket counts.
type LatencyHistogram struct {
	Job      string    `json:"job"`
	BoundsMS []float64 `json:"bounds_ms"`
	Counts   []int64   `json:"counts"` // Counts[i]: queries with latency <= BoundsMS[i]
	Count    int64     `json:"count"`  // all queries (the +Inf bucket)
	SumMS    float64   `json:"sum_ms"`
	// Per-task queue and compute times (jobtimes.go).
	Queue   *TimeHistogram `json:"queue,omitempty"`
	Compute *TimeHistogram `json:"compute,omitempty"`
}

// Histogram returns the latency distribution as cumulative counts at bounds (ms), read from
// the HdrHistogram's buckets (3 significant digits).
func (s *JobStats) Histogram(bounds []float64) LatencyHistogram {
	h := LatencyHistogram{BoundsMS: bounds, Counts: make([]int64, len(bounds))}
	for _, bar := range s.hist.Distribution() {
		if bar.Count == 0 {
			continue
		}
		h.Count += bar.Count
		for i, b := range bounds {
			if float64(bar.To)/1000 <= b {
				h.Counts[i] += bar.Count
			}
		}
	}
	h.SumMS = s.hist.Mean() / 1000 * float64(h.Count)
	return h
}

// WorkerShare is one worker serving a job, in the stats JSON.
type WorkerShare struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// JobStatsReport is `idunno job stats --json`: exactly these keys.
type JobStatsReport struct {
	Job       string        `json:"job"`
	Done      int           `json:"done"`
	Total     int           `json:"total"`
	Rate10s   float64       `json:"rate_10s"`
	LatencyMS Latency       `json:"latency_ms"`
	Workers   []WorkerShare `json:"workers"`
	Weight    float64       `json:"weight"` // the job's fair-time weight (job add --weight)
	// RateRatio is the job's 10 s rate over the mean 10 s rate per unit of weight of the
	// other running jobs: fair time makes it Weight (0 with no other job running).
	RateRatio float64 `json:"rate_ratio"`
	// Accuracy is the share of right top-1 answers against the job's labels, once the job
	// is complete (null without labels or before).
	Accuracy *float64 `json:"accuracy"`
}

// doneQueries counts the queries of committed tasks.
func doneQueries(j *JobState) int {
	if j.Spec.resized() {
		n := 0
		for i := range j.Spec.NumTasks() {
			if j.IsDone(i) {
				f, t := j.Spec.TaskRange(i)
				n += t - f
			}
		}
		return n
	}
	n := j.NDone * j.Spec.TaskSize
	last := j.Spec.NumTasks() - 1
	if last >= 0 && j.IsDone(last) {
		f, t := j.Spec.TaskRange(last)
		n -= j.Spec.TaskSize - (t - f)
	}
	return n
}

// StatsSnapshot is a JobStats on its way to a new standby (the entries before its
// journal snapshot are not replayed there). The histogram goes as its non-empty buckets.
type StatsSnapshot struct {
	Hist      [][2]int64 `json:"hist"`   // (a value in the bucket, µs; count)
	Events    [][2]int64 `json:"events"` // (unix ns, queries) of the completions in the rate window
	BusySum   float64    `json:"busy_sum"`
	QuerySum  float64    `json:"query_sum"`
	LastCost  int64      `json:"last_cost,omitempty"`
	Cost      float64    `json:"cost"`
	Gain      float64    `json:"gain"`
	FirstDone int64      `json:"first_done,omitempty"`
}

// maxHistBuckets bounds a snapshot's histogram (the HdrHistogram has about 23,000 buckets).
const maxHistBuckets = 1 << 16

// Snapshot exports the stats.
func (s *JobStats) Snapshot() *StatsSnapshot {
	ss := &StatsSnapshot{BusySum: s.busySum, QuerySum: s.querySum, Cost: s.cost, Gain: s.gain}
	for _, bar := range s.hist.Distribution() {
		if bar.Count > 0 {
			ss.Hist = append(ss.Hist, [2]int64{bar.From, bar.Count})
		}
	}
	for _, e := range s.events {
		ss.Events = append(ss.Events, [2]int64{e.at.UnixNano(), int64(e.n)})
	}
	if !s.lastCost.IsZero() {
		ss.LastCost = s.lastCost.UnixNano()
	}
	if !s.firstDone.IsZero() {
		ss.FirstDone = s.firstDone.UnixNano()
	}
	return ss
}

// Restore rebuilds the stats a snapshot was taken of, checking what came over the network.
func (ss *StatsSnapshot) Restore() (*JobStats, error) {
	finite := func(xs ...float64) bool {
		for _, x := range xs {
			if x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
				return false
			}
		}
		return true
	}
	if len(ss.Hist) > maxHistBuckets || len(ss.Events) > maxRateEvents ||
		!finite(ss.BusySum, ss.QuerySum, ss.Cost, ss.Gain) {
		return nil, fmt.Errorf("sched: stats snapshot out of bounds")
	}
	s := NewJobStats()
	for _, b := range ss.Hist {
		if b[1] <= 0 {
			return nil, fmt.Errorf("sched: stats snapshot: bucket count %d", b[1])
		}
		if err := s.hist.RecordValues(max(b[0], 1), b[1]); err != nil {
			return nil, fmt.Errorf("sched: stats snapshot: %w", err)
		}
	}
	for _, e := range ss.Events {
		if e[1] < 0 {
			return nil, fmt.Errorf("sched: stats snapshot: %d queries", e[1])
		}
		s.events = append(s.events, rateEvent{time.Unix(0, e[0]), int(e[1])})
	}
	s.busySum, s.querySum, s.cost, s.gain = ss.BusySum, ss.QuerySum, ss.Cost, ss.Gain
	if ss.LastCost != 0 {
		s.lastCost = time.Unix(0, ss.LastCost)
	}
	if ss.FirstDone != 0 {
		s.firstDone = time.Unix(0, ss.FirstDone)
	}
	return s, nil
}
