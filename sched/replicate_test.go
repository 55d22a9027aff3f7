package sched

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/rpc"
)

// cutProxy forwards TCP connections to target until Cut, which closes every connection and
// refuses new ones until Heal: a link that fails on real sockets.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.Cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
	}
}

// Cut closes every forwarded connection and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Heal accepts connections again.
func (p *cutProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// newCutCluster starts a 3-node in-process cluster whose coordinator (node0) reaches its
// standby (node1) only through a cutProxy.
func newCutCluster(t *testing.T) (*memCluster, *cutProxy) {
	return newCutClusterConfig(t, func(*SchedConfig) {})
}

func newCutClusterConfig(t *testing.T, set func(*SchedConfig)) (*memCluster, *cutProxy) {
	cfg := DefaultSchedConfig()
	cfg.TakeoverGrace = 500 * time.Millisecond
	cfg.PullEvery = 50 * time.Millisecond
	cfg.AckTimeout = time.Second
	set(&cfg)
	c := &memCluster{t: t, mem: NewStaticMembership(), blobs: NewMemBlobs(), cfg: cfg, nodes: map[string]*memNode{},
		exec: &FakeExecutor{Datasets: map[string]int{"small.idx": 2000}, Models: map[string]time.Duration{"slow.onnx": 2 * time.Millisecond}}}
	t.Cleanup(func() {
		for name, nd := range c.nodes {
			if nd.running {
				c.kill(name)
			}
		}
		if t.Failed() {
			t.Logf("logs:\n%s", c.logs.String())
		}
	})
	var proxy *cutProxy
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("node%d", i)
		c.nodes[name] = &memNode{name: name, dir: t.TempDir()}
		c.start(name)
		if name == "node1" {
			proxy = newCutProxy(t, c.nodes[name].addr)
			c.mem.Set(Peer{Name: name, RPCAddr: proxy.Addr()}, true)
		}
	}
	if co := c.waitCoordinator(""); co.name != "node0" {
		t.Fatalf("coordinator %s, want node0", co.name)
	}
	waitStandby(t, c, "node1")
	return c, proxy
}

func waitStandby(t *testing.T, c *memCluster, want string) {
	t.Helper()
	var info ClusterInfo
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := c.call("node0", "sched.info", struct{}{}, &info); err == nil && info.Standby == want {
			return
		}
	}
	t.Fatalf("standby %q, want %q", info.Standby, want)
}

func addJob(c *memCluster, via, name string) (JobAddReply, error) {
	var r JobAddReply
	err := c.call(via, "sched.job.add", JobSpec{Name: name, Model: "slow.onnx", Data: "small.idx", Batch: 10, Request: "key-" + name}, &r)
	return r, err
}

// A change the standby did not confirm is not acknowledged; once the link heals, the
// standby gets a snapshot and changes are acknowledged again.
func TestReplicationFailureDoesNotAcknowledge(t *testing.T) {
	c, proxy := newCutCluster(t)
	var info ClusterInfo
	if err := c.call("node0", "sched.phase", PhaseArgs{PhaseInference}, &info); err != nil {
		t.Fatal(err)
	}
	if info.Standby != "node1" || info.NoStandby {
		t.Fatalf("phase change confirmed by %q (no standby %v), want node1", info.Standby, info.NoStandby)
	}
	r, err := addJob(c, "node0", "before")
	if err != nil || r.Standby != "node1" {
		t.Fatalf("add before the cut: %+v, %v", r, err)
	}
	proxy.Cut()
	if r, err := addJob(c, "node0", "during"); err == nil {
		t.Fatalf("add while the standby is cut off was acknowledged: %+v", r)
	} else if !Unconfirmed(err) || !Retryable(err) || !strings.Contains(err.Error(), "not confirmed") {
		t.Fatalf("add while the standby is cut off: %v (code %q), want CodeUnconfirmed", err, rpc.CodeOf(err))
	}
	proxy.Heal()
	// The client retries the add it was not sure of (same idempotency key): it gets the job
	// (once), confirmed. The same add under another key is a duplicate.
	if r, err := addJob(c, "node0", "during"); err != nil || r.Standby != "node1" {
		t.Fatalf("retry of the unconfirmed add: %+v, %v", r, err)
	}
	if err := c.call("node0", "sched.job.add", JobSpec{Name: "during", Model: "slow.onnx", Data: "small.idx", Batch: 10, Request: "other"}, nil); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("add of a taken name under another key: %v", err)
	}
	r, err = addJob(c, "node0", "after")
	if err != nil || r.Standby != "node1" {
		t.Fatalf("add after the heal: %+v, %v", r, err)
	}
	// The standby holds every job, the unconfirmed one included (it was applied on the
	// coordinator, and the snapshot that re-synced the standby carried it).
	st := c.nodes["node1"].s.Status()
	if st.Role != roleStandby.String() {
		t.Fatalf("node1 is %s", st.Role)
	}
	s1 := c.nodes["node1"].s
	s1.mu.Lock()
	defer s1.mu.Unlock()
	for _, j := range []string{"before", "during", "after"} {
		if _, ok := s1.st.Jobs[j]; !ok {
			t.Errorf("standby lacks job %s", j)
		}
	}
}

// Jepsen-style: every job add the client was told succeeded survives a takeover that
// follows a replication failure; adds made while the standby was cut off were refused.
func TestTakeoverAfterReplicationFailureKeepsAcknowledgedAdds(t *testing.T) {
	c, proxy := newCutCluster(t)
	if err := c.call("node0", "sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	add := func(name string) {
		if _, err := addJob(c, "node0", name); err == nil {
			acked[name] = true
		}
	}
	add("a1")
	add("a2")
	proxy.Cut()
	add("b1")
	add("b2")
	if acked["b1"] || acked["b2"] {
		t.Fatalf("adds acknowledged while the standby was cut off: %v", acked)
	}
	if !acked["a1"] || !acked["a2"] {
		t.Fatalf("adds before the cut not acknowledged: %v", acked)
	}
	// The coordinator dies; the standby (still within its heartbeat window) takes over.
	c.kill("node0")
	proxy.Heal()
	co := c.waitCoordinator("node0")
	if co.name != "node1" {
		t.Fatalf("%s took over, want the standby node1", co.name)
	}
	var jobs []JobSummary
	if err := c.callRetry("sched.job.list", struct{}{}, &jobs); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, j := range jobs {
		have[j.Name] = true
	}
	for j := range acked {
		if !have[j] {
			t.Errorf("acknowledged job %s lost in the takeover (have %v)", j, have)
		}
	}
}

// With no other live node, a change is confirmed by the coordinator's disk, and the reply
// says the cluster runs without a standby.
func TestNoStandbyConfirmsOnDisk(t *testing.T) {
	c := newMemCluster(t, 1)
	c.waitCoordinator("")
	var info ClusterInfo
	if err := c.callRetry("sched.phase", PhaseArgs{PhaseInference}, &info); err != nil {
		t.Fatal(err)
	}
	if !info.NoStandby || info.Standby != "" {
		t.Fatalf("reply %+v, want no standby", info)
	}
	var r JobAddReply
	if err := c.callRetry("sched.job.add", JobSpec{Name: "j", Model: "fast.onnx", Data: "small.idx", Batch: 10}, &r); err != nil {
		t.Fatal(err)
	}
	if !r.NoStandby {
		t.Fatalf("reply %+v, want no standby", r)
	}
	// The journal on disk holds the job (it was synced before the answer).
	b, err := os.ReadFile(filepath.Join(c.nodes["node0"].dir, "sched", "journal"))
	if err != nil {
		t.Fatal(err)
	}
	if st, _, _, _ := DecodeJournal(b); st.Jobs["j"] == nil {
		t.Fatal("the journal on disk lacks the acknowledged job")
	}
}

// A refusal for fencing crosses the network as a *FencedError, not as text to match.
func TestFencedErrorIsTyped(t *testing.T) {
	c := newMemCluster(t, 2)
	co := c.waitCoordinator("")
	other := "node0"
	if co.name == "node0" {
		other = "node1"
	}
	nd := c.nodes[other]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// An order of epoch 0 is older than anything node has seen.
	_, err := co.s.callEpoch(ctx, nd.addr, "sched.replicate", 0, ReplicateArgs{From: "ghost"}, nil)
	var f *FencedError
	if !errors.As(err, &f) || f.Newest == 0 {
		t.Fatalf("got %v (%T), want a *FencedError", err, err)
	}
	if !Retryable(err) || rpc.CodeOf(err) != CodeFenced {
		t.Fatalf("fencing error %v carries code %q", err, rpc.CodeOf(err))
	}
	// A method whose reply carries a body: the refusal is known by its code.
	_, _, err = co.s.callEpochBody(ctx, nd.addr, "sched.train.state", 0, StateArgs{}, nil, nil)
	if !IsFenced(err) {
		t.Fatalf("train.state of epoch 0: %v (code %q), want fenced", err, rpc.CodeOf(err))
	}
}

// Client calls that fail tell the caller what to do by their code, through any node, not
// by their text: send it again (CodeRetry), not sure it was made (CodeUnconfirmed, see
// TestReplicationFailureDoesNotAcknowledge), no such job (CodeNoJob), or a refusal for good.
func TestClientErrorCodes(t *testing.T) {
	c := newMemCluster(t, 3)
	co := c.waitCoordinator("")
	var other string
	for name := range c.nodes {
		if name != co.name {
			other = name
			break
		}
	}
	if err := c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	// A node that does not coordinate refuses a call meant for the coordinator alone.
	err := c.call(other, "sched.job.list!", struct{}{}, nil)
	if rpc.CodeOf(err) != CodeRetry || !Retryable(err) || Unconfirmed(err) {
		t.Fatalf("%s: %v (code %q), want CodeRetry", other, err, rpc.CodeOf(err))
	}
	// Through the coordinator, and forwarded by another node: the code survives the hop.
	// (Until the other node has learned who coordinates, it answers CodeRetry.)
	settled := func(via, method string, args any) error {
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if err = c.call(via, method, args, nil); rpc.CodeOf(err) != CodeRetry {
				break
			}
		}
		return err
	}
	for _, via := range []string{co.name, other} {
		for _, m := range []string{"sched.job.get", "sched.job.stats", "sched.job.remove"} {
			err := settled(via, m, NameArgs{Name: "nope"})
			if !IsNoJob(err) || Retryable(err) {
				t.Errorf("%s via %s: %v (code %q), want CodeNoJob", m, via, err, rpc.CodeOf(err))
			}
		}
		err := settled(via, "sched.job.add", JobSpec{Name: "bad", Model: "slow.onnx", Data: "small.idx", Batch: 0})
		if err == nil || rpc.CodeOf(err) != "" || Retryable(err) {
			t.Errorf("bad add via %s: %v (code %q), want a refusal without a code", via, err, rpc.CodeOf(err))
		}
	}
}

// When the coordinator and its standby are both gone, the workers' journals lack the
// acknowledged jobs (only those two hold them): a worker taking over on its higher epoch
// would drop them for good once they return. So nobody takes over until one of them is
// back, and then it does, with every acknowledged job (found by the network-namespace
// scenario "frozen-standby" in chaos/).
func TestNoTakeoverWithoutTheNewestJournal(t *testing.T) {
	c := newMemCluster(t, 5)
	if co := c.waitCoordinator(""); co.name != "node0" {
		t.Fatalf("coordinator %s, want node0", co.name)
	}
	waitStandby(t, c, "node1")
	if err := c.call("node0", "sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{"a1", "a2"} {
		if _, err := addJob(c, "node0", j); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []string{"node2", "node3", "node4"} {
		for deadline := time.Now().Add(10 * time.Second); c.nodes[w].s.Status().Seen < 1; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never heard of the coordinator", w)
			}
		}
	}
	// Both stop before the view says so, so the coordinator cannot replace its standby and
	// the standby cannot take over in between; then the detector reports both.
	for _, n := range []string{"node0", "node1"} {
		nd := c.nodes[n]
		nd.srv.Close()
		nd.s.Stop()
		nd.cli.Close()
		nd.running = false
	}
	c.mem.Set(Peer{Name: "node0"}, false)
	c.mem.Set(Peer{Name: "node1"}, false)
	// Well past TakeoverGrace (0.5 s): node2, node3 and node4 are a majority, answer each
	// other and have seen epoch 1, but their journals are of epoch 0.
	time.Sleep(4 * c.cfg.TakeoverGrace)
	if co := c.coordinator(); co != nil {
		t.Fatalf("%s took over without the acknowledged jobs", co.name)
	}
	c.start("node1")
	co := c.waitCoordinator("")
	if co.name != "node1" {
		t.Fatalf("%s took over, want node1 (the standby, back with its journal)", co.name)
	}
	var jobs []JobSummary
	if err := c.callRetry("sched.job.list", struct{}{}, &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Fatalf("jobs after the takeover: %+v, want a1 and a2", jobs)
	}
}

func TestMajorityOfKnownMembers(t *testing.T) {
	m := NewStaticMembership()
	s := &Scheduler{mem: m}
	for i := 0; i < 5; i++ {
		m.Set(Peer{Name: fmt.Sprintf("node%d", i)}, true)
	}
	if !s.majority(m.Alive()) {
		t.Fatal("5 of 5 alive is no majority")
	}
	m.Set(Peer{Name: "node3"}, false)
	m.Set(Peer{Name: "node4"}, false)
	if !s.majority(m.Alive()) {
		t.Fatal("3 of 5 alive is no majority")
	}
	m.Set(Peer{Name: "node2"}, false)
	if s.majority(m.Alive()) {
		t.Fatal("2 of 5 alive counts as a majority")
	}
	if one := NewStaticMembership(Peer{Name: "node0"}); !(&Scheduler{mem: one}).majority(one.Alive()) {
		t.Fatal("a single-node cluster is no majority of itself")
	}
}

// Two copies of one add (same idempotency key) that reach the coordinator together, as
// when a client gave up on a node cut off from the coordinator and asked another, and the
// partition healed: both are told the job was added, and there is one job (found by the
// chaos scenario "workers-minority": the second copy was refused as "already in use").
func TestConcurrentRetriesOfOneAdd(t *testing.T) {
	c := newMemCluster(t, 2)
	c.exec.ProbeDelay = 200 * time.Millisecond
	c.waitCoordinator("")
	waitStandby(t, c, "node1")
	if err := c.call("node0", "sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, via := range []string{"node0", "node1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = addJob(c, via, "twice")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("copy %d: %v", i, err)
		}
	}
	var jobs []JobSummary
	if err := c.callRetry("sched.job.list", struct{}{}, &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Fatalf("jobs %+v, want one", jobs)
	}
}

// TestStandbyMayTakeOver covers the standby's check before it takes over: its detector has
// failed the coordinator, and the live nodes' own answers must show that it is not cut off
// and was not replaced (the flapping-link case of chaos/: a standby whose link went down
// took over on a view that still held a majority, and its higher epoch dropped changes
// its coordinator had confirmed through a new standby).
func TestStandbyMayTakeOver(t *testing.T) {
	self := StatusReply{Name: "n0", Role: "standby", Epoch: 2, Seq: 30, Coordinator: "n1", Seen: 2}
	fol := func(name string) StatusReply {
		return StatusReply{Name: name, Role: "follower", Epoch: 2, Seq: 30, Coordinator: "n1", Seen: 2}
	}
	cases := []struct {
		name    string
		answers []StatusReply
		known   int
		want    bool
	}{
		{"coordinator dead, the rest answer", []StatusReply{self, fol("n2"), fol("n3"), fol("n4")}, 5, true},
		{"bare majority answers", []StatusReply{self, fol("n2"), fol("n3")}, 5, true},
		{"cut off: nobody answers", []StatusReply{self}, 5, false},
		{"half is no majority", []StatusReply{self, fol("n2")}, 4, false},
		{"replaced: another standby in this epoch", []StatusReply{self,
			{Name: "n2", Role: "standby", Epoch: 2, Seq: 33, Coordinator: "n1", Seen: 2}, fol("n3")}, 5, false},
		{"a stale standby holding no more does not block (seen in make demo)", []StatusReply{self,
			{Name: "n2", Role: "standby", Epoch: 2, Seq: 30, Seen: 2}, fol("n3")}, 5, true},
		{"a stale standby of an older epoch does not block", []StatusReply{self,
			{Name: "n2", Role: "standby", Epoch: 1, Seq: 9, Coordinator: "n0", Seen: 1}, fol("n3")}, 5, true},
		{"a coordinator answers", []StatusReply{self, {Name: "n1", Role: "coordinator", Epoch: 2, Seq: 31}, fol("n2")}, 5, false},
		{"a newer epoch was seen", []StatusReply{self, fol("n2"), {Name: "n3", Role: "follower", Epoch: 2, Seq: 30, Seen: 3}}, 5, false},
		{"a newer journal exists", []StatusReply{self, fol("n2"), {Name: "n3", Role: "follower", Epoch: 3, Seq: 2}}, 5, false},
	}
	for _, c := range cases {
		got, why := standbyMayTakeOver("n0", 2, 30, c.answers, c.known)
		if got != c.want {
			t.Errorf("%s: got %v (%s), want %v", c.name, got, why, c.want)
		}
		if !got && why == "" {
			t.Errorf("%s: refused without a reason", c.name)
		}
	}
}

// A change synced to the coordinator's disk while it saw no other live node is not
// acknowledged as such once the others are back (chaos/ found it on a flapping link: the
// coordinator's view emptied for a moment, the disk "confirmed" a job add, the view came
// back during the quiet period after the standby change, and the add was acknowledged
// although no standby held it; the standby then took over without it). It is confirmed
// only when a standby holds it.
func TestDiskAckWhileAloneNeedsAStandbyOnceOthersAreBack(t *testing.T) {
	c, proxy := newCutClusterConfig(t, func(cfg *SchedConfig) { cfg.AckTimeout = 4 * time.Second })
	if err := c.call("node0", "sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	type result struct {
		r   JobAddReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := addJob(c, "node0", "x")
		done <- result{r, err}
	}()
	// The coordinator's view empties (its link flaps): it syncs the journal to disk.
	time.Sleep(200 * time.Millisecond)
	peers := map[string]Peer{}
	for _, p := range c.mem.Alive() {
		peers[p.Name] = p
	}
	for _, n := range []string{"node1", "node2"} {
		c.mem.Set(peers[n], false)
	}
	time.Sleep(400 * time.Millisecond)
	for _, n := range []string{"node1", "node2"} {
		c.mem.Set(peers[n], true)
	}
	res := <-done
	if res.err == nil {
		t.Fatalf("the add was acknowledged (standby %q, no standby %v) although only the coordinator's disk held it and the standby was cut off",
			res.r.Standby, res.r.NoStandby)
	}
	if !errors.Is(res.err, errNotConfirmed) && !strings.Contains(res.err.Error(), "not confirmed") {
		t.Fatalf("add: %v", res.err)
	}
	proxy.Heal()
	if r, err := addJob(c, "node0", "x"); err != nil || r.Standby != "node1" {
		t.Fatalf("retry after the heal: %+v, %v", r, err)
	}
}

// TestRemovals covers the coordinator's choice of failed members it no longer counts
// toward a majority.
func TestRemovals(t *testing.T) {
	t0 := time.Unix(1000, 0)
	after := 10 * time.Second
	down := map[string]time.Time{}
	// Two workers fail: counted until they have been down for 10 s.
	if got := removals(down, []string{"w1", "w2"}, t0, after, nil, 4, 6); len(got) != 0 {
		t.Fatalf("removed at once: %v", got)
	}
	if got := removals(down, []string{"w1", "w2"}, t0.Add(9*time.Second), after, nil, 4, 6); len(got) != 0 {
		t.Fatalf("removed after 9 s: %v", got)
	}
	got := removals(down, []string{"w1", "w2"}, t0.Add(10*time.Second), after, nil, 4, 6)
	if !reflect.DeepEqual(got, []string{"w1", "w2"}) {
		t.Fatalf("after 10 s: %v, want w1 w2", got)
	}
	// w1 comes back: it counts again, and a later failure starts its clock anew.
	got = removals(down, []string{"w2"}, t0.Add(11*time.Second), after, got, 5, 6)
	if !reflect.DeepEqual(got, []string{"w2"}) {
		t.Fatalf("w1 back: %v, want w2", got)
	}
	if got = removals(down, []string{"w1", "w2"}, t0.Add(12*time.Second), after, got, 4, 6); !reflect.DeepEqual(got, []string{"w2"}) {
		t.Fatalf("w1 failed again: %v, want w2 only", got)
	}
	// Without a majority of what it counts, a coordinator removes no one new (members cut
	// off with it in a minority are never removed), but keeps those removed before.
	down2 := map[string]time.Time{}
	removals(down2, []string{"a", "b", "c"}, t0, after, nil, 2, 5)
	if got := removals(down2, []string{"a", "b", "c"}, t0.Add(time.Minute), after, nil, 2, 5); len(got) != 0 {
		t.Fatalf("a coordinator in a minority removed %v", got)
	}
	if got := removals(down2, []string{"a", "b", "c"}, t0.Add(2*time.Minute), after, []string{"a"}, 2, 5); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("without a majority: %v, want the earlier removal a only", got)
	}
}

// Two workers crash, then (after RemoveAfter) the coordinator: the standby takes over at
// once although only half the members the detector knows are alive, because the
// coordinator had removed the two workers from its count and told its standby. Without
// the removals it would wait until the detector forgot them (here: never).
func TestTakeoverAfterEarlierCrashes(t *testing.T) {
	c := newMemClusterConfig(t, 6, func(cfg *SchedConfig) { cfg.RemoveAfter = 300 * time.Millisecond })
	co := c.waitCoordinator("")
	if err := c.callRetry("sched.phase", PhaseArgs{PhaseInference}, nil); err != nil {
		t.Fatal(err)
	}
	standby := waitStandbyOf(t, c, co.name)
	var workers []string
	for _, n := range []string{"node0", "node1", "node2", "node3", "node4", "node5"} {
		if n != co.name && n != standby && len(workers) < 2 {
			workers = append(workers, n)
		}
	}
	c.kill(workers[0])
	c.kill(workers[1])
	time.Sleep(time.Second) // > RemoveAfter, and several heartbeats to the standby
	c.kill(co.name)
	start := time.Now()
	nc := c.waitCoordinator(co.name)
	if nc.name != standby {
		t.Fatalf("%s took over, want the standby %s", nc.name, standby)
	}
	t.Logf("%s took over %.2f s after the coordinator was killed (3 of 6 members alive)", nc.name, time.Since(start).Seconds())
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("takeover took %v", d)
	}
	// The new coordinator confirms changes: it counts the two workers out too.
	var r JobAddReply
	if err := c.call(nc.name, "sched.job.add", JobSpec{Name: "after", Model: "fast.onnx", Data: "small.idx", Batch: 10, Request: "k"}, &r); err != nil {
		t.Fatalf("add after the takeover: %v", err)
	}
}

// waitStandbyOf returns coordinator coord's standby once it has one.
func waitStandbyOf(t *testing.T, c *memCluster, coord string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var info ClusterInfo
		if err := c.call(coord, "sched.info", struct{}{}, &info); err == nil && info.Standby != "" {
			return info.Standby
		}
	}
	t.Fatal("no standby")
	return ""
}

// An uncoded refusal from a node that no longer coordinates is not the cluster's answer:
// it becomes CodeRetry (so the training API's "stopped coordinating" is retried too);
// coded errors and a coordinator's refusals stay as they are.
func TestNotAuthoritative(t *testing.T) {
	plain := errors.New("sched: phase is idle")
	if err := notAuthoritative(plain, true); err != plain || Retryable(err) {
		t.Errorf("coordinator's refusal: %v", err)
	}
	if err := notAuthoritative(plain, false); !Retryable(err) || err.Error() != plain.Error() || !errors.Is(err, plain) {
		t.Errorf("former coordinator's refusal: %v (code %q)", err, rpc.CodeOf(err))
	}
	if err := notAuthoritative(noJobError("j"), false); !IsNoJob(err) || Retryable(err) {
		t.Errorf("coded error: %v (code %q)", err, rpc.CodeOf(err))
	}
	unconfirmed := fmt.Errorf("%w: standby gone", errNotConfirmed)
	if err := notAuthoritative(unconfirmed, false); !Unconfirmed(err) {
		t.Errorf("unconfirmed: %v (code %q)", err, rpc.CodeOf(err))
	}
	if notAuthoritative(nil, false) != nil {
		t.Error("nil")
	}
}
