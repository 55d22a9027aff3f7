package sdfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/fd"
	"idunno/rpc"
)

func randBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func mustGet(t *testing.T, c *Client, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := c.Get(context.Background(), name, &buf); err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return buf.Bytes()
}

func TestPutGetVersionsDeleteList(t *testing.T) {
	tc := newTestCluster(t, 6, testConfig())
	c := tc.client()
	ctx := context.Background()
	data := randBytes(10*1024+17, 1) // 11 blocks of 1 KiB
	v1, err := c.Put(ctx, "ds/a.bin", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, "ds/a.bin"); !bytes.Equal(got, data) {
		t.Fatal("get returned different bytes")
	}
	if h := tc.holders("ds/a.bin", v1); len(h) != 4 {
		t.Fatalf("version on %v, want 4 nodes", h)
	}
	// Every put makes a new version; the read returns the newest.
	data2 := randBytes(3000, 2)
	v2, err := c.Put(ctx, "ds/a.bin", bytes.NewReader(data2))
	if err != nil || !v1.Less(v2) {
		t.Fatalf("second put: %v %v", v2, err)
	}
	if got := mustGet(t, c, "ds/a.bin"); !bytes.Equal(got, data2) {
		t.Fatal("get did not return the newest version")
	}
	var out bytes.Buffer
	n, err := c.GetVersions(ctx, "ds/a.bin", 5, &out)
	if err != nil || n != 2 {
		t.Fatalf("get-versions: %d %v", n, err)
	}
	s := out.String()
	i2, i1 := strings.Index(s, string(data2)), strings.Index(s, string(data))
	if i2 < 0 || i1 < 0 || i2 > i1 || !strings.Contains(s, "==== sdfs ds/a.bin version "+v2.String()) {
		t.Fatal("get-versions output not newest-first with headers")
	}
	// Empty file.
	if _, err := c.Put(ctx, "ds/empty", bytes.NewReader(nil)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, "ds/empty"); len(got) != 0 {
		t.Fatal("empty file not empty")
	}
	// Ls, List, Store.
	hs, err := c.Ls(ctx, "ds/a.bin")
	if err != nil || len(hs) != 4 {
		t.Fatalf("ls: %v %v", hs, err)
	}
	files, err := c.List(ctx, "ds/")
	if err != nil || len(files) != 2 || files[0].Name != "ds/a.bin" || files[0].Version != v2 {
		t.Fatalf("list: %+v %v", files, err)
	}
	st, err := c.Store(ctx, hs[0].Node)
	if err != nil || len(st) == 0 {
		t.Fatalf("store: %+v %v", st, err)
	}
	// Delete hides every version and lists no more.
	if err := c.Delete(ctx, "ds/a.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "ds/a.bin", io.Discard); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if files, _ := c.List(ctx, "ds/"); len(files) != 1 {
		t.Fatalf("list after delete: %+v", files)
	}
	if err := c.Delete(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete of a missing file: %v", err)
	}
	// A put after a delete brings the name back.
	if _, err := c.Put(ctx, "ds/a.bin", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, "ds/a.bin"); !bytes.Equal(got, data) {
		t.Fatal("put after delete")
	}
	// Bad names never reach a node.
	if _, err := c.Put(ctx, "../etc/passwd", bytes.NewReader(data)); err == nil || !strings.HasPrefix(err.Error(), "sdfs: ") {
		t.Fatalf("bad name: %v", err)
	}
}

func TestSizeLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxFileSize = 4000
	tc := newTestCluster(t, 4, cfg)
	c := tc.client()
	if _, err := c.Put(context.Background(), "big", bytes.NewReader(randBytes(5000, 1))); err == nil {
		t.Fatal("oversized put succeeded")
	}
	if _, err := c.Get(context.Background(), "big", io.Discard); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed put left a version: %v", err)
	}
}

// Concurrent puts of one name end with one newest version that every replica holds.
func TestConcurrentPutsConverge(t *testing.T) {
	tc := newTestCluster(t, 5, testConfig())
	ctx := context.Background()
	var wg sync.WaitGroup
	payloads := make([][]byte, 6)
	for i := range payloads {
		payloads[i] = randBytes(4096+i, int64(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := tc.client().Put(ctx, "same", bytes.NewReader(payloads[i])); err != nil {
				t.Errorf("put %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	var newestSeen Version
	for _, nd := range tc.nodes {
		vs := nd.store.disk.versions("same")
		if len(vs) == 0 {
			continue
		}
		top := vs[len(vs)-1].Version
		if newestSeen.IsZero() {
			newestSeen = top
		} else if top != newestSeen {
			t.Fatalf("replicas disagree on the newest version: %v vs %v", top, newestSeen)
		}
	}
	got := mustGet(t, tc.client(), "same")
	found := false
	for _, p := range payloads {
		found = found || bytes.Equal(got, p)
	}
	if !found {
		t.Fatal("read returned bytes no writer wrote")
	}
}

// failingReader fails after n bytes, like a client that dies midway.
type failingReader struct {
	r io.Reader
	n int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source broke")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

func TestFailedPutLeavesNoVersion(t *testing.T) {
	tc := newTestCluster(t, 5, testConfig())
	c := tc.client()
	ctx := context.Background()
	data := randBytes(8000, 3)
	if _, err := c.Put(ctx, "f", &failingReader{r: bytes.NewReader(data), n: 5000}); err == nil {
		t.Fatal("put from a broken source succeeded")
	}
	for _, nd := range tc.nodes {
		if vs := nd.store.disk.versions("f"); len(vs) != 0 {
			t.Fatalf("%s shows a version of a failed put", nd.name)
		}
		if len(nd.store.disk.txns) != 0 {
			t.Fatalf("%s kept the aborted transaction", nd.name)
		}
	}
}

// A replica that dies during a put (before the detector notices) is replaced: the put
// retries on the next nodes and the acknowledged version is on 4 live nodes.
func TestPutReplacesReplicaThatDies(t *testing.T) {
	tc := newTestCluster(t, 8, testConfig())
	c := tc.client()
	ctx := context.Background()
	data := randBytes(64*1024, 4)
	target := firstN(Rank("victim", mustPeers(t, c)), 4)
	r := &hookReader{r: bytes.NewReader(data), at: 20 * 1024, hook: func() {
		for _, p := range target[:3] {
			tc.node(p.Name).srv.Close() // crashed, but membership still says alive
			tc.node(p.Name).up = false
		}
	}}
	v, err := c.Put(ctx, "victim", r)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if h := tc.holders("victim", v); len(h) != 4 {
		t.Fatalf("acknowledged version on %v", h)
	}
	if got := mustGet(t, c, "victim"); !bytes.Equal(got, data) {
		t.Fatal("bytes differ")
	}
}

type hookReader struct {
	r    *bytes.Reader
	at   int64
	hook func()
	done bool
}

func (h *hookReader) Read(p []byte) (int, error) {
	pos, _ := h.r.Seek(0, io.SeekCurrent)
	if !h.done && pos >= h.at {
		h.done = true
		h.hook()
	}
	return h.r.Read(p)
}

func (h *hookReader) Seek(off int64, whence int) (int64, error) { return h.r.Seek(off, whence) }

func mustPeers(t *testing.T, c *Client) []Peer {
	p, err := c.members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// After 3 of a file's 4 replicas crash, the survivor re-creates 4 replicas.
func TestReReplicationAfterThreeCrashes(t *testing.T) {
	tc := newTestCluster(t, 8, testConfig())
	c := tc.client()
	ctx := context.Background()
	data := randBytes(20*1024, 5)
	v, err := c.Put(ctx, "x", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	h := tc.holders("x", v)
	for _, n := range h[:3] {
		tc.crash(tc.node(n))
	}
	if tc.node(h[3]).store.Scan(ctx); tc.node(h[3]).store.Backlog() != 3 {
		t.Fatalf("survivor's backlog %d, want 3 missing replicas", tc.node(h[3]).store.Backlog())
	}
	tc.scanAll(2)
	if h2 := tc.holders("x", v); len(h2) != 4 {
		t.Fatalf("after repair the version is on %v", h2)
	}
	if b := tc.node(h[3]).store.Backlog(); b != 0 {
		t.Fatalf("backlog %d after repair", b)
	}
	if got := mustGet(t, tc.client(), "x"); !bytes.Equal(got, data) {
		t.Fatal("bytes differ after re-replication")
	}
}

// Joins move names to their new replica sets without losing a version, and the old
// holders drop their copies.
func TestRebalanceOnJoin(t *testing.T) {
	tc := newTestCluster(t, 4, testConfig())
	c := tc.client()
	ctx := context.Background()
	want := map[string][]byte{}
	vers := map[string][]Version{}
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("r/%d", i)
		for k := 0; k < 2; k++ {
			want[name] = randBytes(1500+i, int64(i*10+k))
			v, err := c.Put(ctx, name, bytes.NewReader(want[name]))
			if err != nil {
				t.Fatal(err)
			}
			vers[name] = append(vers[name], v)
		}
	}
	for i := 0; i < 4; i++ {
		tc.add()
	}
	tc.scanAll(3)
	ps := mustPeers(t, tc.client())
	for name, data := range want {
		desired := names(firstN(Rank(name, ps), 4))
		for _, v := range vers[name] {
			if h := tc.holders(name, v); strings.Join(h, ",") != strings.Join(sortedCopy(desired), ",") {
				t.Fatalf("%s %v on %v, want %v", name, v, h, desired)
			}
		}
		if got := mustGet(t, tc.client(), name); !bytes.Equal(got, data) {
			t.Fatalf("%s differs after rebalance", name)
		}
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestCorruptBlockDetectedAndRepaired(t *testing.T) {
	tc := newTestCluster(t, 5, testConfig())
	c := tc.client()
	ctx := context.Background()
	data := randBytes(5000, 6)
	v, err := c.Put(ctx, "c", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	victim := tc.node(tc.holders("c", v)[0])
	path := blockFile(victim.store.disk.versionDir("c", v), 2)
	orig, _ := os.ReadFile(path)
	bad := append([]byte(nil), orig...)
	bad[10] ^= 0xff
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	// The corrupt node refuses to serve the block.
	if _, err := c.getBlock(ctx, Peer{Name: victim.name, Addr: victim.addr}, "c", v, 2, ""); err == nil {
		t.Fatal("corrupt block was served")
	}
	// Reads still return the right bytes, from other replicas.
	for i := 0; i < 4; i++ {
		if got := mustGet(t, c, "c"); !bytes.Equal(got, data) {
			t.Fatal("read returned wrong bytes")
		}
	}
	r := victim.store.Verify(ctx, 0)
	if now, _ := os.ReadFile(path); !bytes.Equal(now, orig) {
		t.Fatalf("block not repaired on disk (verify %+v)", r)
	}
}

func TestRestartAllNodesFindsEveryFile(t *testing.T) {
	tc := newTestCluster(t, 5, testConfig())
	c := tc.client()
	ctx := context.Background()
	want := map[string][]byte{}
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("keep/%d", i)
		want[name] = randBytes(3000+i*100, int64(i))
		if _, err := c.Put(ctx, name, bytes.NewReader(want[name])); err != nil {
			t.Fatal(err)
		}
	}
	for _, nd := range tc.nodes {
		tc.crash(nd)
	}
	for _, nd := range tc.nodes {
		tc.start(nd)
	}
	for name, data := range want {
		if got := mustGet(t, tc.client(), name); !bytes.Equal(got, data) {
			t.Fatalf("%s differs after restart", name)
		}
	}
	if files, err := tc.client().List(ctx, "keep/"); err != nil || len(files) != 10 {
		t.Fatalf("list after restart: %d %v", len(files), err)
	}
}

var _ = fd.Alive

// Listings of many names travel in message bodies, not the 1 MiB JSON header.
func TestListManyNames(t *testing.T) {
	tc := newTestCluster(t, 4, testConfig())
	long := strings.Repeat("x", 900)
	for i := 0; i < 1500; i++ { // into the index only: what travels is the point here
		m := &Manifest{Name: fmt.Sprintf("many/%s%04d", long, i), Version: Version{Seq: 1, Writer: "0123456789abcdef"},
			BlockSize: 1024, Sums: []string{}}
		for _, nd := range tc.nodes {
			nd.store.disk.mu.Lock()
			nd.store.disk.insert(m)
			nd.store.disk.mu.Unlock()
		}
	}
	files, err := tc.client().List(context.Background(), "many/")
	if err != nil || len(files) != 1500 {
		t.Fatalf("list: %d %v", len(files), err)
	}
	views := tc.nodes[0].store.statAll(context.Background(), map[Peer][]string{
		{Name: tc.nodes[1].name, Addr: tc.nodes[1].addr}: tc.nodes[0].store.disk.names("many/"),
	})
	if len(views[tc.nodes[1].name]) != 1500 {
		t.Fatalf("chunked stat saw %d names", len(views[tc.nodes[1].name]))
	}
}

// A small (one-call) put whose replica is dead but not yet detected goes to the next node.
func TestSmallPutSkipsDeadReplica(t *testing.T) {
	tc := newTestCluster(t, 6, testConfig())
	ctx := context.Background()
	target := firstN(Rank("tiny", mustPeers(t, tc.client())), 4)
	dead := tc.node(target[1].Name)
	dead.srv.Close() // the client's membership still lists it
	c := NewClient(tc.cfg, tc.rc, func(context.Context) ([]Peer, error) {
		var out []Peer
		for _, nd := range tc.nodes {
			out = append(out, Peer{Name: nd.name, Addr: nd.addr})
		}
		return out, nil
	})
	data := []byte("small result file")
	v, err := c.Put(ctx, "tiny", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	dead.up = false
	if h := tc.holders("tiny", v); len(h) != 4 {
		t.Fatalf("small put on %v", h)
	}
	if got := mustGet(t, c, "tiny"); !bytes.Equal(got, data) {
		t.Fatal("bytes differ")
	}
}

// The hole of the last notes, end to end: a put whose commit failed on one replica was
// dropped where it had committed, except on a replica that crashed before the drop reached
// it; that replica brought the failed put's version back when it restarted, and a read
// (or the repair scan) could then serve it. Now a put's version is pending until the
// writer confirms it on every replica, and a restart drops what was never confirmed.
func TestFailedPutDoesNotReappearAfterReplicaCrash(t *testing.T) {
	for _, size := range []int{500, 5000} { // one call per replica ("sdfs.write"), and blocks then "sdfs.commit"
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			tc := newTestCluster(t, 4, testConfig())
			ctx := context.Background()
			old := randBytes(size, 10)
			v1, err := tc.client().Put(ctx, "f", bytes.NewReader(old))
			if err != nil {
				t.Fatal(err)
			}
			target := firstN(Rank("f", mustPeers(t, tc.client())), 4)
			victim, failing := tc.node(target[0].Name), tc.node(target[3].Name)
			// failing's commit of the next version fails, once victim has committed it
			// (pending) and crashed: the writer's drop cannot reach victim.
			var mu sync.Mutex
			var failed Version // guarded by mu
			var once sync.Once
			hs := failing.store.handlers()
			for _, m := range []string{"sdfs.write", "sdfs.commit"} {
				h := hs[m]
				hs[m] = func(ctx context.Context, req *rpc.Message) (*rpc.Message, error) {
					hit := false
					once.Do(func() {
						hit = true
						deadline := time.Now().Add(5 * time.Second)
						for time.Now().Before(deadline) {
							// the new version on the victim's disk, pending (or, were the
							// hole open, visible)
							victim.store.disk.mu.Lock()
							mu.Lock()
							for _, p := range victim.store.disk.pending {
								if p.m.Name == "f" {
									failed = p.m.Version
								}
							}
							for _, m := range victim.store.disk.files["f"] {
								if m.Version != v1 {
									failed = m.Version
								}
							}
							seen := failed != (Version{})
							mu.Unlock()
							victim.store.disk.mu.Unlock()
							if seen {
								break
							}
							time.Sleep(5 * time.Millisecond)
						}
						victim.srv.Close() // crashed; the membership has not noticed yet
					})
					if hit {
						return nil, errors.New("injected: disk full")
					}
					return h(ctx, req)
				}
			}
			failing.srv.Close()
			ln, err := net.Listen("tcp", failing.addr)
			if err != nil {
				t.Fatal(err)
			}
			failing.srv = rpc.NewServer([]byte(testSecret))
			failing.srv.Logf = func(string, ...any) {}
			for m, h := range hs {
				failing.srv.Handle(m, h)
			}
			go failing.srv.Serve(ln)

			// A plain reader (no Seek): the put is not retried on other nodes.
			if _, err := tc.client().Put(ctx, "f", struct{ io.Reader }{bytes.NewReader(randBytes(size, 11))}); err == nil {
				t.Fatal("put whose commit failed on a replica succeeded")
			}
			victim.up = false
			mu.Lock()
			failedV := failed
			mu.Unlock()
			if failedV == (Version{}) {
				t.Fatal("the victim never committed the failed put's version")
			}
			if !victim.store.disk.has("f", failedV) {
				t.Fatal("the victim does not hold the failed version: the scenario did not happen")
			}
			for _, nd := range tc.nodes {
				if nd.up && nd.store.disk.has("f", failedV) {
					t.Fatalf("%s kept the failed put's version after the writer's drop", nd.name)
				}
			}
			tc.start(victim) // restarts on its data directory
			for round := 0; round < 2; round++ {
				if vs := victim.store.disk.versions("f"); len(vs) != 1 || vs[0].Version != v1 {
					t.Fatalf("round %d: the restarted replica shows %+v, want only %s", round, vs, v1)
				}
				if h := tc.holders("f", failedV); len(h) != 0 {
					t.Fatalf("round %d: the failed put's version reappeared on %v", round, h)
				}
				if got := mustGet(t, tc.client(), "f"); !bytes.Equal(got, old) {
					t.Fatalf("round %d: a read returned other bytes than the last acknowledged put's", round)
				}
				tc.scanAll(1) // the repair scan must not spread it either
			}
		})
	}
}

// An immutable put (a task's result) is one call per replica: its version comes from the
// bytes, so a second write of the same bytes (a task run again) is the same version, a
// dead replica is skipped for the next node, and the unsynced copies survive a restart of
// the processes (the page cache outlives them).
func TestPutImmutable(t *testing.T) {
	tc := newTestCluster(t, 6, testConfig())
	ctx := context.Background()
	data := []byte("0,3,0.91\n1,7,0.88\n")
	sum := sha256.Sum256(data)
	want := Version{Seq: 1, Writer: hex.EncodeToString(sum[:8])}
	c := tc.client()
	if err := c.PutImmutable(ctx, "jobs/a/task-0.csv", data, false); err != nil {
		t.Fatal(err)
	}
	if h := tc.holders("jobs/a/task-0.csv", want); len(h) != 4 {
		t.Fatalf("immutable put on %v, want 4 replicas of version %s", h, want)
	}
	// Again, with one of its replicas dead but still listed: the same version, on the
	// three live replicas it had and the next node.
	target := firstN(Rank("jobs/a/task-0.csv", mustPeers(t, c)), 4)
	dead := tc.node(target[0].Name)
	dead.srv.Close()
	listed := NewClient(tc.cfg, tc.rc, func(context.Context) ([]Peer, error) {
		var out []Peer
		for _, nd := range tc.nodes {
			out = append(out, Peer{Name: nd.name, Addr: nd.addr})
		}
		return out, nil
	})
	if err := listed.PutImmutable(ctx, "jobs/a/task-0.csv", data, false); err != nil {
		t.Fatal(err)
	}
	tc.crash(dead)
	if h := tc.holders("jobs/a/task-0.csv", want); len(h) != 4 {
		t.Fatalf("after the retry, version %s on %v, want 4 live replicas", want, h)
	}
	info, _, err := tc.client().latest(ctx, "jobs/a/task-0.csv")
	if err != nil || info.Version != want {
		t.Fatalf("latest: %v %v, want only version %s", info.Version, err, want)
	}
	// Every process restarts: the copies are found (not fsynced, but written).
	for _, nd := range tc.nodes {
		if nd.up {
			tc.crash(nd)
		}
	}
	for _, nd := range tc.nodes {
		tc.start(nd)
	}
	if got := mustGet(t, tc.client(), "jobs/a/task-0.csv"); !bytes.Equal(got, data) {
		t.Fatalf("after restart: %q", got)
	}
	// More than one small write: an ordinary put.
	big := randBytes(70<<10, 3)
	if err := tc.client().PutImmutable(ctx, "jobs/a/big.csv", big, false); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, tc.client(), "jobs/a/big.csv"); !bytes.Equal(got, big) {
		t.Fatal("big immutable put: bytes differ")
	}
	if err := tc.client().PutImmutable(ctx, "../escape", data, false); err == nil {
		t.Fatal("a bad name was accepted")
	}
}

// TestGetImmutable: a task's result is read back in one call to one replica, from the next
// when the first is down or holds damaged bytes; a name written otherwise (its versions not
// derived from its bytes), a big one and a missing one go through Get.
func TestGetImmutable(t *testing.T) {
	tc := newTestCluster(t, 6, testConfig())
	ctx := context.Background()
	c := tc.client()
	data := []byte("0,3,0.91\n1,7,0.88\n")
	if err := c.PutImmutable(ctx, "jobs/b/task-0.csv", data, false); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetImmutable(ctx, "jobs/b/task-0.csv"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GetImmutable: %q, %v", got, err)
	}
	// the first replica dead but still listed, the second's copy damaged on disk
	sum := sha256.Sum256(data)
	v := Version{Seq: 1, Writer: hex.EncodeToString(sum[:8])}
	target := firstN(Rank("jobs/b/task-0.csv", mustPeers(t, c)), 4)
	tc.node(target[0].Name).srv.Close()
	second := tc.node(target[1].Name).store.disk
	loc, ok := second.packedAt("jobs/b/task-0.csv", v)
	if !ok {
		t.Fatal("the result is not in the second replica's volume")
	}
	f, _ := os.OpenFile(second.vol.path(loc.file), os.O_WRONLY, 0o644)
	f.WriteAt([]byte("X"), loc.off)
	f.Close()
	listed := NewClient(tc.cfg, tc.rc, func(context.Context) ([]Peer, error) {
		var out []Peer
		for _, nd := range tc.nodes {
			out = append(out, Peer{Name: nd.name, Addr: nd.addr})
		}
		return out, nil
	})
	if got, err := listed.GetImmutable(ctx, "jobs/b/task-0.csv"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GetImmutable past a dead and a damaged replica: %q, %v", got, err)
	}
	// an ordinary put, twice: the newest version
	for _, b := range []string{"old\n", "new\n"} {
		if _, err := c.Put(ctx, "jobs/b/plain.csv", bytes.NewReader([]byte(b))); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := c.GetImmutable(ctx, "jobs/b/plain.csv"); err != nil || string(got) != "new\n" {
		t.Fatalf("GetImmutable of a plain put: %q, %v", got, err)
	}
	big := randBytes(300<<10, 4)
	if err := c.PutImmutable(ctx, "jobs/b/big.csv", big, false); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetImmutable(ctx, "jobs/b/big.csv"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GetImmutable of a big result: %d bytes, %v", len(got), err)
	}
	if _, err := c.GetImmutable(ctx, "jobs/b/missing.csv"); err == nil {
		t.Fatal("GetImmutable of a missing name succeeded")
	}
	if _, err := c.GetImmutable(ctx, "../escape"); err == nil {
		t.Fatal("a bad name was accepted")
	}
}

// A repair scan checks only what changed since the last: names it found fully replicated
// are skipped while the membership and the local versions stay the same, and every
// FullScanEvery scans recheck each of them once.
func TestScanSkipsCleanNames(t *testing.T) {
	tc := newTestCluster(t, 5, testConfig())
	c := tc.client()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if err := c.PutImmutable(ctx, fmt.Sprintf("results/%d", i), []byte(fmt.Sprintf("result %d\n", i)), false); err != nil {
			t.Fatal(err)
		}
	}
	nd := tc.nodes[0]
	held, _ := nd.store.disk.usage()
	checked := func() int { return nd.store.lastChecked }
	nd.store.Scan(ctx)
	if checked() != held {
		t.Fatalf("first scan checked %d names, holds %d", checked(), held)
	}
	nd.store.Scan(ctx)
	if checked() != 0 {
		t.Fatalf("a scan with nothing changed checked %d names", checked())
	}
	// A new version of one name: that name only.
	name := ""
	for n := range nd.store.disk.manifests() {
		name = n
		break
	}
	if _, err := c.Put(ctx, name, bytes.NewReader([]byte("newer\n"))); err != nil {
		t.Fatal(err)
	}
	nd.store.Scan(ctx)
	if checked() != 1 {
		t.Fatalf("after a put of %s the scan checked %d names, want 1", name, checked())
	}
	// A membership change: everything, and what the dead node held is re-replicated.
	tc.crash(tc.nodes[4])
	tc.scanAll(2)
	if held, _ = nd.store.disk.usage(); checked() == 0 || held == 0 {
		t.Fatalf("after a crash the scan checked %d names", checked())
	}
	for i := 0; i < 20; i++ {
		n := fmt.Sprintf("results/%d", i)
		info, _, err := tc.client().latest(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		h := tc.holders(n, info.Version)
		if len(h) != 4 {
			t.Fatalf("%s on %v after the crash and two scans", n, h)
		}
		for _, holder := range h { // an immutable put's copies: into each holder's volume
			if _, ok := tc.node(holder).store.disk.packedAt(n, info.Version); !ok && n != name {
				t.Fatalf("%s on %s not in its volume", n, holder)
			}
		}
	}
	// With nothing changed, FullScanEvery scans check every name exactly once between them,
	// each a different share.
	held, _ = nd.store.disk.usage()
	seen, most := 0, 0
	for i := 0; i < FullScanEvery; i++ {
		nd.store.Scan(ctx)
		seen += checked()
		most = max(most, checked())
	}
	if seen != held || most >= held {
		t.Fatalf("%d scans checked %d names in all (at most %d at once), hold %d", FullScanEvery, seen, most, held)
	}
}

// Moves after joins are paced, RebalanceMoves versions per node and scan, and still end
// with every version in its new set; repairs after crashes are not paced.
func TestRebalanceMovesArePaced(t *testing.T) {
	cfg := testConfig()
	cfg.RebalanceMoves = 3
	tc := newTestCluster(t, 4, cfg)
	c := tc.client()
	ctx := context.Background()
	want := map[string][]byte{}
	vers := map[string]Version{}
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("m/%d", i)
		want[name] = randBytes(600+i, int64(i))
		v, err := c.Put(ctx, name, bytes.NewReader(want[name]))
		if err != nil {
			t.Fatal(err)
		}
		vers[name] = v
	}
	tc.scanAll(1) // the nodes find every name fully replicated, as their periodic scans do
	old := map[string]bool{}
	for _, nd := range tc.nodes {
		old[nd.name] = true
	}
	for i := 0; i < 4; i++ {
		tc.add()
	}
	placed := func() (n int) {
		ps := mustPeers(t, tc.client())
		for name, v := range vers {
			set := map[string]bool{}
			for _, p := range firstN(Rank(name, ps), 4) {
				set[p.Name] = true
			}
			for _, h := range tc.holders(name, v) {
				if set[h] && !old[h] {
					n++ // a copy on a node that joined
				}
			}
		}
		return n
	}
	newCopies := 0 // copies the joins call for: each version's set members among the new nodes
	ps := mustPeers(t, tc.client())
	for name := range vers {
		for _, p := range firstN(Rank(name, ps), 4) {
			if !old[p.Name] {
				newCopies++
			}
		}
	}
	if newCopies <= 4*cfg.RebalanceMoves {
		t.Fatalf("only %d copies to move: the test needs more than one scan's worth", newCopies)
	}
	tc.scanAll(1)
	// A move copies a version to every set member that lacks it, so one scan of the 4
	// old nodes moves at most 4*3 versions, each to at most 4 new nodes.
	if got := placed(); got == 0 || got > 4*cfg.RebalanceMoves*4 || got >= newCopies {
		t.Fatalf("after one scan %d of %d copies moved, want some but at most %d", got, newCopies, 4*cfg.RebalanceMoves*4)
	}
	tc.scanAll(40)
	if got := placed(); got != newCopies {
		t.Fatalf("after the scans %d of %d copies moved", got, newCopies)
	}
	for name, data := range want {
		if got := mustGet(t, tc.client(), name); !bytes.Equal(got, data) {
			t.Fatalf("%s differs after the moves", name)
		}
	}

	// Repairs are not paced by RebalanceMoves (a scan's ScanNames bound, TestRepairScansAreBounded,
	// is far above these 40 names): crash three nodes and one round of scans restores
	// every version to 4 copies.
	var down []string
	for _, nd := range tc.nodes[len(tc.nodes)-3:] {
		tc.crash(nd)
		down = append(down, nd.name)
	}
	tc.scanAll(1)
	for name, v := range vers {
		if h := tc.holders(name, v); len(h) < 4 {
			t.Fatalf("%s on %v after one scan with %v down, want 4 copies", name, h, down)
		}
	}
}

// TestRepairScansAreBounded: after a failure, a scan checks at most ScanNames names, those
// whose replica set lost a member first; later scans check the rest, and every version
// gets back to Replicas copies.
func TestRepairScansAreBounded(t *testing.T) {
	cfg := testConfig()
	cfg.ScanNames = 8
	tc := newTestCluster(t, 7, cfg)
	c := tc.client()
	ctx := context.Background()
	vers := map[string]Version{}
	for i := 0; i < 60; i++ {
		name := fmt.Sprintf("r/%d", i)
		v, err := c.Put(ctx, name, bytes.NewReader(randBytes(300+i, int64(i))))
		if err != nil {
			t.Fatal(err)
		}
		vers[name] = v
	}
	tc.scanAll(1) // every name found fully replicated: clean
	dead := tc.nodes[len(tc.nodes)-2:]
	for _, nd := range dead {
		tc.crash(nd)
	}
	short := func() (n int) {
		for name, v := range vers {
			if len(tc.holders(name, v)) < cfg.Replicas {
				n++
			}
		}
		return n
	}
	before := short()
	if before <= 5*cfg.ScanNames {
		t.Fatalf("only %d names lost a copy: the test needs more than one scan's worth", before)
	}
	for _, nd := range tc.nodes {
		if nd.up {
			nd.store.Scan(ctx)
			if got := nd.store.lastChecked; got > cfg.ScanNames {
				t.Fatalf("%s checked %d names in one scan, bound %d", nd.name, got, cfg.ScanNames)
			}
		}
	}
	after := short()
	// 5 live nodes, each checking 8 names: at most 40 names repaired, and since the names
	// that lost a copy go first, each node's 8 are all such names while it holds that many.
	if after >= before || before-after > 5*cfg.ScanNames {
		t.Fatalf("one bounded scan: %d names short before, %d after", before, after)
	}
	if before-after < cfg.ScanNames {
		t.Fatalf("one bounded scan repaired %d names, want at least %d (the names that lost a copy first)", before-after, cfg.ScanNames)
	}
	tc.scanAll(20)
	if n := short(); n != 0 {
		t.Fatalf("%d names still short of %d copies after the scans", n, cfg.Replicas)
	}
}
