package sdfs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	vol     *volume                  // the small unsynced versions (see writePacked)
	packed  map[string]volLoc        // where each version held in vol is, by pendingKey
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
		direct: map[string]chan struct{}{}, packed: map[string]volLoc{}}
	if err := os.RemoveAll(filepath.Join(root, "staging")); err != nil {
		return nil, fmt.Errorf("sdfs: clear staging: %w", err)
	}
	for _, sub := range []string{"staging", "v"} {
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
	d.vol, err = openVolume(filepath.Join(d.root, "vol"), volFileSize, d.replay)
	if err != nil {
		return err
	}
	for name := range d.files {
		d.prune(name)
	}
	return nil
}

// replay applies one volume record at start: a put adds its version to the index (a later
// put of the same version moves it: a repaired block), a drop removes it.
func (d *disk) replay(kind byte, mj []byte, loc volLoc) {
	if kind == recDrop {
		var r dropRecord
		if json.Unmarshal(mj, &r) == nil {
			if key := pendingKey(r.Name, r.Version); d.packed[key].file != 0 {
				delete(d.packed, key)
				d.unindex(r.Name, r.Version)
			}
		}
		return
	}
	m, err := decodeManifest(mj, d.cfg)
	if err != nil || m.Pending || len(m.Sums) != 1 || m.Size != int64(loc.n) {
		return
	}
	key := pendingKey(m.Name, m.Version)
	if _, ok := d.packed[key]; !ok && d.hasLocked(m.Name, m.Version) {
		return // held as a version directory too: that copy serves
	}
	d.packed[key] = loc
	d.insert(m)
}

// dropRecord is a volume's record of a version removed.
type dropRecord struct {
	Name    string  `json:"name"`
	Version Version `json:"version"`
}

// unindex removes a version from the index, not from disk. The caller holds mu or owns d.
func (d *disk) unindex(name string, v Version) {
	vs := d.files[name]
	for i, m := range vs {
		if m.Version == v {
			d.bytes -= m.Size
			vs = append(vs[:i:i], vs[i+1:]...)
			break
		}
	}
	if len(vs) == 0 {
		delete(d.files, name)
	} else {
		d.files[name] = vs
	}
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
	key := pendingKey(m.Name, m.Version)
	if _, ok := d.packed[key]; ok {
		// Without its drop record (a failed append) the version comes back at the next
		// start, where the repair scan drops a surplus copy again and a deleted name's
		// tombstone outranks it.
		b, _ := json.Marshal(dropRecord{m.Name, m.Version})
		d.vol.appendRecord(recDrop, b, nil)
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

// writePacked stores a version of one block that is not to be fsynced (Client.PutImmutable's
// writes: a task's result, durable by its replicas, not by this disk) as one record
// appended to the volume. A task's result is written to every replica, and a staged version
// directory (a staging directory, two files, a name directory and a rename) made most of
// its cost: creating inodes is slow on ext4, and slower still after many deletions. The
// index shows the version once its record is written. A second write of the same version
// while one is under way waits for it.
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
	loc, err := d.vol.appendRecord(recPut, b, body)
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.direct, key)
	close(done)
	if err != nil {
		return fmt.Errorf("sdfs: write %s: %w", m.Name, err)
	}
	d.packed[key] = loc
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

// packedAt returns where a version held in the volume is (ok false: not held there).
func (d *disk) packedAt(name string, v Version) (volLoc, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	loc, ok := d.packed[pendingKey(name, v)]
	return loc, ok
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
	if loc, ok := d.packedAt(name, v); ok {
		b, err := d.vol.read(loc)
		if err != nil {
			return nil, fmt.Errorf("sdfs: read block %d of %s: %w", idx, name, err)
		}
		buf, got = b, len(b)
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
	if _, ok := d.packedAt(name, v); ok {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("sdfs: repair: %w", err)
		}
		loc, err := d.vol.appendRecord(recPut, b, body)
		if err != nil {
			return fmt.Errorf("sdfs: repair: %w", err)
		}
		d.mu.Lock()
		if _, ok := d.packed[pendingKey(name, v)]; ok {
			d.packed[pendingKey(name, v)] = loc
		}
		d.mu.Unlock()
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
