package sdfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// errCorrupt marks a block whose bytes do not match its checksum.
var errCorrupt = errors.New("sdfs: block checksum mismatch")

// disk is one node's local replica store under root (DATA_DIR/sdfs):
//
//	staging/<txn>/b000000 ...        blocks of uncommitted writes (wiped at start)
//	v/<hh>/<hash of name>/<version>/ manifest.json and blocks of a committed version
//
// A put's version is committed pending (Manifest.Pending): installed but invisible until
// the writer confirms it, which it does only once every replica committed. A pending
// version is dropped at start, and after TxnIdle without a confirm: its put was never
// acknowledged, so a replica that crashed before the writer's drop reached it cannot
// bring a failed put's version back when it restarts.
// User names never become paths: a name's directory is the hex SHA-256 of the name. A
// version is visible once its directory is renamed from staging into v/, which happens
// only after every block and the manifest are fsynced. The index of names and versions
// lives in memory, guarded by mu, and is rebuilt from v/ at start.
type disk struct {
	root string
	cfg  Config

	mu      sync.Mutex
	files   map[string][]*Manifest // committed versions per name, oldest first
	pending map[string]pendingVersion
	txns    map[string]*txn
	direct  map[string]chan struct{} // writePacked calls under way, by pendingKey; closed when done
	packed  map[string]bool          // committed versions stored as one packed file, by pendingKey
	bytes   int64                    // bytes of committed data versions
}

// pendingVersion is a version committed but not confirmed, keyed by pendingKey.
type pendingVersion struct {
	m  *Manifest
	at time.Time
}

func pendingKey(name string, v Version) string { return name + "\x00" + v.dirName() }

type txn struct {
	name    string
	ver     Version
	dir     string
	sums    map[int]string
	bytes   int64
	touched time.Time
	busy    int
	// nosync: the write's files and directories are not fsynced (Client.PutImmutable with
	// sync false): it is durable by its replicas, not by this disk.
	nosync bool
}

func openDisk(root string, cfg Config) (*disk, error) {
	d := &disk{root: root, cfg: cfg, files: map[string][]*Manifest{}, pending: map[string]pendingVersion{}, txns: map[string]*txn{},
		direct: map[string]chan struct{}{}, packed: map[string]bool{}}
	if err := os.RemoveAll(filepath.Join(root, "staging")); err != nil {
		return nil, fmt.Errorf("sdfs: clear staging: %w", err)
	}
	for _, sub := range []string{"staging", "v", "p"} {
		if err := os.MkdirAll(filepath.Join(root, sub), 0o755); err != nil {
			return nil, fmt.Errorf("sdfs: %w", err)
		}
	}
	if err := d.rebuild(); err != nil {
		return nil, err
	}
	return d, nil
}

// rebuild reads every committed manifest. A version directory without a valid manifest
// (a crash during a drop) is removed.
func (d *disk) rebuild() error {
	dirs, err := filepath.Glob(filepath.Join(d.root, "v", "*", "*", "*"))
	if err != nil {
		return fmt.Errorf("sdfs: scan store: %w", err)
	}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		var m *Manifest
		if err == nil {
			m, err = decodeManifest(b, d.cfg)
		}
		if err == nil && (d.versionDir(m.Name, m.Version) != dir) {
			err = fmt.Errorf("sdfs: manifest of %s in wrong directory", m.Name)
		}
		if err != nil || m.Pending {
			os.RemoveAll(dir) // a pending version's put was never acknowledged
			continue
		}
		d.insert(m)
	}
	files, err := filepath.Glob(filepath.Join(d.root, "p", "*", "*"))
	if err != nil {
		return fmt.Errorf("sdfs: scan store: %w", err)
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		var m *Manifest
		var body []byte
		if err == nil {
			m, body, err = d.decodePacked(b)
		}
		if err == nil && (d.packedFile(m.Name, m.Version) != path || int64(len(body)) != m.Size) {
			err = fmt.Errorf("sdfs: packed version of %s in wrong file or cut short", m.Name)
		}
		if err != nil {
			os.Remove(path) // a write cut short by a crash
			continue
		}
		d.packed[pendingKey(m.Name, m.Version)] = true
		d.insert(m)
	}
	for name := range d.files {
		d.prune(name)
	}
	return nil
}

// packedFile is where a packed version lives: its manifest's JSON, a newline, and its one
// block, in one file (see writePacked).
func (d *disk) packedFile(name string, v Version) string {
	h := nameHash(name)
	return filepath.Join(d.root, "p", h[:2], h+"-"+v.dirName())
}

// decodePacked splits a packed file into its manifest and its block.
func (d *disk) decodePacked(b []byte) (*Manifest, []byte, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, nil, fmt.Errorf("sdfs: packed file without a manifest")
	}
	m, err := decodeManifest(b[:i], d.cfg)
	if err != nil {
		return nil, nil, err
	}
	if m.Pending || len(m.Sums) != 1 {
		return nil, nil, fmt.Errorf("sdfs: packed version of %s is pending or has %d blocks", m.Name, len(m.Sums))
	}
	return m, b[i+1:], nil
}

func nameHash(name string) string {
	s := sha256.Sum256([]byte(name))
	return hex.EncodeToString(s[:20])
}

func (d *disk) nameDir(name string) string {
	h := nameHash(name)
	return filepath.Join(d.root, "v", h[:2], h)
}

func (d *disk) versionDir(name string, v Version) string {
	return filepath.Join(d.nameDir(name), v.dirName())
}

func blockFile(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("b%06d", i)) }

// insert adds m to the index; the caller holds mu or owns d exclusively.
func (d *disk) insert(m *Manifest) {
	vs := d.files[m.Name]
	i := sort.Search(len(vs), func(i int) bool { return !vs[i].Version.Less(m.Version) })
	if i < len(vs) && vs[i].Version == m.Version {
		return
	}
	vs = append(vs, nil)
	copy(vs[i+1:], vs[i:])
	vs[i] = m
	d.files[m.Name] = vs
	d.bytes += m.Size
}

// prune removes data versions older than the newest tombstone and all but the newest
// MaxVersions data versions. The caller holds mu.
func (d *disk) prune(name string) {
	vs := d.files[name]
	keep := make([]*Manifest, 0, len(vs))
	data := 0
	tomb := false
	for i := len(vs) - 1; i >= 0; i-- {
		m := vs[i]
		switch {
		case tomb:
		case m.Deleted:
			tomb = true
			keep = append(keep, m)
			continue
		case data < d.cfg.MaxVersions:
			data++
			keep = append(keep, m)
			continue
		}
		d.removeVersion(m)
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	if len(keep) == 0 {
		delete(d.files, name)
		return
	}
	d.files[name] = keep
}

// removeVersion deletes a version from disk: the manifest first, so a crash midway leaves a
// directory that rebuild discards. The caller holds mu and updates the index.
func (d *disk) removeVersion(m *Manifest) {
	if key := pendingKey(m.Name, m.Version); d.packed[key] {
		os.Remove(d.packedFile(m.Name, m.Version))
		delete(d.packed, key)
		d.bytes -= m.Size
		return
	}
	dir := d.versionDir(m.Name, m.Version)
	os.Remove(filepath.Join(dir, "manifest.json"))
	os.RemoveAll(dir)
	d.bytes -= m.Size
}

func (d *disk) begin(id, name string, v Version, now time.Time) error {
	return d.beginSync(id, name, v, now, true)
}

// beginSync is begin, for a write whose files are fsynced (sync) or not.
func (d *disk) beginSync(id, name string, v Version, now time.Time, sync bool) error {
	if len(id) != 32 || !isHex(id) {
		return fmt.Errorf("sdfs: bad transaction id %q", id)
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := v.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.txns[id]; ok {
		return nil
	}
	if len(d.txns) >= d.cfg.MaxTxns {
		return fmt.Errorf("sdfs: node busy: %d writes in progress", len(d.txns))
	}
	dir := filepath.Join(d.root, "staging", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sdfs: stage %s: %w", name, err)
	}
	d.txns[id] = &txn{name: name, ver: v, dir: dir, sums: map[int]string{}, touched: now, nosync: !sync}
	return nil
}

func (d *disk) take(id string, now time.Time) (*txn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.txns[id]
	if t == nil {
		return nil, fmt.Errorf("sdfs: unknown or expired transaction %s", id)
	}
	t.busy++
	t.touched = now
	return t, nil
}

func (d *disk) release(t *txn) {
	d.mu.Lock()
	t.busy--
	d.mu.Unlock()
}

// putBlock writes and fsyncs block idx of a staged write after checking its checksum.
func (d *disk) putBlock(id string, idx int, sum string, body []byte, now time.Time) error {
	if idx < 0 || idx >= 1<<24 {
		return fmt.Errorf("sdfs: block index %d out of range", idx)
	}
	if len(body) == 0 || len(body) > d.cfg.MaxBlockSize {
		return fmt.Errorf("sdfs: block of %d bytes outside (0, %d]", len(body), d.cfg.MaxBlockSize)
	}
	if got := sumHex(sha256.Sum256(body)); got != sum {
		return fmt.Errorf("sdfs: block %d arrived corrupt (checksum %s, want %s)", idx, got[:12], sum)
	}
	t, err := d.take(id, now)
	if err != nil {
		return err
	}
	defer d.release(t)
	d.mu.Lock()
	t.bytes += int64(len(body))
	over := t.bytes > d.cfg.MaxFileSize+int64(d.cfg.MaxBlockSize)
	d.mu.Unlock()
	if over {
		return fmt.Errorf("sdfs: write of %s exceeds the size limit of %d bytes", t.name, d.cfg.MaxFileSize)
	}
	if err := writeFile(blockFile(t.dir, idx), body, !t.nosync); err != nil {
		return fmt.Errorf("sdfs: store block %d of %s: %w", idx, t.name, err)
	}
	d.mu.Lock()
	t.sums[idx] = sum
	d.mu.Unlock()
	return nil
}

// commit makes a staged write visible: it checks every block against m, writes the
// manifest, fsyncs, and renames the staging directory into place. Committing a version the
// node already holds succeeds and discards the staged copy.
func (d *disk) commit(id string, m *Manifest, now time.Time) error {
	return d.commitAs(id, m, now, false)
}

// commitPending is commit for a put's new version: installed but invisible until confirm.
func (d *disk) commitPending(id string, m *Manifest, now time.Time) error {
	return d.commitAs(id, m, now, true)
}

func (d *disk) commitAs(id string, m *Manifest, now time.Time, pending bool) error {
	if err := m.Validate(d.cfg); err != nil {
		return err
	}
	mm := *m
	mm.Pending = pending
	m = &mm
	t, err := d.take(id, now)
	if err != nil {
		if held := d.manifest(m.Name, m.Version); held != nil && slices.Equal(held.Sums, m.Sums) {
			return nil // a repeated commit of a version already installed
		}
		return err
	}
	defer d.finish(id, t)
	if t.name != m.Name || t.ver != m.Version {
		return fmt.Errorf("sdfs: commit of %s %s does not match transaction (%s %s)", m.Name, m.Version, t.name, t.ver)
	}
	if d.has(m.Name, m.Version) {
		return nil
	}
	d.mu.Lock()
	for i, s := range m.Sums {
		if t.sums[i] != s {
			d.mu.Unlock()
			return fmt.Errorf("sdfs: commit of %s %s: block %d missing or different", m.Name, m.Version, i)
		}
	}
	d.mu.Unlock()
	return d.install(t.dir, m, now, !t.nosync)
}

// confirm makes a pending version visible (and durable as such). Confirming a version
// already visible succeeds.
func (d *disk) confirm(name string, v Version) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pending[pendingKey(name, v)]
	if !ok {
		if d.hasLocked(name, v) {
			return nil
		}
		return fmt.Errorf("sdfs: confirm of %s %s: not committed here", name, v)
	}
	m := *p.m
	m.Pending = false
	b, err := json.Marshal(&m)
	if err != nil {
		return fmt.Errorf("sdfs: encode manifest: %w", err)
	}
	dir := d.versionDir(name, v)
	tmp := filepath.Join(dir, "manifest.json.tmp")
	if err := writeFileSync(tmp, b); err != nil {
		return fmt.Errorf("sdfs: confirm of %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "manifest.json")); err != nil {
		return fmt.Errorf("sdfs: confirm of %s: %w", name, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("sdfs: %w", err)
	}
	delete(d.pending, pendingKey(name, v))
	d.insert(&m)
	d.prune(name)
	return nil
}

// install writes m into staged directory dir and moves dir into the store, fsyncing the
// files and directories on the way when sync is set.
func (d *disk) install(dir string, m *Manifest, now time.Time, sync bool) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("sdfs: encode manifest: %w", err)
	}
	if err := writeFile(filepath.Join(dir, "manifest.json"), b, sync); err != nil {
		return fmt.Errorf("sdfs: write manifest of %s: %w", m.Name, err)
	}
	syncDir := syncDir
	if !sync {
		syncDir = func(string) error { return nil }
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("sdfs: %w", err)
	}
	parent := d.nameDir(m.Name)
	d.mu.Lock() // drop may remove an empty name directory: create it under the same lock
	defer d.mu.Unlock()
	_, statErr := os.Stat(parent)
	created := statErr != nil
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("sdfs: %w", err)
	}
	if err := os.Rename(dir, d.versionDir(m.Name, m.Version)); err != nil {
		if d.hasLocked(m.Name, m.Version) {
			return nil
		}
		return fmt.Errorf("sdfs: commit %s: %w", m.Name, err)
	}
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("sdfs: %w", err)
	}
	if created { // the name's directory entry (and maybe its parent's) is new too
		syncDir(filepath.Dir(parent))
		syncDir(filepath.Dir(filepath.Dir(parent)))
	}
	if m.Pending {
		d.pending[pendingKey(m.Name, m.Version)] = pendingVersion{m: m, at: now}
		return nil
	}
	d.insert(m)
	d.prune(m.Name)
	return nil
}

// writePacked installs a version of one block as one packed file (its manifest, a newline,
// its block), not fsynced: Client.PutImmutable's writes, durable by their replicas, not by
// this disk. A task's result is written to every replica, and a staged version directory
// (a staging directory, two files, a name directory and a rename) made most of its cost:
// the file system allocates one inode here instead of four. The index shows the version
// once the file is written; a file a crash cut short is removed by rebuild, and a block
// damaged on disk fails its checksum on read like any other. A second write of the same
// version while one is under way waits for it.
func (d *disk) writePacked(m *Manifest, body []byte) error {
	if len(m.Sums) != 1 || int64(len(body)) != m.Size || m.Pending {
		return fmt.Errorf("sdfs: packed write of %s: %d blocks, %d bytes", m.Name, len(m.Sums), len(body))
	}
	if got := sumHex(sha256.Sum256(body)); got != m.Sums[0] {
		return fmt.Errorf("sdfs: block 0 arrived corrupt (checksum %s, want %s)", got[:12], m.Sums[0])
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("sdfs: encode manifest: %w", err)
	}
	key := pendingKey(m.Name, m.Version)
	d.mu.Lock()
	if d.hasLocked(m.Name, m.Version) {
		d.mu.Unlock()
		return nil
	}
	if ch, busy := d.direct[key]; busy {
		d.mu.Unlock()
		<-ch
		if d.has(m.Name, m.Version) {
			return nil
		}
		return fmt.Errorf("sdfs: write of %s %s failed", m.Name, m.Version)
	}
	if len(d.txns)+len(d.direct) >= d.cfg.MaxTxns {
		d.mu.Unlock()
		return fmt.Errorf("sdfs: node busy: %d writes in progress", len(d.txns)+len(d.direct))
	}
	done := make(chan struct{})
	d.direct[key] = done
	d.mu.Unlock()
	path := d.packedFile(m.Name, m.Version)
	buf := append(append(b, '\n'), body...)
	err = writeFile(path, buf, false)
	if errors.Is(err, fs.ErrNotExist) { // the first file under this hash prefix
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			err = writeFile(path, buf, false)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.direct, key)
	close(done)
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("sdfs: write %s: %w", m.Name, err)
	}
	d.packed[key] = true
	d.insert(m)
	d.prune(m.Name)
	return nil
}

func (d *disk) finish(id string, t *txn) {
	d.mu.Lock()
	t.busy--
	delete(d.txns, id)
	d.mu.Unlock()
	os.RemoveAll(t.dir)
}

func (d *disk) abort(id string) {
	d.mu.Lock()
	t := d.txns[id]
	if t == nil || t.busy > 0 {
		d.mu.Unlock()
		return
	}
	delete(d.txns, id)
	d.mu.Unlock()
	os.RemoveAll(t.dir)
}

// expire discards staged writes idle for longer than TxnIdle, and pending versions not
// confirmed within TxnIdle (their writer gave up or died).
func (d *disk) expire(now time.Time) {
	d.mu.Lock()
	var dead []*txn
	for id, t := range d.txns {
		if t.busy == 0 && now.Sub(t.touched) > d.cfg.TxnIdle {
			dead = append(dead, t)
			delete(d.txns, id)
		}
	}
	for k, p := range d.pending {
		if now.Sub(p.at) > d.cfg.TxnIdle {
			os.RemoveAll(d.versionDir(p.m.Name, p.m.Version))
			delete(d.pending, k)
		}
	}
	d.mu.Unlock()
	for _, t := range dead {
		os.RemoveAll(t.dir)
	}
}

func (d *disk) isPacked(name string, v Version) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.packed[pendingKey(name, v)]
}

func (d *disk) has(name string, v Version) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hasLocked(name, v)
}

func (d *disk) hasLocked(name string, v Version) bool {
	if _, ok := d.pending[pendingKey(name, v)]; ok {
		return true
	}
	for _, m := range d.files[name] {
		if m.Version == v {
			return true
		}
	}
	return false
}

func (d *disk) manifest(name string, v Version) *Manifest {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.files[name] {
		if m.Version == v {
			return m
		}
	}
	return nil
}

// versions lists the committed versions of name, oldest first.
func (d *disk) versions(name string) []VersionInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	vs := d.files[name]
	out := make([]VersionInfo, len(vs))
	for i, m := range vs {
		out[i] = m.info()
	}
	return out
}

// manifests returns a snapshot of every name's versions.
func (d *disk) manifests() map[string][]*Manifest {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string][]*Manifest, len(d.files))
	for n, vs := range d.files {
		out[n] = append([]*Manifest(nil), vs...)
	}
	return out
}

func (d *disk) usage() (files int, bytes int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.files), d.bytes
}

// readBlock returns block idx of a committed version, verified against its checksum.
func (d *disk) readBlock(name string, v Version, idx int) ([]byte, error) {
	m := d.manifest(name, v)
	if m == nil {
		return nil, fmt.Errorf("sdfs: %s version %s not held here", name, v)
	}
	if idx < 0 || idx >= len(m.Sums) {
		return nil, fmt.Errorf("sdfs: %s version %s has no block %d", name, v, idx)
	}
	n := m.blockLen(idx)
	var buf []byte
	var got int
	if d.isPacked(name, v) {
		b, err := os.ReadFile(d.packedFile(name, v))
		if err != nil {
			return nil, fmt.Errorf("sdfs: read block %d of %s: %w", idx, name, err)
		}
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			buf = b[i+1:]
		}
		got = len(buf)
	} else {
		f, err := os.Open(blockFile(d.versionDir(name, v), idx))
		if err != nil {
			return nil, fmt.Errorf("sdfs: read block %d of %s: %w", idx, name, err)
		}
		defer f.Close()
		buf = make([]byte, n+1)
		got, err = io.ReadFull(f, buf)
		if err != io.ErrUnexpectedEOF && err != nil && err != io.EOF {
			return nil, fmt.Errorf("sdfs: read block %d of %s: %w", idx, name, err)
		}
	}
	if got != n || sumHex(sha256.Sum256(buf[:n])) != m.Sums[idx] {
		return nil, fmt.Errorf("%w: block %d of %s version %s", errCorrupt, idx, name, v)
	}
	return buf[:n], nil
}

// repairBlock replaces a block with good bytes, atomically.
func (d *disk) repairBlock(name string, v Version, idx int, body []byte) error {
	m := d.manifest(name, v)
	if m == nil || idx < 0 || idx >= len(m.Sums) || sumHex(sha256.Sum256(body)) != m.Sums[idx] {
		return fmt.Errorf("sdfs: repair of block %d of %s refused", idx, name)
	}
	if d.isPacked(name, v) {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("sdfs: repair: %w", err)
		}
		path := d.packedFile(name, v)
		if err := writeFileSync(path+".repair", append(append(b, '\n'), body...)); err != nil {
			return fmt.Errorf("sdfs: repair: %w", err)
		}
		if err := os.Rename(path+".repair", path); err != nil {
			os.Remove(path + ".repair")
			return fmt.Errorf("sdfs: repair: %w", err)
		}
		return nil
	}
	dir := d.versionDir(name, v)
	tmp := blockFile(dir, idx) + ".repair"
	if err := writeFileSync(tmp, body); err != nil {
		return fmt.Errorf("sdfs: repair: %w", err)
	}
	if err := os.Rename(tmp, blockFile(dir, idx)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sdfs: repair: %w", err)
	}
	return syncDir(dir)
}

// drop removes one version of name (a rolled-back write, or a copy moved elsewhere).
func (d *disk) drop(name string, v Version) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.pending[pendingKey(name, v)]; ok {
		os.RemoveAll(d.versionDir(name, v))
		delete(d.pending, pendingKey(name, v))
		if len(d.files[name]) == 0 {
			os.Remove(d.nameDir(name))
		}
		return
	}
	vs := d.files[name]
	for i, m := range vs {
		if m.Version == v {
			d.removeVersion(m)
			vs = append(vs[:i:i], vs[i+1:]...)
			break
		}
	}
	if len(vs) == 0 {
		delete(d.files, name)
		os.Remove(d.nameDir(name))
	} else {
		d.files[name] = vs
	}
}

// names lists held names with the given prefix, sorted.
func (d *disk) names(prefix string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n := range d.files {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func writeFileSync(path string, b []byte) error { return writeFile(path, b, true) }

// writeFile writes b to path, fsynced before it returns when sync is set.
func writeFile(path string, b []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
