package sdfs

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func peers(n int) []Peer {
	out := make([]Peer, n)
	for i := range out {
		out[i] = Peer{Name: fmt.Sprintf("node%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 9000+i)}
	}
	return out
}

func names(ps []Peer) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func TestRankIsDeterministicAndIndependentOfOrder(t *testing.T) {
	ps := peers(10)
	a := names(Rank("data/x.png", ps))
	rev := append([]Peer(nil), ps...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	b := names(Rank("data/x.png", rev))
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("rank depends on input order: %v vs %v", a, b)
	}
	if len(a) != 10 {
		t.Fatalf("rank lost peers: %v", a)
	}
}

// A departure only moves names the departed node held; survivors keep their places.
func TestRankMinimalMovementOnFailure(t *testing.T) {
	ps := peers(10)
	without := append(append([]Peer(nil), ps[:3]...), ps[4:]...) // node3 fails
	for i := 0; i < 500; i++ {
		name := fmt.Sprintf("file%d", i)
		before := names(firstN(Rank(name, ps), 4))
		after := names(firstN(Rank(name, without), 4))
		held := false
		for _, n := range before {
			held = held || n == "node3"
		}
		if !held {
			if strings.Join(before, ",") != strings.Join(after, ",") {
				t.Fatalf("%s moved though node3 did not hold it: %v -> %v", name, before, after)
			}
			continue
		}
		// The three survivors stay replicas; one new node joins.
		for _, n := range before {
			if n == "node3" {
				continue
			}
			if !strings.Contains(","+strings.Join(after, ",")+",", ","+n+",") {
				t.Fatalf("%s: survivor %s lost its replica: %v -> %v", name, n, before, after)
			}
		}
	}
}

func TestRankSpreadsLoad(t *testing.T) {
	ps := peers(10)
	count := map[string]int{}
	const files = 4000
	for i := 0; i < files; i++ {
		for _, p := range firstN(Rank(fmt.Sprintf("f%d", i), ps), 4) {
			count[p.Name]++
		}
	}
	mean := files * 4 / 10
	for n, c := range count {
		if c < mean*85/100 || c > mean*115/100 {
			t.Errorf("%s holds %d replicas, mean %d", n, c, mean)
		}
	}
}

func TestValidateName(t *testing.T) {
	good := []string{"a", "data/fashion/train-images.idx3", "x_y-z+1.onnx", strings.Repeat("a", MaxNameLen)}
	bad := []string{"", "/abs", "a//b", "a/", "..", "a/../b", "./a", "a\x00b", "a b", "a\\b", "é", strings.Repeat("a", MaxNameLen+1), "a/./b"}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateName(n); err == nil || !strings.HasPrefix(err.Error(), "sdfs: ") {
			t.Errorf("ValidateName(%q) = %v, want an sdfs error", n, err)
		}
	}
}

func TestVersionOrder(t *testing.T) {
	a := Version{Seq: 1, Writer: "ffffffffffffffff"}
	b := Version{Seq: 2, Writer: "0000000000000000"}
	c := Version{Seq: 2, Writer: "0000000000000001"}
	if !a.Less(b) || !b.Less(c) || c.Less(b) || b.Less(b) {
		t.Fatal("version order wrong")
	}
	for _, v := range []Version{a, b, c} {
		got, err := parseDirName(v.dirName())
		if err != nil || got != v {
			t.Fatalf("parseDirName(%q) = %v, %v", v.dirName(), got, err)
		}
	}
	if (Version{Seq: 1, Writer: "../../etc/passwd"}).Validate() == nil {
		t.Fatal("path-like writer accepted")
	}
	if (Version{Seq: 0, Writer: "0000000000000000"}).Validate() == nil {
		t.Fatal("seq 0 accepted")
	}
}

func TestCovered(t *testing.T) {
	v := func(s uint64) Version { return Version{Seq: s, Writer: "0000000000000000"} }
	vs := []VersionInfo{{Version: v(2)}, {Version: v(3)}}
	if !covered(vs, v(2), 5) || covered(vs, v(1), 5) || !covered(vs, v(1), 2) {
		t.Fatal("covered by holding / by newer versions wrong")
	}
	tomb := []VersionInfo{{Version: v(4), Deleted: true}}
	if !covered(tomb, v(3), 5) || covered(tomb, v(5), 5) {
		t.Fatal("covered by tombstone wrong")
	}
}

func block(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func manifestFor(name string, v Version, blocks ...[]byte) *Manifest {
	m := &Manifest{Name: name, Version: v, BlockSize: 1024, Sums: []string{}}
	for _, b := range blocks {
		m.Sums = append(m.Sums, sumHex(sha256.Sum256(b)))
		m.Size += int64(len(b))
	}
	return m
}

func writeVersion(t *testing.T, d *disk, m *Manifest, blocks ...[]byte) {
	t.Helper()
	txn := randHex(16)
	if err := d.begin(txn, m.Name, m.Version, time.Now()); err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		if err := d.putBlock(txn, i, m.Sums[i], b, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.commit(txn, m, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestDiskCommitVisibilityAndRebuild(t *testing.T) {
	root := t.TempDir()
	cfg := testConfig()
	cfg.MaxVersions = 2
	d, err := openDisk(root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b0, b1 := block(1024, 1), block(100, 2)
	v1 := Version{Seq: 1, Writer: randHex(8)}
	m1 := manifestFor("a/b", v1, b0, b1)

	// A staged, uncommitted write is invisible.
	txn := randHex(16)
	if err := d.begin(txn, "a/b", v1, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := d.putBlock(txn, 0, m1.Sums[0], b0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if len(d.versions("a/b")) != 0 {
		t.Fatal("uncommitted version visible")
	}
	// A commit missing a block is refused.
	if err := d.commit(txn, m1, time.Now()); err == nil {
		t.Fatal("commit with a missing block succeeded")
	}
	// A corrupt block is refused on arrival.
	if err := d.putBlock(txn, 1, m1.Sums[0], b1, time.Now()); err == nil {
		t.Fatal("block with wrong checksum accepted")
	}
	writeVersion(t, d, m1, b0, b1)
	if got, err := d.readBlock("a/b", v1, 1); err != nil || string(got) != string(b1) {
		t.Fatalf("readBlock = %v", err)
	}
	// Three more versions: only the newest two stay.
	var last Version
	for s := uint64(2); s <= 4; s++ {
		last = Version{Seq: s, Writer: randHex(8)}
		b := block(10, byte(s))
		writeVersion(t, d, manifestFor("a/b", last, b), b)
	}
	if vs := d.versions("a/b"); len(vs) != 2 || vs[1].Version != last {
		t.Fatalf("after pruning: %+v", vs)
	}
	// An abandoned staged write and the index survive a restart: staging is wiped.
	txn2 := randHex(16)
	d.begin(txn2, "c", Version{Seq: 1, Writer: randHex(8)}, time.Now())
	d2, err := openDisk(root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if vs := d2.versions("a/b"); len(vs) != 2 || vs[1].Version != last {
		t.Fatalf("after rebuild: %+v", vs)
	}
	if len(d2.versions("c")) != 0 {
		t.Fatal("staged write visible after restart")
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "staging")); len(ents) != 0 {
		t.Fatalf("staging not wiped: %v", ents)
	}
	// A tombstone removes the older data versions.
	tomb := &Manifest{Name: "a/b", Version: Version{Seq: 9, Writer: randHex(8)}, Deleted: true, Sums: []string{}}
	writeVersion(t, d2, tomb)
	if vs := d2.versions("a/b"); len(vs) != 1 || !vs[0].Deleted {
		t.Fatalf("after tombstone: %+v", vs)
	}
}

func TestDiskCorruptBlockNeverReturned(t *testing.T) {
	root := t.TempDir()
	d, err := openDisk(root, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	b := block(1024, 3)
	v := Version{Seq: 1, Writer: randHex(8)}
	writeVersion(t, d, manifestFor("f", v, b), b)
	path := blockFile(d.versionDir("f", v), 0)
	bad := append([]byte(nil), b...)
	bad[500] ^= 1
	os.WriteFile(path, bad, 0o644)
	if _, err := d.readBlock("f", v, 0); err == nil {
		t.Fatal("corrupt block returned")
	}
	if err := d.repairBlock("f", v, 0, bad); err == nil {
		t.Fatal("repair with bad bytes accepted")
	}
	if err := d.repairBlock("f", v, 0, b); err != nil {
		t.Fatal(err)
	}
	if got, err := d.readBlock("f", v, 0); err != nil || string(got) != string(b) {
		t.Fatalf("after repair: %v", err)
	}
}

func TestDiskRejectsBadInput(t *testing.T) {
	d, err := openDisk(t.TempDir(), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	v := Version{Seq: 1, Writer: randHex(8)}
	if d.begin("../../x", "a", v, time.Now()) == nil {
		t.Fatal("path-like transaction id accepted")
	}
	if d.begin(randHex(16), "../a", v, time.Now()) == nil {
		t.Fatal("bad name accepted")
	}
	if d.putBlock(randHex(16), 0, "x", []byte{1}, time.Now()) == nil {
		t.Fatal("block for unknown transaction accepted")
	}
	txn := randHex(16)
	d.begin(txn, "a", v, time.Now())
	big := make([]byte, d.cfg.MaxBlockSize+1)
	if d.putBlock(txn, 0, sumHex(sha256.Sum256(big)), big, time.Now()) == nil {
		t.Fatal("oversized block accepted")
	}
	d.expire(time.Now().Add(d.cfg.TxnIdle + time.Second))
	if d.putBlock(txn, 0, sumHex(sha256.Sum256([]byte{1})), []byte{1}, time.Now()) == nil {
		t.Fatal("expired transaction still open")
	}
}

func TestManifestValidate(t *testing.T) {
	cfg := testConfig()
	v := Version{Seq: 1, Writer: randHex(8)}
	m := manifestFor("ok", v, block(1024, 1), block(5, 1))
	if err := m.Validate(cfg); err != nil {
		t.Fatal(err)
	}
	m.Size = 5000
	if m.Validate(cfg) == nil {
		t.Fatal("size/blocks mismatch accepted")
	}
	m = manifestFor("ok", v, block(5, 1))
	m.Size = cfg.MaxFileSize + 1
	if m.Validate(cfg) == nil {
		t.Fatal("oversized file accepted")
	}
}

func FuzzManifest(f *testing.F) {
	m := manifestFor("a/b", Version{Seq: 3, Writer: "0123456789abcdef"}, block(1024, 1), block(3, 2))
	b, _ := jsonMarshal(m)
	f.Add(b)
	f.Add([]byte(`{"name":"../x","version":{"seq":1,"writer":"zz"}}`))
	f.Add([]byte(`{"name":"x","deleted":true,"version":{"seq":1,"writer":"0123456789abcdef"},"sums":[]}`))
	cfg := DefaultConfig()
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b, cfg)
		if err != nil {
			return
		}
		if ValidateName(m.Name) != nil || m.Version.Validate() != nil {
			t.Fatal("invalid manifest accepted")
		}
		for i := range m.Sums {
			if l := m.blockLen(i); l <= 0 || l > m.BlockSize {
				t.Fatalf("block %d length %d", i, l)
			}
		}
	})
}

func FuzzName(f *testing.F) {
	for _, s := range []string{"a/b", "..", "a/../b", "x\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateName(s) != nil {
			return
		}
		if strings.Contains(s, "..") && (s == ".." || strings.HasPrefix(s, "../") || strings.Contains(s, "/../") || strings.HasSuffix(s, "/..")) {
			t.Fatalf("accepted %q", s)
		}
		if filepath.IsAbs(s) || strings.ContainsRune(s, 0) || filepath.Clean(s) != s {
			t.Fatalf("accepted %q", s)
		}
	})
}

func TestStatChunkFitsOneFrame(t *testing.T) {
	long := strings.Repeat("n", MaxNameLen)
	var ns []string
	for i := 0; i < 3000; i++ {
		ns = append(ns, long)
	}
	total := 0
	for len(ns) > 0 {
		c := statChunk(ns)
		if len(c) == 0 || len(c)*(MaxNameLen+4) > 300<<10 {
			t.Fatalf("chunk of %d long names", len(c))
		}
		total += len(c)
		ns = ns[len(c):]
	}
	if total != 3000 {
		t.Fatalf("chunks cover %d names", total)
	}
}

// TestDiskPendingVersion: a put's version committed pending is invisible until confirmed;
// if the node restarts before the confirm (the put was never acknowledged), the version is
// gone instead of reappearing; a confirmed one survives the restart.
func TestDiskPendingVersion(t *testing.T) {
	root := t.TempDir()
	cfg := testConfig()
	d, err := openDisk(root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := block(100, 7)
	commit := func(d *disk, m *Manifest) {
		t.Helper()
		txn := randHex(16)
		if err := d.begin(txn, m.Name, m.Version, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := d.putBlock(txn, 0, m.Sums[0], b, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := d.commitPending(txn, m, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	failed := manifestFor("f", Version{Seq: 1, Writer: randHex(8)}, b)
	commit(d, failed)
	if len(d.versions("f")) != 0 || d.manifest("f", failed.Version) != nil {
		t.Fatal("pending version visible")
	}
	if _, err := d.readBlock("f", failed.Version, 0); err == nil {
		t.Fatal("pending version readable")
	}
	// The node crashes before the writer confirms (or drops) it.
	d2, err := openDisk(root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(d2.versions("f")) != 0 {
		t.Fatal("a never-acknowledged version reappeared after a restart")
	}
	if err := d2.confirm("f", failed.Version); err == nil {
		t.Fatal("confirm of a version dropped at restart succeeded")
	}
	ok := manifestFor("f", Version{Seq: 2, Writer: randHex(8)}, b)
	commit(d2, ok)
	if err := d2.confirm("f", ok.Version); err != nil {
		t.Fatal(err)
	}
	if err := d2.confirm("f", ok.Version); err != nil {
		t.Fatalf("a repeated confirm: %v", err)
	}
	d3, err := openDisk(root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if vs := d3.versions("f"); len(vs) != 1 || vs[0].Version != ok.Version {
		t.Fatalf("after a restart: %+v, want the confirmed version", vs)
	}
	// A pending version whose writer never comes back expires; a drop removes one at once.
	late := manifestFor("g", Version{Seq: 1, Writer: randHex(8)}, b)
	commit(d3, late)
	d3.expire(time.Now().Add(cfg.TxnIdle + time.Second))
	if err := d3.confirm("g", late.Version); err == nil {
		t.Fatal("expired pending version confirmed")
	}
	dropped := manifestFor("h", Version{Seq: 1, Writer: randHex(8)}, b)
	commit(d3, dropped)
	d3.drop("h", dropped.Version)
	if err := d3.confirm("h", dropped.Version); err == nil {
		t.Fatal("dropped pending version confirmed")
	}
}

// TestDiskWritePacked: an unsynced one-block write is appended to the volume: visible once
// written, readable, kept by a restart, repaired like a block when damaged, gone after a
// drop (and after the next restart); a corrupt body is refused; concurrent writes of the
// same version both succeed and store it once; a record a crash cut short is cut off at
// the restart, and appends continue after the last good record.
func TestDiskWritePacked(t *testing.T) {
	root := t.TempDir()
	d, err := openDisk(root, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	b := block(300, 5)
	v := Version{Seq: 1, Writer: randHex(8)}
	m := manifestFor("job/r/7", v, b)
	bad := append([]byte(nil), b...)
	bad[9] ^= 1
	if err := d.writePacked(m, bad); err == nil {
		t.Fatal("corrupt body accepted")
	}
	if len(d.versions("job/r/7")) != 0 {
		t.Fatal("refused write visible")
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.writePacked(m, b) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if vs := d.versions("job/r/7"); len(vs) != 1 || d.bytes != int64(len(b)) {
		t.Fatalf("versions %+v, %d bytes", vs, d.bytes)
	}
	if got, err := d.readBlock("job/r/7", v, 0); err != nil || string(got) != string(b) {
		t.Fatalf("readBlock: %v", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(root, "v", "*", "*")); len(ents) != 0 {
		t.Fatalf("a packed write made directories: %v", ents)
	}
	b2 := block(50, 9)
	v2 := Version{Seq: 1, Writer: randHex(8)}
	if err := d.writePacked(manifestFor("job/r/9", v2, b2), b2); err != nil {
		t.Fatal(err)
	}
	// damaged on disk: refused on read, repaired from good bytes
	loc, _ := d.packedAt("job/r/7", v)
	vol := d.vol.path(loc.file)
	raw, _ := os.ReadFile(vol)
	raw[loc.off+5] ^= 1
	os.WriteFile(vol, raw, 0o644)
	if _, err := d.readBlock("job/r/7", v, 0); !errors.Is(err, errCorrupt) {
		t.Fatalf("damaged packed block read: %v", err)
	}
	if err := d.repairBlock("job/r/7", v, 0, b); err != nil {
		t.Fatal(err)
	}
	if got, err := d.readBlock("job/r/7", v, 0); err != nil || string(got) != string(b) {
		t.Fatalf("after repair: %v", err)
	}
	d.drop("job/r/9", v2)
	// a record cut short by a crash at the end of the volume
	f, _ := os.OpenFile(vol, os.O_APPEND|os.O_WRONLY, 0o644)
	f.Write([]byte(volMagic + "P\x10\x00"))
	f.Close()
	d2, err := openDisk(root, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := d2.readBlock("job/r/7", v, 0); err != nil || string(got) != string(b) {
		t.Fatalf("after restart: %v", err)
	}
	if len(d2.versions("job/r/9")) != 0 || d2.bytes != int64(len(b)) {
		t.Fatalf("dropped version back after restart (%d bytes)", d2.bytes)
	}
	v3 := Version{Seq: 1, Writer: randHex(8)}
	if err := d2.writePacked(manifestFor("job/r/10", v3, b2), b2); err != nil {
		t.Fatal(err)
	}
	d3, err := openDisk(root, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"job/r/7": b, "job/r/10": b2} {
		vs := d3.versions(name)
		if len(vs) != 1 {
			t.Fatalf("%s after two restarts: %+v", name, vs)
		}
		if got, err := d3.readBlock(name, vs[0].Version, 0); err != nil || string(got) != string(want) {
			t.Fatalf("%s after two restarts: %v", name, err)
		}
	}
}
