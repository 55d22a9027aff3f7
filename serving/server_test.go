package serving

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/kernel/onnx"
)

// doubleMeta is a fake model: y = 2x, x and y FP32 [-1, 4].
var doubleMeta = ModelMetadata{
	Name: "double", Versions: []string{"1"}, Platform: "fake",
	Inputs:  []TensorMeta{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 4}}},
	Outputs: []TensorMeta{{Name: "y", Datatype: "FP32", Shape: []int64{-1, 4}}},
}

// addMeta is a fake model with two inputs: s = a + b, FP32 [-1, 2].
var addMeta = ModelMetadata{
	Name: "add", Versions: []string{"1"}, Platform: "fake",
	Inputs:  []TensorMeta{{Name: "a", Datatype: "FP32", Shape: []int64{-1, 2}}, {Name: "b", Datatype: "FP32", Shape: []int64{-1, 2}}},
	Outputs: []TensorMeta{{Name: "s", Datatype: "FP32", Shape: []int64{-1, 2}}, {Name: "d", Datatype: "FP32", Shape: []int64{-1, 2}}},
}

// idsMeta is a fake model over integers: sum (INT32 [-1]) is each row's sum of ids
// (INT64 [-1, 2]), pos (BOOL [-1, 2]) whether each id is positive.
var idsMeta = ModelMetadata{
	Name: "ids", Versions: []string{"1"}, Platform: "fake",
	Inputs:  []TensorMeta{{Name: "ids", Datatype: "INT64", Shape: []int64{-1, 2}}},
	Outputs: []TensorMeta{{Name: "sum", Datatype: "INT32", Shape: []int64{-1}}, {Name: "pos", Datatype: "BOOL", Shape: []int64{-1, 2}}},
}

func ids(in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x := in[0]
	rows := int(x.Dims[0])
	sum := &onnx.Tensor{Name: "sum", DType: onnx.Int32, Dims: []int64{int64(rows)}, I64: make([]int64, rows)}
	pos := &onnx.Tensor{Name: "pos", DType: onnx.Bool, Dims: []int64{int64(rows), 2}, I64: make([]int64, 2*rows)}
	for i, v := range x.I64 {
		sum.I64[i/2] += v
		if v > 0 {
			pos.I64[i] = 1
		}
	}
	return []*onnx.Tensor{sum, pos}, nil
}

func double(in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x := in[0]
	y := &onnx.Tensor{Name: "y", DType: onnx.Float, Dims: append([]int64(nil), x.Dims...), F32: make([]float32, len(x.F32))}
	for i, v := range x.F32 {
		y.F32[i] = 2 * v
	}
	return []*onnx.Tensor{y}, nil
}

func add(in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	a, b := in[0], in[1]
	s := &onnx.Tensor{Name: "s", DType: onnx.Float, Dims: a.Dims, F32: make([]float32, len(a.F32))}
	d := &onnx.Tensor{Name: "d", DType: onnx.Float, Dims: a.Dims, F32: make([]float32, len(a.F32))}
	for i := range a.F32 {
		s.F32[i], d.F32[i] = a.F32[i]+b.F32[i], a.F32[i]-b.F32[i]
	}
	return []*onnx.Tensor{s, d}, nil
}

type testServer struct {
	url   string
	srv   *Server
	fake  *FakeBackend
	stats *StaticStats
}

// startServer runs a Server with the fake models on a loopback port until the test ends.
func startServer(t *testing.T, cfg Config, batch BatchConfig) *testServer {
	t.Helper()
	fake := NewFakeBackend()
	fake.Add(doubleMeta, double)
	fake.Add(addMeta, add)
	fake.Add(idsMeta, ids)
	local := NewLocalModels(fake, 5*time.Second)
	for _, m := range []string{"double", "add", "ids"} {
		if err := local.Serve(ServedModel{Name: m, Batch: batch}); err != nil {
			t.Fatal(err)
		}
	}
	s := NewServer(cfg, local)
	stats := &StaticStats{}
	s.Stats, s.Gauges = stats, stats
	t.Cleanup(func() { local.Close() }) // runs after serveHTTP's shutdown
	return &testServer{url: serveHTTP(t, s), srv: s, fake: fake, stats: stats}
}

// serveHTTP runs s on a loopback port until the test ends and returns its base URL.
func serveHTTP(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		httpClient.CloseIdleConnections() // Shutdown waits for open connections
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	})
	return "http://" + ln.Addr().String()
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func do(t *testing.T, method, url string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func getJSON(t *testing.T, url string, want int, v any) {
	t.Helper()
	code, _, b := do(t, "GET", url, nil, nil)
	if code != want {
		t.Fatalf("GET %s: status %d, want %d: %s", url, code, want, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
}

type inferResp struct {
	ModelName string `json:"model_name"`
	ID        string `json:"id"`
	Outputs   []struct {
		Name       string          `json:"name"`
		Datatype   string          `json:"datatype"`
		Shape      []int64         `json:"shape"`
		Data       []float32       `json:"data"`
		Parameters map[string]int  `json:"parameters"`
		Raw        json.RawMessage `json:"-"`
	} `json:"outputs"`
}

func infer(t *testing.T, base, model, body string) (int, inferResp, string) {
	t.Helper()
	code, _, b := do(t, "POST", base+"/v2/models/"+model+"/infer", []byte(body), nil)
	var r inferResp
	if code == 200 {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("infer response: %v: %s", err, b)
		}
	}
	return code, r, string(b)
}

func TestHealthAndServerMetadata(t *testing.T) {
	ts := startServer(t, Config{Node: "n0"}, BatchConfig{})
	var live, ready map[string]bool
	getJSON(t, ts.url+"/v2/health/live", 200, &live)
	getJSON(t, ts.url+"/v2/health/ready", 200, &ready)
	if !live["live"] || !ready["ready"] {
		t.Fatalf("live %v ready %v", live, ready)
	}
	var meta map[string]any
	getJSON(t, ts.url+"/v2", 200, &meta)
	if meta["name"] != "idunno" {
		t.Fatalf("server metadata %v", meta)
	}
	code, _, b := do(t, "POST", ts.url+"/v2/health/live", nil, nil)
	if code != 405 || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("POST health: %d %s", code, b)
	}
}

func TestModelMetadataAndReady(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	var m ModelMetadata
	getJSON(t, ts.url+"/v2/models/add", 200, &m)
	if m.Name != "add" || len(m.Inputs) != 2 || m.Inputs[1].Name != "b" || m.Inputs[0].Datatype != "FP32" ||
		fmt.Sprint(m.Inputs[0].Shape) != "[-1 2]" || len(m.Outputs) != 2 {
		t.Fatalf("metadata %+v", m)
	}
	getJSON(t, ts.url+"/v2/models/add/versions/1", 200, &m)
	var r map[string]any
	getJSON(t, ts.url+"/v2/models/double/ready", 200, &r)
	if r["ready"] != true {
		t.Fatalf("ready %v", r)
	}
	for _, u := range []string{"/v2/models/nope", "/v2/models/nope/ready", "/v2/models/add/versions/7", "/v2/models/add/bogus", "/nothing"} {
		var e map[string]string
		getJSON(t, ts.url+u, 404, &e)
		if e["error"] == "" {
			t.Fatalf("%s: no error message", u)
		}
	}
}

func TestInferJSON(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	code, r, b := infer(t, ts.url, "double", `{"id":"q1","inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8.5]}]}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	if r.ModelName != "double" || r.ID != "q1" || len(r.Outputs) != 1 || r.Outputs[0].Name != "y" ||
		r.Outputs[0].Datatype != "FP32" || fmt.Sprint(r.Outputs[0].Shape) != "[2 4]" ||
		fmt.Sprint(r.Outputs[0].Data) != "[2 4 6 8 10 12 14 17]" {
		t.Fatalf("response %s", b)
	}
	// Nested data, inputs in another order than the model's, one output selected.
	code, r, b = infer(t, ts.url, "add", `{"inputs":[{"name":"b","shape":[1,2],"datatype":"FP32","data":[[10,20]]},
		{"name":"a","shape":[1,2],"datatype":"FP32","data":[[1,2]]}],"outputs":[{"name":"d"}]}`)
	if code != 200 || len(r.Outputs) != 1 || r.Outputs[0].Name != "d" || fmt.Sprint(r.Outputs[0].Data) != "[-9 -18]" {
		t.Fatalf("add: %d %s", code, b)
	}
}

func TestInferBinaryExtension(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	js := []byte(`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}],` +
		`"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`)
	var bin []byte
	for _, v := range []float32{1, -2, 3.25, 0} {
		bin = binary.LittleEndian.AppendUint32(bin, math.Float32bits(v))
	}
	code, hdr, b := do(t, "POST", ts.url+"/v2/models/double/infer", append(js, bin...),
		map[string]string{"Inference-Header-Content-Length": fmt.Sprint(len(js)), "Content-Type": "application/octet-stream"})
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var hl int
	fmt.Sscan(hdr.Get("Inference-Header-Content-Length"), &hl)
	if hl <= 0 || hl > len(b) {
		t.Fatalf("response header length %q, body %d bytes", hdr.Get("Inference-Header-Content-Length"), len(b))
	}
	var r inferResp
	if err := json.Unmarshal(b[:hl], &r); err != nil {
		t.Fatal(err)
	}
	if r.Outputs[0].Parameters["binary_data_size"] != 16 || len(b)-hl != 16 {
		t.Fatalf("binary output: %s + %d bytes", b[:hl], len(b)-hl)
	}
	var got []float32
	for i := hl; i < len(b); i += 4 {
		got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	if fmt.Sprint(got) != "[2 -4 6.5 0]" {
		t.Fatalf("binary output values %v", got)
	}
	// Request-level binary_data_output with JSON input.
	code, hdr, b = do(t, "POST", ts.url+"/v2/models/double/infer",
		[]byte(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,1,1,1]}]}`), nil)
	if code != 200 || hdr.Get("Inference-Header-Content-Length") == "" || !bytes.Contains(b, []byte(`"binary_data_size":16`)) {
		t.Fatalf("binary_data_output: %d %q", code, b)
	}
}

func TestInferBadInputs(t *testing.T) {
	ts := startServer(t, Config{Limits: Limits{MaxBodyBytes: 4096}}, BatchConfig{})
	x := func(shape, dtype, data string) string {
		return `{"inputs":[{"name":"x","shape":` + shape + `,"datatype":"` + dtype + `","data":` + data + `}]}`
	}
	big := `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[` + strings.Repeat("1,", 3000) + `1]}]}`
	cases := []struct {
		name, model, body string
		hdr               map[string]string
		code              int
		msg               string
	}{
		{"malformed JSON", "double", `{"inputs":[{"name":`, nil, 400, "malformed JSON"},
		{"not an object", "double", `[1,2]`, nil, 400, "malformed JSON"},
		{"empty body", "double", ``, nil, 400, "malformed JSON"},
		{"no inputs", "double", `{"inputs":[]}`, nil, 400, "no inputs"},
		{"datatype not convertible without loss", "double", x("[1,4]", "INT64", "[1,2,3,16777217]"), nil, 400, "INT64 cannot be converted to the model's FP32"},
		{"floats for an integer model are not truncated", "ids", `{"inputs":[{"name":"ids","shape":[1,2],"datatype":"FP32","data":[1.5,2]}]}`, nil, 400, "FP32 cannot be converted to the model's INT64"},
		{"unknown datatype", "double", x("[1,4]", "FP8", "[1,2,3,4]"), nil, 400, "unsupported datatype"},
		{"wrong shape", "double", x("[1,5]", "FP32", "[1,2,3,4,5]"), nil, 400, "has shape [1 5]"},
		{"wrong rank", "double", x("[4]", "FP32", "[1,2,3,4]"), nil, 400, "has shape [4]"},
		{"zero batch", "double", x("[0,4]", "FP32", "[]"), nil, 400, "at least 1"},
		{"negative dimension", "double", x("[-1,4]", "FP32", "[1,2,3,4]"), nil, 400, "bad dimension"},
		{"too few elements", "double", x("[1,4]", "FP32", "[1,2,3]"), nil, 400, "3 elements"},
		{"too many elements", "double", x("[1,4]", "FP32", "[1,2,3,4,5]"), nil, 400, "more than"},
		{"string in data", "double", x("[1,4]", "FP32", `[1,2,"3",4]`), nil, 400, "not an FP32"},
		{"data not an array", "double", x("[1,4]", "FP32", `7`), nil, 400, "array"},
		{"no data", "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32"}]}`, nil, 400, "no data"},
		{"missing input", "add", `{"inputs":[{"name":"a","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`, nil, 400, "takes 2 inputs"},
		{"wrong input name", "double", `{"inputs":[{"name":"z","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`, nil, 400, `"x" is missing`},
		{"duplicate input", "add", `{"inputs":[{"name":"a","shape":[1,2],"datatype":"FP32","data":[1,2]},{"name":"a","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`, nil, 400, "twice"},
		{"batch disagreement", "add", `{"inputs":[{"name":"a","shape":[1,2],"datatype":"FP32","data":[1,2]},{"name":"b","shape":[2,2],"datatype":"FP32","data":[1,2,3,4]}]}`, nil, 400, "disagree"},
		{"unknown output", "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"q"}]}`, nil, 400, `no output "q"`},
		{"bad binary parameter", "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":"a"}}]}`, nil, 400, "binary_data_size"},
		{"binary size mismatch", "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":12}}]}`, nil, 400, "need 16 bytes"},
		{"binary section missing", "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}`, nil, 400, "too short"},
		{"header length too big", "double", x("[1,4]", "FP32", "[1,2,3,4]"), map[string]string{"Inference-Header-Content-Length": "99999"}, 400, "does not fit"},
		{"header length garbage", "double", x("[1,4]", "FP32", "[1,2,3,4]"), map[string]string{"Inference-Header-Content-Length": "x"}, 400, "Inference-Header-Content-Length"},
		{"trailing binary bytes", "double", x("[1,4]", "FP32", "[1,2,3,4]") + "junk", map[string]string{"Inference-Header-Content-Length": fmt.Sprint(len(x("[1,4]", "FP32", "[1,2,3,4]")))}, 400, "binary section"},
		{"oversize body", "double", big, nil, 413, "limit of 4096"},
		{"unknown model", "nope", x("[1,4]", "FP32", "[1,2,3,4]"), nil, 404, `unknown model "nope"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, b := do(t, "POST", ts.url+"/v2/models/"+tc.model+"/infer", []byte(tc.body), tc.hdr)
			var e map[string]string
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("error body is not JSON: %q", b)
			}
			if code != tc.code || !strings.Contains(e["error"], tc.msg) {
				t.Fatalf("status %d error %q; want %d containing %q", code, e["error"], tc.code, tc.msg)
			}
		})
	}
	code, _, b := do(t, "GET", ts.url+"/v2/models/double/infer", nil, nil)
	if code != 405 {
		t.Fatalf("GET infer: %d %s", code, b)
	}
	// The server keeps serving good requests after all of that.
	if code, _, b := infer(t, ts.url, "double", x("[1,4]", "FP32", "[1,2,3,4]")); code != 200 {
		t.Fatalf("good request after bad ones: %d %s", code, b)
	}
}

func TestQueueFullGets503(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{MaxBatch: 1, MaxQueue: 2})
	gate := make(chan struct{})
	ts.fake.SetGate("double", gate)
	body := `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	var wg sync.WaitGroup
	codes := make(chan int, 3)
	send := func() {
		wg.Go(func() {
			c, _, _ := infer(t, ts.url, "double", body)
			codes <- c
		})
	}
	send() // this one runs, blocked at the gate
	waitFor(t, func() bool { return len(ts.fake.CallRows()) == 1 })
	send() // these two wait in the queue
	send()
	waitFor(t, func() bool { return ts.srv.Local.Depths()["double"] == 2 })
	code, _, b := infer(t, ts.url, "double", body)
	if code != 503 || !strings.Contains(b, "queue is full") {
		t.Fatalf("request over the bound: %d %s", code, b)
	}
	// Another model is not affected by the full queue.
	if code, _, b := infer(t, ts.url, "add", `{"inputs":[{"name":"a","shape":[1,2],"datatype":"FP32","data":[1,2]},{"name":"b","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`); code != 200 {
		t.Fatalf("other model while one is full: %d %s", code, b)
	}
	for range 3 {
		gate <- struct{}{}
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("queued request got %d", c)
		}
	}
}

func TestDynamicBatchingSplitsResults(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{MaxBatch: 8, MaxDelay: 20 * time.Second})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 { // 4 requests of 2 rows: one full batch of 8
		wg.Go(func() {
			v := float32(i * 10)
			body := fmt.Sprintf(`{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[%v,1,2,3,%v,5,6,7]}]}`, v, v+1)
			code, r, b := infer(t, ts.url, "double", body)
			want := fmt.Sprint([]float32{2 * v, 2, 4, 6, 2 * (v + 1), 10, 12, 14})
			if code != 200 || fmt.Sprint(r.Outputs[0].Shape) != "[2 4]" || fmt.Sprint(r.Outputs[0].Data) != want {
				errs <- fmt.Errorf("request %d: %d %s, want data %s", i, code, b, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if calls := ts.fake.CallRows(); fmt.Sprint(calls) != "[8]" {
		t.Fatalf("backend calls (rows) %v, want one batch of 8", calls)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{MaxBatch: 4})
	ts.stats.SetJobs([]JobStats{{Job: "lenet", Done: 120, Total: 1000, Rate10s: 12.5,
		LatencyMs: LatencyMs{Mean: 3, P50: 2.5, P90: 4, P95: 5, P99: 9}, Workers: []WorkerShare{{"node1", 0.5}, {"node2", 1}},
		Histogram: &LatencyHistogram{BoundsMS: []float64{2.5, 10}, Counts: []int64{60, 119}, Count: 120, SumMS: 360}}})
	ts.stats.SetGauges(ClusterGauges{Members: 7, SDFSBytesStored: 123456, ReplicationBacklog: 3})
	for range 3 {
		if code, _, b := infer(t, ts.url, "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`); code != 200 {
			t.Fatal(b)
		}
	}
	infer(t, ts.url, "double", `{"inputs":[]}`)
	code, hdr, b := do(t, "GET", ts.url+"/metrics", nil, nil)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", code, hdr.Get("Content-Type"))
	}
	text := string(b)
	for _, want := range []string{
		`idunno_http_requests_total{code="200",model="double"} 3`,
		`idunno_http_requests_total{code="400",model="double"} 1`,
		`idunno_http_request_duration_seconds_count{model="double"} 4`,
		`idunno_http_request_duration_seconds_bucket{model="double",le="+Inf"} 4`,
		`idunno_model_batch_rows_count{model="double"} 3`,
		`idunno_model_queue_depth{model="double"} 0`,
		`idunno_model_queue_depth{model="add"} 0`,
		`idunno_job_queries_completed_total{job="lenet"} 120`,
		`idunno_job_queries{job="lenet"} 1000`,
		`idunno_job_query_rate{job="lenet"} 12.5`,
		`idunno_job_query_latency_seconds{job="lenet",quantile="0.99"} 0.009`,
		`idunno_job_query_latency_seconds_count{job="lenet"} 120`,
		`idunno_job_worker_share{job="lenet",worker="node1"} 0.5`,
		`idunno_job_query_latency_bucketed_seconds_bucket{job="lenet",le="0.0025"} 60`,
		`idunno_job_query_latency_bucketed_seconds_bucket{job="lenet",le="0.01"} 119`,
		`idunno_job_query_latency_bucketed_seconds_bucket{job="lenet",le="+Inf"} 120`,
		`idunno_job_query_latency_bucketed_seconds_sum{job="lenet"} 0.36`,
		`idunno_membership_size 7`,
		`idunno_sdfs_bytes_stored 123456`,
		`idunno_sdfs_replication_backlog 3`,
		"# TYPE idunno_http_request_duration_seconds histogram",
	} {
		if !strings.Contains(text, want+"\n") && !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	checkExposition(t, text)
	// A failing stats source leaves the rest of /metrics intact.
	ts.stats.SetErr(errors.New("coordinator unreachable"))
	_, _, b = do(t, "GET", ts.url+"/metrics", nil, nil)
	if !strings.Contains(string(b), "idunno_membership_size 7") || strings.Contains(string(b), "idunno_job_queries_completed_total{") {
		t.Fatalf("metrics with failing stats source:\n%s", b)
	}
}

// checkExposition checks the lines of a Prometheus text exposition: comments or
// `name{labels} value` with a parseable value, every sample's family declared by a TYPE line.
func checkExposition(t *testing.T, text string) {
	t.Helper()
	typed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			typed[strings.Fields(f)[0]] = true
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad line %q", line)
		}
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil && line[i+1:] != "+Inf" {
			t.Fatalf("bad value in %q", line)
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if typed[strings.TrimSuffix(name, suf)] {
				base = strings.TrimSuffix(name, suf)
			}
		}
		if !typed[base] {
			t.Fatalf("sample %q has no TYPE line", line)
		}
	}
}

func TestDashboardServedAndJSON(t *testing.T) {
	ts := startServer(t, Config{Node: "node3"}, BatchConfig{MaxBatch: 4, MaxDelay: 5 * time.Millisecond})
	ts.stats.SetJobs([]JobStats{{Job: "j1", Done: 5, Total: 10}})
	ts.stats.SetGauges(ClusterGauges{Members: 4, SDFSBytesStored: 99})
	code, hdr, b := do(t, "GET", ts.url+"/", nil, nil)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") || !bytes.Contains(b, []byte("/api/dashboard")) {
		t.Fatalf("dashboard page: %d %s", code, hdr.Get("Content-Type"))
	}
	for _, outside := range []string{"http://", "https://", "//cdn"} {
		if bytes.Contains(b, []byte(outside)) {
			t.Fatalf("dashboard refers to an outside asset (%s)", outside)
		}
	}
	var d DashboardData
	getJSON(t, ts.url+"/api/dashboard", 200, &d)
	if d.Node != "node3" || d.Members != 4 || d.SDFSBytes != 99 || len(d.Jobs) != 1 || d.Jobs[0].Job != "j1" ||
		len(d.Models) != 3 || d.Models[0].Name != "add" || d.Models[1].MaxBatch != 4 || d.Models[1].MaxDelayMs != 5 {
		t.Fatalf("dashboard data %+v", d)
	}
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

var httpNewRequest = http.NewRequest

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestInferTimeoutIs504AndOthersGoOn(t *testing.T) {
	ts := startServer(t, Config{InferTimeout: 150 * time.Millisecond}, BatchConfig{})
	gate := make(chan struct{})
	ts.fake.SetGate("double", gate)
	defer close(gate)
	start := time.Now()
	code, _, b := infer(t, ts.url, "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`)
	if code != 504 || !strings.Contains(b, "deadline exceeded") || time.Since(start) > 5*time.Second {
		t.Fatalf("stuck model: %d %s after %v", code, b, time.Since(start))
	}
	if code, _, b := infer(t, ts.url, "add", `{"inputs":[{"name":"a","shape":[1,2],"datatype":"FP32","data":[1,2]},{"name":"b","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`); code != 200 {
		t.Fatalf("other model while one is stuck: %d %s", code, b)
	}
}
