package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/rpc"
)

// Model repository extension on a node (NodeService), with the real kernel: index, load
// with a "config" parameter, inference, unload; SDFS is a map.
func TestRepositoryExtensionOnANode(t *testing.T) {
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed: %v", err)
	}
	model, err := os.ReadFile(lenetFile(t))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"idunno/models/lenet5.onnx": model, "idunno/models/notes.txt": nil, "idunno/models/bad name.onnx": nil}
	fetch := func(ctx context.Context, name string, w io.Writer) error {
		b, ok := files[name]
		if !ok {
			return fmt.Errorf("no file %q", name)
		}
		_, err := w.Write(b)
		return err
	}
	list := func(ctx context.Context, prefix string) ([]string, error) {
		var r []string
		for n := range files {
			if strings.HasPrefix(n, prefix) {
				r = append(r, n)
			}
		}
		return r, nil
	}
	srv := rpc.NewServer([]byte(testSecret))
	client := rpc.NewClient([]byte(testSecret))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := NewNodeService(NodeOptions{DataDir: t.TempDir(), Threads: 1, RPC: srv, Client: client,
		SelfRPC: ln.Addr().String(), Peers: StaticPeers{}, Fetch: fetch, List: list})
	go srv.Serve(ln)
	t.Cleanup(func() { svc.Stop(); srv.Close(); client.Close() })
	url := serveHTTP(t, svc.Server())

	index := func(body string) string {
		t.Helper()
		code, _, b := do(t, "POST", url+"/v2/repository/index", []byte(body), nil)
		if code != 200 {
			t.Fatalf("index: %d %s", code, b)
		}
		var ms []RepositoryModel
		if err := json.Unmarshal(b, &ms); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(ms)
	}
	if got := index(""); got != "[{lenet5 1 UNAVAILABLE not served by any node (load it to serve it here)}]" {
		t.Fatalf("index before load: %s", got)
	}
	if got := index(`{"ready":true}`); got != "[]" {
		t.Fatalf("ready index before load: %s", got)
	}
	getJSON(t, url+"/v2/models/lenet5", 404, nil)

	cfg := `{"parameters":{"config":"{\"max_batch_size\":4,\"dynamic_batching\":{\"max_queue_delay_microseconds\":1000}}"}}`
	if code, _, b := do(t, "POST", url+"/v2/repository/models/lenet5/load", []byte(cfg), nil); code != 200 {
		t.Fatalf("load: %d %s", code, b)
	}
	if got := index(`{"ready":true}`); got != "[{lenet5 1 READY }]" {
		t.Fatalf("index after load: %s", got)
	}
	var c ModelConfig
	getJSON(t, url+"/v2/models/lenet5/config", 200, &c)
	if c.MaxBatchSize != 4 || c.DynamicBatching == nil || c.DynamicBatching.MaxQueueDelayMicroseconds != 1000 ||
		len(c.Input) != 1 || c.Input[0].DataType != "TYPE_FP32" || fmt.Sprint(c.Input[0].Dims) != "[1 28 28]" {
		t.Fatalf("config after load: %+v", c)
	}

	// A UINT8 image reaches the FP32 model as the same numbers.
	img := fashionImages(t, 1)[0]
	raw := make([]byte, len(img))
	f32 := make([]float32, len(img))
	for i, v := range img {
		raw[i] = byte(v*255 + 0.5)
		f32[i] = float32(raw[i])
	}
	want, err := kernelRun(t, model, f32)
	if err != nil {
		t.Fatal(err)
	}
	body, hdr := binaryBody("input", "UINT8", []int64{1, 1, 28, 28}, raw)
	code, _, b := do(t, "POST", url+"/v2/models/lenet5/infer", body, hdr)
	var r inferResp
	if code != 200 || json.Unmarshal(b, &r) != nil || !equalF32(r.Outputs[0].Data, want, 1e-5) {
		t.Fatalf("UINT8 image: %d %s, want %v", code, b, want)
	}

	for _, bad := range []struct{ path, msg string }{
		{"/v2/repository/models/missing/load", "no file"},
		{"/v2/repository/models/bad%20name/load", "bad model name"},
	} {
		if code, _, b := do(t, "POST", url+bad.path, nil, nil); code != 400 || !strings.Contains(string(b), bad.msg) {
			t.Fatalf("POST %s: %d %s", bad.path, code, b)
		}
	}
	for range 2 { // unloading twice is fine, as in Triton
		if code, _, b := do(t, "POST", url+"/v2/repository/models/lenet5/unload", []byte(`{"parameters":{"unload_dependents":false}}`), nil); code != 200 {
			t.Fatalf("unload: %d %s", code, b)
		}
	}
	getJSON(t, url+"/v2/models/lenet5", 404, nil)
	if got := index("{}"); !strings.Contains(got, "lenet5 1 UNAVAILABLE") {
		t.Fatalf("index after unload: %s", got)
	}
}

// kernelRun runs one image through the model directly.
func kernelRun(t *testing.T, model []byte, img []float32) ([]float32, error) {
	om, err := onnx.Decode(model)
	if err != nil {
		return nil, err
	}
	m, err := kernel.LoadModel(om, kernel.Options{Threads: 1})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	out, err := m.Run([]*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: []int64{1, 1, 28, 28}, F32: img}})
	if err != nil {
		return nil, err
	}
	return out[0].F32, nil
}
