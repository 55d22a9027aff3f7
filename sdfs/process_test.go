package sdfs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"idunno/client/localcluster"
	"idunno/rpc"
	"idunno/sdfs"
)

func TestMain(m *testing.M) {
	code := m.Run()
	localcluster.RemoveBinary()
	os.Exit(code)
}

// binary returns $IDUNNO_BIN or an idunno binary built once for this test run.
func binary(t *testing.T) string {
	t.Helper()
	b, err := localcluster.Binary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type procCluster struct {
	t  *testing.T
	lc *localcluster.Cluster
	rc *rpc.Client
	c  *sdfs.Client
}

func upCluster(t *testing.T, n int) *procCluster {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	lc, err := localcluster.Up(t.TempDir(), n, 0, binary(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Down() })
	rc := rpc.NewClient([]byte(lc.Secret()))
	t.Cleanup(rc.Close)
	var gw []string
	for _, nd := range lc.Nodes() {
		gw = append(gw, nd.RPCAddr)
	}
	return &procCluster{t: t, lc: lc, rc: rc, c: sdfs.NewClient(sdfs.DefaultConfig(), rc, sdfs.GatewayMembers(rc, gw))}
}

func randomFile(t *testing.T, size int) (string, []byte) {
	data := make([]byte, size)
	rand.Read(data)
	p := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func (pc *procCluster) get(name string) []byte {
	pc.t.Helper()
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pc.c.Get(ctx, name, &buf); err != nil {
		pc.t.Fatalf("get %s: %v", name, err)
	}
	return buf.Bytes()
}

// holders lists the live nodes that hold version v of name.
func (pc *procCluster) holders(name string, v sdfs.Version) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, err := pc.c.Ls(ctx, name)
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range hs {
		for _, vi := range h.Versions {
			if vi.Version == v {
				out = append(out, h.Node)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (pc *procCluster) waitReplicas(name string, v sdfs.Version, n int, limit time.Duration) time.Duration {
	start := time.Now()
	for {
		h := pc.holders(name, v)
		if len(h) >= n {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			pc.t.Fatalf("%s version %s on %v after %v, want %d replicas", name, v, h, limit, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killAfter wraps a file and kill -9s nodes once at bytes have been read.
type killAfter struct {
	*os.File
	at   int64
	read int64
	kill func()
}

func (k *killAfter) Read(p []byte) (int, error) {
	n, err := k.File.Read(p)
	k.read += int64(n)
	if k.kill != nil && k.read >= k.at {
		k.kill()
		k.kill = nil
	}
	return n, err
}

// TestProcessCluster drives a 7-node cluster of real processes: kill -9 of three replicas
// after a put and during one, a corrupted block on disk, and a restart of every node.
func TestProcessCluster(t *testing.T) {
	pc := upCluster(t, 7)
	ctx := context.Background()

	t.Run("kill three replicas after put", func(t *testing.T) {
		pc.t = t
		src, data := randomFile(t, 10<<20+123) // 3 blocks
		v, _, err := pc.c.PutFile(ctx, src, "after/put")
		if err != nil {
			t.Fatal(err)
		}
		h := pc.holders("after/put", v)
		if len(h) != 4 {
			t.Fatalf("acknowledged version on %v", h)
		}
		if err := pc.lc.Kill(h[:3]...); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		if got := pc.get("after/put"); !bytes.Equal(got, data) {
			t.Fatal("bytes differ after 3 replicas were killed")
		}
		pc.waitReplicas("after/put", v, 4, 30*time.Second)
		t.Logf("4 replicas restored %v after the kill", time.Since(killed))
		if err := pc.lc.Restart(h[:3]...); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("kill three replicas during put", func(t *testing.T) {
		pc.t = t
		src, data := randomFile(t, 24<<20)
		peers, err := sdfs.GatewayMembers(pc.rc, []string{pc.lc.RPCAddr("node0")})(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var victims []string
		for _, p := range sdfs.Rank("during/put", peers)[:4] {
			if p.Name != "node0" && len(victims) < 3 {
				victims = append(victims, p.Name)
			}
		}
		f, _ := os.Open(src)
		defer f.Close()
		r := &killAfter{File: f, at: 9 << 20, kill: func() {
			if err := pc.lc.Kill(victims...); err != nil {
				t.Error(err)
			}
		}}
		v, err := pc.c.Put(ctx, "during/put", r)
		if err != nil {
			// A put may fail, but then it must leave nothing visible.
			if _, gerr := pc.c.Get(ctx, "during/put", io.Discard); !errors.Is(gerr, sdfs.ErrNotFound) {
				t.Fatalf("failed put (%v) left something visible: %v", err, gerr)
			}
			t.Fatalf("put with 3 replicas killed midway failed although 4 nodes are live: %v", err)
		}
		h := pc.holders("during/put", v)
		if len(h) != 4 {
			t.Fatalf("acknowledged version on %v", h)
		}
		for _, n := range h {
			for _, dead := range victims {
				if n == dead {
					t.Fatalf("version counted on killed node %s", n)
				}
			}
		}
		if got := pc.get("during/put"); !bytes.Equal(got, data) {
			t.Fatal("bytes differ")
		}
		if err := pc.lc.Restart(victims...); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("corrupt block repaired", func(t *testing.T) {
		pc.t = t
		src, data := randomFile(t, 6<<20)
		v, _, err := pc.c.PutFile(ctx, src, "corrupt/me")
		if err != nil {
			t.Fatal(err)
		}
		victim := pc.holders("corrupt/me", v)[0]
		nd, _ := pc.lc.Node(victim)
		blocks, _ := filepath.Glob(filepath.Join(nd.DataDir, "sdfs", "v", "*", "*", "*"+v.Writer, "b000001"))
		if len(blocks) != 1 {
			t.Fatalf("block file of %s on %s: %v", v, victim, blocks)
		}
		orig, _ := os.ReadFile(blocks[0])
		bad := append([]byte(nil), orig...)
		bad[1000] ^= 0x5a
		os.WriteFile(blocks[0], bad, 0o644)
		for i := 0; i < 4; i++ {
			if got := pc.get("corrupt/me"); !bytes.Equal(got, data) {
				t.Fatal("get returned wrong bytes with a corrupt replica")
			}
		}
		rep, err := pc.c.Verify(ctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		now, _ := os.ReadFile(blocks[0])
		if !bytes.Equal(now, orig) {
			t.Fatalf("block not repaired on disk (verify: %+v)", rep)
		}
		t.Logf("verify on %s: %+v", victim, rep)
	})

	t.Run("rebalance when nodes join", func(t *testing.T) {
		pc.t = t
		late := []string{"node5", "node6"}
		if err := pc.lc.Kill(late...); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(15 * time.Second); ; {
			peers, err := pc.c.Peers(ctx)
			if err == nil && len(peers) == 5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("membership still %d nodes after the kill", len(peers))
			}
			time.Sleep(100 * time.Millisecond)
		}
		want := map[string][]byte{}
		vers := map[string]sdfs.Version{}
		for i := 0; i < 8; i++ {
			name := fmt.Sprintf("join/%d", i)
			src, data := randomFile(t, 200<<10+i)
			v, _, err := pc.c.PutFile(ctx, src, name)
			if err != nil {
				t.Fatal(err)
			}
			want[name], vers[name] = data, v
		}
		if err := pc.lc.Restart(late...); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for name, v := range vers {
			for {
				peers, err := pc.c.Peers(ctx)
				if err != nil {
					t.Fatal(err)
				}
				desired := sdfs.Rank(name, peers)[:4]
				var ds []string
				for _, p := range desired {
					ds = append(ds, p.Name)
				}
				sort.Strings(ds)
				h := pc.holders(name, v)
				if len(peers) == 7 && fmt.Sprint(h) == fmt.Sprint(ds) {
					break
				}
				if time.Since(start) > 30*time.Second {
					t.Fatalf("%s on %v, its replica set is %v", name, h, ds)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if got := pc.get(name); !bytes.Equal(got, want[name]) {
				t.Fatalf("%s differs after rebalancing", name)
			}
		}
		t.Logf("placement settled %v after the joins", time.Since(start))
	})

	t.Run("restart every node", func(t *testing.T) {
		pc.t = t
		want := map[string][]byte{}
		for _, n := range []string{"r/a", "r/b", "r/c"} {
			src, data := randomFile(t, 5<<20+len(n))
			if _, _, err := pc.c.PutFile(ctx, src, n); err != nil {
				t.Fatal(err)
			}
			want[n] = data
		}
		var all, running []string
		for _, nd := range pc.lc.Nodes() {
			all = append(all, nd.Name)
			if pc.lc.Running(nd.Name) {
				running = append(running, nd.Name)
			}
		}
		if err := pc.lc.Kill(running...); err != nil {
			t.Fatal(err)
		}
		if err := pc.lc.Restart(all...); err != nil {
			t.Fatal(err)
		}
		for n, data := range want {
			if got := pc.get(n); !bytes.Equal(got, data) {
				t.Fatalf("%s differs after restarting every node", n)
			}
		}
		files, err := pc.c.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, f := range files {
			names[f.Name] = true
		}
		for _, n := range []string{"after/put", "during/put", "corrupt/me", "r/a", "r/b", "r/c"} {
			if !names[n] {
				t.Fatalf("%s missing after restarting every node (have %v)", n, names)
			}
		}
	})
}
