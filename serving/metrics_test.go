package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// busyServer is a test server with figures in every metric family: requests (batched,
// good and bad), a job with a histogram, cluster gauges.
func busyServer(t *testing.T) *testServer {
	t.Helper()
	ts := startServer(t, Config{}, BatchConfig{MaxBatch: 4, MaxDelay: time.Millisecond})
	ts.stats.SetJobs([]JobStats{{Job: "lenet", Done: 120, Total: 1000, Rate10s: 12.5,
		LatencyMs: LatencyMs{Mean: 3, P50: 2.5, P90: 4, P95: 5, P99: 9}, Workers: []WorkerShare{{"node1", 0.5}},
		Histogram: &LatencyHistogram{BoundsMS: []float64{2.5, 10}, Counts: []int64{60, 119}, Count: 120, SumMS: 360,
			Queue:   &TimeHistogram{BoundsMS: []float64{100, 1000}, Counts: []int64{1, 3}, Count: 4, SumMS: 1500},
			Compute: &TimeHistogram{BoundsMS: []float64{100, 1000}, Counts: []int64{4, 4}, Count: 4, SumMS: 200}}}})
	ts.stats.SetGauges(ClusterGauges{Members: 7, SDFSBytesStored: 123456, ReplicationBacklog: 3})
	for range 3 {
		if code, _, b := infer(t, ts.url, "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`); code != 200 {
			t.Fatal(b)
		}
	}
	infer(t, ts.url, "double", `{"inputs":[]}`)
	return ts
}

// scrape reads /metrics and parses it with Prometheus's own text parser.
func scrape(t *testing.T, url string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	code, hdr, b := do(t, "GET", url+"/metrics", nil, nil)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %s", code, hdr.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses /metrics: %v\n%s", err, b)
	}
	return b, fams
}

// The names follow Prometheus's conventions, as client_golang's linter checks them, on the
// registry and on a live scrape.
func TestMetricsPassPromlint(t *testing.T) {
	ts := busyServer(t)
	problems, err := testutil.GatherAndLint(ts.srv.Metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("registry: %s: %s", p.Metric, p.Text)
	}
	body, _ := scrape(t, ts.url)
	problems, err = promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("scrape: %s: %s", p.Metric, p.Text)
	}
}

// idunno_build_info carries the version the binary was built as (what idunno --version
// prints), not the "(devel)" the Go build info holds for a build from a work tree.
func TestBuildInfoCarriesTheBuildVersion(t *testing.T) {
	version := func(m *Metrics) string {
		t.Helper()
		fams, err := m.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "idunno_build_info" {
				continue
			}
			if len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
				t.Fatalf("idunno_build_info: %v", f)
			}
			for _, l := range f.GetMetric()[0].GetLabel() {
				if l.GetName() == "version" {
					return l.GetValue()
				}
			}
		}
		t.Fatal("no idunno_build_info with a version label")
		return ""
	}
	if v := version(NewMetrics()); v == "" {
		t.Fatal("idunno_build_info has an empty version without BuildVersion")
	}
	BuildVersion = "v9.8.7-3-gabcdef0"
	defer func() { BuildVersion = "" }()
	if v := version(NewMetrics()); v != BuildVersion {
		t.Fatalf("idunno_build_info version %q, want BuildVersion %q", v, BuildVersion)
	}
}

// Counters end in _total, latencies are histograms per model (end to end, queue, compute)
// and per job, and the Go runtime, process and build-info collectors are there.
func TestMetricsFamiliesAndTypes(t *testing.T) {
	ts := busyServer(t)
	_, fams := scrape(t, ts.url)
	want := map[string]dto.MetricType{
		"idunno_http_requests_total":                dto.MetricType_COUNTER,
		"idunno_http_request_duration_seconds":      dto.MetricType_HISTOGRAM,
		"idunno_model_queue_duration_seconds":       dto.MetricType_HISTOGRAM,
		"idunno_model_compute_duration_seconds":     dto.MetricType_HISTOGRAM,
		"idunno_model_batch_rows":                   dto.MetricType_HISTOGRAM,
		"idunno_model_queue_depth":                  dto.MetricType_GAUGE,
		"idunno_job_queries_completed_total":        dto.MetricType_COUNTER,
		"idunno_job_queries":                        dto.MetricType_GAUGE,
		"idunno_job_query_rate":                     dto.MetricType_GAUGE,
		"idunno_job_query_latency_seconds":          dto.MetricType_SUMMARY,
		"idunno_job_query_latency_bucketed_seconds": dto.MetricType_HISTOGRAM,
		"idunno_job_worker_share":                   dto.MetricType_GAUGE,
		"idunno_job_queue_duration_seconds":         dto.MetricType_HISTOGRAM,
		"idunno_job_compute_duration_seconds":       dto.MetricType_HISTOGRAM,
		"idunno_membership_size":                    dto.MetricType_GAUGE,
		"idunno_sdfs_bytes_stored":                  dto.MetricType_GAUGE,
		"idunno_sdfs_replication_backlog":           dto.MetricType_GAUGE,
		"idunno_build_info":                         dto.MetricType_GAUGE,
		"go_build_info":                             dto.MetricType_GAUGE,
		"go_goroutines":                             dto.MetricType_GAUGE,
		"go_gc_duration_seconds":                    dto.MetricType_SUMMARY,
		"process_cpu_seconds_total":                 dto.MetricType_COUNTER,
		"process_resident_memory_bytes":             dto.MetricType_GAUGE,
	}
	for name, typ := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("no family %s", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s is a %s, want %s", name, f.GetType(), typ)
		}
	}
	for name, f := range fams {
		if f.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			t.Errorf("counter %s lacks _total", name)
		}
		if f.GetType() != dto.MetricType_COUNTER && strings.HasSuffix(name, "_total") {
			t.Errorf("%s %s is named like a counter", f.GetType(), name)
		}
	}
	// The job's 4 tasks: queue 1.5 s in all, 1 within 0.1 s; compute 0.2 s, all within 0.1 s.
	for name, want := range map[string]string{"idunno_job_queue_duration_seconds": "4 1.5 1", "idunno_job_compute_duration_seconds": "4 0.2 4"} {
		h := fams[name].GetMetric()[0].GetHistogram()
		if got := fmt.Sprint(h.GetSampleCount(), h.GetSampleSum(), h.GetBucket()[0].GetCumulativeCount()); got != want || h.GetBucket()[0].GetUpperBound() != 0.1 {
			t.Errorf("%s: count, sum, first bucket %s (bound %v), want %s", name, got, h.GetBucket()[0].GetUpperBound(), want)
		}
	}
	// Three requests ran, each in a batch: queue and compute were observed once each.
	for _, name := range []string{"idunno_model_queue_duration_seconds", "idunno_model_compute_duration_seconds"} {
		if h := fams[name].GetMetric()[0].GetHistogram(); h.GetSampleCount() != 3 {
			t.Errorf("%s counted %d requests, want 3", name, h.GetSampleCount())
		}
	}
}

// promQLNames are the metric names a PromQL expression selects (IDunno's, Go's and the
// process collector's all start with one of these prefixes; labels and functions do not).
var promQLNames = regexp.MustCompile(`\b(?:idunno|go|process)_[a-z0-9_]+`)

// Every metric the shipped Grafana dashboard queries exists in a live scrape (a histogram's
// _bucket, _sum and _count and a summary's through their family), and the Prometheus
// configuration scrapes the HTTP port of each node of a 10-node local cluster.
func TestDeployedDashboardQueriesExistingMetrics(t *testing.T) {
	ts := busyServer(t)
	_, fams := scrape(t, ts.url)
	exists := func(name string) bool {
		if fams[name] != nil {
			return true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if f := fams[strings.TrimSuffix(name, suf)]; strings.HasSuffix(name, suf) && f != nil &&
				(f.GetType() == dto.MetricType_HISTOGRAM || (f.GetType() == dto.MetricType_SUMMARY && suf != "_bucket")) {
				return true
			}
		}
		return false
	}
	raw, err := os.ReadFile("../deploy/grafana/idunno.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/idunno.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			exprs = append(exprs, q["query"].(string))
		}
	}
	seen := map[string]bool{}
	for _, e := range exprs {
		names := promQLNames.FindAllString(e, -1)
		if len(names) == 0 {
			t.Errorf("query %q selects no metric", e)
		}
		for _, n := range names {
			seen[n] = true
			if !exists(n) {
				t.Errorf("the dashboard queries %s, which /metrics does not have (in %q)", n, e)
			}
		}
	}
	if dash.UID == "" || len(seen) < 15 {
		t.Fatalf("dashboard %q queries only %d metrics", dash.Title, len(seen))
	}

	cfg, err := os.ReadFile("../deploy/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, line := range strings.Split(string(cfg), "\n") {
		if tg, ok := strings.CutPrefix(strings.TrimSpace(line), "- 127.0.0.1:"); ok {
			targets = append(targets, tg)
		}
	}
	want := []string{"7002", "7012", "7022", "7032", "7042", "7052", "7062", "7072", "7082", "7092"}
	if !slices.Equal(targets, want) || !strings.Contains(string(cfg), "metrics_path: /metrics") {
		t.Fatalf("deploy/prometheus.yml scrapes %v, want the HTTP ports (base+2) of nodes 0-9 at base port 7000", targets)
	}
}

// dashboardExprs returns the PromQL of every panel of the shipped dashboard, with Grafana's
// variables replaced by what they stand for at query time.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../deploy/grafana/idunno.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")
	var r []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			r = append(r, vars.Replace(tg.Expr))
		}
	}
	return r
}

// Prometheus's own promtool accepts the scrape configuration, parses every query of the
// dashboard (as recording rules) and lints a live scrape.
func TestDeployedFilesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed (Debian package prometheus; make test-deps installs it): %v", err)
	}
	run := func(stdin []byte, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Stdin = bytes.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(nil, "check", "config", "../deploy/prometheus.yml")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range dashboardExprs(t) {
		q, _ := json.Marshal(e) // a JSON string is a YAML double-quoted scalar
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(nil, "check", "rules", path)
	body, _ := scrape(t, busyServer(t).url)
	run(body, "check", "metrics")
}
