package fd

import (
	"sort"
	"time"
)

// Anti-entropy (push-pull state sync). Piggybacked updates are retransmitted a bounded number
// of times, so a node that misses them all (stopped, cut off, unlucky with losses) would keep
// a stale view for good: nobody gossips old news, and nobody watches a member on its behalf.
// Every SyncInterval a node therefore sends one random live member a MsgSync carrying a
// digest of its view; the receiver answers with its records wherever its own digest differs.

const (
	// syncBuckets is the number of digest buckets a node sends (128 bytes of hashes). With
	// n members an answer carries about n/syncBuckets records per differing bucket.
	syncBuckets = 32
	// maxSyncAnswers bounds the sync answers a node sends per SyncInterval, whoever asks:
	// a burst of syncs (or a replayed one) costs at most this many membership lists.
	maxSyncAnswers = 4
)

// digest summarises the live part of our view in n buckets. A member falls in bucket
// hash(addr) mod n; a bucket is the sum of its members' hashes of (addr, incarnation, state)
// (a sum, so the order members are visited in does not matter). Only alive and suspect
// members count, self included: records of dead members are retained for different times on
// different nodes, and that difference alone must not cause traffic.
func (m *Membership) digest(n int) []uint32 {
	sums := make([]uint64, n)
	for _, e := range m.members {
		if e.State == Alive || e.State == Suspect {
			a := addrHash(e.Addr)
			sums[a%uint64(n)] += recordHash(a, e.Incarnation, e.State)
		}
	}
	out := make([]uint32, n)
	for i, s := range sums {
		out[i] = uint32(mix64(s))
	}
	return out
}

// sendSync sends our digest to one random live member.
func (m *Membership) sendSync() {
	for _, a := range m.randomLive(1, "") {
		m.out = append(m.out, Envelope{To: a, Msg: Message{Kind: MsgSync, From: m.self.Member, Digest: m.digest(syncBuckets)}})
	}
}

// answerSync sends to every record we hold (dead ones included) in the buckets where
// their digest differs from ours, within the rate limits.
func (m *Membership) answerSync(now time.Time, to string, theirs []uint32) {
	n := len(theirs)
	if n == 0 {
		return
	}
	mine := m.digest(n)
	differs := make([]bool, n)
	any := false
	for i := range mine {
		differs[i] = mine[i] != theirs[i]
		any = any || differs[i]
	}
	if !any || !m.mayAnswerSync(now, to) {
		return
	}
	var recs []Member
	for _, e := range m.members {
		if differs[addrHash(e.Addr)%uint64(n)] {
			recs = append(recs, e.Member)
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Addr < recs[j].Addr })
	for _, part := range m.chunks(recs, len(recs)) {
		m.send(to, MsgSyncAck, part)
	}
}

// mayAnswerSync allows one answer per requester per SyncInterval/2 and maxSyncAnswers in
// all per SyncInterval.
func (m *Membership) mayAnswerSync(now time.Time, to string) bool {
	if now.Sub(m.syncWindow) >= m.cfg.SyncInterval {
		m.syncWindow, m.syncAnswers = now, 0
	}
	if last, ok := m.syncAnswered[to]; ok && now.Sub(last) < m.cfg.SyncInterval/2 {
		return false
	}
	if m.syncAnswers >= maxSyncAnswers {
		return false
	}
	m.syncAnswers++
	m.syncAnswered[to] = now
	return true
}

// forgetSyncAnswers drops rate-limit entries that no longer limit anything.
func (m *Membership) forgetSyncAnswers(now time.Time) {
	for a, t := range m.syncAnswered {
		if now.Sub(t) >= m.cfg.SyncInterval/2 {
			delete(m.syncAnswered, a)
		}
	}
}

// mergeSyncAck merges a sync answer like a join answer, except that failed and left
// records of members we do not know are not added: we may have forgotten them already
// (RetainDead), and re-learning them would only make the retention differ again. Records
// where our view is strictly newer are sent back to the answerer, so one exchange fixes
// both sides.
func (m *Membership) mergeSyncAck(now time.Time, from string, ups []Member) {
	var newer []Member
	for _, u := range ups {
		e := m.members[u.Addr]
		if e == nil && (u.State == Failed || u.State == Left) {
			continue
		}
		if e != nil && u.Addr != m.self.Addr && supersedes(e.Member, u) {
			newer = append(newer, e.Member)
			continue
		}
		m.apply(now, u, piggyback)
	}
	for _, part := range m.chunks(newer, m.cfg.MaxPiggyback) {
		m.send(from, MsgGossip, part)
	}
}

// addrHash is FNV-1a of an address: it picks the member's digest bucket.
func addrHash(addr string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(addr); i++ {
		h ^= uint64(addr[i])
		h *= 1099511628211
	}
	return h
}

// recordHash mixes a member's address hash, incarnation and state.
func recordHash(addr, inc uint64, st State) uint64 {
	return mix64(addr + mix64(inc^0x9e3779b97f4a7c15) + uint64(st)*0x632be59bd9b4e019)
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
