package sched

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"idunno/fd"
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
		if p+PortsPerNode > 65535 {
			continue
		}
		ok := true
		for _, off := range []int{OffsetRPC, OffsetHTTP} {
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

type fakeComponent struct{ started, stopped atomic.Bool }

func (f *fakeComponent) Name() string                    { return "fake" }
func (f *fakeComponent) Start(ctx context.Context) error { f.started.Store(true); return nil }
func (f *fakeComponent) Stop() error                     { f.stopped.Store(true); return nil }

// TestNodeRunServesMembersAndStops: a node answers fd.members over authenticated RPC, logs in
// the documented format, and stops its components when its context ends.
func TestNodeRunServesMembersAndStops(t *testing.T) {
	dir := t.TempDir()
	cfg := NodeConfig{Name: "node0", Host: "127.0.0.1", BasePort: freePort(t), DataDir: dir, Secret: "s"}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	comp := &fakeComponent{}
	n.Add(comp)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	}()
	var r MembersReply
	deadline := time.Now().Add(5 * time.Second)
	for {
		cctx, c := context.WithTimeout(context.Background(), time.Second)
		err = n.Client.CallJSON(cctx, cfg.RPCAddr(), "fd.members", struct{}{}, &r)
		c()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 1 || r.Self.Name != "node0" || r.Self.State != fd.Alive || r.Self.RPCAddr != cfg.RPCAddr() {
		t.Fatalf("members %+v", r)
	}
	if !comp.started.Load() {
		t.Fatal("component not started")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	if !comp.stopped.Load() {
		t.Fatal("component not stopped")
	}
	log, _ := os.ReadFile(filepath.Join(dir, "node.log"))
	line := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z node0 node: started`)
	if !line.Match(log) {
		t.Fatalf("log format:\n%s", log)
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
