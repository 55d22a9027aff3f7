package sdfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"idunno/rpc"
)

// MemberSource returns the live nodes as the caller sees them.
type MemberSource func(ctx context.Context) ([]Peer, error)

// GatewayMembers asks the first of gateways (RPC addresses of nodes) that answers for its
// membership view. Clients outside the cluster (the CLI) use it.
func GatewayMembers(rc *rpc.Client, gateways []string) MemberSource {
	return func(ctx context.Context) ([]Peer, error) {
		var errs []string
		for _, g := range gateways {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			var peers []Peer
			err := rc.CallJSON(cctx, g, "sdfs.members", empty{}, &peers)
			cancel()
			if err == nil && len(peers) > 0 {
				return peers, nil
			}
			errs = append(errs, fmt.Sprint(err))
		}
		return nil, fmt.Errorf("sdfs: no node answered for the membership (%s)", strings.Join(errs, "; "))
	}
}

// Client reads and writes SDFS files. It is safe for concurrent use from any process that
// holds the cluster secret: a node, the scheduler, the HTTP server or the CLI.
type Client struct {
	cfg     Config
	rc      *rpc.Client
	members MemberSource
	// progress, when set, is told the bytes of each block a get writes out and of each
	// read a PutFile makes of its file (see WithProgress).
	progress func(n int64)
}

// WithProgress returns a copy of the client that calls f with the size of each piece of
// file data it moves (Get, GetFile, PutFile, PutDir, GetDir), for progress reports. f is
// called from several goroutines at once.
func (c *Client) WithProgress(f func(n int64)) *Client {
	cc := *c
	cc.progress = f
	return &cc
}

// NewClient returns a client; cfg supplies the replication factor, quorum, block size,
// pipeline depth and deadlines.
func NewClient(cfg Config, rc *rpc.Client, members MemberSource) *Client {
	return &Client{cfg: cfg, rc: rc, members: members}
}

// Peers returns the live nodes as the client's membership source reports them.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) { return c.members(ctx) }

// view is one node's answer to a version query.
type view struct {
	peer     Peer
	versions []VersionInfo // oldest first
}

func (v view) has(ver Version) bool {
	for _, vi := range v.versions {
		if vi.Version == ver {
			return true
		}
	}
	return false
}

// stat asks each of peers for the versions of names, in parallel. ok[i] tells whether
// peers[i] answered.
func (c *Client) stat(ctx context.Context, peers []Peer, names []string) (replies []map[string][]VersionInfo, ok []bool) {
	replies = make([]map[string][]VersionInfo, len(peers))
	ok = make([]bool, len(peers))
	c.each(peers, func(i int, p Peer) error {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.StatTimeout)
		defer cancel()
		var r statReply
		if err := c.callBody(cctx, p.Addr, "sdfs.stat", statArgs{Names: names}, &r); err != nil {
			return err
		}
		replies[i], ok[i] = r.Versions, true
		return nil
	})
	return replies, ok
}

// callBody calls a method whose JSON result comes in the message body.
func (c *Client) callBody(ctx context.Context, addr, method string, args, reply any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("sdfs: encode %s arguments: %w", method, err)
	}
	r, err := c.rc.Call(ctx, addr, &rpc.Message{Method: method, Args: raw})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(r.Body, reply); err != nil {
		return fmt.Errorf("sdfs: decode %s result from %s: %w", method, addr, err)
	}
	return nil
}

// each runs f on every peer in parallel and returns the errors by index.
func (c *Client) each(peers []Peer, f func(i int, p Peer) error) []error {
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, p)
		}()
	}
	wg.Wait()
	return errs
}

// query finds who holds name: it asks the top 2N of the name's rendezvous order (the
// replica set and where copies may linger after membership changes), and everyone else
// when none of those holds a version. It needs ReadQuorum answers.
func (c *Client) query(ctx context.Context, name string, exclude map[string]bool) ([]view, []Peer, error) {
	views, live, _, err := c.queryN(ctx, name, exclude)
	return views, live, err
}

// queryN is query that also returns how many live members the membership lists.
func (c *Client) queryN(ctx context.Context, name string, exclude map[string]bool) ([]view, []Peer, int, error) {
	if err := ValidateName(name); err != nil {
		return nil, nil, 0, err
	}
	all, err := c.members(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	var peers []Peer
	for _, p := range all {
		if !exclude[p.Name] {
			peers = append(peers, p)
		}
	}
	if len(peers) == 0 {
		return nil, nil, 0, errors.New("sdfs: no live nodes")
	}
	ranked := Rank(name, peers)
	first := firstN(ranked, 2*c.cfg.Replicas)
	views, answered := c.views(ctx, first, name)
	if need := min(c.cfg.ReadQuorum, len(first)); answered < need {
		return nil, nil, 0, fmt.Errorf("sdfs: %s: read quorum not reached (%d of %d nodes answered)", name, answered, need)
	}
	if newest(views).IsZero() && len(ranked) > len(first) {
		more, _ := c.views(ctx, ranked[len(first):], name)
		views = append(views, more...)
	}
	var live []Peer
	for _, v := range views {
		live = append(live, v.peer)
	}
	return views, live, len(all), nil
}

func (c *Client) views(ctx context.Context, peers []Peer, name string) ([]view, int) {
	replies, ok := c.stat(ctx, peers, []string{name})
	var out []view
	n := 0
	for i, p := range peers {
		if ok[i] {
			n++
			out = append(out, view{peer: p, versions: replies[i][name]})
		}
	}
	return out, n
}

func newest(views []view) Version {
	var best Version
	for _, v := range views {
		for _, vi := range v.versions {
			if best.Less(vi.Version) {
				best = vi.Version
			}
		}
	}
	return best
}

// latest returns the newest visible version of name and the nodes holding it.
func (c *Client) latest(ctx context.Context, name string) (VersionInfo, []Peer, error) {
	views, _, err := c.query(ctx, name, nil)
	if err != nil {
		return VersionInfo{}, nil, err
	}
	best := newest(views)
	var info VersionInfo
	var holders []Peer
	for _, v := range views {
		for _, vi := range v.versions {
			if vi.Version == best {
				info = vi
				holders = append(holders, v.peer)
			}
		}
	}
	if best.IsZero() || info.Deleted {
		return VersionInfo{}, nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return info, holders, nil
}

// Put stores the bytes of r as a new version of name and returns once every replica of
// the version (N of them, or every live node if fewer) has it on disk. If r is an
// io.Seeker, a put whose replica fails midway is retried on other nodes.
func (c *Client) Put(ctx context.Context, name string, r io.Reader) (Version, error) {
	exclude := map[string]bool{}
	var lastErr error
	for attempt := 0; attempt < max(c.cfg.Replicas, 3); attempt++ { // each retry excludes at least one more node
		if attempt > 0 {
			sk, ok := r.(io.Seeker)
			if !ok {
				break
			}
			if _, err := sk.Seek(0, io.SeekStart); err != nil {
				break
			}
		}
		m, bad, err := c.put(ctx, name, exclude, false, r)
		if err == nil {
			return m.Version, nil
		}
		lastErr = err
		if len(bad) == 0 || ctx.Err() != nil {
			break
		}
		for _, p := range bad {
			exclude[p.Name] = true
		}
	}
	return Version{}, lastErr
}

// PutImmutable stores body under name for a file whose bytes are fixed by its name, such
// as a task's result, which a task run again recomputes byte for byte. The version comes
// from the bytes (sequence 1, writer: the start of their SHA-256), so every write of the
// same bytes is the same version: no version query is needed, a replica that holds it
// already accepts it again, and a version left on some replicas by a failed write holds
// the right bytes, so it is committed visible at once, with no pending phase to confirm.
// It takes one call per replica, against Put's version query to up to every node, the
// write and the confirmation. With sync false the replicas do not fsync it: like a
// coordinator's journal with a standby, it is durable by its replicas (any 3 of the 4 may
// crash), not against every replica's machine losing power at once. Bytes over one small
// write (64 KiB, or a block) go through Put instead.
func (c *Client) PutImmutable(ctx context.Context, name string, body []byte, sync bool) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if len(body) > min(smallFile, c.cfg.BlockSize) {
		_, err := c.Put(ctx, name, bytes.NewReader(body))
		return err
	}
	sum := sha256.Sum256(body)
	tmpl := Manifest{Name: name, Version: Version{Seq: 1, Writer: hex.EncodeToString(sum[:8])},
		BlockSize: c.cfg.BlockSize, Created: time.Now().UnixNano()}
	exclude := map[string]bool{}
	var lastErr error
	for attempt := 0; attempt < max(c.cfg.Replicas, 3); attempt++ { // each retry excludes at least one more node
		all, err := c.members(ctx)
		if err != nil {
			return err
		}
		var live []Peer
		for _, p := range all {
			if !exclude[p.Name] {
				live = append(live, p)
			}
		}
		targets := firstN(Rank(name, live), c.cfg.Replicas)
		if w := min(c.cfg.Replicas, len(all)); len(targets) < w {
			return fmt.Errorf("sdfs: put %s: only %d reachable nodes for a write to %d replicas", name, len(targets), w)
		}
		_, bad, err := c.writeSmall(ctx, targets, tmpl, body, false, sync)
		if err == nil {
			return nil
		}
		lastErr = err
		if len(bad) == 0 || ctx.Err() != nil {
			break
		}
		for _, p := range bad {
			exclude[p.Name] = true
		}
	}
	return lastErr
}

// GetImmutable returns the bytes of a name written by PutImmutable. Any replica's copy is
// the copy (its version is derived from its bytes, which the client checks), so it asks
// the name's replicas one at a time, in rendezvous order, for their newest version and its
// bytes: one call, where Get asks up to 2N nodes for their versions first and then fetches
// the manifest and the block. A name no replica returns so (moved by membership changes,
// several blocks, or absent) is read by Get.
func (c *Client) GetImmutable(ctx context.Context, name string) ([]byte, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	peers, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	args, _ := json.Marshal(versionArgs{Name: name})
	for _, p := range firstN(Rank(name, peers), c.cfg.Replicas) {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.BlockTimeout)
		r, err := c.rc.Call(cctx, p.Addr, &rpc.Message{Method: "sdfs.getsmall", Args: args})
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			continue
		}
		sum := sha256.Sum256(r.Body)
		var v Version
		if json.Unmarshal(r.Args, &v) == nil && v == (Version{Seq: 1, Writer: hex.EncodeToString(sum[:8])}) {
			return r.Body, nil
		}
	}
	var buf bytes.Buffer
	if _, err := c.Get(ctx, name, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Delete hides every version of name behind a tombstone written like a put.
func (c *Client) Delete(ctx context.Context, name string) error {
	if _, _, err := c.latest(ctx, name); err != nil {
		return err
	}
	exclude := map[string]bool{}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		_, bad, err := c.put(ctx, name, exclude, true, nil)
		if err == nil {
			return nil
		}
		lastErr = err
		for _, p := range bad {
			exclude[p.Name] = true
		}
		if len(bad) == 0 {
			break
		}
	}
	return lastErr
}

// put picks the version (one above the newest a read quorum reports) and the replica set
// (the first N live nodes of the name's rendezvous order, minus exclude) and writes.
func (c *Client) put(ctx context.Context, name string, exclude map[string]bool, deleted bool, r io.Reader) (*Manifest, []Peer, error) {
	views, live, members, err := c.queryN(ctx, name, exclude)
	if err != nil {
		return nil, nil, err
	}
	// W is the replication factor, or every member when the cluster is smaller. Nodes that
	// failed this put or did not answer are not members the write can count on.
	targets := firstN(Rank(name, live), c.cfg.Replicas)
	if w := min(c.cfg.Replicas, members); len(targets) < w {
		return nil, nil, fmt.Errorf("sdfs: put %s: only %d reachable nodes for a write to %d replicas", name, len(targets), w)
	}
	tmpl := Manifest{Name: name, Version: Version{Seq: newest(views).Seq + 1, Writer: randHex(8)},
		BlockSize: c.cfg.BlockSize, Deleted: deleted, Created: time.Now().UnixNano()}
	if deleted {
		tmpl.BlockSize = 0
		return c.writeSmall(ctx, targets, tmpl, nil, true, true)
	}
	// A file that fits in smallFile bytes goes in one call per replica.
	head := make([]byte, min(smallFile, c.cfg.BlockSize)+1)
	n, err := io.ReadFull(r, head)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return c.writeSmall(ctx, targets, tmpl, head[:n], true, true)
	case err != nil:
		return nil, nil, fmt.Errorf("sdfs: put %s: read: %w", name, err)
	}
	r = io.MultiReader(bytes.NewReader(head), r)
	next := func(buf []byte) ([]byte, error) {
		n, err := io.ReadFull(r, buf)
		if err == io.ErrUnexpectedEOF || (err == io.EOF && n > 0) {
			err = nil
		}
		return buf[:n], err
	}
	return c.writeVersion(ctx, targets, tmpl, next, true)
}

// smallFile is the size up to which a put sends the whole file in one call per replica.
const smallFile = 64 << 10

// writeSmall writes a version of at most one block (or a tombstone) with one "sdfs.write"
// call per target: each stages, fsyncs (sync) and commits it. If any target fails, the
// version is dropped where it was committed, as in writeVersion.
func (c *Client) writeSmall(ctx context.Context, targets []Peer, tmpl Manifest, body []byte, rollback, sync bool) (*Manifest, []Peer, error) {
	if len(targets) == 0 {
		return nil, nil, errors.New("sdfs: no live nodes to write to")
	}
	m := tmpl
	m.Sums, m.Size = []string{}, int64(len(body))
	if len(body) > 0 {
		m.Sums = append(m.Sums, sumHex(sha256.Sum256(body)))
	}
	args, err := json.Marshal(commitArgs{Txn: randHex(16), Manifest: m, Pending: rollback, NoSync: !sync})
	if err != nil {
		return nil, nil, fmt.Errorf("sdfs: encode write: %w", err)
	}
	errs := c.each(targets, func(_ int, p Peer) error {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.BlockTimeout)
		defer cancel()
		_, err := c.rc.Call(cctx, p.Addr, &rpc.Message{Method: "sdfs.write", Args: args, Body: body})
		return err
	})
	var bad, committed []Peer
	var first error
	for i, err := range errs {
		if err == nil {
			committed = append(committed, targets[i])
			continue
		}
		bad = append(bad, targets[i])
		if first == nil {
			first = fmt.Errorf("sdfs: put %s: %s: %w", m.Name, targets[i].Name, err)
		}
	}
	if first != nil {
		if rollback {
			c.dropVersion(committed, m.Name, m.Version)
		}
		if ctx.Err() != nil {
			bad = nil
		}
		return nil, bad, first
	}
	if rollback {
		if bad, err := c.confirm(ctx, targets, m.Name, m.Version); err != nil {
			return nil, bad, err
		}
	}
	return &m, nil, nil
}

// confirm makes a put's version visible on every target, once every target committed it
// (pending). If any target fails, the version is dropped everywhere and the failed targets
// are returned: a version is visible only where its put was acknowledged, so a replica that
// crashed holding it (pending) drops it at restart instead of bringing it back.
func (c *Client) confirm(ctx context.Context, targets []Peer, name string, v Version) ([]Peer, error) {
	errs := c.each(targets, func(_ int, p Peer) error {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.StatTimeout)
		defer cancel()
		return c.rc.CallJSON(cctx, p.Addr, "sdfs.confirm", versionArgs{Name: name, Version: v}, nil)
	})
	var bad []Peer
	var first error
	for i, err := range errs {
		if err != nil {
			bad = append(bad, targets[i])
			if first == nil {
				first = fmt.Errorf("sdfs: put %s: confirm on %s: %w", name, targets[i].Name, err)
			}
		}
	}
	if first != nil {
		c.dropVersion(targets, name, v)
		if ctx.Err() != nil {
			bad = nil
		}
	}
	return bad, first
}

// dropVersion takes a version back from peers (best effort) after a failed write.
func (c *Client) dropVersion(peers []Peer, name string, v Version) {
	c.each(peers, func(_ int, p Peer) error {
		dctx, cancel := context.WithTimeout(context.Background(), c.cfg.StatTimeout)
		defer cancel()
		return c.rc.CallJSON(dctx, p.Addr, "sdfs.drop", versionArgs{Name: name, Version: v}, nil)
	})
}

// writeVersion writes one version to targets in two phases: every block to every
// target's staging area (fsynced there), then the manifest commit everywhere. next fills
// the buffer it is given (or returns its own) with the next block, io.EOF at the end. On
// failure the version is aborted, and with rollback (a new version from a put, not a
// copy of an existing one) dropped where it was committed; the nodes that failed are
// returned.
func (c *Client) writeVersion(ctx context.Context, targets []Peer, tmpl Manifest, next func([]byte) ([]byte, error), rollback bool) (*Manifest, []Peer, error) {
	if len(targets) == 0 {
		return nil, nil, errors.New("sdfs: no live nodes to write to")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	txn := randHex(16)
	var mu sync.Mutex
	var firstErr error
	bad := map[string]Peer{}
	fail := func(p Peer, err error) {
		mu.Lock()
		defer mu.Unlock()
		if p.Name != "" && !errors.Is(err, context.Canceled) { // not a call we cancelled ourselves
			bad[p.Name] = p
		}
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return firstErr
	}
	abort := func() {
		c.each(targets, func(_ int, p Peer) error {
			actx, acancel := context.WithTimeout(context.Background(), c.cfg.StatTimeout)
			defer acancel()
			return c.rc.CallJSON(actx, p.Addr, "sdfs.abort", beginArgs{Txn: txn}, nil)
		})
	}
	badList := func() []Peer {
		var out []Peer
		for _, p := range bad {
			out = append(out, p)
		}
		return out
	}

	c.each(targets, func(_ int, p Peer) error {
		cctx, ccancel := context.WithTimeout(ctx, c.cfg.StatTimeout)
		defer ccancel()
		err := c.rc.CallJSON(cctx, p.Addr, "sdfs.begin", beginArgs{Txn: txn, Name: tmpl.Name, Version: tmpl.Version}, nil)
		if err != nil {
			fail(p, fmt.Errorf("sdfs: put %s: %s: %w", tmpl.Name, p.Name, err))
		}
		return err
	})
	m := tmpl
	m.Sums = []string{}
	if err := failed(); err != nil {
		abort()
		return nil, badList(), err
	}
	depth := max(c.cfg.Pipeline, 1)
	pool := make(chan []byte, depth)
	for i := 0; i < depth; i++ {
		pool <- nil
	}
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		var buf []byte
		select {
		case buf = <-pool:
		case <-ctx.Done():
		}
		if failed() != nil || ctx.Err() != nil {
			break
		}
		if buf == nil && !tmpl.Deleted {
			buf = make([]byte, tmpl.BlockSize)
		}
		blk, err := next(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(Peer{}, fmt.Errorf("sdfs: put %s: read: %w", tmpl.Name, err))
			break
		}
		m.Size += int64(len(blk))
		if m.Size > c.cfg.MaxFileSize {
			fail(Peer{}, fmt.Errorf("sdfs: put %s: larger than the limit of %d bytes", tmpl.Name, c.cfg.MaxFileSize))
			break
		}
		sum := sumHex(sha256.Sum256(blk))
		m.Sums = append(m.Sums, sum)
		args, _ := json.Marshal(blockArgs{Txn: txn, Index: i, Sum: sum})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { pool <- buf }()
			c.each(targets, func(_ int, p Peer) error {
				bctx, bcancel := context.WithTimeout(ctx, c.cfg.BlockTimeout)
				defer bcancel()
				_, err := c.rc.Call(bctx, p.Addr, &rpc.Message{Method: "sdfs.putblock", Args: args, Body: blk})
				if err != nil {
					fail(p, fmt.Errorf("sdfs: put %s: block %d to %s: %w", tmpl.Name, i, p.Name, err))
				}
				return err
			})
		}()
	}
	wg.Wait()
	if err := failed(); err != nil {
		abort()
		return nil, badList(), err
	}
	errs := c.each(targets, func(_ int, p Peer) error {
		cctx, ccancel := context.WithTimeout(ctx, c.cfg.BlockTimeout)
		defer ccancel()
		return c.rc.CallJSON(cctx, p.Addr, "sdfs.commit", commitArgs{Txn: txn, Manifest: m, Pending: rollback}, nil)
	})
	var committed []Peer
	for i, err := range errs {
		if err != nil {
			fail(targets[i], fmt.Errorf("sdfs: put %s: commit on %s: %w", tmpl.Name, targets[i].Name, err))
		} else {
			committed = append(committed, targets[i])
		}
	}
	if err := failed(); err != nil {
		// Not durable on every replica: take the version back where it landed.
		if rollback {
			c.dropVersion(committed, m.Name, m.Version)
		}
		return nil, badList(), err
	}
	if rollback {
		if bad, err := c.confirm(ctx, targets, m.Name, m.Version); err != nil {
			return nil, bad, err
		}
	}
	return &m, nil, nil
}

// Get writes the newest version of name to w and returns its description.
func (c *Client) Get(ctx context.Context, name string, w io.Writer) (VersionInfo, error) {
	info, holders, err := c.latest(ctx, name)
	if err != nil {
		return VersionInfo{}, err
	}
	return info, c.read(ctx, name, info.Version, holders, w)
}

// read streams one version from holders to w, Pipeline blocks ahead, each block checked
// against its checksum and taken from the next holder when one fails.
func (c *Client) read(ctx context.Context, name string, v Version, holders []Peer, w io.Writer) error {
	m, err := c.manifest(ctx, name, v, holders)
	if err != nil {
		return err
	}
	if b, ok := w.(*bytes.Buffer); ok {
		// One allocation for the whole file (Validate bounds Size), not a doubling and a
		// clear per block: a worker reading a 100 MB model spent 0.6 CPU-s growing it.
		b.Grow(int(m.Size))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		b   []byte
		err error
	}
	window := make(chan chan result, max(c.cfg.Pipeline, 1))
	go func() {
		defer close(window)
		for i := range m.Sums {
			ch := make(chan result, 1)
			select {
			case window <- ch:
			case <-ctx.Done():
				return
			}
			go func() {
				b, err := c.fetch(ctx, m, i, holders)
				ch <- result{b, err}
			}()
		}
	}()
	for ch := range window {
		r := <-ch
		if r.err != nil {
			return r.err
		}
		if _, err := w.Write(r.b); err != nil {
			return fmt.Errorf("sdfs: get %s: write: %w", name, err)
		}
		if c.progress != nil {
			c.progress(int64(len(r.b)))
		}
	}
	return ctx.Err()
}

func (c *Client) manifest(ctx context.Context, name string, v Version, holders []Peer) (*Manifest, error) {
	var errs []string
	for _, p := range holders {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.StatTimeout)
		var m Manifest
		err := c.rc.CallJSON(cctx, p.Addr, "sdfs.manifest", versionArgs{Name: name, Version: v}, &m)
		cancel()
		if err == nil {
			err = m.Validate(c.cfg)
		}
		if err == nil && (m.Name != name || m.Version != v) {
			err = errors.New("wrong manifest")
		}
		if err == nil {
			return &m, nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", p.Name, err))
	}
	return nil, fmt.Errorf("sdfs: %s version %s: no replica gave its manifest (%s)", name, v, strings.Join(errs, "; "))
}

// fetch gets block i from the first holder that returns it intact, starting at a holder
// that depends on i so reads spread over the replicas.
func (c *Client) fetch(ctx context.Context, m *Manifest, i int, holders []Peer) ([]byte, error) {
	var errs []string
	for j := range holders {
		p := holders[(i+j)%len(holders)]
		b, err := c.getBlock(ctx, p, m.Name, m.Version, i, m.Sums[i])
		if err == nil && len(b) != m.blockLen(i) {
			err = errors.New("wrong length")
		}
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, fmt.Sprintf("%s: %v", p.Name, err))
	}
	return nil, fmt.Errorf("sdfs: block %d of %s: no intact replica (%s)", i, m.Name, strings.Join(errs, "; "))
}

func (c *Client) getBlock(ctx context.Context, p Peer, name string, v Version, i int, sum string) ([]byte, error) {
	args, _ := json.Marshal(versionArgs{Name: name, Version: v, Index: i})
	cctx, cancel := context.WithTimeout(ctx, c.cfg.BlockTimeout)
	defer cancel()
	r, err := c.rc.Call(cctx, p.Addr, &rpc.Message{Method: "sdfs.getblock", Args: args})
	if err != nil {
		return nil, err
	}
	if sum != "" && sumHex(sha256.Sum256(r.Body)) != sum {
		return nil, errCorrupt
	}
	return r.Body, nil
}

// GetVersions writes the newest n versions of name to w, newest first, each between a
// header line and an end line:
//
//	==== sdfs NAME version SEQ.WRITER (K of N) SIZE bytes ====
//	...bytes...
//	==== end NAME version SEQ.WRITER ====
func (c *Client) GetVersions(ctx context.Context, name string, n int, w io.Writer) (int, error) {
	if n <= 0 {
		return 0, fmt.Errorf("sdfs: get-versions: N must be positive, got %d", n)
	}
	views, _, err := c.query(ctx, name, nil)
	if err != nil {
		return 0, err
	}
	all := map[Version]VersionInfo{}
	holders := map[Version][]Peer{}
	for _, v := range views {
		for _, vi := range v.versions {
			all[vi.Version] = vi
			holders[vi.Version] = append(holders[vi.Version], v.peer)
		}
	}
	var list []VersionInfo
	for _, vi := range all {
		list = append(list, vi)
	}
	sort.Slice(list, func(i, j int) bool { return list[j].Version.Less(list[i].Version) })
	var pick []VersionInfo
	for _, vi := range list {
		if vi.Deleted || len(pick) == n {
			break
		}
		pick = append(pick, vi)
	}
	if len(pick) == 0 {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	for k, vi := range pick {
		fmt.Fprintf(w, "==== sdfs %s version %s (%d of %d) %d bytes ====\n", name, vi.Version, k+1, len(pick), vi.Size)
		if err := c.read(ctx, name, vi.Version, holders[vi.Version], w); err != nil {
			return k, err
		}
		if _, err := fmt.Fprintf(w, "\n==== end %s version %s ====\n", name, vi.Version); err != nil {
			return k, fmt.Errorf("sdfs: get-versions: write: %w", err)
		}
	}
	return len(pick), nil
}

// Holder is one node's copy of a name.
type Holder struct {
	Node     string        `json:"node"`
	Versions []VersionInfo `json:"versions"`
}

// Ls reports which live nodes hold name and which versions each has.
func (c *Client) Ls(ctx context.Context, name string) ([]Holder, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	peers, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	ranked := Rank(name, peers)
	replies, ok := c.stat(ctx, ranked, []string{name})
	var out []Holder
	for i, p := range ranked {
		if ok[i] && len(replies[i][name]) > 0 {
			out = append(out, Holder{Node: p.Name, Versions: replies[i][name]})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return out, nil
}

// Store lists what one node holds (its name as in the membership).
func (c *Client) Store(ctx context.Context, node string) ([]StoredFile, error) {
	p, err := c.peer(ctx, node)
	if err != nil {
		return nil, err
	}
	var out []StoredFile
	cctx, cancel := context.WithTimeout(ctx, c.cfg.StatTimeout)
	defer cancel()
	if err := c.callBody(cctx, p.Addr, "sdfs.store", listArgs{}, &out); err != nil {
		return nil, fmt.Errorf("sdfs: store of %s: %w", node, err)
	}
	return out, nil
}

// Verify makes node check every block it holds and repair the corrupt ones.
func (c *Client) Verify(ctx context.Context, node string) (VerifyReport, error) {
	var r VerifyReport
	p, err := c.peer(ctx, node)
	if err != nil {
		return r, err
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a whole store's blocks
	defer cancel()
	if err := c.rc.CallJSON(vctx, p.Addr, "sdfs.verify", empty{}, &r); err != nil {
		return r, fmt.Errorf("sdfs: verify on %s: %w", node, err)
	}
	return r, nil
}

func (c *Client) peer(ctx context.Context, node string) (Peer, error) {
	peers, err := c.members(ctx)
	if err != nil {
		return Peer{}, err
	}
	for _, p := range peers {
		if p.Name == node {
			return p, nil
		}
	}
	return Peer{}, fmt.Errorf("sdfs: node %q is not a live member", node)
}

// FileInfo is a name and its newest version.
type FileInfo struct {
	Name string `json:"name"`
	VersionInfo
}

// List returns the visible names starting with prefix, sorted, with their newest versions.
// It asks every live node; a name is on N of them, so it is found while fewer than N are down.
func (c *Client) List(ctx context.Context, prefix string) ([]FileInfo, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	peers, err := c.members(ctx)
	if err != nil {
		return nil, err
	}
	lists := make([][]StoredFile, len(peers))
	errs := c.each(peers, func(i int, p Peer) error {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.StatTimeout)
		defer cancel()
		return c.callBody(cctx, p.Addr, "sdfs.store", listArgs{Prefix: prefix}, &lists[i])
	})
	best := map[string]VersionInfo{}
	answered := 0
	for i, l := range lists {
		if errs[i] == nil {
			answered++
		}
		for _, f := range l {
			for _, vi := range f.Versions {
				if b, ok := best[f.Name]; !ok || b.Version.Less(vi.Version) {
					best[f.Name] = vi
				}
			}
		}
	}
	if answered == 0 {
		return nil, fmt.Errorf("sdfs: list: no node answered (%v)", errors.Join(errs...))
	}
	var out []FileInfo
	for n, vi := range best {
		if !vi.Deleted {
			out = append(out, FileInfo{Name: n, VersionInfo: vi})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("sdfs: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}
