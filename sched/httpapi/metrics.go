package httpapi

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Histogram buckets: request latency in seconds, batch sizes in rows.
var (
	latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	batchBuckets   = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
)

// histogram is a Prometheus histogram: cumulative on output, per-bucket counts inside.
type histogram struct {
	bounds []float64
	counts []uint64 // len(bounds)+1, the last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

// quantile estimates the q-quantile by linear interpolation in its bucket (as PromQL's
// histogram_quantile does); the dashboard uses it for per-model latency.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := q * float64(h.n)
	var cum uint64
	for i, c := range h.counts {
		if float64(cum+c) >= rank && c > 0 {
			lo := 0.0
			if i > 0 {
				lo = h.bounds[i-1]
			}
			if i == len(h.bounds) {
				return lo
			}
			return lo + (h.bounds[i]-lo)*(rank-float64(cum))/float64(c)
		}
		cum += c
	}
	return h.bounds[len(h.bounds)-1]
}

// modelMetrics are one model's request figures on this node.
type modelMetrics struct {
	codes   map[int]uint64
	latency *histogram
	batch   *histogram
}

// Metrics collects this node's HTTP figures; Server.writeMetrics adds the sources' figures.
// Safe for concurrent use.
type Metrics struct {
	mu     sync.Mutex
	models map[string]*modelMetrics
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics { return &Metrics{models: map[string]*modelMetrics{}} }

func (m *Metrics) model(name string) *modelMetrics {
	mm := m.models[name]
	if mm == nil {
		mm = &modelMetrics{codes: map[int]uint64{}, latency: newHistogram(latencyBuckets), batch: newHistogram(batchBuckets)}
		m.models[name] = mm
	}
	return mm
}

// maxModelSeries bounds how many model names metrics remember, so that requests for
// made-up model names cannot grow memory without bound; the rest count as "_other".
const maxModelSeries = 1024

// ObserveRequest records one infer request's status and latency.
func (m *Metrics) ObserveRequest(model string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.models[model]; !ok && len(m.models) >= maxModelSeries {
		model = "_other"
	}
	mm := m.model(model)
	mm.codes[code]++
	mm.latency.observe(d.Seconds())
}

// ObserveBatch records the rows of one kernel call.
func (m *Metrics) ObserveBatch(model string, rows int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.model(model).batch.observe(float64(rows))
}

// ModelSummary is a model's figures for the dashboard.
type ModelSummary struct {
	Requests uint64  `json:"requests"`
	Errors   uint64  `json:"errors"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// Summaries returns per-model request figures.
func (m *Metrics) Summaries() map[string]ModelSummary {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := map[string]ModelSummary{}
	for name, mm := range m.models {
		var s ModelSummary
		for code, n := range mm.codes {
			s.Requests += n
			if code >= 400 {
				s.Errors += n
			}
		}
		s.P50Ms = mm.latency.quantile(0.5) * 1000
		s.P99Ms = mm.latency.quantile(0.99) * 1000
		r[name] = s
	}
	return r
}

// promWriter writes the Prometheus text exposition format (version 0.0.4).
type promWriter struct {
	b    strings.Builder
	seen map[string]bool
}

func (w *promWriter) header(name, typ, help string) {
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	if w.seen[name] {
		return
	}
	w.seen[name] = true
	fmt.Fprintf(&w.b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (w *promWriter) sample(name string, labels []string, v float64) {
	w.b.WriteString(name)
	if len(labels) > 0 {
		w.b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.b.WriteString(labels[i])
			w.b.WriteString(`="`)
			w.b.WriteString(escapeLabel(labels[i+1]))
			w.b.WriteByte('"')
		}
		w.b.WriteByte('}')
	}
	w.b.WriteByte(' ')
	w.b.WriteString(formatValue(v))
	w.b.WriteByte('\n')
}

func (w *promWriter) histogram(name string, labels []string, h *histogram) {
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		w.sample(name+"_bucket", append(slices.Clip(labels), "le", formatValue(b)), float64(cum))
	}
	w.sample(name+"_bucket", append(slices.Clip(labels), "le", "+Inf"), float64(h.n))
	w.sample(name+"_sum", labels, h.sum)
	w.sample(name+"_count", labels, float64(h.n))
}

func escapeLabel(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// writeModels writes the per-model request, latency and batch figures and queue depths.
func (m *Metrics) writeModels(w *promWriter, depths map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.models))
	for n := range m.models {
		names = append(names, n)
	}
	slices.Sort(names)
	w.header("idunno_http_requests_total", "counter", "Inference requests received by this node, by model and HTTP status.")
	for _, n := range names {
		codes := make([]int, 0)
		for c := range m.models[n].codes {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		for _, c := range codes {
			w.sample("idunno_http_requests_total", []string{"model", n, "code", strconv.Itoa(c)}, float64(m.models[n].codes[c]))
		}
	}
	w.header("idunno_http_request_duration_seconds", "histogram", "Inference request latency at this node, by model.")
	for _, n := range names {
		if m.models[n].latency.n > 0 {
			w.histogram("idunno_http_request_duration_seconds", []string{"model", n}, m.models[n].latency)
		}
	}
	w.header("idunno_model_batch_rows", "histogram", "Rows per kernel call of a served model (dynamic batching).")
	for _, n := range names {
		if m.models[n].batch.n > 0 {
			w.histogram("idunno_model_batch_rows", []string{"model", n}, m.models[n].batch)
		}
	}
	w.header("idunno_model_queue_depth", "gauge", "Requests waiting in a served model's batching queue.")
	dn := make([]string, 0, len(depths))
	for n := range depths {
		dn = append(dn, n)
	}
	slices.Sort(dn)
	for _, n := range dn {
		w.sample("idunno_model_queue_depth", []string{"model", n}, float64(depths[n]))
	}
}

// writeJobs writes per-job figures from the scheduler's statistics. The scheduler keeps
// exact percentiles (HdrHistogram), so latency is exported as a summary with quantiles, and
// also as a histogram with fixed buckets (which Prometheus can aggregate across jobs).
func writeJobs(w *promWriter, jobs []JobStats) {
	w.header("idunno_job_queries_done", "counter", "Queries of a job completed.")
	for _, j := range jobs {
		w.sample("idunno_job_queries_done", []string{"job", j.Job}, float64(j.Done))
	}
	w.header("idunno_job_queries_total", "gauge", "Queries a job has in all.")
	for _, j := range jobs {
		w.sample("idunno_job_queries_total", []string{"job", j.Job}, float64(j.Total))
	}
	w.header("idunno_job_query_rate", "gauge", "Queries per second of a job over the last 10 s.")
	for _, j := range jobs {
		w.sample("idunno_job_query_rate", []string{"job", j.Job}, j.Rate10s)
	}
	w.header("idunno_job_query_latency_seconds", "summary", "Per-query latency of a job.")
	for _, j := range jobs {
		l := j.LatencyMs
		for _, q := range []struct {
			q string
			v float64
		}{{"0.5", l.P50}, {"0.9", l.P90}, {"0.95", l.P95}, {"0.99", l.P99}} {
			w.sample("idunno_job_query_latency_seconds", []string{"job", j.Job, "quantile", q.q}, q.v/1000)
		}
		w.sample("idunno_job_query_latency_seconds_sum", []string{"job", j.Job}, l.Mean/1000*float64(j.Done))
		w.sample("idunno_job_query_latency_seconds_count", []string{"job", j.Job}, float64(j.Done))
	}
	w.header("idunno_job_query_latency_histogram_seconds", "histogram", "Per-query latency of a job, in buckets.")
	for _, j := range jobs {
		h := j.Histogram
		if h == nil {
			continue
		}
		for i, b := range h.BoundsMS {
			w.sample("idunno_job_query_latency_histogram_seconds_bucket", []string{"job", j.Job, "le", strconv.FormatFloat(b/1000, 'g', -1, 64)}, float64(h.Counts[i]))
		}
		w.sample("idunno_job_query_latency_histogram_seconds_bucket", []string{"job", j.Job, "le", "+Inf"}, float64(h.Count))
		w.sample("idunno_job_query_latency_histogram_seconds_sum", []string{"job", j.Job}, h.SumMS/1000)
		w.sample("idunno_job_query_latency_histogram_seconds_count", []string{"job", j.Job}, float64(h.Count))
	}
	w.header("idunno_job_worker_share", "gauge", "Fraction of a worker's time given to a job.")
	for _, j := range jobs {
		for _, ws := range j.Workers {
			w.sample("idunno_job_worker_share", []string{"job", j.Job, "worker", ws.Name}, ws.Share)
		}
	}
}

func writeGauges(w *promWriter, g ClusterGauges) {
	if g.Members >= 0 {
		w.header("idunno_membership_size", "gauge", "Live members of the cluster as this node sees them.")
		w.sample("idunno_membership_size", nil, float64(g.Members))
	}
	if g.SDFSBytesStored >= 0 {
		w.header("idunno_sdfs_bytes_stored", "gauge", "Bytes of SDFS data stored on this node.")
		w.sample("idunno_sdfs_bytes_stored", nil, float64(g.SDFSBytesStored))
	}
	if g.ReplicationBacklog >= 0 {
		w.header("idunno_sdfs_replication_backlog", "gauge", "Replicas known missing and not yet re-created.")
		w.sample("idunno_sdfs_replication_backlog", nil, float64(g.ReplicationBacklog))
	}
}
