package serving

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
	"idunno/rpc"
)

// fashionImages reads the first n Fashion-MNIST test images (Debian's dataset-fashion-mnist)
// as 28x28 floats in [0, 1].
func fashionImages(t *testing.T, n int) [][]float32 {
	t.Helper()
	f, err := os.Open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
	if err != nil {
		t.Fatalf("Fashion-MNIST (Debian package dataset-fashion-mnist; make test-deps installs it): %v", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16+n*784)
	if _, err := io.ReadFull(z, buf); err != nil {
		t.Fatal(err)
	}
	imgs := make([][]float32, n)
	for i := range imgs {
		imgs[i] = make([]float32, 784)
		for j, p := range buf[16+i*784 : 16+(i+1)*784] {
			imgs[i][j] = float32(p) / 255
		}
	}
	return imgs
}

// lenetFile writes the zoo's LeNet-5 (the bytes `idunno zoo lenet5 --seed 7 --out F` writes).
func lenetFile(t *testing.T) string {
	t.Helper()
	m, err := zoo.Build("lenet5", zoo.Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lenet5.onnx")
	if err := onnx.WriteFile(path, m); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLeNet5ThroughEndpointMatchesKernel(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed (make builds it; IDUNNO_KERNEL_LIB): %v", err)
	}
	path := lenetFile(t)
	direct, err := kernel.Load(path, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	backend := NewKernelBackend(1)
	defer backend.Close()
	if err := backend.LoadFile("lenet5", path); err != nil {
		t.Fatal(err)
	}
	local := NewLocalModels(backend, 10*time.Second)
	defer local.Close()
	if err := local.Serve(ServedModel{Name: "lenet5", Batch: BatchConfig{MaxBatch: 8, MaxDelay: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	url := serveLocal(t, local)

	var meta ModelMetadata
	getJSON(t, url+"/v2/models/lenet5", 200, &meta)
	if meta.Inputs[0].Name != "input" || fmt.Sprint(meta.Inputs[0].Shape) != "[-1 1 28 28]" || meta.Inputs[0].Datatype != "FP32" ||
		meta.Outputs[0].Name != "output" || fmt.Sprint(meta.Outputs[0].Shape) != "[-1 10]" {
		t.Fatalf("LeNet-5 metadata %+v", meta)
	}

	imgs := fashionImages(t, 6)
	want := make([][]float32, len(imgs))
	for i, img := range imgs {
		out, err := direct.Run([]*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: []int64{1, 1, 28, 28}, F32: img}})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = out[0].F32
	}
	// One at a time, JSON in and out: the same plan as the direct call, so the same bits.
	for i, img := range imgs[:2] {
		code, r, body := infer(t, url, "lenet5", jsonImage(img, 1))
		if code != 200 {
			t.Fatalf("image %d: %d %s", i, code, body)
		}
		if fmt.Sprint(r.Outputs[0].Shape) != "[1 10]" || !equalF32(r.Outputs[0].Data, want[i], 0) {
			t.Fatalf("image %d: endpoint %v, kernel %v", i, r.Outputs[0].Data, want[i])
		}
	}
	// Concurrent binary requests, batched together by the server (5 rows, padded to 8).
	var wg sync.WaitGroup
	errs := make(chan error, len(imgs))
	for i, img := range imgs[1:] {
		wg.Go(func() {
			got, err := binaryInfer(url, "lenet5", img)
			if err == nil && !equalF32(got, want[i+1], 1e-4) {
				err = fmt.Errorf("image %d batched: endpoint %v, kernel %v", i+1, got, want[i+1])
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// A two-image request in one body.
	code, r, body := infer(t, url, "lenet5", jsonImage(append(append([]float32(nil), imgs[0]...), imgs[3]...), 2))
	if code != 200 || !equalF32(r.Outputs[0].Data, append(append([]float32(nil), want[0]...), want[3]...), 1e-4) {
		t.Fatalf("two-image request: %d %s", code, body)
	}
	// A LeNet-shaped mistake is refused with a message.
	code, _, body = infer(t, url, "lenet5", `{"inputs":[{"name":"input","shape":[1,1,32,32],"datatype":"FP32","data":[`+strings.Repeat("0,", 1023)+`0]}]}`)
	if code != 400 || !strings.Contains(body, "[-1 1 28 28]") {
		t.Fatalf("wrong image size: %d %s", code, body)
	}
}

func serveLocal(t *testing.T, local *LocalModels) string {
	t.Helper()
	s := NewServer(Config{}, local)
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() { s.Shutdown(t.Context()); <-done })
	return "http://" + ln.Addr().String()
}

func jsonImage(img []float32, n int) string {
	b, _ := json.Marshal(img)
	return fmt.Sprintf(`{"inputs":[{"name":"input","shape":[%d,1,28,28],"datatype":"FP32","data":%s}]}`, n, b)
}

// binaryInfer sends one image with the binary extension and asks for a binary output.
func binaryInfer(url, model string, img []float32) ([]float32, error) {
	js := []byte(`{"inputs":[{"name":"input","shape":[1,1,28,28],"datatype":"FP32","parameters":{"binary_data_size":3136}}],"parameters":{"binary_data_output":true}}`)
	body := append([]byte(nil), js...)
	for _, v := range img {
		body = binary.LittleEndian.AppendUint32(body, math.Float32bits(v))
	}
	req, _ := httpNewRequest("POST", url+"/v2/models/"+model+"/infer", bytes.NewReader(body))
	req.Header.Set("Inference-Header-Content-Length", fmt.Sprint(len(js)))
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d: %s %v", resp.StatusCode, b, err)
	}
	var hl int
	fmt.Sscan(resp.Header.Get("Inference-Header-Content-Length"), &hl)
	if hl <= 0 || hl > len(b) {
		return nil, fmt.Errorf("bad header length in response")
	}
	out := make([]float32, (len(b)-hl)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[hl+4*i:]))
	}
	return out, nil
}

// equalF32 compares within tol relative to the largest magnitude of want.
func equalF32(got, want []float32, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	scale := 1e-30
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol*scale {
			return false
		}
	}
	return true
}

func TestKernelBackendPaddedBatchMatchesSingleRuns(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	b := NewKernelBackend(1)
	defer b.Close()
	if err := b.LoadFile("lenet5", lenetFile(t)); err != nil {
		t.Fatal(err)
	}
	imgs := fashionImages(t, 6)
	for _, rows := range []int{3, 6} { // 3 runs exactly, 6 is padded to 8
		batch := &onnx.Tensor{Name: "input", DType: onnx.Float, Dims: []int64{int64(rows), 1, 28, 28}}
		for _, img := range imgs[:rows] {
			batch.F32 = append(batch.F32, img...)
		}
		out, err := b.Infer(t.Context(), "lenet5", []*onnx.Tensor{batch})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(out[0].Dims) != fmt.Sprintf("[%d 10]", rows) || len(out[0].F32) != rows*10 {
			t.Fatalf("%d rows: output %v with %d values", rows, out[0].Dims, len(out[0].F32))
		}
		for i, img := range imgs[:rows] {
			one, err := b.Infer(t.Context(), "lenet5", []*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: []int64{1, 1, 28, 28}, F32: img}})
			if err != nil {
				t.Fatal(err)
			}
			if !equalF32(out[0].F32[i*10:(i+1)*10], one[0].F32, 1e-4) {
				t.Fatalf("%d rows: row %d %v, alone %v", rows, i, out[0].F32[i*10:(i+1)*10], one[0].F32)
			}
		}
	}
}

func TestNodeServiceLoadsFromStoreAndReloadsAfterRestart(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	model, err := os.ReadFile(lenetFile(t))
	if err != nil {
		t.Fatal(err)
	}
	var fetches atomic.Int32 // restore fetches on its own goroutine
	fetch := func(ctx context.Context, name string, w io.Writer) error {
		if name != "models/lenet5.onnx" {
			return fmt.Errorf("no file %q", name)
		}
		fetches.Add(1)
		_, err := w.Write(model)
		return err
	}
	dataDir := t.TempDir()
	start := func() (*NodeService, string, *rpc.Client) {
		srv := rpc.NewServer([]byte(testSecret))
		client := rpc.NewClient([]byte(testSecret))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		svc := NewNodeService(NodeOptions{Addr: "127.0.0.1:0", DataDir: dataDir, Threads: 1, RPC: srv, Client: client,
			SelfRPC: ln.Addr().String(), Peers: StaticPeers{}, Fetch: fetch, Config: Config{Logf: t.Logf}})
		go srv.Serve(ln)
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Stop(); srv.Close(); client.Close() })
		return svc, ln.Addr().String(), client
	}
	svc, addr, client := start()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, bad := range []ServeRequest{
		{ServedModel: ServedModel{Name: "../evil"}, SDFSName: "models/lenet5.onnx"},
		{ServedModel: ServedModel{Name: "lenet5"}, SDFSName: "models/missing.onnx"},
		{ServedModel: ServedModel{Name: "lenet5"}},
	} {
		if _, err := Serve(ctx, client, addr, bad); err == nil {
			t.Fatalf("serve %+v accepted", bad)
		}
	}
	m, err := Serve(ctx, client, addr, ServeRequest{SDFSName: "models/lenet5.onnx",
		ServedModel: ServedModel{Name: "lenet5", Batch: BatchConfig{MaxBatch: 4, MaxDelay: time.Millisecond}}})
	if err != nil || m.Batch.MaxBatch != 4 || m.Batch.MaxQueue != DefaultMaxQueue {
		t.Fatalf("serve: %+v %v", m, err)
	}
	if _, ok := svc.Server().Local.Metadata("lenet5"); !ok {
		t.Fatal("not serving after http.serve")
	}
	svc.Stop()
	// A new service on the same data directory (a restarted node) serves it again by itself.
	svc2, addr2, client2 := start()
	waitFor(t, func() bool { _, ok := svc2.Server().Local.Metadata("lenet5"); return ok })
	if n := fetches.Load(); n != 2 {
		t.Fatalf("model fetched %d times, want once per start", n)
	}
	if got := svc2.Server().Local.Served(); len(got) != 1 || got[0].Batch.MaxBatch != 4 {
		t.Fatalf("restored %+v", got)
	}
	// Unserved, it stays unserved across a restart.
	if err := Unserve(ctx, client2, addr2, "lenet5"); err != nil {
		t.Fatal(err)
	}
	if err := Unserve(ctx, client2, addr2, "lenet5"); err == nil {
		t.Fatal("unserving a model twice succeeded")
	}
	if _, ok := svc2.Server().Local.Metadata("lenet5"); ok {
		t.Fatal("still serving after http.unserve")
	}
	svc2.Stop()
	svc3, _, _ := start()
	time.Sleep(300 * time.Millisecond)
	if _, ok := svc3.Server().Local.Metadata("lenet5"); ok || fetches.Load() != 2 {
		t.Fatalf("an unserved model came back after a restart (fetches %d)", fetches.Load())
	}
}

// TestRPCStatsRatesLeaveOutHistograms: JobRates (the dashboard sampler's) makes one call
// to the coordinator for every job's stats and asks for no histogram; JobStats (/metrics)
// asks for each job's histogram too.
func TestRPCStatsRatesLeaveOutHistograms(t *testing.T) {
	srv := rpc.NewServer([]byte(testSecret))
	var calls sync.Map
	count := func(m string) {
		n, _ := calls.LoadOrStore(m, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	rpc.HandleJSON(srv, "sched.job.stats.all", func(_ context.Context, _ struct{}) ([]JobStats, error) {
		count("stats.all")
		return []JobStats{{Job: "a", Rate10s: 5}, {Job: "b", Rate10s: 6}}, nil
	})
	rpc.HandleJSON(srv, "sched.job.histogram", func(_ context.Context, a map[string]string) (LatencyHistogram, error) {
		count("histogram")
		return LatencyHistogram{BoundsMS: []float64{1}, Counts: []int64{3}}, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	client := rpc.NewClient([]byte(testSecret))
	t.Cleanup(client.Close)
	r := &RPCStats{Client: client, Addr: ln.Addr().String()}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := func(m string) int32 {
		n, ok := calls.Load(m)
		if !ok {
			return 0
		}
		return n.(*atomic.Int32).Load()
	}
	jobs, err := r.JobRates(ctx)
	if err != nil || len(jobs) != 2 || jobs[0].Rate10s != 5 || jobs[1].Job != "b" || jobs[0].Histogram != nil {
		t.Fatalf("JobRates: %+v %v", jobs, err)
	}
	if got("histogram") != 0 || got("stats.all") != 1 {
		t.Fatalf("JobRates made %d histogram and %d stats.all calls, want 0 and 1", got("histogram"), got("stats.all"))
	}
	jobs, err = r.JobStats(ctx)
	if err != nil || len(jobs) != 2 || jobs[1].Histogram == nil {
		t.Fatalf("JobStats: %+v %v", jobs, err)
	}
	if got("histogram") != 2 || got("stats.all") != 2 {
		t.Fatalf("JobStats made %d histogram and %d stats.all calls, want 2 and 2", got("histogram"), got("stats.all"))
	}
}
