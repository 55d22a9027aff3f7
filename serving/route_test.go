package serving

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idunno/rpc"
)

const testSecret = "route-test-secret"

// rpcNode is a node's rpc side: its local models registered under http.*.
type rpcNode struct {
	peer  Peer
	local *LocalModels
	fake  *FakeBackend
	srv   *rpc.Server
}

func startRPCNode(t *testing.T, name string, serve map[string]BatchConfig) *rpcNode {
	t.Helper()
	fake := NewFakeBackend()
	fake.Add(doubleMeta, double)
	fake.Add(addMeta, add)
	local := NewLocalModels(fake, 5*time.Second)
	for m, b := range serve {
		if err := local.Serve(ServedModel{Name: m, Batch: b}); err != nil {
			t.Fatal(err)
		}
	}
	srv := rpc.NewServer([]byte(testSecret))
	srv.Logf = t.Logf
	RegisterRPC(srv, local, Limits{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	n := &rpcNode{peer: Peer{Name: name, RPCAddr: ln.Addr().String()}, local: local, fake: fake, srv: srv}
	t.Cleanup(func() { srv.Close(); local.Close() })
	return n
}

// startFrontNode runs an HTTP server that serves nothing itself and routes to peers.
func startFrontNode(t *testing.T, peers ...Peer) (string, *Router) {
	t.Helper()
	client := rpc.NewClient([]byte(testSecret))
	t.Cleanup(client.Close)
	router := NewRouter(client, StaticPeers(peers), Limits{})
	local := NewLocalModels(NewFakeBackend(), time.Second)
	s := NewServer(Config{Node: "front"}, local)
	s.Remote = router
	return serveHTTP(t, s), router
}

const doubleReq = `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`

func TestRoutingToServingNodes(t *testing.T) {
	b := startRPCNode(t, "nodeB", map[string]BatchConfig{"double": {}})
	c := startRPCNode(t, "nodeC", map[string]BatchConfig{"double": {}, "add": {}})
	url, router := startFrontNode(t, b.peer, c.peer)

	var m ModelMetadata
	getJSON(t, url+"/v2/models/add", 200, &m)
	if m.Name != "add" || len(m.Inputs) != 2 {
		t.Fatalf("routed metadata %+v", m)
	}
	for range 6 {
		code, r, body := infer(t, url, "double", doubleReq)
		if code != 200 || fmt.Sprint(r.Outputs[0].Data) != "[2 4 6 8]" {
			t.Fatalf("routed infer: %d %s", code, body)
		}
	}
	if nb, nc := len(b.fake.CallRows()), len(c.fake.CallRows()); nb == 0 || nc == 0 || nb+nc != 6 {
		t.Fatalf("requests not spread over the serving nodes: B ran %d, C ran %d", nb, nc)
	}
	if models := router.Models(context.Background()); fmt.Sprint(models["add"]) != "[nodeC]" {
		t.Fatalf("directory %v", models)
	}
	// Bad input is refused at the front node with the model's metadata, never forwarded.
	before := len(c.fake.CallRows())
	code, _, body := infer(t, url, "add", doubleReq)
	if code != 400 || !strings.Contains(body, "takes 2 inputs") || len(c.fake.CallRows()) != before {
		t.Fatalf("bad routed input: %d %s", code, body)
	}
	code, _, body = infer(t, url, "nope", doubleReq)
	if code != 404 || !strings.Contains(body, "unknown model") {
		t.Fatalf("unknown routed model: %d %s", code, body)
	}
}

func TestRoutingSurvivesAServingNodeGoingAway(t *testing.T) {
	b := startRPCNode(t, "nodeB", map[string]BatchConfig{"double": {}})
	c := startRPCNode(t, "nodeC", map[string]BatchConfig{"double": {}})
	url, _ := startFrontNode(t, b.peer, c.peer)
	if code, _, body := infer(t, url, "double", doubleReq); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	b.srv.Close() // B's rpc server is gone: requests go to C
	for i := range 4 {
		if code, _, body := infer(t, url, "double", doubleReq); code != 200 {
			t.Fatalf("request %d after B went away: %d %s", i, code, body)
		}
	}
	c.local.Unserve("double") // nobody serves it any more: the caller learns so
	code, _, body := infer(t, url, "double", doubleReq)
	if code != 404 || !strings.Contains(body, "unknown model") {
		t.Fatalf("request with no serving node: %d %s", code, body)
	}
}

func TestRoutedQueueFullIs503(t *testing.T) {
	b := startRPCNode(t, "nodeB", map[string]BatchConfig{"double": {MaxBatch: 1, MaxQueue: 1}})
	url, _ := startFrontNode(t, b.peer)
	gate := make(chan struct{})
	b.fake.SetGate("double", gate)
	done := make(chan int, 2)
	send := func() { go func() { c, _, _ := infer(t, url, "double", doubleReq); done <- c }() }
	send() // runs, blocked at the gate
	waitFor(t, func() bool { return len(b.fake.CallRows()) == 1 })
	send() // waits in B's queue
	waitFor(t, func() bool { return b.local.Depths()["double"] == 1 })
	code, _, body := infer(t, url, "double", doubleReq)
	if code != 503 || !strings.Contains(body, "queue is full") {
		t.Fatalf("routed request over B's bound: %d %s", code, body)
	}
	gate <- struct{}{}
	gate <- struct{}{}
	for range 2 {
		if c := <-done; c != 200 {
			t.Fatalf("queued routed request got %d", c)
		}
	}
}

func TestRoutingFindsAModelServedLater(t *testing.T) {
	b := startRPCNode(t, "nodeB", nil)
	url, _ := startFrontNode(t, b.peer)
	if code, _, body := infer(t, url, "double", doubleReq); code != 404 {
		t.Fatalf("before anyone serves it: %d %s", code, body)
	}
	if err := b.local.Serve(ServedModel{Name: "double"}); err != nil {
		t.Fatal(err)
	}
	// A miss always asks the peers again (the model may have just been served).
	if code, _, body := infer(t, url, "double", doubleReq); code != 200 {
		t.Fatalf("model served on B a moment ago: %d %s", code, body)
	}
}

func TestUnknownModelStormIsBounded(t *testing.T) {
	var calls atomic.Int64
	srv := rpc.NewServer([]byte(testSecret))
	rpc.HandleJSON(srv, MethodModels, func(ctx context.Context, _ struct{}) ([]RemoteModel, error) {
		calls.Add(1)
		return nil, nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url, _ := startFrontNode(t, Peer{Name: "counter", RPCAddr: ln.Addr().String()})
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if code, _, body := infer(t, url, fmt.Sprintf("nope%d", i), doubleReq); code != 404 {
				t.Errorf("unknown model: %d %s", code, body)
			}
		})
	}
	wg.Wait()
	// Refreshes are shared and at least 50 ms apart.
	if n, limit := calls.Load(), int64(time.Since(start)/(50*time.Millisecond))+2; n > limit {
		t.Fatalf("40 requests for unknown models made %d directory calls in %v (limit %d)", n, time.Since(start), limit)
	}
}
