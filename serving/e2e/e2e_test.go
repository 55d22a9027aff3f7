// Package e2e tests the HTTP endpoint on a real local cluster of node processes that
// require a bearer token (IDUNNO_HTTP_TOKEN): models served from SDFS and reached through
// any node, a serving node killed and restarted, Triton's repository extension loading and
// unloading a model, /metrics linted by client_golang's promlint, and the dashboard rendered
// by headless Chromium (opened with ?token=) compared with `idunno job stats`.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	png_ "image/png"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"idunno/client/localcluster"
	"idunno/kernel"
	"idunno/kernel/onnx"
)

var bin string

// TestMain finds the idunno binary ($IDUNNO_BIN, else built once) and the kernel library
// ($IDUNNO_KERNEL_LIB, else the repository's bin/); the nodes it starts inherit both.
func TestMain(m *testing.M) {
	if os.Getenv("IDUNNO_KERNEL_LIB") == "" {
		lib, _ := filepath.Abs("../../bin/libidunno_kernel.so")
		if _, err := os.Stat(lib); err != nil {
			fmt.Fprintln(os.Stderr, "FATAL: set IDUNNO_KERNEL_LIB or run `make` to build bin/libidunno_kernel.so")
			os.Exit(1)
		}
		os.Setenv("IDUNNO_KERNEL_LIB", lib)
	}
	var err error
	if bin, err = localcluster.Binary(); err != nil {
		fmt.Fprintln(os.Stderr, "FATAL:", err)
		os.Exit(1)
	}
	code := m.Run()
	localcluster.RemoveBinary()
	os.Exit(code)
}

// cli runs one idunno command against the cluster and returns its standard output.
func cli(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "IDUNNO_CLUSTER="+dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("idunno %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("idunno %s: timed out", strings.Join(args, " "))
	}
	return out.String()
}

var httpc = &http.Client{Timeout: 20 * time.Second}

// token is the cluster's HTTP token: the nodes inherit it as IDUNNO_HTTP_TOKEN.
const token = "e2e-http-token"

// send makes one request, with the token unless auth is false.
func send(method, url string, body []byte, auth bool) (int, []byte, error) {
	h := map[string]string{"Content-Type": "application/json"}
	if auth {
		h["Authorization"] = "Bearer " + token
	}
	return do(method, url, body, h)
}

// sendWith posts body with the token and the given headers.
func sendWith(url string, body []byte, headers map[string]string) (int, []byte, error) {
	h := map[string]string{"Authorization": "Bearer " + token}
	for k, v := range headers {
		h[k] = v
	}
	return do("POST", url, body, h)
}

func do(method, url string, body []byte, headers map[string]string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func post(url string, body []byte) (int, []byte, error) { return send("POST", url, body, true) }

func get(url string) (int, []byte, error) { return send("GET", url, nil, true) }

type inferResp struct {
	Outputs []struct {
		Name string    `json:"name"`
		Data []float32 `json:"data"`
	} `json:"outputs"`
}

func TestClusterEndpointAndDashboard(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("IDUNNO_HTTP_TOKEN", token)
	c, err := localcluster.Up(dir, 3, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down() })
	httpAddr := map[string]string{}
	for _, n := range c.Nodes() {
		node, _ := c.Node(n.Name)
		httpAddr[n.Name] = "http://" + node.HTTPAddr
	}
	t.Run("token required", func(t *testing.T) { tokenRequired(t, httpAddr["node0"]) })
	t.Run("dashboard matches job stats", func(t *testing.T) { dashboardMatchesJobStats(t, dir, httpAddr["node1"]+"/?token="+token) })
	t.Run("live metrics pass promlint", func(t *testing.T) { liveMetricsLint(t, dir, httpAddr["node1"]) })
	t.Run("serve, route, kill and restart", func(t *testing.T) { serveRouteRestart(t, c, dir, httpAddr) })
	t.Run("Triton model repository", func(t *testing.T) { tritonRepository(t, dir, httpAddr) })
	t.Run("INT64 and BOOL tensors", func(t *testing.T) { intAndBoolTensors(t, dir, httpAddr) })
	t.Run("Prometheus answers the dashboard's queries", func(t *testing.T) { prometheusScrapes(t, dir, httpAddr) })
}

// prometheusScrapes runs Prometheus (Debian's) against the cluster with the token, and
// checks that every query of deploy/grafana/idunno.json evaluates and every metric it
// names has series (metrics_test.go checks all of them, worker shares included, on one
// server with a running job).
func prometheusScrapes(t *testing.T, dir string, httpAddr map[string]string) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is needed (Debian package prometheus; make test-deps installs it): %v", err)
	}
	raw, err := os.ReadFile("../../deploy/grafana/idunno.json")
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
	// A served model, so that its gauges exist (repo5 is in SDFS since the repository test).
	if code, b, err := post(httpAddr["node2"]+"/v2/repository/models/repo5/load", nil); err != nil || code != 200 {
		t.Fatalf("load at node2: %d %s %v", code, b, err)
	}
	tokenFile := filepath.Join(dir, "prom-token")
	cfg := "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: idunno\n" +
		"    authorization:\n      type: Bearer\n      credentials_file: " + tokenFile + "\n    static_configs:\n      - targets:\n"
	for _, a := range httpAddr {
		cfg += "          - " + strings.TrimPrefix(a, "http://") + "\n"
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if os.WriteFile(tokenFile, []byte(token), 0o600) != nil || os.WriteFile(cfgFile, []byte(cfg), 0o644) != nil {
		t.Fatal("cannot write Prometheus's files")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(prom, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "prom-data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	query := func(q string) (string, []json.RawMessage, error) {
		code, b, err := send("GET", "http://"+addr+"/api/v1/query?query="+url.QueryEscape(q), nil, false)
		if err != nil {
			return "", nil, err
		}
		var r struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return "", nil, fmt.Errorf("status %d: %s", code, b)
		}
		if r.Status != "success" {
			return r.Status, nil, fmt.Errorf("%s", r.Error)
		}
		return r.Status, r.Data.Result, nil
	}
	// Every node is up, and scraped a few times (rate() needs two samples).
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, res, err := query(`count(up == 1) == 3 and count(count_over_time(up[1m]) >= 4) == 3`)
		if err == nil && len(res) == 1 {
			break
		}
		if time.Now().After(deadline) {
			_, res, _ := query("up")
			t.Fatalf("Prometheus did not scrape the 3 nodes: %v %s\n%s", err, res, logs.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	names := map[string]bool{}
	vars := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")
	metricName := regexp.MustCompile(`\b(?:idunno|go|process)_[a-z0-9_]+`)
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if _, _, err := query(vars.Replace(tg.Expr)); err != nil {
				t.Errorf("query %q: %v", tg.Expr, err)
			}
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				names[n] = true
			}
		}
	}
	for n := range names {
		if n == "idunno_job_worker_share" {
			continue // only while a job runs on workers; the jobs of this test are done
		}
		if _, res, err := query(`count({__name__="` + n + `"})`); err != nil || len(res) == 0 {
			t.Errorf("Prometheus has no series of %s (%v)", n, err)
		}
	}
}

// liveMetricsLint lints a node's /metrics while jobs exist (their figures come from the
// coordinator) with client_golang's promlint, and checks that idunno_build_info names the
// version idunno --version prints (when the binary was built with one, as make does).
func liveMetricsLint(t *testing.T, dir, base string) {
	code, b, err := get(base + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	if v := strings.Fields(cli(t, dir, "--version")); len(v) == 2 { // "idunno VERSION": built with -X main.version
		if want := `idunno_build_info{revision=`; !strings.Contains(string(b), want) || !strings.Contains(string(b), `version="`+v[1]+`"} 1`) {
			t.Errorf("live /metrics' idunno_build_info does not name version %q (idunno --version)", v[1])
		}
	}
	for _, want := range []string{"idunno_job_queries_completed_total{", "idunno_job_query_latency_bucketed_seconds_bucket{", "go_goroutines ", "process_resident_memory_bytes ", "idunno_build_info{"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("live /metrics lacks %s", want)
		}
	}
	problems, err := promlint.New(bytes.NewReader(b)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// tritonRepository loads, queries and unloads a model through Triton's repository
// extension on a live cluster: the model file is idunno/models/NAME.onnx in SDFS.
func tritonRepository(t *testing.T, dir string, httpAddr map[string]string) {
	model := filepath.Join(dir, "repo5.onnx")
	cli(t, dir, "zoo", "lenet5", "--seed", "7", "--out", model)
	cli(t, dir, "put", model, "idunno/models/repo5.onnx")
	index := func(node string) string {
		code, b, err := post(httpAddr[node]+"/v2/repository/index", []byte(`{}`))
		if err != nil || code != 200 {
			t.Fatalf("index at %s: %d %s %v", node, code, b, err)
		}
		return string(b)
	}
	if got := index("node1"); !strings.Contains(got, `{"name":"repo5","version":"1","state":"UNAVAILABLE"`) {
		t.Fatalf("index before load: %s", got)
	}
	cfg := []byte(`{"parameters":{"config":"{\"max_batch_size\":8}"}}`)
	if code, b, err := post(httpAddr["node1"]+"/v2/repository/models/repo5/load", cfg); err != nil || code != 200 {
		t.Fatalf("load at node1: %d %s %v", code, b, err)
	}
	// Every node sees it (once its 2 s directory is renewed): node0 routes the config
	// request and the inference to node1.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got := index("node0")
		if strings.Contains(got, `{"name":"repo5","version":"1","state":"READY"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("index at node0 after load: %s", got)
		}
	}
	code, b, err := get(httpAddr["node0"] + "/v2/models/repo5/config")
	if err != nil || code != 200 || !strings.Contains(string(b), `"max_batch_size":8`) {
		t.Fatalf("config at node0: %d %s %v", code, b, err)
	}
	body := []byte(`{"inputs":[{"name":"input","shape":[1,1,28,28],"datatype":"UINT8","data":[` + strings.Repeat("7,", 783) + `7]}]}`)
	if code, b, err := post(httpAddr["node0"]+"/v2/models/repo5/infer", body); err != nil || code != 200 {
		t.Fatalf("UINT8 inference at node0 on the loaded model: %d %s %v", code, b, err)
	}
	code, b, err = get(httpAddr["node1"] + "/v2/models/repo5/stats")
	if err != nil || code != 200 || !strings.Contains(string(b), `"inference_count":1,"execution_count":1`) {
		t.Fatalf("stats at node1: %d %s %v", code, b, err)
	}
	// Unloaded through another node, it stops everywhere.
	if code, b, err := post(httpAddr["node2"]+"/v2/repository/models/repo5/unload", nil); err != nil || code != 200 {
		t.Fatalf("unload at node2: %d %s %v", code, b, err)
	}
	if code, b, err := post(httpAddr["node1"]+"/v2/models/repo5/infer", body); err != nil || code != 404 {
		t.Fatalf("inference after unload: %d %s %v", code, b, err)
	}
}

// tokenRequired checks that a node refuses requests without the token but answers
// health probes.
func tokenRequired(t *testing.T, base string) {
	for _, p := range []string{"/metrics", "/api/dashboard", "/", "/v2/models/lenet5"} {
		if code, b, err := send("GET", base+p, nil, false); err != nil || code != 401 || !strings.Contains(string(b), `"error"`) {
			t.Fatalf("GET %s without the token: %d %s %v", p, code, b, err)
		}
	}
	if code, b, err := send("POST", base+"/v2/models/lenet5/infer", []byte(`{}`), false); err != nil || code != 401 {
		t.Fatalf("infer without the token: %d %s %v", code, b, err)
	}
	for _, p := range []string{"/v2/health/live", "/v2/health/ready"} {
		if code, b, err := send("GET", base+p, nil, false); err != nil || code != 200 {
			t.Fatalf("GET %s without the token: %d %s %v", p, code, b, err)
		}
	}
	if code, b, err := get(base + "/metrics"); err != nil || code != 200 {
		t.Fatalf("GET /metrics with the token: %d %s %v", code, b, err)
	}
}

func serveRouteRestart(t *testing.T, c *localcluster.Cluster, dir string, httpAddr map[string]string) {
	model := filepath.Join(dir, "lenet5.onnx")
	cli(t, dir, "zoo", "lenet5", "--seed", "7", "--out", model)
	cli(t, dir, "put", model, "http-lenet5.onnx")
	out := cli(t, dir, "serve", "lenet5", "--sdfs", "http-lenet5.onnx", "--nodes", "node2", "--max-batch", "4", "--max-delay", "1ms")
	if !strings.Contains(out, "node2 serves lenet5") {
		t.Fatalf("serve said %q", out)
	}
	var served []struct {
		Node string `json:"node"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(cli(t, dir, "served", "--json")), &served); err != nil || len(served) != 1 || served[0].Node != "node2" {
		t.Fatalf("served: %+v %v", served, err)
	}

	direct, err := kernel.Load(model, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	img := make([]float32, 784)
	for i := range img {
		img[i] = float32(i%29) / 29
	}
	want, err := direct.Run([]*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: []int64{1, 1, 28, 28}, F32: img}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(img)
	body := []byte(`{"inputs":[{"name":"input","shape":[1,1,28,28],"datatype":"FP32","data":` + string(data) + `}]}`)
	check := func(node string) error {
		code, b, err := post(httpAddr[node]+"/v2/models/lenet5/infer", body)
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("%s: status %d: %s", node, code, b)
		}
		var r inferResp
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		if fmt.Sprint(r.Outputs[0].Data) != fmt.Sprint(want[0].F32) {
			return fmt.Errorf("%s: endpoint %v, kernel %v", node, r.Outputs[0].Data, want[0].F32)
		}
		return nil
	}
	for _, n := range []string{"node0", "node1", "node2"} { // node2 locally, the others forward to it
		if err := check(n); err != nil {
			t.Fatal(err)
		}
	}
	// node2 ran all three (one came to it over HTTP, two forwarded over rpc); node0 took one.
	_, m, _ := get(httpAddr["node2"] + "/metrics")
	if !strings.Contains(string(m), `idunno_model_batch_rows_count{model="lenet5"} 3`) ||
		!strings.Contains(string(m), `idunno_http_requests_total{code="200",model="lenet5"} 1`) {
		t.Fatalf("node2 metrics do not show the 3 requests it ran:\n%s", m)
	}
	_, m, _ = get(httpAddr["node0"] + "/metrics")
	if !strings.Contains(string(m), `idunno_http_requests_total{code="200",model="lenet5"} 1`) {
		t.Fatalf("node0 metrics do not count the request it forwarded:\n%s", m)
	}

	// The only serving node dies: until the model is served again elsewhere, requests fail
	// with an error, not a hang; then node0 (the placer, the first live name) serves it.
	if err := c.Kill("node2"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		start := time.Now()
		code, b, err := post(httpAddr["node1"]+"/v2/models/lenet5/infer", body)
		if err != nil || time.Since(start) > 10*time.Second || (code != 200 && !strings.Contains(string(b), `"error"`)) {
			t.Fatalf("request while the only serving node is dead: %d %s %v after %v", code, b, err, time.Since(start))
		}
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "node0", "node.log"))
			t.Fatalf("lenet5 never served again after node2 died: %d %s\nnode0's log:\n%s", code, b, grepLines(string(log), "http:"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := check("node1"); err != nil {
		t.Fatal(err)
	}
	// Restarted, node2 reloads the model from SDFS on its own and serves it again too.
	if err := c.Restart("node2"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		// Ready means its models are loaded again (before, 503 with the reason).
		code, b, err := get(httpAddr["node2"] + "/v2/health/ready")
		if err == nil && code == 200 {
			if !strings.Contains(cli(t, dir, "served"), "node2") {
				t.Fatalf("node2 ready but does not serve lenet5: %s", cli(t, dir, "served"))
			}
			break
		}
		if err == nil && (code != 503 || !strings.Contains(string(b), "loading lenet5")) {
			t.Fatalf("node2 not ready: %d %s", code, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("node2 never served lenet5 again after its restart: %d %s %v", code, b, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := check("node2"); err != nil {
		t.Fatal(err)
	}
	// Unserved, it is gone from every node's view at once.
	if out := cli(t, dir, "unserve", "lenet5"); !strings.Contains(out, "node2 no longer serves lenet5") || !strings.Contains(out, "node0 no longer serves lenet5") {
		t.Fatalf("unserve said %q", out)
	}
	if code, b, err := post(httpAddr["node1"]+"/v2/models/lenet5/infer", body); err != nil || code != 404 {
		t.Fatalf("request after unserve: %d %s %v", code, b, err)
	}
}

// jobStats is `idunno job stats J --json`.
type jobStats struct {
	Job       string             `json:"job"`
	Done      int64              `json:"done"`
	Total     int64              `json:"total"`
	Rate10s   float64            `json:"rate_10s"`
	LatencyMs map[string]float64 `json:"latency_ms"`
	Workers   []struct {
		Name  string  `json:"name"`
		Share float64 `json:"share"`
	} `json:"workers"`
}

func stats(t *testing.T, dir, job string) jobStats {
	t.Helper()
	var s jobStats
	if err := json.Unmarshal([]byte(cli(t, dir, "job", "stats", job, "--json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// dumpDashboard loads the dashboard in headless Chromium, lets it run for budget of
// virtual time (several one-second refreshes), and returns the DOM it ends with.
func dumpDashboard(t *testing.T, url string, budget time.Duration) string {
	return chromium(t, url, budget, "--dump-dom")
}

// screenshotDashboard is dumpDashboard taking a PNG of the page instead: to
// $IDUNNO_DASHBOARD_PNG if set (to look at), else into a temporary directory.
func screenshotDashboard(t *testing.T, url string, budget time.Duration) string {
	path := os.Getenv("IDUNNO_DASHBOARD_PNG")
	if path == "" {
		path = filepath.Join(t.TempDir(), "dashboard.png")
	}
	chromium(t, url, budget, "--screenshot="+path, "--window-size=1500,2600", "--hide-scrollbars")
	return path
}

// chromium runs headless Chromium on url with budget of virtual time and returns its output.
func chromium(t *testing.T, url string, budget time.Duration, what ...string) string {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds())}, what...)
	cmd := exec.Command("/usr/bin/chromium", append(args, url)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromium (Debian packages chromium and chromium-driver; make test-deps installs them): %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium: %v", err)
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("chromium did not finish in 90 s")
	}
	return out.String()
}

var (
	rowRE  = regexp.MustCompile(`(?s)<tr data-job="([^"]+)">(.*?)</tr>`)
	cellRE = regexp.MustCompile(`(?s)<td class="(\w+)">([^<]*)</td>`)
	spanRE = regexp.MustCompile(`<span id="(\w+)">([^<]*)</span>`)
)

// shownJobs returns, per job row of the dashboard, its cells by class.
func shownJobs(dom string) map[string]map[string]string {
	r := map[string]map[string]string{}
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		cells := map[string]string{}
		for _, c := range cellRE.FindAllStringSubmatch(m[2], -1) {
			cells[c[1]] = c[2]
		}
		r[m[1]] = cells
	}
	return r
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("dashboard shows %q where a number belongs", s)
	}
	return v
}

// workers formats a job's workers as the dashboard shows them.
func workers(s jobStats) string {
	var names []string
	for _, w := range s.Workers {
		names = append(names, fmt.Sprintf("%s (%.2f)", w.Name, w.Share))
	}
	return strings.Join(names, ", ")
}

func dashboardMatchesJobStats(t *testing.T, dir, dashURL string) {
	cli(t, dir, "train", "start")
	cli(t, dir, "train", "add", "--name", "lenet", "--model", "zoo:lenet5")
	cli(t, dir, "train", "add", "--name", "resnet", "--model", "zoo:resnet18", "--input-shape", "1,64,64", "--classes", "10")
	cli(t, dir, "train", "stop")
	cli(t, dir, "inference", "start")
	cli(t, dir, "put", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "fm-test.gz")
	cli(t, dir, "job", "add", "--name", "quick", "--model", "lenet", "--data", "fm-test.gz", "--batch", "16")
	cli(t, dir, "job", "add", "--name", "slow", "--model", "resnet", "--data", "fm-test.gz", "--batch", "8", "--resize", "64x64")
	t.Cleanup(func() {
		cmd := exec.Command(bin, "job", "remove", "slow")
		cmd.Env = append(os.Environ(), "IDUNNO_CLUSTER="+dir)
		cmd.Run()
	})
	cli(t, dir, "job", "wait", "quick", "--timeout", "3m")
	// Once its 10 s rate window has passed, a finished job's statistics stand still.
	deadline := time.Now().Add(30 * time.Second)
	for stats(t, dir, "quick").Rate10s != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the finished job's 10 s rate never reached 0")
		}
		time.Sleep(time.Second)
	}
	before := map[string]jobStats{"quick": stats(t, dir, "quick"), "slow": stats(t, dir, "slow")}
	// The running job's rate and latency spread move both ways, so a figure the dashboard
	// fetched between the two snapshots need not lie between them: its job stats are also
	// sampled all the while the dashboard runs, and each figure must lie within them.
	stopSampling := make(chan struct{})
	sampled := make(chan []jobStats, 1)
	go func() {
		var got []jobStats
		defer func() { sampled <- got }()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			cmd := exec.Command(bin, "job", "stats", "slow", "--json")
			cmd.Env = append(os.Environ(), "IDUNNO_CLUSTER="+dir)
			out, err := cmd.Output()
			var st jobStats
			if err == nil && json.Unmarshal(out, &st) == nil {
				got = append(got, st)
			}
		}
	}()
	dom := dumpDashboard(t, dashURL, 3500*time.Millisecond)
	close(stopSampling)
	during := map[string][]jobStats{"slow": <-sampled}
	after := map[string]jobStats{"quick": stats(t, dir, "quick"), "slow": stats(t, dir, "slow")}

	spans := map[string]string{}
	for _, m := range spanRE.FindAllStringSubmatch(dom, -1) {
		spans[m[1]] = m[2]
	}
	if spans["node"] != "node1" || spans["members"] != "3" {
		t.Errorf("dashboard header: node %q members %q", spans["node"], spans["members"])
	}
	if n, _ := strconv.Atoi(spans["refreshes"]); n < 2 {
		t.Errorf("dashboard refreshed %q times in 3.5 s, want one a second", spans["refreshes"])
	}
	shown := shownJobs(dom)
	if len(shown) != 2 {
		t.Fatalf("dashboard shows jobs %v, want quick and slow:\n%s", shown, dom)
	}
	for _, job := range []string{"quick", "slow"} {
		b, a, s := before[job], after[job], shown[job]
		if s == nil {
			t.Fatalf("dashboard lacks job %s", job)
		}
		if num(t, s["total"]) != float64(a.Total) {
			t.Errorf("%s: total shown %s, job stats %d", job, s["total"], a.Total)
		}
		done := num(t, s["done"])
		if done < float64(b.Done) || done > float64(a.Done) {
			t.Errorf("%s: done shown %v, job stats %d before and %d after", job, done, b.Done, a.Done)
		}
		if w := s["workers"]; w != workers(b) && w != workers(a) { // shares may move between snapshots
			t.Errorf("%s: workers shown %q, job stats %q before and %q after", job, w, workers(b), workers(a))
		}
		// Each figure shown must lie within what job stats said before, during and after
		// the dashboard ran (equal to all of them once a job has finished and its 10 s rate
		// window has passed).
		within := func(what string, shown string, get func(jobStats) float64) {
			v := num(t, shown)
			lo, hi := math.Min(get(b), get(a)), math.Max(get(b), get(a))
			for _, d := range during[job] {
				lo, hi = math.Min(lo, get(d)), math.Max(hi, get(d))
			}
			if v < lo-0.0051 || v > hi+0.0051 {
				t.Errorf("%s: %s shown %s, job stats %v before and %v after (%d samples between: %v to %v)",
					job, what, shown, get(b), get(a), len(during[job]), lo, hi)
			}
		}
		within("rate", s["rate"], func(j jobStats) float64 { return j.Rate10s })
		for _, k := range []string{"mean", "stddev", "p50", "p90", "p95", "p99"} {
			within(k, s[k], func(j jobStats) float64 { return j.LatencyMs[k] })
		}
	}
	if len(after["slow"].Workers) == 0 && after["slow"].Done < after["slow"].Total {
		t.Errorf("the running job has no workers in job stats: %+v", after["slow"])
	}
	dashboardViews(t, dir, dom)
	png := screenshotDashboard(t, dashURL, 3500*time.Millisecond)
	f, err := os.Open(png)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png_.Decode(f)
	if err != nil || img.Bounds().Dx() < 1000 || img.Bounds().Dy() < 2000 {
		t.Fatalf("dashboard screenshot %s: %v %v", png, err, img.Bounds())
	}
	t.Logf("dashboard screenshot: %s", png)
}

var (
	nodeRowRE  = regexp.MustCompile(`(?s)<tr data-node="([^"]+)"[^>]*>(.*?)</tr>`)
	trainRowRE = regexp.MustCompile(`<tr data-train="([^"]+)"`)
	canvasRE   = regexp.MustCompile(`<canvas id="chart-(\w+)"[^>]*data-points="(\d+)"`)
	eventRE    = regexp.MustCompile(`<li data-kind="([^"]+)"[^>]*>(.*?)</li>`)
)

// dashboardViews checks the dashboard's node table, training jobs, history charts and
// events against the cluster: three live nodes with one coordinator, the training jobs of
// `idunno train list`, charts with points, and the jobs' start and end among the events.
func dashboardViews(t *testing.T, dir, dom string) {
	roles := map[string]string{}
	tasksDone := 0
	for _, m := range nodeRowRE.FindAllStringSubmatch(dom, -1) {
		cells := map[string]string{}
		for _, c := range cellRE.FindAllStringSubmatch(m[2], -1) {
			cells[c[1]] = c[2]
		}
		if cells["state"] != "alive" {
			t.Errorf("node %s shown %q", m[1], cells["state"])
		}
		if cpu, err := strconv.ParseFloat(cells["cpu"], 64); err != nil || cpu < 0 {
			t.Errorf("node %s CPU shown %q", m[1], cells["cpu"])
		}
		if mem, err := strconv.ParseFloat(cells["memory"], 64); err != nil || mem <= 0 {
			t.Errorf("node %s memory shown %q", m[1], cells["memory"])
		}
		roles[m[1]] = cells["role"]
		var running, queued, done int
		if n, err := fmt.Sscanf(cells["tasks"], "%d / %d / %d", &running, &queued, &done); n != 3 || err != nil || running < 0 || queued < 0 || done < 0 {
			t.Errorf("node %s tasks shown %q, want running / queued / done", m[1], cells["tasks"])
		}
		tasksDone += done
	}
	// Every task of the finished job quick was done by some worker (once or more).
	var jobs []struct {
		Name  string `json:"name"`
		Tasks int    `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(cli(t, dir, "job", "list", "--json")), &jobs); err != nil {
		t.Fatal(err)
	}
	quickTasks := -1
	for _, j := range jobs {
		if j.Name == "quick" {
			quickTasks = j.Tasks
		}
	}
	if quickTasks < 1 || tasksDone < quickTasks {
		t.Errorf("node table's tasks done add up to %d; job quick has %d tasks (-1: not listed)", tasksDone, quickTasks)
	}
	coords := 0
	for _, r := range roles {
		if r == "coordinator" {
			coords++
		}
	}
	if len(roles) != 3 || coords != 1 {
		t.Errorf("node table roles %v, want node0..node2 with one coordinator", roles)
	}
	var trains []struct {
		Name   string    `json:"name"`
		Losses []float32 `json:"losses"`
	}
	if err := json.Unmarshal([]byte(cli(t, dir, "train", "list", "--json")), &trains); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, m := range trainRowRE.FindAllStringSubmatch(dom, -1) {
		shown[m[1]] = true
	}
	losses := 0
	for _, tr := range trains {
		losses += len(tr.Losses)
		if !shown[tr.Name] {
			t.Errorf("training job %s not shown (shown: %v)", tr.Name, shown)
		}
	}
	points := map[string]int{}
	for _, m := range canvasRE.FindAllStringSubmatch(dom, -1) {
		points[m[1]], _ = strconv.Atoi(m[2])
	}
	if points["jobrate"] < 2 || points["joblatency"] < 2 || points["loss"] != losses {
		t.Errorf("chart points %v, want job charts drawn and %d loss points", points, losses)
	}
	kinds := map[string]bool{}
	for _, m := range eventRE.FindAllStringSubmatch(dom, -1) {
		if strings.Contains(m[2], "quick") {
			kinds[m[1]] = true
		}
	}
	if !kinds["job started"] || !kinds["job finished"] {
		t.Errorf("events about job quick: %v, want it started and finished", kinds)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
