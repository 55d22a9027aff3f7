package node

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"idunno/fd"
	"idunno/logs"
	"idunno/sched"
)

func freePort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.LocalAddr().(*net.UDPAddr).Port
		l.Close()
		if p+sched.PortsPerNode > 65535 {
			continue
		}
		ok := true
		for _, off := range []int{sched.OffsetRPC, sched.OffsetHTTP} {
			tl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+off))
			if err != nil {
				ok = false
				break
			}
			tl.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free ports")
	return 0
}

// runNode starts a node with opt and returns it and a function that stops it and waits.
func runNode(t *testing.T, opt Options) (*Node, sched.NodeConfig, func()) {
	t.Helper()
	cfg := sched.NodeConfig{Name: "node0", Host: "127.0.0.1", BasePort: freePort(t), DataDir: t.TempDir(), Secret: "s"}
	n, err := New(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return n, cfg, stop
}

func members(t *testing.T, n *Node, addr string) MembersReply {
	t.Helper()
	var r MembersReply
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		cctx, c := context.WithTimeout(context.Background(), time.Second)
		err = n.client.CallJSON(cctx, addr, "fd.members", struct{}{}, &r)
		c()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNodeRunsEveryPartAndStops: one node answers fd.members over authenticated RPC, serves
// HTTP, answers the scheduler's RPC, logs in the documented text layout, and lets go of its
// ports when its context ends.
func TestNodeRunsEveryPartAndStops(t *testing.T) {
	n, cfg, stop := runNode(t, Options{})
	r := members(t, n, cfg.RPCAddr())
	if len(r.Members) != 1 || r.Self.Name != "node0" || r.Self.State != fd.Alive || r.Self.RPCAddr != cfg.RPCAddr() {
		t.Fatalf("members %+v", r)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err = hc.Get("http://" + cfg.HTTPAddr() + "/v2/health/live")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("http: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("http live: %s", resp.Status)
	}
	// The scheduler answers its RPC methods; alone, the node becomes the coordinator.
	var info sched.ClusterInfo
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = n.client.CallJSON(ctx, cfg.RPCAddr(), "sched.info", struct{}{}, &info)
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || info.Coordinator != "node0" {
		t.Fatalf("sched.info: %+v, %v", info, err)
	}
	stop()
	for _, a := range []string{cfg.RPCAddr(), cfg.HTTPAddr()} {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still listening after Run returned", a)
		}
	}
	log, _ := os.ReadFile(filepath.Join(cfg.DataDir, "node.log"))
	line := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z node0 node: started: .* level=INFO$`)
	if !line.Match(log) {
		t.Fatalf("log format:\n%s", log)
	}
	if !strings.Contains(string(log), "node0 node: stopping: leaving the cluster") {
		t.Fatalf("no stop record:\n%s", log)
	}
}

func TestNodeLogsJSON(t *testing.T) {
	n, cfg, stop := runNode(t, Options{LogFormat: logs.JSON})
	members(t, n, cfg.RPCAddr())
	stop()
	b, _ := os.ReadFile(filepath.Join(cfg.DataDir, "node.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) < 2 {
		t.Fatalf("log:\n%s", b)
	}
	subsystems := map[string]bool{}
	for _, l := range lines {
		var rec struct{ Time, Level, Msg, Node, Subsystem string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		if rec.Node != "node0" || rec.Level == "" || rec.Msg == "" || rec.Time == "" {
			t.Fatalf("record %q", l)
		}
		subsystems[rec.Subsystem] = true
	}
	if !subsystems["node"] {
		t.Fatalf("no node records in\n%s", b)
	}
}

func TestNewRejectsBadConfigAndFormat(t *testing.T) {
	if _, err := New(sched.NodeConfig{Name: "x"}, Options{}); err == nil {
		t.Fatal("config without ports or data dir accepted")
	}
	cfg := sched.NodeConfig{Name: "node0", Host: "127.0.0.1", BasePort: freePort(t), DataDir: t.TempDir(), Secret: "s"}
	if _, err := New(cfg, Options{LogFormat: "xml"}); err == nil {
		t.Fatal("log format xml accepted")
	}
}

func TestIncarnationAlwaysGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fd.incarnation")
	os.WriteFile(path, []byte("99999999999999999\n"), 0o644) // a previous life "in the future"
	a := nextIncarnation(path)
	b := nextIncarnation(path)
	if a != 100000000000000000 || b != a+1 {
		t.Fatalf("got %d then %d", a, b)
	}
}
