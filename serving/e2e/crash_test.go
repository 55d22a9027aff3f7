package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/client/localcluster"
)

// crashLoad is the load of TestServingSurvivesReplicaCrash: clients sending one request
// after another, for before the kill and after it.
const (
	crashClients = 4
	crashBefore  = 3 * time.Second
	crashAfter   = 6 * time.Second
)

type crashResult struct {
	sent    time.Time
	latency time.Duration
	code    int
	err     error
	idOK    bool
}

// TestServingSurvivesReplicaCrash serves lenet5 on node1 and node2, sends requests
// through node0 from several clients, and kills node2 (SIGKILL) under that load: every
// request must be answered, with its own id, and the model must be served again on a live
// node. It logs the latency percentiles before and across the crash and how long after
// node0's failure detector noticed node2's death the model was served again (figures:
// benchmarks/README.md).
func TestServingSurvivesReplicaCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and kills a node under load")
	}
	dir := t.TempDir()
	t.Setenv("IDUNNO_HTTP_TOKEN", token)
	c, err := localcluster.Up(dir, 3, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down() })
	addr := map[string]string{}
	for _, n := range c.Nodes() {
		node, _ := c.Node(n.Name)
		addr[n.Name] = "http://" + node.HTTPAddr
	}
	model := filepath.Join(dir, "lenet5.onnx")
	cli(t, dir, "zoo", "lenet5", "--seed", "7", "--out", model)
	cli(t, dir, "put", model, "crash-lenet5.onnx")
	out := cli(t, dir, "serve", "lenet5", "--sdfs", "crash-lenet5.onnx", "--nodes", "node1,node2", "--max-batch", "4", "--max-delay", "1ms")
	if !strings.Contains(out, "node1 serves lenet5") || !strings.Contains(out, "node2 serves lenet5") {
		t.Fatalf("serve said %q", out)
	}
	img := make([]float32, 784)
	for i := range img {
		img[i] = float32(i%31) / 31
	}
	data, _ := json.Marshal(img)
	body := func(id string) []byte {
		return []byte(`{"id":"` + id + `","inputs":[{"name":"input","shape":[1,1,28,28],"datatype":"FP32","data":` + string(data) + `}]}`)
	}
	one := func(id string) crashResult {
		r := crashResult{sent: time.Now()}
		var b []byte
		r.code, b, r.err = post(addr["node0"]+"/v2/models/lenet5/infer", body(id))
		r.latency = time.Since(r.sent)
		var resp struct {
			ID string `json:"id"`
		}
		r.idOK = json.Unmarshal(b, &resp) == nil && resp.ID == id
		if r.err == nil && r.code != 200 {
			r.err = fmt.Errorf("status %d: %s", r.code, b)
		}
		return r
	}
	warm := time.Now().Add(30 * time.Second)
	for r := one("warm"); r.err != nil; r = one("warm") { // both replicas known to node0
		if time.Now().After(warm) {
			t.Fatalf("node0 does not route to lenet5: %v", r.err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	var (
		mu      sync.Mutex
		results []crashResult
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range crashClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := one(fmt.Sprintf("c%d-%d", w, i))
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(crashBefore)
	killed := time.Now()
	if err := c.Kill("node2"); err != nil {
		t.Error(err)
	}
	time.Sleep(crashAfter)
	close(stop)
	wg.Wait()

	var before, across []time.Duration
	failed := 0
	for _, r := range results {
		if r.err != nil || !r.idOK {
			failed++
			if failed <= 5 {
				t.Errorf("request sent %v after the kill: %v (id echoed: %v)", r.sent.Sub(killed), r.err, r.idOK)
			}
			continue
		}
		if r.sent.Before(killed) {
			before = append(before, r.latency)
		} else if r.sent.Before(killed.Add(2 * time.Second)) {
			across = append(across, r.latency)
		}
	}
	t.Logf("%d requests from %d clients, %d failed; before the kill: %d, p50 %v, p99 %v; sent in the 2 s after it: %d, p50 %v, p99 %v, max %v",
		len(results), crashClients, failed, len(before), pct(before, 50), pct(before, 99), len(across), pct(across, 50), pct(across, 99), pct(across, 100))
	if failed > 0 {
		t.Fatalf("%d of %d requests failed across the crash", failed, len(results))
	}

	// node0 (the placer: the first live name) serves lenet5 again: two live replicas as before.
	var detected, placed time.Time
	deadline := time.Now().Add(60 * time.Second)
	for placed.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("lenet5 was not served again after node2 died; node0's events: %+v", events(t, addr["node0"]))
		}
		time.Sleep(250 * time.Millisecond)
		for _, e := range events(t, addr["node0"]) {
			switch {
			case e.Kind == "node failed" && e.Detail == "node2":
				detected = e.At
			case e.Kind == "placed again" && strings.HasPrefix(e.Detail, "lenet5 on "):
				placed = e.At
			}
		}
	}
	t.Logf("node2 killed; node0 noticed %v later; lenet5 served again %v after that", detected.Sub(killed).Round(time.Millisecond), placed.Sub(detected).Round(time.Millisecond))
	// The target: placed again on a live node within 2 s of the failure's detection.
	if detected.IsZero() {
		t.Fatalf("node0 recorded no 'node failed' event for node2: %+v", events(t, addr["node0"]))
	}
	if d := placed.Sub(detected); d > 2*time.Second {
		t.Errorf("lenet5 served again %v after node2's failure was detected, want within 2 s", d.Round(time.Millisecond))
	}
	var served []struct {
		Node string `json:"node"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(cli(t, dir, "served", "--json")), &served); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, s := range served {
		if s.Name == "lenet5" {
			nodes = append(nodes, s.Node)
		}
	}
	slices.Sort(nodes)
	if fmt.Sprint(nodes) != "[node0 node1]" {
		t.Fatalf("lenet5 served on %v after node2 died, want node0 and node1", nodes)
	}
	for _, n := range []string{"node0", "node1"} {
		if code, b, err := get(addr[n] + "/v2/health/ready"); err != nil || code != 200 {
			t.Fatalf("%s not ready: %d %s %v", n, code, b, err)
		}
	}
}

type event struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
}

// events returns a node's dashboard events.
func events(t *testing.T, addr string) []event {
	t.Helper()
	code, b, err := get(addr + "/api/dashboard")
	if err != nil || code != 200 {
		t.Fatalf("dashboard: %d %s %v", code, b, err)
	}
	var d struct {
		Events []event `json:"events"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d.Events
}

// pct is the p-th percentile of ds (nearest rank; 100 is the maximum).
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))].Round(10 * time.Microsecond)
}
