package sdfs

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// Run runs the store's background work until ctx ends: a re-replication and rebalancing
// scan every RepairInterval and shortly after each membership change, expiry of abandoned
// writes, and a gentle checksum scrub every ScrubInterval.
func (s *Store) Run(ctx context.Context) error {
	events, unsubscribe := s.mem.Subscribe(64)
	defer unsubscribe()
	tick := time.NewTicker(s.cfg.RepairInterval)
	defer tick.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	var scrub <-chan time.Time
	if s.cfg.ScrubInterval > 0 {
		t := time.NewTicker(s.cfg.ScrubInterval)
		defer t.Stop()
		scrub = t.C
	}
	scrubbing := make(chan struct{}, 1)
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			debounce.Reset(s.cfg.RepairDebounce)
		case <-s.kick:
			s.Scan(ctx)
		case <-debounce.C:
			s.Scan(ctx)
		case <-tick.C:
			s.disk.expire(s.now())
			s.Scan(ctx)
		case <-scrub:
			select {
			case scrubbing <- struct{}{}:
				go func() {
					defer func() { <-scrubbing }()
					if r := s.Verify(ctx, 5*time.Millisecond); r.Corrupt > 0 {
						s.Logf("scrub: %d blocks checked, %d corrupt, %d repaired", r.Blocks, r.Corrupt, r.Repaired)
					}
				}()
			default:
			}
		}
	}
}

// Kick asks Run for a scan soon.
func (s *Store) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// push is one version to copy to some nodes.
type push struct {
	m       *Manifest
	targets []Peer
}

// Scan compares what this node holds with what each name's replica set holds, pushes the
// versions the set lacks, and drops this node's copies of names it no longer places here
// once the set covers them. For each version, only the first node in the name's
// rendezvous order that holds it pushes it, so copies are not sent twice.
//
// A name whose replica set held every local version at its last check is clean, and
// is skipped while the live peers and this node's versions of it stay the same: a scan
// then costs in proportion to what changed, not to every file held (task results pile up
// by the thousand; checking each every 3 s on every node took a sizeable share of the
// benchmark cluster's CPU). For what no membership change shows (a replica that lost a
// file while it kept running), each scan also checks one FullScanEvery-th of the clean
// names, a different share each time (by a hash of the name), so every name is checked
// at least once every FullScanEvery scans, and no scan checks them all at once.
func (s *Store) Scan(ctx context.Context) {
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	peers := s.Peers()
	all := s.disk.manifests()
	if len(all) == 0 {
		s.backlog.Store(0)
		s.lastChecked = 0
		return
	}
	pp := peersPrint(peers)
	s.scans++
	if s.clean == nil {
		s.clean = map[string]cleanMark{}
	}
	// Nodes only joined since the last scan: a name that scan found fully replicated still
	// has all its copies live, so copying it to a new set member is a move, not a repair.
	now := make(map[string]bool, len(peers))
	for _, p := range peers {
		now[p.Name] = true
	}
	joinedOnly := s.lastPeers != nil
	for n := range s.lastPeers {
		joinedOnly = joinedOnly && now[n]
	}
	if !joinedOnly || s.moving == nil {
		s.moving = map[string]bool{} // someone left: every copy counts as a repair again
	}
	prevPrint, prevPeers := s.lastPrint, s.lastPeers
	s.lastPeers, s.lastPrint = now, pp
	turn := uint32(s.scans % FullScanEvery)
	local := make(map[string][]*Manifest, len(all))
	for name, mine := range all {
		c, ok := s.clean[name]
		if ok && c.peers == pp && c.local == versionsPrint(mine) && scanShare(name) != turn {
			continue
		}
		if ok && joinedOnly && pp != prevPrint && c.peers == prevPrint && c.local == versionsPrint(mine) {
			s.moving[name] = true
		}
		delete(s.clean, name)
		local[name] = mine
	}
	for name := range s.moving {
		if local[name] == nil {
			delete(s.moving, name) // clean, dropped or deleted since
		}
	}
	for name := range s.clean {
		if all[name] == nil {
			delete(s.clean, name) // dropped or deleted here since
		}
	}
	deferred := s.boundScan(local, prevPeers, now)
	s.lastChecked = len(local)
	ranks := make(map[string][]Peer, len(local))
	ask := map[Peer][]string{}
	for name := range local {
		r := Rank(name, peers)
		ranks[name] = r
		upto := max(s.cfg.Replicas, s.pos(r))
		for _, p := range firstN(r, upto) {
			if p.Name != s.self.Name {
				ask[p] = append(ask[p], name)
			}
		}
	}
	views := s.statAll(ctx, ask)
	var pushes []push
	moves := 0 // moves pushed in this scan (at most RebalanceMoves)
	for name, mine := range local {
		r := ranks[name]
		pos := s.pos(r)
		desired := firstN(r, s.cfg.Replicas)
		for _, m := range mine {
			if s.someoneEarlierHolds(r[:pos], name, m.Version, views) {
				continue
			}
			var to []Peer
			for _, d := range desired {
				if d.Name == s.self.Name || !answered(views, d.Name) {
					continue
				}
				if !covered(views[d.Name][name], m.Version, s.cfg.MaxVersions) {
					to = append(to, d)
				}
			}
			if len(to) == 0 {
				continue
			}
			// Moves (s.moving) are paced, RebalanceMoves a scan, while repairs all go at
			// once: two workers rejoining a cluster that had run eight jobs drew ~5,500
			// task results at once, which stalled every worker's result writes for 3-4 s
			// and had one of the two declared failed.
			if s.cfg.RebalanceMoves > 0 && s.moving[name] {
				if moves >= s.cfg.RebalanceMoves {
					continue // the name stays unclean: a later scan moves it
				}
				moves++
			}
			pushes = append(pushes, push{m: m, targets: to})
		}
		if pos >= s.cfg.Replicas && s.setCovers(desired, name, mine, views) {
			for _, m := range mine {
				s.disk.drop(name, m.Version)
			}
			s.Logf("rebalance: dropped local copy of %s, now held by its replica set", name)
		} else if pos < s.cfg.Replicas && s.setCovers(desired, name, mine, views) {
			s.clean[name] = cleanMark{peers: pp, local: versionsPrint(mine)}
		}
	}
	missing := 0
	for _, p := range pushes {
		missing += len(p.targets)
	}
	s.backlog.Store(int64(missing + deferred))
	s.runPushes(ctx, pushes) // the names left for later go at the next tick (RepairInterval)
}

// boundScan keeps at most ScanNames of the names a scan is to check (local), those whose
// replica set lost a member since the last scan first (their copies may be short), the
// rest in an order that changes from scan to scan, and returns how many it left for later
// scans (they stay unclean; the next runs at the next tick, so a node checks about
// ScanNames names per RepairInterval: 4,000 names held take 4 scans, 12 s). After two of
// ten workers were killed, every node checked every name it held at once (all names turn
// unclean when a peer leaves) and pushed the lost copies of about two thirds of them:
// thousands of task results, at the nodes' normal priority, which left the workers'
// compute at a fifth of its rate for 10 s.
func (s *Store) boundScan(local map[string][]*Manifest, prevPeers, now map[string]bool) int {
	n := s.cfg.ScanNames
	if n <= 0 || len(local) <= n {
		return 0
	}
	var gone map[string]bool
	var prev []Peer
	for p := range prevPeers {
		prev = append(prev, Peer{Name: p})
		if !now[p] {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[p] = true
		}
	}
	type cand struct {
		name  string
		risk  bool
		order uint64
	}
	cs := make([]cand, 0, len(local))
	for name := range local {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d", name, s.scans)
		c := cand{name: name, order: h.Sum64()}
		if gone != nil {
			for _, p := range firstN(Rank(name, prev), s.cfg.Replicas) {
				c.risk = c.risk || gone[p.Name]
			}
		}
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].risk != cs[j].risk {
			return cs[i].risk
		}
		return cs[i].order < cs[j].order
	})
	for _, c := range cs[n:] {
		delete(local, c.name)
	}
	return len(cs) - n
}

// FullScanEvery: every name held, clean or not, is checked at least once in this many
// repair scans (5 minutes at the default RepairInterval).
const FullScanEvery = 100

// scanShare is the scan (modulo FullScanEvery) that rechecks name while it is clean.
func scanShare(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32() % FullScanEvery
}

// cleanMark is what a clean name was checked against (see Scan).
type cleanMark struct {
	peers uint64 // the live peers (peersPrint)
	local string // this node's versions of it (versionsPrint)
}

// peersPrint is a fingerprint of a set of peers, whatever their order.
func peersPrint(peers []Peer) uint64 {
	keys := make([]string, len(peers))
	for i, p := range peers {
		keys[i] = p.Name + "@" + p.Addr
	}
	sort.Strings(keys)
	h := fnv.New64a()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// versionsPrint names a node's versions of one name.
func versionsPrint(ms []*Manifest) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%d.%s.%t;", m.Version.Seq, m.Version.Writer, m.Deleted)
	}
	return b.String()
}

func (s *Store) pos(r []Peer) int {
	for i, p := range r {
		if p.Name == s.self.Name {
			return i
		}
	}
	return len(r)
}

func answered(views map[string]map[string][]VersionInfo, node string) bool {
	_, ok := views[node]
	return ok
}

func (s *Store) someoneEarlierHolds(earlier []Peer, name string, v Version, views map[string]map[string][]VersionInfo) bool {
	for _, p := range earlier {
		for _, vi := range views[p.Name][name] {
			if vi.Version == v {
				return true
			}
		}
	}
	return false
}

// setCovers reports whether every node of the name's replica set other than this one
// answered and needs no copy of any version this node holds.
func (s *Store) setCovers(desired []Peer, name string, mine []*Manifest, views map[string]map[string][]VersionInfo) bool {
	if len(desired) < s.cfg.Replicas {
		return false
	}
	for _, d := range desired {
		if d.Name == s.self.Name {
			continue // the scan does not ask itself
		}
		if !answered(views, d.Name) {
			return false
		}
		for _, m := range mine {
			if !covered(views[d.Name][name], m.Version, s.cfg.MaxVersions) {
				return false
			}
		}
	}
	return true
}

// covered reports whether a node holding vs needs no copy of version v: it has v, or a
// tombstone newer than v, or maxVersions newer data versions (so it would prune v).
func covered(vs []VersionInfo, v Version, maxVersions int) bool {
	newer := 0
	for _, vi := range vs {
		switch {
		case vi.Version == v:
			return true
		case v.Less(vi.Version) && vi.Deleted:
			return true
		case v.Less(vi.Version):
			newer++
		}
	}
	return newer >= maxVersions
}

// statAll asks each node for the versions of its list of names, in chunks. A node that
// does not answer is absent from the result.
func (s *Store) statAll(ctx context.Context, ask map[Peer][]string) map[string]map[string][]VersionInfo {
	out := map[string]map[string][]VersionInfo{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p, names := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := map[string][]VersionInfo{}
			for len(names) > 0 {
				chunk := statChunk(names)
				names = names[len(chunk):]
				replies, ok := s.client.stat(ctx, []Peer{p}, chunk)
				if !ok[0] {
					return
				}
				for n, vs := range replies[0] {
					got[n] = vs
				}
			}
			mu.Lock()
			out[p.Name] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// runPushes copies versions from the local disk, RepairPushes at a time.
func (s *Store) runPushes(ctx context.Context, pushes []push) {
	sem := make(chan struct{}, max(s.cfg.RepairPushes, 1))
	var wg sync.WaitGroup
	for _, p := range pushes {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.pushVersion(ctx, p.m, p.targets); err != nil {
				s.Logf("re-replicate %s version %s: %v", p.m.Name, p.m.Version, err)
				return
			}
			names := make([]string, len(p.targets))
			for i, t := range p.targets {
				names[i] = t.Name
			}
			s.Logf("re-replicated %s version %s to %v", p.m.Name, p.m.Version, names)
		}()
	}
	wg.Wait()
}

func (s *Store) pushVersion(ctx context.Context, m *Manifest, targets []Peer) error {
	tmpl := *m
	tmpl.Sums, tmpl.Size = nil, 0
	i := 0
	next := func([]byte) ([]byte, error) {
		if i >= len(m.Sums) {
			return nil, io.EOF
		}
		b, err := s.disk.readBlock(m.Name, m.Version, i)
		if err != nil && s.repairBlock(m.Name, m.Version, i) {
			b, err = s.disk.readBlock(m.Name, m.Version, i)
		}
		i++
		return b, err
	}
	// A copy of an acknowledged version is never rolled back: where it landed, it stays.
	// A version held in the volume (a task's result, not fsynced) is copied the same way,
	// into the target's volume: a node's death has every survivor copy thousands of them.
	if len(m.Sums) <= 1 && m.Size <= smallFile {
		_, packed := s.disk.packedAt(m.Name, m.Version)
		var body []byte
		if len(m.Sums) == 1 {
			b, err := next(nil)
			if err != nil {
				return err
			}
			body = b
		}
		_, _, err := s.client.writeSmall(ctx, targets, tmpl, body, false, !packed)
		return err
	}
	_, _, err := s.client.writeVersion(ctx, targets, tmpl, next, false)
	return err
}

// statChunk returns the leading names that fit one stat request: at most maxStatNames
// names and about 256 KiB of them, well under rpc.MaxHeader.
func statChunk(names []string) []string {
	size := 0
	for i, n := range names {
		size += len(n) + 4
		if i == maxStatNames || (i > 0 && size > 256<<10) {
			return names[:i]
		}
	}
	return names
}
