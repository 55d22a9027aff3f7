package serving

import (
	"context"
	"sync"
)

// JobStats is one job's statistics, with the keys of `idunno job stats J --json`.
type JobStats struct {
	Job       string        `json:"job"`
	Done      int64         `json:"done"`
	Total     int64         `json:"total"`
	Rate10s   float64       `json:"rate_10s"`
	LatencyMs LatencyMs     `json:"latency_ms"`
	Workers   []WorkerShare `json:"workers"`
	// Histogram is the per-query latency distribution, when the source has one.
	Histogram *LatencyHistogram `json:"-"`
}

// LatencyHistogram is a job's per-query latency as cumulative counts at upper bounds in
// milliseconds (the scheduler's "sched.job.histogram").
type LatencyHistogram struct {
	BoundsMS []float64 `json:"bounds_ms"`
	Counts   []int64   `json:"counts"`
	Count    int64     `json:"count"`
	SumMS    float64   `json:"sum_ms"`
	// Queue and Compute are the job's per-task queue and compute times, when the source
	// has them.
	Queue   *TimeHistogram `json:"queue,omitempty"`
	Compute *TimeHistogram `json:"compute,omitempty"`
}

// TimeHistogram is a distribution of durations as cumulative counts at upper bounds in
// milliseconds.
type TimeHistogram struct {
	BoundsMS []float64 `json:"bounds_ms"`
	Counts   []int64   `json:"counts"`
	Count    int64     `json:"count"`
	SumMS    float64   `json:"sum_ms"`
}

// LatencyMs holds per-query latency statistics in milliseconds.
type LatencyMs struct {
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
}

// WorkerShare is a worker and the fraction of its time a job has.
type WorkerShare struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// StatsSource gives the running jobs' statistics (the scheduler's, through its client).
type StatsSource interface {
	JobStats(ctx context.Context) ([]JobStats, error)
}

// RateSource is a StatsSource that can leave out the latency histograms: the dashboard's
// sampler, which every node runs every 2 s, reads only rates, percentiles and workers,
// and a histogram is one more call per job to the coordinator (ten nodes and eight jobs:
// 80 histograms every 2 s, 15% of the coordinator's CPU in a profile of the many-jobs
// benchmark).
type RateSource interface {
	JobRates(ctx context.Context) ([]JobStats, error)
}

// ClusterGauges are cluster-wide figures /metrics exports. A negative value is unknown
// and not exported.
type ClusterGauges struct {
	Members            int   // live members as this node sees them
	SDFSBytesStored    int64 // bytes of SDFS data on this node
	ReplicationBacklog int64 // replicas this node knows are missing and not yet re-created
}

// GaugeSource gives the cluster gauges (fd and sdfs, through the node runtime).
type GaugeSource interface {
	Gauges() ClusterGauges
}

// StaticStats is a StatsSource and GaugeSource holding values set by its owner: a fake for
// tests, and a bridge for callers that push figures rather than being asked.
type StaticStats struct {
	mu     sync.Mutex
	jobs   []JobStats
	gauges ClusterGauges
	err    error
}

// SetJobs replaces the jobs' statistics.
func (s *StaticStats) SetJobs(j []JobStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs = j
}

// SetGauges replaces the gauges.
func (s *StaticStats) SetGauges(g ClusterGauges) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gauges = g
}

// SetErr makes JobStats fail with err (nil to succeed again).
func (s *StaticStats) SetErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// JobStats implements StatsSource.
func (s *StaticStats) JobStats(context.Context) ([]JobStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]JobStats(nil), s.jobs...), s.err
}

// Gauges implements GaugeSource.
func (s *StaticStats) Gauges() ClusterGauges {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gauges
}
