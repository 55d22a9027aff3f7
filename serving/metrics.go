package serving

import (
	"bytes"
	"context"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// /metrics goes through Prometheus's official Go client: its registry checks every metric
// family for consistency, its Go runtime and process collectors come for free, and its
// promlint tests (metrics_test.go) keep the names to the conventions. Each Server has its
// own registry (tests run several servers in one process).
//
// Served models (this node's figures):
//
//	idunno_http_requests_total{model,code}            counter    infer requests answered here
//	idunno_http_request_duration_seconds{model}       histogram  end to end, at the node the client asked
//	idunno_model_queue_duration_seconds{model}        histogram  time a request waited for its batch
//	idunno_model_compute_duration_seconds{model}      histogram  its batch's kernel call (inputs joined, run, outputs split)
//	idunno_model_batch_rows{model}                    histogram  rows per kernel call (dynamic batching)
//	idunno_model_queue_depth{model}                   gauge      requests waiting in the batching queue
//
// Jobs (the scheduler's statistics, asked at scrape time):
//
//	idunno_job_queries_completed_total{job}           counter    was idunno_job_queries_done
//	idunno_job_queries{job}                           gauge      was idunno_job_queries_total (a gauge named like a counter)
//	idunno_job_query_rate{job}                        gauge      the fair-time controller's 10 s rate (rate() of the counter is the Prometheus way)
//	idunno_job_query_latency_seconds{job}             summary    exact quantiles from the scheduler's HdrHistogram
//	idunno_job_query_latency_bucketed_seconds{job}    histogram  the same in fixed buckets (aggregatable); was
//	                                                             idunno_job_query_latency_histogram_seconds (promlint: no type in names)
//	idunno_job_queue_duration_seconds{job}            histogram  per task: from the job's submission to a worker starting it
//	idunno_job_compute_duration_seconds{job}          histogram  per task: the worker time it took
//	idunno_job_worker_share{job,worker}               gauge
//
// Cluster: idunno_membership_size, idunno_sdfs_bytes_stored, idunno_sdfs_replication_backlog;
// and idunno_build_info, go_build_info, go_* and process_*.

// Histogram buckets: request latency in seconds, batch sizes in rows.
var (
	latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	batchBuckets   = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
)

// maxModelSeries bounds how many model names metrics remember, so that requests for
// made-up model names cannot grow memory without bound; the rest count as "_other".
const maxModelSeries = 1024

// maxBatchSizes bounds the distinct batch sizes a model's Triton statistics keep.
const maxBatchSizes = 256

// Metrics collects this node's HTTP figures: the Prometheus series and the Triton
// statistics (tritonstats.go) of each model. Safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	queue     *prometheus.HistogramVec
	compute   *prometheus.HistogramVec
	batchRows *prometheus.HistogramVec

	mu     sync.Mutex
	models map[string]*modelStats
}

// NewMetrics returns empty metrics in a fresh registry that also holds the Go runtime,
// process and build-info collectors.
func NewMetrics() *Metrics {
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{"model"})
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idunno_http_requests_total",
			Help: "Inference requests answered by this node, by model and HTTP status."}, []string{"model", "code"}),
		duration:  hist("idunno_http_request_duration_seconds", "Inference request latency at this node (end to end), by model.", latencyBuckets),
		queue:     hist("idunno_model_queue_duration_seconds", "Time a request to a model served here waited in its batching queue.", latencyBuckets),
		compute:   hist("idunno_model_compute_duration_seconds", "Kernel time of the batch a request to a model served here ran in (inputs joined, model run, outputs split).", latencyBuckets),
		batchRows: hist("idunno_model_batch_rows", "Rows per kernel call of a model served here (dynamic batching).", batchBuckets),
		models:    map[string]*modelStats{},
	}
	m.reg.MustRegister(m.requests, m.duration, m.queue, m.compute, m.batchRows,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(), buildInfo())
	return m
}

// BuildVersion is the version the binary was built as (idunno's `-ldflags "-X
// main.version=..."`, what `idunno --version` prints), set once at start before any
// server is made. Empty: idunno_build_info falls back to the module version recorded in
// the Go build info, "(devel)" for a build from a work tree.
var BuildVersion string

// buildInfo is idunno_build_info: 1, labelled with the build's version (BuildVersion, or
// the module version) and VCS revision.
func buildInfo() prometheus.Collector {
	version, revision := "(devel)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	if BuildVersion != "" {
		version = BuildVersion
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "idunno_build_info", Help: "Build of this idunno binary (always 1).",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision}})
	g.Set(1)
	return g
}

// series returns the stats record of model, or of "_other" past maxModelSeries names;
// m.mu is held.
func (m *Metrics) series(model string) (string, *modelStats) {
	s := m.models[model]
	if s == nil {
		if len(m.models) >= maxModelSeries {
			model = "_other"
			if s = m.models[model]; s != nil {
				return model, s
			}
		}
		s = &modelStats{batches: map[int]*batchStat{}}
		m.models[model] = s
	}
	return model, s
}

// ObserveRequest records one infer request's status and latency (at the node the client asked).
func (m *Metrics) ObserveRequest(model string, code int, d time.Duration) {
	m.mu.Lock()
	model, s := m.series(model)
	s.request(code, d, time.Now())
	m.mu.Unlock()
	m.requests.WithLabelValues(model, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(model).Observe(d.Seconds())
}

// batchRecord is one kernel call of a served model and the requests it answered.
type batchRecord struct {
	model                string
	rows                 int
	queued               []time.Duration // each request's wait in the queue
	input, infer, output time.Duration   // joining inputs, the backend call, splitting outputs
	failed               bool
}

// ObserveBatch records one kernel call of a model served here.
func (m *Metrics) observeBatch(b batchRecord) {
	m.mu.Lock()
	model, s := m.series(b.model)
	s.batch(b)
	m.mu.Unlock()
	m.batchRows.WithLabelValues(model).Observe(float64(b.rows))
	q, c := m.queue.WithLabelValues(model), m.compute.WithLabelValues(model)
	compute := (b.input + b.infer + b.output).Seconds()
	for _, d := range b.queued {
		q.Observe(d.Seconds())
		c.Observe(compute)
	}
}

// ModelSummary is a model's figures for the dashboard.
type ModelSummary struct {
	Requests uint64  `json:"requests"`
	Errors   uint64  `json:"errors"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// Summaries returns per-model request figures, the latency percentiles interpolated in the
// request histogram's buckets (as PromQL's histogram_quantile does).
func (m *Metrics) Summaries() map[string]ModelSummary {
	m.mu.Lock()
	r := map[string]ModelSummary{}
	for name, s := range m.models {
		r[name] = ModelSummary{Requests: s.Success.Count + s.Fail.Count, Errors: s.Fail.Count}
	}
	m.mu.Unlock()
	for name, sum := range r {
		if sum.Requests == 0 { // batches only: requests forwarded here from other nodes
			continue
		}
		h, err := m.duration.GetMetricWithLabelValues(name)
		if err != nil {
			continue
		}
		var pb dto.Metric
		if h.(prometheus.Metric).Write(&pb) != nil || pb.Histogram == nil {
			continue
		}
		sum.P50Ms = bucketQuantile(0.5, pb.Histogram) * 1000
		sum.P99Ms = bucketQuantile(0.99, pb.Histogram) * 1000
		r[name] = sum
	}
	return r
}

// requestHistograms returns each model's cumulative request-duration histogram (models
// with requests at this node only).
func (m *Metrics) requestHistograms() map[string]*dto.Histogram {
	m.mu.Lock()
	var names []string
	for name, s := range m.models {
		if s.Success.Count+s.Fail.Count > 0 {
			names = append(names, name)
		}
	}
	m.mu.Unlock()
	r := make(map[string]*dto.Histogram, len(names))
	for _, name := range names {
		h, err := m.duration.GetMetricWithLabelValues(name)
		if err != nil {
			continue
		}
		var pb dto.Metric
		if h.(prometheus.Metric).Write(&pb) == nil && pb.Histogram != nil {
			r[name] = pb.Histogram
		}
	}
	return r
}

// bucketQuantile estimates the q-quantile of a histogram by linear interpolation within
// its bucket.
func bucketQuantile(q float64, h *dto.Histogram) float64 {
	n := h.GetSampleCount()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var prevCum uint64
	lo := 0.0
	for _, b := range h.Bucket {
		cum := b.GetCumulativeCount()
		if float64(cum) >= rank && cum > prevCum {
			return lo + (b.GetUpperBound()-lo)*(rank-float64(prevCum))/float64(cum-prevCum)
		}
		prevCum, lo = cum, b.GetUpperBound()
	}
	return lo
}

// sourceCollector turns the server's sources (queue depths, the scheduler's job
// statistics, cluster gauges) into metrics at scrape time. It is unchecked (its Describe
// sends nothing): which jobs exist is only known when asked.
type sourceCollector struct{ s *Server }

func (c sourceCollector) Describe(chan<- *prometheus.Desc) {}

var (
	descQueueDepth   = prometheus.NewDesc("idunno_model_queue_depth", "Requests waiting in a served model's batching queue.", []string{"model"}, nil)
	descJobDone      = prometheus.NewDesc("idunno_job_queries_completed_total", "Queries of a job completed.", []string{"job"}, nil)
	descJobQueries   = prometheus.NewDesc("idunno_job_queries", "Queries a job has in all, completed or not.", []string{"job"}, nil)
	descJobRate      = prometheus.NewDesc("idunno_job_query_rate", "Queries per second of a job over the last 10 s, as the fair-time controller measures it.", []string{"job"}, nil)
	descJobLatency   = prometheus.NewDesc("idunno_job_query_latency_seconds", "Per-query latency of a job (exact quantiles).", []string{"job"}, nil)
	descJobHistogram = prometheus.NewDesc("idunno_job_query_latency_bucketed_seconds", "Per-query latency of a job, in buckets.", []string{"job"}, nil)
	descJobQueue     = prometheus.NewDesc("idunno_job_queue_duration_seconds", "Time a job's task waited from the job's submission until a worker started it.", []string{"job"}, nil)
	descJobCompute   = prometheus.NewDesc("idunno_job_compute_duration_seconds", "Worker time one of a job's tasks took.", []string{"job"}, nil)
	descJobShare     = prometheus.NewDesc("idunno_job_worker_share", "Fraction of a worker's time given to a job.", []string{"job", "worker"}, nil)
	descMembers      = prometheus.NewDesc("idunno_membership_size", "Live members of the cluster as this node sees them.", nil, nil)
	descSDFSBytes    = prometheus.NewDesc("idunno_sdfs_bytes_stored", "Bytes of SDFS data stored on this node.", nil, nil)
	descBacklog      = prometheus.NewDesc("idunno_sdfs_replication_backlog", "Replicas known missing and not yet re-created.", nil, nil)
)

func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	depths := s.Local.Depths()
	names := make([]string, 0, len(depths))
	for n := range depths {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(depths[n]), n)
	}
	if s.Stats != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatsTimeout)
		jobs, err := s.Stats.JobStats(ctx)
		cancel()
		if err != nil {
			s.cfg.Logf("serving: metrics: job stats: %v", err)
			jobs = nil
		}
		for _, j := range jobs {
			collectJob(ch, j)
		}
	}
	if s.Gauges != nil {
		g := s.Gauges.Gauges()
		if g.Members >= 0 {
			ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(g.Members))
		}
		if g.SDFSBytesStored >= 0 {
			ch <- prometheus.MustNewConstMetric(descSDFSBytes, prometheus.GaugeValue, float64(g.SDFSBytesStored))
		}
		if g.ReplicationBacklog >= 0 {
			ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(g.ReplicationBacklog))
		}
	}
}

// collectJob exports one job's statistics. The scheduler keeps exact percentiles, so
// latency goes out as a summary with quantiles, and also as a histogram with fixed buckets
// (which Prometheus can aggregate across jobs).
func collectJob(ch chan<- prometheus.Metric, j JobStats) {
	ch <- prometheus.MustNewConstMetric(descJobDone, prometheus.CounterValue, float64(j.Done), j.Job)
	ch <- prometheus.MustNewConstMetric(descJobQueries, prometheus.GaugeValue, float64(j.Total), j.Job)
	ch <- prometheus.MustNewConstMetric(descJobRate, prometheus.GaugeValue, j.Rate10s, j.Job)
	l := j.LatencyMs
	ch <- prometheus.MustNewConstSummary(descJobLatency, uint64(max(j.Done, 0)), l.Mean/1000*float64(j.Done),
		map[float64]float64{0.5: l.P50 / 1000, 0.9: l.P90 / 1000, 0.95: l.P95 / 1000, 0.99: l.P99 / 1000}, j.Job)
	if h := j.Histogram; h != nil {
		constHistogram(ch, descJobHistogram, h.BoundsMS, h.Counts, h.Count, h.SumMS, j.Job)
		if q := h.Queue; q != nil {
			constHistogram(ch, descJobQueue, q.BoundsMS, q.Counts, q.Count, q.SumMS, j.Job)
		}
		if c := h.Compute; c != nil {
			constHistogram(ch, descJobCompute, c.BoundsMS, c.Counts, c.Count, c.SumMS, j.Job)
		}
	}
	for _, w := range j.Workers {
		ch <- prometheus.MustNewConstMetric(descJobShare, prometheus.GaugeValue, w.Share, j.Job, w.Name)
	}
}

// constHistogram exports cumulative counts at bounds in milliseconds as a histogram in
// seconds; mismatched bounds and counts export nothing.
func constHistogram(ch chan<- prometheus.Metric, d *prometheus.Desc, boundsMS []float64, counts []int64, count int64, sumMS float64, labels ...string) {
	if len(boundsMS) != len(counts) {
		return
	}
	buckets := make(map[float64]uint64, len(boundsMS))
	for i, b := range boundsMS {
		buckets[b/1000] = uint64(max(counts[i], 0))
	}
	if m, err := prometheus.NewConstHistogram(d, uint64(max(count, 0)), sumMS/1000, buckets, labels...); err == nil {
		ch <- m
	}
}

// exposition gathers every metric and writes the Prometheus text format (version 0.0.4).
// Families that fail to gather are left out and logged; the rest are still written.
func (m *Metrics) exposition(logf func(string, ...any)) []byte {
	mfs, err := m.reg.Gather()
	if err != nil {
		logf("serving: metrics: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			logf("serving: metrics: encode %s: %v", mf.GetName(), err)
		}
	}
	return buf.Bytes()
}
