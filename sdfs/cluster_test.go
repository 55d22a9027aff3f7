package sdfs

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"idunno/fd"
	"idunno/rpc"
)

// fakeMembers is an in-memory membership view shared by the nodes of a test cluster.
type fakeMembers struct {
	mu      sync.Mutex
	members map[string]fd.Member
	subs    []chan fd.Event
}

func newFakeMembers() *fakeMembers { return &fakeMembers{members: map[string]fd.Member{}} }

func (f *fakeMembers) Members() []fd.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fd.Member
	for _, m := range f.members {
		out = append(out, m)
	}
	return out
}

func (f *fakeMembers) Subscribe(buf int) (<-chan fd.Event, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan fd.Event, buf)
	f.subs = append(f.subs, ch)
	return ch, func() {}
}

func (f *fakeMembers) set(name, addr string, st fd.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := fd.Member{Name: name, RPCAddr: addr, State: st}
	f.members[name] = m
	kind := fd.Joined
	if st == fd.Failed {
		kind = fd.FailedDetected
	}
	for _, s := range f.subs {
		select {
		case s <- fd.Event{Kind: kind, Member: m}:
		default:
		}
	}
}

const testSecret = "sdfs-test-secret"

// testCluster runs n stores in this process, each with its own RPC server on loopback.
type testCluster struct {
	t     testing.TB
	cfg   Config
	mem   *fakeMembers
	rc    *rpc.Client
	nodes []*testNode
}

type testNode struct {
	name, addr, dir string
	store           *Store
	srv             *rpc.Server
	up              bool
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.BlockSize = 1 << 10
	cfg.RepairInterval = time.Hour // tests call Scan themselves
	cfg.ScrubInterval = 0
	cfg.StatTimeout = 2 * time.Second
	cfg.BlockTimeout = 5 * time.Second
	return cfg
}

func newTestCluster(t testing.TB, n int, cfg Config) *testCluster {
	c := &testCluster{t: t, cfg: cfg, mem: newFakeMembers(), rc: rpc.NewClient([]byte(testSecret))}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd.up {
				nd.srv.Close()
			}
		}
		c.rc.Close()
	})
	for i := 0; i < n; i++ {
		c.add()
	}
	return c
}

func (c *testCluster) add() *testNode {
	nd := &testNode{name: fmt.Sprintf("node%d", len(c.nodes)), dir: c.t.TempDir()}
	c.nodes = append(c.nodes, nd)
	c.start(nd)
	return nd
}

func (c *testCluster) start(nd *testNode) {
	addr := nd.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.addr = ln.Addr().String()
	st, err := New(c.cfg, nd.dir, Peer{Name: nd.name, Addr: nd.addr}, c.mem, c.rc)
	if err != nil {
		c.t.Fatal(err)
	}
	st.Logf = c.t.Logf
	nd.store = st
	nd.srv = rpc.NewServer([]byte(testSecret))
	nd.srv.Logf = func(string, ...any) {}
	st.Register(nd.srv)
	go nd.srv.Serve(ln)
	nd.up = true
	c.mem.set(nd.name, nd.addr, fd.Alive)
}

// crash stops a node's server and marks it failed in the membership.
func (c *testCluster) crash(nd *testNode) {
	nd.srv.Close()
	nd.up = false
	c.mem.set(nd.name, nd.addr, fd.Failed)
}

func (c *testCluster) client() *Client {
	return NewClient(c.cfg, c.rc, func(context.Context) ([]Peer, error) {
		var out []Peer
		for _, nd := range c.nodes {
			if nd.up {
				out = append(out, Peer{Name: nd.name, Addr: nd.addr})
			}
		}
		return out, nil
	})
}

func (c *testCluster) node(name string) *testNode {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

// holders returns the live nodes whose disk holds version v of name.
func (c *testCluster) holders(name string, v Version) []string {
	var out []string
	for _, nd := range c.nodes {
		if nd.up && nd.store.disk.has(name, v) {
			out = append(out, nd.name)
		}
	}
	return out
}

// scanAll runs a repair scan on every live node, rounds times.
func (c *testCluster) scanAll(rounds int) {
	for r := 0; r < rounds; r++ {
		for _, nd := range c.nodes {
			if nd.up {
				nd.store.Scan(context.Background())
			}
		}
	}
}
