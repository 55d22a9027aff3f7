package serving

// Compatibility with the KServe v2 / Open Inference Protocol and Triton's extensions
// (model configuration, statistics, model repository, schedule policy, parameters),
// written from the protocol documents: each test names the part of the protocol it checks.
//
// No test here drives the endpoint with a client we did not write: none can be installed on
// the project's machines (checked 2026-11-27: the Go module proxy refuses
// github.com/triton-inference-server/client, github.com/sunhailin-Leo/triton-service-go,
// github.com/Trendyol/go-triton-client and github.com/kserve/kserve; we found no KServe v2 or
// Triton HTTP client in the npm registry, whose one Triton client we found,
// @mgcrea/triton-client, speaks gRPC and is not served; Debian packages none; Python's
// tritonclient is on a registry these machines do not reach). Prometheus and Chromium, which
// can be installed, are the third-party clients of /metrics and of the dashboard
// (metrics_test.go, dashboard_test.go, serving/e2e).

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/kernel/onnx"
)

// Server metadata lists the extensions a client may rely on.
func TestServerMetadataListsExtensions(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	var md struct {
		Name       string   `json:"name"`
		Version    string   `json:"version"`
		Extensions []string `json:"extensions"`
	}
	getJSON(t, ts.url+"/v2", 200, &md)
	for _, e := range []string{"binary_tensor_data", "model_configuration", "statistics", "model_repository"} {
		if !slices.Contains(md.Extensions, e) {
			t.Errorf("extensions %v lack %q", md.Extensions, e)
		}
	}
}

// Model configuration extension: GET v2/models/${MODEL_NAME}[/versions/${MODEL_VERSION}]/config.
func TestModelConfigExtension(t *testing.T) {
	ts := startServer(t, Config{InferTimeout: 3 * time.Second}, BatchConfig{MaxBatch: 8, MaxDelay: 2 * time.Millisecond, MaxQueue: 100})
	for _, path := range []string{"/v2/models/ids/config", "/v2/models/ids/versions/1/config"} {
		var c map[string]any
		getJSON(t, ts.url+path, 200, &c)
		b, _ := json.Marshal(c)
		for _, want := range []string{
			`"name":"ids"`, `"platform":"fake"`, `"max_batch_size":8`,
			`"input":[{"data_type":"TYPE_INT64","dims":[2],"name":"ids"}]`,
			`"output":[{"data_type":"TYPE_INT32","dims":[],"name":"sum"},{"data_type":"TYPE_BOOL","dims":[2],"name":"pos"}]`,
			`"max_queue_delay_microseconds":2000`, `"preferred_batch_size":[8]`, `"max_queue_size":100`,
			`"default_timeout_microseconds":3000000`, `"priority_levels":10`, `"default_priority_level":5`,
			`"instance_group":[{"count":1,"kind":"KIND_CPU","name":"ids"}]`,
			`"version_policy":{"latest":{"num_versions":1}}`,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("GET %s: config %s lacks %s", path, b, want)
			}
		}
	}
	getJSON(t, ts.url+"/v2/models/nope/config", 404, nil)
	getJSON(t, ts.url+"/v2/models/ids/versions/2/config", 404, nil)
	if code, _, _ := do(t, "POST", ts.url+"/v2/models/ids/config", nil, nil); code != 405 {
		t.Fatalf("POST config: %d, want 405", code)
	}
}

// echoMeta is a fake FP32 model that returns its input (y = x, [-1, 3]).
var echoMeta = ModelMetadata{
	Name: "echo", Versions: []string{"1"}, Platform: "fake",
	Inputs:  []TensorMeta{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 3}}},
	Outputs: []TensorMeta{{Name: "y", Datatype: "FP32", Shape: []int64{-1, 3}}},
}

func echo(in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	return []*onnx.Tensor{{Name: "y", DType: onnx.Float, Dims: in[0].Dims, F32: in[0].F32}}, nil
}

// addModel serves one more fake model on a test server.
func (ts *testServer) addModel(t *testing.T, meta ModelMetadata, fn FakeFunc, batch BatchConfig) {
	t.Helper()
	ts.fake.Add(meta, fn)
	if err := ts.srv.Local.Serve(ServedModel{Name: meta.Name, Batch: batch}); err != nil {
		t.Fatal(err)
	}
}

// binaryBody is a request whose one input x travels in the binary tensor extension.
func binaryBody(name, dtype string, shape []int64, raw []byte) ([]byte, map[string]string) {
	js, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": name, "shape": shape, "datatype": dtype,
		"parameters": map[string]any{"binary_data_size": len(raw)}}}})
	return append(js, raw...), map[string]string{"Inference-Header-Content-Length": fmt.Sprint(len(js))}
}

// Tensor data types (KServe v2 "Tensor Data Types"): every one is accepted, in JSON and in
// the binary extension, and converted to the model's FP32 where no value changes.
func TestEveryDatatypeReachesAnFP32Model(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	ts.addModel(t, echoMeta, echo, BatchConfig{})
	le := binary.LittleEndian
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	u16 := func(vs ...uint16) []byte {
		var b []byte
		for _, v := range vs {
			b = le.AppendUint16(b, v)
		}
		return b
	}
	bytesElems := func(ss ...string) []byte {
		var b []byte
		for _, s := range ss {
			b = le.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
		return b
	}
	cases := []struct {
		dtype string
		json  string // the "data" member
		bin   []byte // the same values in the binary extension
		want  string
	}{
		{"FP32", "[1.5,-2,3]", cat(le.AppendUint32(nil, math.Float32bits(1.5)), le.AppendUint32(nil, math.Float32bits(-2)), le.AppendUint32(nil, math.Float32bits(3))), "[1.5 -2 3]"},
		{"FP16", "[1.5,-2,65504]", u16(0x3e00, 0xc000, 0x7bff), "[1.5 -2 65504]"},
		{"BF16", "[1.5,-2,3]", u16(0x3fc0, 0xc000, 0x4040), "[1.5 -2 3]"},
		{"FP64", "[1.5,-2,0.1]", cat(le.AppendUint64(nil, math.Float64bits(1.5)), le.AppendUint64(nil, math.Float64bits(-2)), le.AppendUint64(nil, math.Float64bits(0.1))), "[1.5 -2 0.1]"},
		{"UINT8", "[0,128,255]", []byte{0, 128, 255}, "[0 128 255]"},
		{"UINT16", "[0,1,65535]", u16(0, 1, 65535), "[0 1 65535]"},
		{"UINT32", "[0,1,16777216]", cat(le.AppendUint32(nil, 0), le.AppendUint32(nil, 1), le.AppendUint32(nil, 1<<24)), "[0 1 1.6777216e+07]"},
		{"UINT64", "[0,1,2]", cat(le.AppendUint64(nil, 0), le.AppendUint64(nil, 1), le.AppendUint64(nil, 2)), "[0 1 2]"},
		{"INT8", "[-128,0,127]", []byte{0x80, 0, 0x7f}, "[-128 0 127]"},
		{"INT16", "[-32768,0,32767]", u16(0x8000, 0, 0x7fff), "[-32768 0 32767]"},
		{"INT32", "[-5,0,5]", cat(le.AppendUint32(nil, uint32(0xfffffffb)), le.AppendUint32(nil, 0), le.AppendUint32(nil, 5)), "[-5 0 5]"},
		{"INT64", "[-5,0,5]", cat(le.AppendUint64(nil, uint64(0xfffffffffffffffb)), le.AppendUint64(nil, 0), le.AppendUint64(nil, 5)), "[-5 0 5]"},
		{"BOOL", "[true,false,true]", []byte{1, 0, 1}, "[1 0 1]"},
		{"BYTES", `["1.5","-2","3e0"]`, bytesElems("1.5", "-2", "3e0"), "[1.5 -2 3]"},
	}
	for _, tc := range cases {
		t.Run(tc.dtype, func(t *testing.T) {
			body := `{"inputs":[{"name":"x","shape":[1,3],"datatype":"` + tc.dtype + `","data":` + tc.json + `}]}`
			code, r, b := infer(t, ts.url, "echo", body)
			if code != 200 || fmt.Sprint(r.Outputs[0].Data) != tc.want || r.Outputs[0].Datatype != "FP32" {
				t.Fatalf("JSON %s: %d %s, want %s", tc.dtype, code, b, tc.want)
			}
			bb, hdr := binaryBody("x", tc.dtype, []int64{1, 3}, tc.bin)
			code, _, raw := do(t, "POST", ts.url+"/v2/models/echo/infer", bb, hdr)
			if code != 200 || json.Unmarshal(raw, &r) != nil || fmt.Sprint(r.Outputs[0].Data) != tc.want {
				t.Fatalf("binary %s: %d %s, want %s", tc.dtype, code, raw, tc.want)
			}
		})
	}
}

// What cannot be converted without changing a value (or by the usual rule) is a 400 that
// names both datatypes.
func TestUnconvertibleInputsAre400(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	ts.addModel(t, echoMeta, echo, BatchConfig{})
	x := func(model, name, dtype, data string) string {
		shape := "[1,3]"
		if model == "ids" {
			shape = "[1,2]"
		}
		return `{"inputs":[{"name":"` + name + `","shape":` + shape + `,"datatype":"` + dtype + `","data":` + data + `}]}`
	}
	for _, tc := range []struct{ model, body, msg string }{
		{"echo", x("echo", "x", "INT32", "[1,2,16777217]"), "INT32 cannot be converted to the model's FP32"},
		{"echo", x("echo", "x", "UINT64", "[1,2,18446744073709551615]"), "UINT64 cannot be converted to the model's FP32"},
		{"echo", x("echo", "x", "FP64", "[1,2,1e300]"), "out of range"},
		{"echo", x("echo", "x", "BYTES", `["1","two","3"]`), "element 1 is not a decimal number"},
		{"echo", x("echo", "x", "FP16", "[1,2,70000]"), "out of the range of FP16"},
		{"echo", x("echo", "x", "UINT8", "[1,2,256]"), "is not a UINT8"},
		{"echo", x("echo", "x", "BYTES", `[1,2,3]`), "array of strings"},
		{"ids", x("ids", "ids", "FP16", "[1,2]"), "FP16 cannot be converted to the model's INT64"},
		{"ids", x("ids", "ids", "UINT64", "[1,18446744073709551615]"), "out of range"},
		{"ids", x("ids", "ids", "BYTES", `["1","x"]`), "not a decimal integer"},
	} {
		code, _, b := infer(t, ts.url, tc.model, tc.body)
		if code != 400 || !strings.Contains(b, tc.msg) {
			t.Errorf("%s: %d %s; want 400 with %q", tc.body, code, b, tc.msg)
		}
	}
	// Integer types convert into the model's INT64 when every value fits.
	if code, _, b := do(t, "POST", ts.url+"/v2/models/ids/infer", []byte(x("ids", "ids", "UINT8", "[3,4]")), nil); code != 200 || !strings.Contains(string(b), `"data":[7]`) {
		t.Fatalf("UINT8 into INT64: %d %s", code, b)
	}
}

// Outputs carry the model's datatype (INT32, BOOL), in JSON and in the binary extension.
func TestOutputsKeepTheirDatatype(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	body := `{"inputs":[{"name":"ids","shape":[2,2],"datatype":"INT64","data":[1,-2,3,4]}]}`
	code, _, b := do(t, "POST", ts.url+"/v2/models/ids/infer", []byte(body), nil)
	want := `"outputs":[{"name":"sum","datatype":"INT32","shape":[2],"data":[-1,7]},{"name":"pos","datatype":"BOOL","shape":[2,2],"data":[true,false,true,true]}]`
	if code != 200 || !strings.Contains(string(b), want) {
		t.Fatalf("JSON outputs: %d %s", code, b)
	}
	body = `{"inputs":[{"name":"ids","shape":[2,2],"datatype":"INT64","data":[1,-2,3,4]}],"parameters":{"binary_data_output":true}}`
	code, hdr, b := do(t, "POST", ts.url+"/v2/models/ids/infer", []byte(body), nil)
	var hl int
	fmt.Sscan(hdr.Get("Inference-Header-Content-Length"), &hl)
	if code != 200 || hl <= 0 || hl > len(b) {
		t.Fatalf("binary outputs: %d %q", code, b)
	}
	js, bin := b[:hl], b[hl:]
	if !strings.Contains(string(js), `"name":"sum","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}`) ||
		!strings.Contains(string(js), `"name":"pos","datatype":"BOOL","shape":[2,2],"parameters":{"binary_data_size":4}`) {
		t.Fatalf("binary output header %s", js)
	}
	if int32(binary.LittleEndian.Uint32(bin)) != -1 || int32(binary.LittleEndian.Uint32(bin[4:])) != 7 || !bytes.Equal(bin[8:], []byte{1, 0, 1, 1}) {
		t.Fatalf("binary output data % x", bin)
	}
}

// BYTES round trip through the JSON and binary encoders (a BYTES output, as a model with
// string outputs would give).
func TestBytesEncoding(t *testing.T) {
	out := &onnx.Tensor{Name: "s", DType: onnx.String, Dims: []int64{2}, Strings: []string{"a\"b", "\x00é"}}
	js, _ := EncodeInferResponse(nil, "m", "", []*onnx.Tensor{out}, func(int) bool { return false })
	if !strings.Contains(string(js), `"datatype":"BYTES","shape":[2],"data":["a\"b","\u0000é"]`) {
		t.Fatalf("JSON BYTES: %s", js)
	}
	js, bin := EncodeInferResponse(nil, "m", "", []*onnx.Tensor{out}, func(int) bool { return true })
	js = []byte(strings.Replace(string(js), `"outputs"`, `"inputs"`, 1))
	req, err := DecodeInferRequest(append(js, bin...), len(js), Limits{})
	if err != nil || !slices.Equal(req.Inputs[0].Strings, out.Strings) {
		t.Fatalf("binary BYTES round trip: %v %+v", err, req)
	}
}

// Statistics extension: GET v2/models[/${MODEL_NAME}[/versions/${MODEL_VERSION}]]/stats.
func TestStatisticsExtension(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{MaxBatch: 4, MaxDelay: time.Second})
	gate := make(chan struct{})
	ts.fake.SetGate("double", gate)
	body := `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	var wg sync.WaitGroup
	for range 4 { // one batch of 4 rows
		wg.Add(1)
		go func() {
			defer wg.Done()
			infer(t, ts.url, "double", body)
		}()
	}
	waitFor(t, func() bool { return ts.srv.Local.Depths()["double"] == 0 && len(ts.fake.CallRows()) == 1 })
	gate <- struct{}{}
	wg.Wait()
	ts.fake.SetGate("double", nil)
	infer(t, ts.url, "double", `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}]}`) // a batch of 2 rows after the delay
	infer(t, ts.url, "double", `{"inputs":[]}`)                                                                      // a failure
	var one StatsResponse
	for _, path := range []string{"/v2/models/double/stats", "/v2/models/double/versions/1/stats"} {
		getJSON(t, ts.url+path, 200, &one)
		if len(one.ModelStats) != 1 {
			t.Fatalf("%s: %+v", path, one)
		}
		st := one.ModelStats[0]
		is := st.InferenceStats
		if st.Name != "double" || st.Version != "1" || st.InferenceCount != 6 || st.ExecutionCount != 2 ||
			is.Success.Count != 5 || is.Fail.Count != 1 || is.Queue.Count != 5 || is.ComputeInfer.Count != 5 ||
			is.ComputeInput.Count != 5 || is.ComputeOutput.Count != 5 || is.Success.Ns == 0 || is.Queue.Ns == 0 ||
			st.LastInference < time.Now().Add(-time.Minute).UnixMilli() {
			t.Fatalf("%s: %+v", path, st)
		}
		if len(st.BatchStats) != 2 || st.BatchStats[0].BatchSize != 2 || st.BatchStats[1].BatchSize != 4 ||
			st.BatchStats[1].ComputeInfer.Count != 1 {
			t.Fatalf("%s: batch stats %+v", path, st.BatchStats)
		}
	}
	// The raw JSON has Triton's keys.
	_, _, raw := do(t, "GET", ts.url+"/v2/models/double/stats", nil, nil)
	for _, k := range []string{`"model_stats"`, `"last_inference"`, `"inference_count"`, `"execution_count"`, `"inference_stats"`,
		`"success":{"count":5,"ns":`, `"compute_input"`, `"compute_infer"`, `"compute_output"`, `"batch_stats"`, `"batch_size":4`} {
		if !bytes.Contains(raw, []byte(k)) {
			t.Errorf("stats JSON lacks %s: %s", k, raw)
		}
	}
	var all StatsResponse
	getJSON(t, ts.url+"/v2/models/stats", 200, &all)
	var names []string
	for _, m := range all.ModelStats {
		names = append(names, m.Name)
	}
	if fmt.Sprint(names) != "[add double ids]" {
		t.Fatalf("all stats: %v", names)
	}
	getJSON(t, ts.url+"/v2/models/nope/stats", 404, nil)
}

// Parameters: "timeout" (µs) bounds a request, queueing included.
func TestTimeoutParameter(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	gate := make(chan struct{})
	ts.fake.SetGate("double", gate)
	defer close(gate)
	start := time.Now()
	code, _, b := infer(t, ts.url, "double", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"parameters":{"timeout":100000}}`)
	if code != 504 || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout 100 ms on a stuck model: %d %s after %v", code, b, time.Since(start))
	}
	for _, bad := range []string{`"timeout":-1`, `"timeout":"soon"`, `"priority":1.5`} {
		code, _, b := infer(t, ts.url, "add", `{"inputs":[{"name":"a","shape":[1,2],"datatype":"FP32","data":[1,2]},{"name":"b","shape":[1,2],"datatype":"FP32","data":[1,2]}],"parameters":{`+bad+`}}`)
		if code != 400 || !strings.Contains(b, "non-negative integer") {
			t.Fatalf("parameter %s: %d %s", bad, code, b)
		}
	}
}

// Schedule policy: requests with "priority" 1 run before earlier requests of the default
// level; the same level keeps arrival order.
func TestPriorityParameter(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{MaxBatch: 1})
	var mu sync.Mutex
	var order []float32
	gate := make(chan struct{})
	ts.addModel(t, ModelMetadata{Name: "rec", Versions: []string{"1"}, Platform: "fake",
		Inputs:  []TensorMeta{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 1}}},
		Outputs: []TensorMeta{{Name: "y", Datatype: "FP32", Shape: []int64{-1, 1}}}},
		func(in []*onnx.Tensor) ([]*onnx.Tensor, error) {
			mu.Lock()
			order = append(order, in[0].F32[0])
			mu.Unlock()
			return echo(in)
		}, BatchConfig{MaxBatch: 1})
	ts.fake.SetGate("rec", gate)
	send := func(v int, prio string, wg *sync.WaitGroup) {
		defer wg.Done()
		body := fmt.Sprintf(`{"inputs":[{"name":"x","shape":[1,1],"datatype":"FP32","data":[%d]}]%s}`, v, prio)
		if code, _, b := infer(t, ts.url, "rec", body); code != 200 {
			t.Errorf("request %d: %d %s", v, code, b)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go send(0, "", &wg) // runs first and holds the model at the gate
	waitFor(t, func() bool { return len(ts.fake.CallRows()) == 1 })
	for i, prio := range []string{"", "", `,"parameters":{"priority":1}`, `,"parameters":{"priority":0}`, `,"parameters":{"priority":1}`} {
		wg.Add(1)
		go send(i+1, prio, &wg)
		waitFor(t, func() bool { return ts.srv.Local.Depths()["rec"] == i+1 })
	}
	for range 6 {
		gate <- struct{}{}
	}
	wg.Wait()
	if fmt.Sprint(order) != "[0 3 5 1 2 4]" {
		t.Fatalf("run order %v, want [0 3 5 1 2 4] (priority 1 first, then arrival)", order)
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// deflated is b as HTTP's deflate: a zlib stream (what tritonclient's
// request_compression_algorithm="deflate" sends).
func deflated(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Content-Encoding: gzip and deflate request bodies (Triton's HTTP compression: its clients
// compress requests with either), bounded once decompressed.
func TestGzipRequestBodies(t *testing.T) {
	ts := startServer(t, Config{Limits: Limits{MaxBodyBytes: 64 << 10}}, BatchConfig{})
	body := []byte(`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`)
	code, _, b := do(t, "POST", ts.url+"/v2/models/double/infer", gzipped(t, body), map[string]string{"Content-Encoding": "gzip"})
	if code != 200 || !strings.Contains(string(b), `"data":[2,4,6,8]`) {
		t.Fatalf("gzip body: %d %s", code, b)
	}
	// Binary extension: the header length counts the uncompressed JSON.
	bb, hdr := binaryBody("x", "FP32", []int64{1, 4}, bytes.Repeat([]byte{0, 0, 128, 63}, 4))
	hdr["Content-Encoding"] = "GZIP"
	if code, _, b := do(t, "POST", ts.url+"/v2/models/double/infer", gzipped(t, bb), hdr); code != 200 || !strings.Contains(string(b), `"data":[2,2,2,2]`) {
		t.Fatalf("gzip binary body: %d %s", code, b)
	}
	if code, _, b := do(t, "POST", ts.url+"/v2/models/double/infer", deflated(t, body), map[string]string{"Content-Encoding": "deflate"}); code != 200 || !strings.Contains(string(b), `"data":[2,4,6,8]`) {
		t.Fatalf("deflate body: %d %s", code, b)
	}
	hdr["Content-Encoding"] = "Deflate"
	if code, _, b := do(t, "POST", ts.url+"/v2/models/double/infer", deflated(t, bb), hdr); code != 200 || !strings.Contains(string(b), `"data":[2,2,2,2]`) {
		t.Fatalf("deflate binary body: %d %s", code, b)
	}
	spaces := bytes.Repeat([]byte(" "), 10<<20)
	bomb := gzipped(t, spaces) // 10 MiB of spaces in ~10 KB
	for _, tc := range []struct {
		enc  string
		body []byte
		code int
		msg  string
	}{
		{"gzip", bomb, 413, "decompressed body exceeds the limit of 65536"},
		{"gzip", []byte("not gzip"), 400, "gzip body"},
		{"gzip", gzipped(t, body)[:20], 400, "gzip body"},
		{"deflate", deflated(t, spaces), 413, "decompressed body exceeds the limit of 65536"},
		{"deflate", gzipped(t, body), 400, "deflate body"}, // gzip's framing is not zlib's
		{"deflate", deflated(t, body)[:10], 400, "deflate body"},
		{"br", body, 415, "unsupported Content-Encoding"},
	} {
		code, _, b := do(t, "POST", ts.url+"/v2/models/double/infer", tc.body, map[string]string{"Content-Encoding": tc.enc})
		if code != tc.code || !strings.Contains(string(b), tc.msg) {
			t.Errorf("%s body of %d bytes: %d %s; want %d %q", tc.enc, len(tc.body), code, b, tc.code, tc.msg)
		}
	}
}

// Model repository extension without a repository behind it: 501, not a crash; bad bodies
// are 400 (decoders are fuzzed in fuzz_test.go).
func TestRepositoryEndpointsWithoutRepository(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	for _, p := range []string{"/v2/repository/index", "/v2/repository/models/double/load", "/v2/repository/models/double/unload"} {
		if code, _, b := do(t, "POST", ts.url+p, nil, nil); code != 501 || !strings.Contains(string(b), "no model repository") {
			t.Fatalf("POST %s: %d %s", p, code, b)
		}
	}
	if code, _, _ := do(t, "GET", ts.url+"/v2/repository/index", nil, nil); code != 405 {
		t.Fatalf("GET index: %d", code)
	}
	if code, _, _ := do(t, "POST", ts.url+"/v2/repository/models/double/reload", nil, nil); code != 404 {
		t.Fatalf("POST reload: %d", code)
	}
}

func TestRepositoryRequestDecoding(t *testing.T) {
	p, err := DecodeLoadRequest([]byte(`{"parameters":{"config":"{\"max_batch_size\":16,\"dynamic_batching\":{\"max_queue_delay_microseconds\":1500,\"default_queue_policy\":{\"max_queue_size\":64}},\"instance_group\":[{\"count\":2,\"kind\":\"KIND_CPU\"}]}"}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := p.Apply(ServedModel{Name: "m", Batch: BatchConfig{MaxBatch: 1, MaxQueue: 8}})
	if m.Batch.MaxBatch != 16 || m.Batch.MaxDelay != 1500*time.Microsecond || m.Batch.MaxQueue != 64 || m.Instances != 2 {
		t.Fatalf("applied %+v", m)
	}
	if p, err := DecodeLoadRequest([]byte(`{"parameters":{"config":"{\"max_batch_size\":0}"}}`)); err != nil || *p.MaxBatch != 1 {
		t.Fatalf("max_batch_size 0 (no batching): %+v %v", p, err)
	}
	for _, body := range []string{`{`, `{"parameters":{"config":7}}`, `{"parameters":{"config":"{"}}`,
		`{"parameters":{"config":"{\"max_batch_size\":5000}"}}`, `{"parameters":{"config":"{\"dynamic_batching\":{\"max_queue_delay_microseconds\":-1}}"}}`} {
		if _, err := DecodeLoadRequest([]byte(body)); err == nil || !IsBadRequest(err) {
			t.Errorf("load body %s: %v, want a bad request", body, err)
		}
	}
	for body, want := range map[string]bool{``: false, `{}`: false, `{"ready":true}`: true, `{"ready":false}`: false} {
		if got, err := DecodeIndexRequest([]byte(body)); err != nil || got != want {
			t.Errorf("index body %q: %v %v", body, got, err)
		}
	}
	if _, err := DecodeIndexRequest([]byte(`{"ready":"yes"}`)); err == nil {
		t.Error(`index {"ready":"yes"} accepted`)
	}
}

// Priority levels in the pure batch queue.
func TestBatchQueuePriorityLevels(t *testing.T) {
	t0 := time.Unix(0, 0)
	ms := time.Millisecond
	q := newBatchQueue[int](BatchConfig{MaxBatch: 2, MaxDelay: 10 * ms})
	q.PushLevel(t0, 1, 5, 1)
	q.PushLevel(t0.Add(ms), 1, 9, 2)
	q.PushLevel(t0.Add(2*ms), 1, 1, 3)
	q.PushLevel(t0.Add(3*ms), 1, 5, 4)
	if b, _ := q.Next(t0.Add(3 * ms)); !slices.Equal(b, []int{3, 1}) {
		t.Fatalf("first batch %v, want [3 1]", b)
	}
	if b, _ := q.Next(t0.Add(3 * ms)); !slices.Equal(b, []int{4, 2}) {
		t.Fatalf("second batch %v, want [4 2]", b)
	}
	// The delay counts from the oldest request, whatever its level.
	q = newBatchQueue[int](BatchConfig{MaxBatch: 3, MaxDelay: 10 * ms})
	q.PushLevel(t0, 1, 9, 1)
	q.PushLevel(t0.Add(5*ms), 1, 1, 2)
	if b, wait := q.Next(t0.Add(6 * ms)); b != nil || wait != 4*ms {
		t.Fatalf("partial batch %v, wait %v; want none for 4ms", b, wait)
	}
	if b, _ := q.Next(t0.Add(10 * ms)); !slices.Equal(b, []int{2, 1}) {
		t.Fatalf("batch at the delay %v, want [2 1]", b)
	}
	for p, want := range map[uint64]int{0: DefaultPriorityLevel, 1: 1, 10: 10, 11: DefaultPriorityLevel, math.MaxUint64: DefaultPriorityLevel} {
		if got := priorityLevel(p); got != want {
			t.Errorf("priorityLevel(%d) = %d, want %d", p, got, want)
		}
	}
}

func TestHalfPrecisionConversions(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		half uint16
		bf   uint16
	}{
		{0, 0, 0}, {1, 0x3c00, 0x3f80}, {-2, 0xc000, 0xc000}, {65504, 0x7bff, 0x4780}, {1e6, 0x7c00, 0x4974},
		{5.960464477539063e-08, 0x0001, 0x3380}, {float32(math.Inf(-1)), 0xfc00, 0xff80},
		{1.0009765625, 0x3c01, 0x3f80}, // exactly representable in half, rounds to 1 in bf16
	} {
		if got := halfBits(tc.f); got != tc.half {
			t.Errorf("halfBits(%g) = %#04x, want %#04x", tc.f, got, tc.half)
		}
		if got := bf16Bits(tc.f); got != tc.bf {
			t.Errorf("bf16Bits(%g) = %#04x, want %#04x", tc.f, got, tc.bf)
		}
	}
	// Every finite half converts to float32 and back to itself.
	for h := range uint32(1 << 16) {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := halfBits(halfToFloat(uint16(h))); got != uint16(h) {
			t.Fatalf("half %#04x -> %g -> %#04x", h, halfToFloat(uint16(h)), got)
		}
	}
	if !math.IsNaN(float64(halfToFloat(halfBits(float32(math.NaN()))))) || !math.IsNaN(float64(bf16ToFloat(bf16Bits(float32(math.NaN()))))) {
		t.Fatal("NaN did not stay NaN")
	}
}

// The kernel returns every integer output as INT64 values; the backend gives each the
// datatype the model declares.
func TestKernelOutputsTakeTheirDeclaredDatatype(t *testing.T) {
	out := []*onnx.Tensor{
		{Name: "idx", DType: onnx.Int64, Dims: []int64{2}, I64: []int64{3, 1}},
		{Name: "mask", DType: onnx.Int64, Dims: []int64{2}, I64: []int64{1, 0}},
		{Name: "prob", DType: onnx.Float, Dims: []int64{2}, F32: []float32{0.5, 0.5}},
		{Name: "other", DType: onnx.Int64, Dims: []int64{1}, I64: []int64{7}},
	}
	realTypes(out, map[string]onnx.DataType{"idx": onnx.Int32, "mask": onnx.Bool, "prob": onnx.Float, "other": onnx.Float16})
	got := []string{DatatypeName(out[0].DType), DatatypeName(out[1].DType), DatatypeName(out[2].DType), DatatypeName(out[3].DType)}
	if fmt.Sprint(got) != "[INT32 BOOL FP32 INT64]" {
		t.Fatalf("output datatypes %v", got)
	}
}
