package fd

import (
	"math/bits"
	"math/rand/v2"
	"sort"
	"time"
)

// Envelope is a message the caller must send to To.
type Envelope struct {
	To  string
	Msg Message
}

// Membership is the pure protocol state of one node: it does no I/O and reads no clock.
// Time arrives through Tick and Receive, and the caller sends what Ready returns. It is not
// safe for concurrent use; the Detector's run goroutine owns it.
type Membership struct {
	cfg      Config
	rng      *rand.Rand
	self     *entry
	members  map[string]*entry // by fd address, self included
	ring     []string          // sorted addresses of alive and suspect members, self included
	watched  map[string]bool   // ring predecessors this node monitors
	suspects map[string]bool   // members in state Suspect

	queue   []*broadcast // updates being piggybacked, fewest transmissions first
	fresh   []Member     // updates learned in this step, pushed to Fanout members at its end
	out     []Envelope
	events  []Event
	leaving bool

	lastTick, lastBeat, lastJoin, lastSweep, lastProbe, lastSync time.Time

	syncSoon     bool                 // sync at the next tick (we were paused)
	syncAnswered map[string]time.Time // when we last answered each requester's sync
	syncWindow   time.Time            // start of the current SyncInterval window of answers
	syncAnswers  int                  // answers sent in that window

	// forgotten keeps the last record of each member dropped after RetainDead, for
	// ForgetTombstones: a stale record that still says it is alive (from a node paused
	// longer than RetainDead) must not bring it back. Only a newer incarnation does.
	forgotten map[string]tombstone
	replyTo   string // the sender of the message being received (for corrections)
}

type tombstone struct {
	m  Member
	at time.Time
}

// maxTombstones bounds Membership.forgotten.
const maxTombstones = 8192

type entry struct {
	Member
	changed time.Time // when State last changed here
	heard   time.Time // last packet from this member (liveness evidence)
	// armed: a heartbeat arrived since we started watching this member, so its view agrees
	// that we are its successor. Until then its silence may mean that views still differ
	// (a join in flight), and we allow it unarmedFactor times longer before suspecting.
	armed bool
}

const unarmedFactor = 2

type broadcast struct {
	m     Member
	sends int
}

// NewMembership returns the protocol state of a node that knows only itself. seed drives the
// random choices (gossip targets), so a simulation is reproducible.
func NewMembership(cfg Config, now time.Time, seed uint64) *Membership {
	cfg = cfg.withDefaults()
	inc := cfg.Incarnation
	if inc == 0 {
		inc = uint64(now.UnixMicro())
	}
	self := &entry{Member: Member{Name: cfg.Name, Addr: cfg.Addr, RPCAddr: cfg.RPCAddr, HTTPAddr: cfg.HTTPAddr,
		Incarnation: inc, State: Alive}, changed: now, heard: now}
	m := &Membership{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), self: self,
		members: map[string]*entry{cfg.Addr: self}, watched: map[string]bool{}, suspects: map[string]bool{},
		syncAnswered: map[string]time.Time{}, forgotten: map[string]tombstone{}}
	// Syncs start at a random phase, so a cluster's syncs spread over the interval.
	m.lastSync = now.Add(-time.Duration(m.rng.Int64N(int64(cfg.SyncInterval))))
	m.rebuildRing(now)
	return m
}

// Self is this node's own record.
func (m *Membership) Self() Member { return m.self.Member }

// Members returns every known member (self included), sorted by address.
func (m *Membership) Members() []Member {
	out := make([]Member, 0, len(m.members))
	for _, e := range m.members {
		out = append(out, e.Member)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// Ready returns and clears the messages to send and the events that happened.
func (m *Membership) Ready() ([]Envelope, []Event) {
	out, ev := m.out, m.events
	m.out, m.events = nil, nil
	return out, ev
}

// Tick advances the protocol to now: joins, heartbeats, timeouts.
func (m *Membership) Tick(now time.Time) {
	if m.leaving {
		return
	}
	if !m.lastTick.IsZero() && now.Sub(m.lastTick) > m.cfg.PauseThreshold {
		// We were not running (stopped, starved): silence we measured is ours, not theirs.
		m.cfg.Logf("paused for %v, restarting silence timers", now.Sub(m.lastTick).Round(time.Millisecond))
		for _, e := range m.members {
			e.heard = now
			if e.State == Suspect {
				e.changed = now
			}
		}
		// Updates piggybacked while we were out have likely been retired: compare views now.
		m.syncSoon = true
	}
	m.lastTick = now
	if m.alone() && now.Sub(m.lastJoin) >= m.cfg.JoinRetry {
		m.lastJoin = now
		for _, a := range m.cfg.Introducers {
			if a != m.self.Addr {
				m.send(a, MsgJoin, nil)
			}
		}
	}
	if now.Sub(m.lastBeat) >= m.cfg.HeartbeatInterval {
		m.lastBeat = now
		for _, a := range m.successors() {
			m.send(a, MsgHeartbeat, m.piggyback())
		}
	}
	if now.Sub(m.lastProbe) >= m.cfg.DeadProbeInterval {
		m.lastProbe = now
		m.probeDead()
	}
	if m.syncSoon || now.Sub(m.lastSync) >= m.cfg.SyncInterval {
		m.syncSoon, m.lastSync = false, now
		m.sendSync()
	}
	m.checkTimeouts(now)
	m.flushFresh("")
}

// probeDead heartbeats one random failed member: if it is in fact alive on the other side of
// a healed partition, the two sides learn of each other again (it refutes, we rejoin it).
func (m *Membership) probeDead() {
	var dead []string
	for a, e := range m.members {
		if e.State == Failed {
			dead = append(dead, a)
		}
	}
	if len(dead) > 0 {
		sort.Strings(dead)
		m.send(dead[m.rng.IntN(len(dead))], MsgHeartbeat, nil)
	}
}

func (m *Membership) checkTimeouts(now time.Time) {
	for _, a := range sortedKeys(m.watched) {
		e := m.members[a]
		limit := m.cfg.SuspectTimeout
		if e != nil && !e.armed {
			limit *= unarmedFactor
		}
		if e != nil && e.State == Alive && now.Sub(e.heard) > limit {
			m.cfg.Logf("suspect %s (%s): silent for %v", e.Name, e.Addr, now.Sub(e.heard).Round(time.Millisecond))
			m.apply(now, Member{Name: e.Name, Addr: e.Addr, RPCAddr: e.RPCAddr, HTTPAddr: e.HTTPAddr,
				Incarnation: e.Incarnation, State: Suspect}, eager)
			m.send(e.Addr, MsgGossip, []Member{e.Member}) // let it refute at once
		}
	}
	for _, a := range sortedKeys(m.suspects) {
		if e := m.members[a]; now.Sub(e.changed) > m.cfg.SuspicionTimeout {
			f := e.Member
			f.State = Failed
			m.apply(now, f, eager)
		}
	}
	if now.Sub(m.lastSweep) < time.Second {
		return
	}
	m.lastSweep = now
	m.forgetSyncAnswers(now)
	for a, e := range m.members {
		if (e.State == Failed || e.State == Left) && now.Sub(e.changed) > m.cfg.RetainDead {
			delete(m.members, a)
			m.forget(now, e.Member)
		}
	}
	for a, t := range m.forgotten {
		if now.Sub(t.at) > m.cfg.ForgetTombstones {
			delete(m.forgotten, a)
		}
	}
}

// forget keeps a dropped member's last record as a tombstone (at most maxTombstones,
// the oldest going first).
func (m *Membership) forget(now time.Time, u Member) {
	if len(m.forgotten) >= maxTombstones {
		old, oldAt := "", now
		for a, t := range m.forgotten {
			if old == "" || t.at.Before(oldAt) {
				old, oldAt = a, t.at
			}
		}
		delete(m.forgotten, old)
	}
	m.forgotten[u.Addr] = tombstone{m: u, at: now}
}

// Receive handles one authenticated message.
func (m *Membership) Receive(now time.Time, msg *Message) {
	if m.leaving || msg.From.Addr == m.self.Addr {
		return
	}
	from := msg.From
	if from.State != Left {
		from.State = Alive // a sender speaks for itself: it is alive, or leaving
	}
	mode := eager
	if msg.Kind == MsgJoinAck || msg.Kind == MsgSyncAck {
		mode = piggyback // a whole membership list: pass it on, but at heartbeat pace
	}
	m.replyTo = from.Addr
	defer func() { m.replyTo = "" }()
	m.apply(now, from, mode)
	if e := m.members[from.Addr]; e != nil {
		if (e.State == Alive || e.State == Suspect) && from.Incarnation >= e.Incarnation {
			e.heard = now
			if msg.Kind == MsgHeartbeat {
				e.armed = true
			}
		}
		if e.State != Alive && e.Incarnation >= from.Incarnation {
			// The sender is suspected or declared dead here: tell it, so it refutes or rejoins.
			m.send(from.Addr, MsgGossip, []Member{e.Member})
		}
	}
	switch msg.Kind {
	case MsgSyncAck:
		m.mergeSyncAck(now, from.Addr, msg.Updates)
	default:
		for _, u := range msg.Updates {
			m.apply(now, u, mode)
		}
	}
	switch msg.Kind {
	case MsgJoin:
		m.answerJoin(from.Addr)
	case MsgSync:
		m.answerSync(now, from.Addr, msg.Digest)
	}
	m.flushFresh(from.Addr)
}

// Leave announces a voluntary leave to every member. After it the node sends nothing more.
func (m *Membership) Leave(now time.Time) {
	if m.leaving {
		return
	}
	m.self.Incarnation++
	m.self.State = Left
	m.self.changed = now
	for _, a := range m.ring {
		if a != m.self.Addr {
			m.send(a, MsgGossip, []Member{m.self.Member})
		}
	}
	m.leaving = true
	m.cfg.Logf("leaving the cluster")
}

func (m *Membership) answerJoin(to string) {
	for _, part := range m.chunks(m.Members(), len(m.Members())) {
		m.send(to, MsgJoinAck, part)
	}
}

// chunks splits ms into packets of at most max members that fit in MaxPacket bytes.
func (m *Membership) chunks(ms []Member, max int) [][]Member {
	var out [][]Member
	room := MaxPacket - EncodedSize(&Message{From: m.self.Member}) - 2
	for len(ms) > 0 {
		n, size := 0, 0
		for n < len(ms) && n < max && (n == 0 || size+memberSize(ms[n]) <= room) {
			size += memberSize(ms[n])
			n++
		}
		out = append(out, ms[:n])
		ms = ms[n:]
	}
	return out
}

// spread says how a change to our view is passed on.
type spread int

const (
	quiet     spread = iota // not at all
	piggyback               // on heartbeats only
	eager                   // pushed to Fanout members at once, and on heartbeats
)

// apply merges one record using incarnation precedence and reports whether it changed our view.
func (m *Membership) apply(now time.Time, u Member, mode spread) bool {
	if u.Addr == m.self.Addr {
		m.refute(now, u)
		return false
	}
	e := m.members[u.Addr]
	if e == nil {
		if t, ok := m.forgotten[u.Addr]; ok {
			if u.Incarnation <= t.m.Incarnation {
				// A stale record of a member we dropped as dead. Tell whoever sent it (if it is
				// the member itself, it refutes with a newer incarnation and comes back).
				if m.replyTo != "" && u.State != Failed && u.State != Left {
					m.send(m.replyTo, MsgGossip, []Member{t.m})
				}
				return false
			}
			delete(m.forgotten, u.Addr)
		}
		e = &entry{Member: u, changed: now, heard: now}
		m.members[u.Addr] = e
		if u.State == Suspect {
			m.suspects[u.Addr] = true
		}
		switch u.State {
		case Alive, Suspect:
			m.emit(Joined, u)
		}
		m.changed(now, u, mode)
		return true
	}
	if !supersedes(u, e.Member) {
		return false
	}
	old := e.State
	if u.State == Alive && u.Incarnation > e.Incarnation {
		e.Name, e.RPCAddr, e.HTTPAddr = u.Name, u.RPCAddr, u.HTTPAddr
	}
	e.Incarnation, e.State = u.Incarnation, u.State
	if old != u.State {
		e.changed = now
	}
	if e.State == Suspect {
		m.suspects[e.Addr] = true
	} else {
		delete(m.suspects, e.Addr)
	}
	if (old == Failed || old == Left) && u.State == Alive {
		e.heard = now
	}
	m.transition(old, e.Member)
	m.changed(now, e.Member, mode)
	return true
}

// supersedes is SWIM's precedence: a higher incarnation wins; at equal incarnation
// left/failed beat suspect, which beats alive.
func supersedes(u, cur Member) bool {
	if u.Incarnation != cur.Incarnation {
		if u.Incarnation < cur.Incarnation {
			return false
		}
		// A newer incarnation of a dead node only comes back through an alive record.
		return u.State == Alive || (cur.State != Failed && cur.State != Left)
	}
	return rank(u.State) > rank(cur.State)
}

func rank(s State) int { return [...]int{Alive: 0, Suspect: 1, Failed: 2, Left: 3}[s] }

func (m *Membership) transition(old State, e Member) {
	switch {
	case e.State == old:
	case e.State == Alive && old == Suspect:
		m.cfg.Logf("%s (%s) refuted suspicion (incarnation %d)", e.Name, e.Addr, e.Incarnation)
		m.emit(Refuted, e)
	case e.State == Alive:
		m.emit(Joined, e)
	case e.State == Suspect:
		m.emit(Suspected, e)
	case e.State == Failed:
		m.emit(FailedDetected, e)
	case e.State == Left:
		m.emit(LeftVoluntarily, e)
	}
}

func (m *Membership) emit(k EventKind, e Member) {
	switch k {
	case Joined:
		m.cfg.Logf("%s (%s) joined (incarnation %d)", e.Name, e.Addr, e.Incarnation)
	case Suspected:
		m.cfg.Logf("%s (%s) suspected (incarnation %d)", e.Name, e.Addr, e.Incarnation)
	case FailedDetected:
		m.cfg.Logf("%s (%s) failed (incarnation %d)", e.Name, e.Addr, e.Incarnation)
	case LeftVoluntarily:
		m.cfg.Logf("%s (%s) left (incarnation %d)", e.Name, e.Addr, e.Incarnation)
	}
	m.events = append(m.events, Event{Kind: k, Member: e})
}

// refute answers a record about ourselves that says we are not alive.
func (m *Membership) refute(now time.Time, u Member) {
	if u.State == Alive || u.Incarnation < m.self.Incarnation || m.leaving {
		return
	}
	m.self.Incarnation = u.Incarnation + 1
	m.cfg.Logf("refuting %s at incarnation %d with %d", u.State, u.Incarnation, m.self.Incarnation)
	m.changed(now, m.self.Member, eager)
	// Everyone may be counting down its suspicion timer: tell them all directly, not by
	// gossip. Refutations are rare, so n packets is cheap.
	for _, a := range m.ring {
		if a != m.self.Addr {
			m.send(a, MsgGossip, []Member{m.self.Member})
		}
	}
}

// seed adds members known from elsewhere (a simulation's bootstrap) without events or gossip.
func (m *Membership) seed(now time.Time, ms []Member) {
	for _, u := range ms {
		if u.Addr != m.self.Addr && m.members[u.Addr] == nil {
			m.members[u.Addr] = &entry{Member: u, changed: now, heard: now}
		}
	}
	m.rebuildRing(now)
}

func (m *Membership) changed(now time.Time, u Member, mode spread) {
	m.rebuildRing(now)
	if mode == quiet {
		return
	}
	for i, b := range m.queue {
		if b.m.Addr == u.Addr {
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			break
		}
	}
	m.queue = append([]*broadcast{{m: u}}, m.queue...)
	if mode == eager {
		m.fresh = append(m.fresh, u)
	}
}

// flushFresh pushes this step's new updates to Fanout random live members other than skip.
func (m *Membership) flushFresh(skip string) {
	if len(m.fresh) == 0 {
		return
	}
	fresh := m.fresh
	m.fresh = nil
	for _, a := range m.randomLive(m.cfg.Fanout, skip) {
		for _, part := range m.chunks(fresh, m.cfg.MaxPiggyback) {
			m.send(a, MsgGossip, part)
		}
	}
}

func (m *Membership) send(to string, k MsgKind, ups []Member) {
	m.out = append(m.out, Envelope{To: to, Msg: Message{Kind: k, From: m.self.Member, Updates: ups}})
}

// piggyback picks the least-sent queued updates and retires those sent often enough.
func (m *Membership) piggyback() []Member {
	if len(m.queue) == 0 {
		return nil
	}
	limit := m.cfg.RetransmitMult * bits.Len(uint(len(m.ring)+1))
	sort.SliceStable(m.queue, func(i, j int) bool { return m.queue[i].sends < m.queue[j].sends })
	all := make([]Member, len(m.queue))
	for i, b := range m.queue {
		all[i] = b.m
	}
	out := m.chunks(all, m.cfg.MaxPiggyback)[0]
	for _, b := range m.queue[:len(out)] {
		b.sends++
	}
	kept := m.queue[:0]
	for _, b := range m.queue {
		if b.sends < limit {
			kept = append(kept, b)
		}
	}
	m.queue = kept
	return out
}

func (m *Membership) alone() bool { return len(m.ring) <= 1 }

func (m *Membership) randomLive(n int, skip string) []string {
	var c []string
	for _, a := range m.ring {
		if a != m.self.Addr && a != skip {
			c = append(c, a)
		}
	}
	m.rng.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
	return c[:min(n, len(c))]
}

// rebuildRing recomputes the ring and the predecessors this node watches. A newly watched
// member gets a fresh silence timer.
func (m *Membership) rebuildRing(now time.Time) {
	m.ring = m.ring[:0]
	for a, e := range m.members {
		if e.State == Alive || e.State == Suspect {
			m.ring = append(m.ring, a)
		}
	}
	sort.Strings(m.ring)
	watched := map[string]bool{}
	for _, a := range m.neighbours(-1) {
		watched[a] = true
		if !m.watched[a] {
			m.members[a].heard, m.members[a].armed = now, false
		}
	}
	m.watched = watched
}

func (m *Membership) successors() []string { return m.neighbours(1) }

// neighbours returns up to Monitors ring members after (dir=1) or before (dir=-1) self.
func (m *Membership) neighbours(dir int) []string {
	n := len(m.ring)
	i := sort.SearchStrings(m.ring, m.self.Addr)
	if i >= n || m.ring[i] != m.self.Addr {
		return nil
	}
	var out []string
	for k := 1; k < n && k <= m.cfg.Monitors; k++ {
		out = append(out, m.ring[((i+dir*k)%n+n)%n])
	}
	return out
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
