// Command http benchmarks the KServe v2 endpoint with a zoo model (LeNet-5 by default): the direct kernel call
// against the endpoint at low load (the overhead), p50/p99 latency and throughput at
// several open-loop offered loads with and without dynamic batching, and peak requests/s.
//
// The server runs in a child process (this binary with -serve), so the load generator and
// the server do not share a Go runtime; both are on 127.0.0.1.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/serving"
)

func main() {
	serve := flag.String("serve", "", "internal: serve the LeNet-5 file at this path and print the address")
	out := flag.String("out", "benchmarks/out/http.csv", "CSV of the load runs")
	loads := flag.String("loads", "250,500,1000,2000,4000", "offered loads (requests/s)")
	dur := flag.Duration("duration", 3*time.Second, "length of each load run")
	maxBatch := flag.Int("max-batch", 16, "max batch of the batching configuration")
	maxDelay := flag.Duration("max-delay", 2*time.Millisecond, "max queue delay of the batching configuration")
	arch := flag.String("zoo", "lenet5", "zoo model to serve")
	shape := flag.String("input-shape", "", "C,H,W of the zoo model (default: the architecture's)")
	classes := flag.Int64("classes", 0, "classes of the zoo model (default: the architecture's)")
	peakClients := flag.Int("peak-clients", 64, "closed-loop clients of the peak run")
	flag.Parse()
	opt := zoo.Options{Seed: 7, Classes: *classes}
	if *shape != "" {
		for _, f := range strings.Split(*shape, ",") {
			var d int64
			fmt.Sscan(f, &d)
			opt.InputShape = append(opt.InputShape, d)
		}
	}
	var err error
	if *serve != "" {
		err = runServer(*serve, *maxBatch, *maxDelay)
	} else {
		err = runBench(*out, *arch, opt, *loads, *dur, *maxBatch, *maxDelay, *peakClients)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench http:", err)
		os.Exit(1)
	}
}

// runServer serves two instances of the model: "plain" (no batching) and "batched".
func runServer(path string, maxBatch int, maxDelay time.Duration) error {
	b := serving.NewKernelBackend(1)
	for _, name := range []string{"plain", "batched"} {
		if err := b.LoadFile(name, path); err != nil {
			return err
		}
	}
	local := serving.NewLocalModels(b, 0)
	if err := local.Serve(serving.ServedModel{Name: "plain", Batch: serving.BatchConfig{MaxBatch: 1, MaxQueue: 1024}}); err != nil {
		return err
	}
	if err := local.Serve(serving.ServedModel{Name: "batched", Batch: serving.BatchConfig{MaxBatch: maxBatch, MaxDelay: maxDelay, MaxQueue: 1024}}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	go func() { // the parent closes our stdin when it is done
		bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}()
	return serving.NewServer(serving.Config{Token: os.Getenv("IDUNNO_HTTP_TOKEN")}, local).Serve(ln)
}

type result struct {
	name          string
	cpuPerReq     time.Duration // server process CPU time per response
	offered       float64       // requests/s offered (0: closed loop)
	achieved      float64       // responses/s
	p50, p99      time.Duration
	errors, drops int
	responses     int
}

func runBench(out, arch string, opt zoo.Options, loads string, dur time.Duration, maxBatch int, maxDelay time.Duration, peakClients int) error {
	if err := kernel.Available(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "idunno-bench-http")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	m, err := zoo.Build(arch, opt)
	if err != nil {
		return err
	}
	model := filepath.Join(tmp, arch+".onnx")
	if err := onnx.WriteFile(model, m); err != nil {
		return err
	}
	dims := append([]int64(nil), m.Graph.Inputs[0].Dims...)
	dims[0] = 1
	n := 1
	for _, d := range dims {
		n *= int(d)
	}
	img := make([]float32, n)
	for i := range img {
		img[i] = float32(i%29) / 29
	}

	direct, err := directLatency(model, img, dims, 2*time.Second)
	if err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	srv := exec.Command(self, "-serve", model, "-max-batch", fmt.Sprint(maxBatch), "-max-delay", maxDelay.String())
	srv.Stderr = os.Stderr
	stdin, _ := srv.StdinPipe()
	stdout, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { stdin.Close(); srv.Process.Kill(); srv.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("server did not start: %w", err)
	}
	addr = strings.TrimSpace(addr)
	pid := srv.Process.Pid
	client := &fasthttp.HostClient{Addr: addr, MaxConns: 1024, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}

	jsonBody := jsonRequest(img, dims)
	binBody, binHdr := binaryRequest(img, dims)
	la, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("%s input %v, 1 kernel thread; server and load generator on 127.0.0.1; %s per run; batched: max batch %d, max delay %v\n",
		arch, dims, dur, maxBatch, maxDelay)
	fmt.Printf("load average at start: %s\n", strings.Join(strings.Fields(string(la))[:3], " "))
	fmt.Printf("direct kernel.Run:        p50 %8.1f µs  p99 %8.1f µs\n", us(direct.p50), us(direct.p99))
	var results []result
	for _, v := range []struct {
		name string
		body []byte
		hdr  int
	}{{"plain", jsonBody, -1}, {"plain", binBody, binHdr}} {
		kind := "JSON"
		if v.hdr >= 0 {
			kind = "binary"
		}
		warm(client, v.name, v.body, v.hdr)
		r := measured(pid, func() result { return closedLoop(client, v.name, v.body, v.hdr, 1, 2*time.Second) })
		r.name = "low load " + kind
		fmt.Printf("endpoint %-7s 1 client: p50 %8.1f µs  p99 %8.1f µs  overhead over direct p50 %6.1f µs  server CPU %6.1f µs/request\n",
			kind, us(r.p50), us(r.p99), us(r.p50-direct.p50), us(r.cpuPerReq))
		results = append(results, r)
	}
	fmt.Printf("\n%-9s %9s %10s %10s %10s %7s %7s %12s\n", "config", "offered", "achieved", "p50 ms", "p99 ms", "errors", "drops", "CPU µs/req")
	warm(client, "batched", binBody, binHdr)
	for _, f := range strings.Split(loads, ",") { // interleaved, so both see the same machine load
		var rate float64
		fmt.Sscan(f, &rate)
		for _, name := range []string{"plain", "batched"} {
			r := measured(pid, func() result { return openLoop(client, name, binBody, binHdr, rate, dur) })
			r.name = name
			fmt.Printf("%-9s %9.0f %10.0f %10.2f %10.2f %7d %7d %12.0f\n", name, rate, r.achieved, ms(r.p50), ms(r.p99), r.errors, r.drops, us(r.cpuPerReq))
			results = append(results, r)
		}
	}
	fmt.Println()
	for _, name := range []string{"plain", "batched"} {
		r := measured(pid, func() result { return closedLoop(client, name, binBody, binHdr, peakClients, dur) })
		r.name = "peak " + name
		fmt.Printf("peak %-8s %d clients: %8.0f requests/s  p50 %6.2f ms  p99 %6.2f ms  errors %d  server CPU %.0f µs/request\n",
			name, peakClients, r.achieved, ms(r.p50), ms(r.p99), r.errors, us(r.cpuPerReq))
		results = append(results, r)
	}
	return writeCSV(out, direct, results)
}

// procCPU returns the user+system CPU time of a process so far (from /proc, 100 Hz ticks).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// measured runs f and sets the server CPU time per response of its result.
func measured(pid int, f func() result) result {
	c0 := procCPU(pid)
	r := f()
	if n := r.achieved; n > 0 {
		r.cpuPerReq = (procCPU(pid) - c0) / time.Duration(max(1, r.responses))
	}
	return r
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }
func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func directLatency(path string, img []float32, dims []int64, dur time.Duration) (result, error) {
	m, err := kernel.Load(path, kernel.Options{Threads: 1})
	if err != nil {
		return result{}, err
	}
	defer m.Close()
	in := []*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: dims, F32: img}}
	var lat []time.Duration
	for end := time.Now().Add(dur); time.Now().Before(end); {
		t0 := time.Now()
		if _, err := m.Run(in); err != nil {
			return result{}, err
		}
		lat = append(lat, time.Since(t0))
	}
	r := result{name: "direct"}
	r.p50, r.p99 = pct(lat, 0.5), pct(lat, 0.99)
	r.achieved = float64(len(lat)) / dur.Seconds()
	return r, nil
}

func jsonRequest(img []float32, dims []int64) []byte {
	d, _ := json.Marshal(img)
	sh, _ := json.Marshal(dims)
	return []byte(`{"inputs":[{"name":"input","shape":` + string(sh) + `,"datatype":"FP32","data":` + string(d) + `}]}`)
}

func binaryRequest(img []float32, dims []int64) ([]byte, int) {
	sh, _ := json.Marshal(dims)
	js := []byte(fmt.Sprintf(`{"inputs":[{"name":"input","shape":%s,"datatype":"FP32","parameters":{"binary_data_size":%d}}],"parameters":{"binary_data_output":true}}`,
		sh, 4*len(img)))
	b := append([]byte(nil), js...)
	for _, v := range img {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b, len(js)
}

// authHeader authenticates the load when IDUNNO_HTTP_TOKEN is set (the server it starts
// then requires it too, so the figures include the check).
var authHeader = bearer(os.Getenv("IDUNNO_HTTP_TOKEN"))

func bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

// do sends one request and reports whether it got a 200.
func do(c *fasthttp.HostClient, model string, body []byte, hdr int) bool {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + c.Addr + "/v2/models/" + model + "/infer")
	req.Header.SetMethod("POST")
	if authHeader != "" {
		req.Header.Set("Authorization", authHeader)
	}
	if hdr >= 0 {
		req.Header.Set("Inference-Header-Content-Length", fmt.Sprint(hdr))
	}
	req.SetBody(body)
	if err := c.DoTimeout(req, resp, 10*time.Second); err != nil {
		return false
	}
	return resp.StatusCode() == 200
}

func warm(c *fasthttp.HostClient, model string, body []byte, hdr int) {
	for range 200 {
		do(c, model, body, hdr)
	}
}

// closedLoop runs n clients back to back for dur.
func closedLoop(c *fasthttp.HostClient, model string, body []byte, hdr, n int, dur time.Duration) result {
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(dur)
	for range n {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				if !do(c, model, body, hdr) {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return result{achieved: float64(len(lat)) / dur.Seconds(), p50: pct(lat, 0.5), p99: pct(lat, 0.99), errors: int(errs.Load()), responses: len(lat)}
}

// openLoop offers rate requests/s at fixed intervals for dur, each request on its own
// goroutine, so a slow response does not hold back the next request. Latency counts from
// the moment a request is sent (on this shared 2-core machine the generator's own timer
// lateness would otherwise dominate). At most 512 are outstanding; a request due while 512
// are out is dropped and counted.
func openLoop(c *fasthttp.HostClient, model string, body []byte, hdr int, rate float64, dur time.Duration) result {
	const maxOut = 512
	sem := make(chan struct{}, maxOut)
	var mu sync.Mutex
	var lat []time.Duration
	var errs, drops atomic.Int64
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	n := int(rate * dur.Seconds())
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		select {
		case sem <- struct{}{}:
		default:
			drops.Add(1)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			ok := do(c, model, body, hdr)
			l := time.Since(t0)
			if !ok {
				errs.Add(1)
				return
			}
			mu.Lock()
			lat = append(lat, l)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	return result{offered: rate, achieved: float64(len(lat)) / elapsed.Seconds(), p50: pct(lat, 0.5), p99: pct(lat, 0.99),
		errors: int(errs.Load()), drops: int(drops.Load()), responses: len(lat)}
}

func pct(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func writeCSV(path string, direct result, rs []result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintln(f, "run,offered_rps,achieved_rps,p50_ms,p99_ms,errors,drops,server_cpu_us_per_request")
	for _, r := range append([]result{direct}, rs...) {
		fmt.Fprintf(f, "%s,%.0f,%.1f,%.4f,%.4f,%d,%d,%.1f\n", r.name, r.offered, r.achieved, ms(r.p50), ms(r.p99), r.errors, r.drops, us(r.cpuPerReq))
	}
	fmt.Println("\nwrote", path)
	return nil
}
