package fd

import (
	"testing"
	"time"
)

// syncPair returns two members of a bootstrapped n-node cluster (same view) and the time.
func syncPair(n int) (a, b *Membership, now time.Time) {
	s := NewSim(SimConfig{N: n, Seed: 1, Bootstrap: true})
	return s.Nodes[0].M, s.Nodes[1].M, s.Now
}

func syncMsg(from *Membership) *Message {
	return &Message{Kind: MsgSync, From: from.Self(), Digest: from.digest(syncBuckets)}
}

func sent(m *Membership, k MsgKind) (msgs []Message) {
	out, _ := m.Ready()
	for _, e := range out {
		if e.Msg.Kind == k {
			msgs = append(msgs, e.Msg)
		}
	}
	return msgs
}

func setState(m *Membership, now time.Time, addr string, st State) {
	m.members[addr].State = st
	m.rebuildRing(now)
}

func TestSyncSameViewsNoAnswer(t *testing.T) {
	a, b, now := syncPair(50)
	b.Receive(now, syncMsg(a))
	if got := sent(b, MsgSyncAck); len(got) != 0 {
		t.Fatalf("answered equal views with %d packets", len(got))
	}
}

// TestSyncIgnoresRetainedDead: a failed record one side still retains and the other has
// dropped is no difference worth a packet.
func TestSyncIgnoresRetainedDead(t *testing.T) {
	a, b, now := syncPair(50)
	for _, m := range []*Membership{a, b} {
		setState(m, now, SimAddr(9), Failed)
	}
	delete(b.members, SimAddr(9))
	b.Receive(now, syncMsg(a))
	a.Receive(now, syncMsg(b))
	if len(sent(a, MsgSyncAck))+len(sent(b, MsgSyncAck)) != 0 {
		t.Fatal("retention difference caused an answer")
	}
}

// TestSyncAnswersDifferingBuckets: the answer holds the records of the buckets that differ,
// dead ones included, and nothing else; it fits in packets.
func TestSyncAnswersDifferingBuckets(t *testing.T) {
	a, b, now := syncPair(200)
	setState(b, now, SimAddr(9), Failed)
	b.Receive(now, syncMsg(a))
	acks := sent(b, MsgSyncAck)
	want := addrHash(SimAddr(9)) % syncBuckets
	found := false
	c := NewCodec([]byte("k"))
	for _, msg := range acks {
		if n := len(c.Encode(&msg)); n > MaxPacket {
			t.Fatalf("packet of %d bytes", n)
		}
		for _, u := range msg.Updates {
			if addrHash(u.Addr)%syncBuckets != want {
				t.Fatalf("record %s of an equal bucket sent", u.Addr)
			}
			found = found || (u.Addr == SimAddr(9) && u.State == Failed)
		}
	}
	if !found {
		t.Fatalf("failed record not in the answer (%d packets)", len(acks))
	}
	// a merges it: 9 failed at a, and a's digest now equals b's.
	for i := range acks {
		a.Receive(now, &acks[i])
	}
	if a.members[SimAddr(9)].State != Failed {
		t.Fatal("answer not merged")
	}
	b.Receive(now.Add(time.Second), syncMsg(a))
	if len(sent(b, MsgSyncAck)) != 0 {
		t.Fatal("views still differ after merging")
	}
}

func TestSyncAnswerRateLimits(t *testing.T) {
	s := NewSim(SimConfig{N: 20, Seed: 1, Bootstrap: true})
	b, now := s.Nodes[1].M, s.Now
	setState(b, now, SimAddr(9), Failed) // b differs from everyone
	half := b.cfg.SyncInterval / 2
	answers := func(at time.Time, from ...int) int {
		for _, i := range from {
			b.Receive(at, syncMsg(s.Nodes[i].M))
		}
		n := map[string]bool{}
		out, _ := b.Ready()
		for _, e := range out {
			if e.Msg.Kind == MsgSyncAck {
				n[e.To] = true
			}
		}
		return len(n)
	}
	if got := answers(now, 0, 0, 0); got != 1 {
		t.Fatalf("a requester asking 3 times at once got %d answers", got)
	}
	if got := answers(now.Add(half-time.Millisecond), 0); got != 0 {
		t.Fatal("answered the same requester twice within SyncInterval/2")
	}
	if got := answers(now.Add(half), 0); got != 1 {
		t.Fatal("no answer to the same requester after SyncInterval/2")
	}
	// Global bound: 2 answers so far in this window.
	if got := answers(now.Add(half), 2, 3, 4, 5, 6, 7, 8); got != maxSyncAnswers-2 {
		t.Fatalf("many requesters: %d answers in one interval, want %d", got, maxSyncAnswers-2)
	}
	if got := answers(now.Add(b.cfg.SyncInterval), 10, 11, 12, 13, 14, 15); got != maxSyncAnswers {
		t.Fatalf("next interval: %d answers, want %d", got, maxSyncAnswers)
	}
}

// TestSyncAckMerge: unknown dead records are not added, unknown live ones are (without an
// eager push), and where our view is newer the answerer is corrected.
func TestSyncAckMerge(t *testing.T) {
	a, b, now := syncPair(10)
	self := a.Self()
	old := *b.members[SimAddr(5)]
	setState(a, now, SimAddr(5), Failed) // a is newer about 5
	ack := &Message{Kind: MsgSyncAck, From: b.Self(), Updates: []Member{
		{Name: "ghost", Addr: "10.9.9.9:7000", Incarnation: 3, State: Failed},
		{Name: "gone", Addr: "10.9.9.8:7000", Incarnation: 3, State: Left},
		{Name: "new", Addr: "10.9.9.7:7000", Incarnation: 3, State: Alive},
		old.Member, self,
	}}
	a.Receive(now, ack)
	if a.members["10.9.9.9:7000"] != nil || a.members["10.9.9.8:7000"] != nil {
		t.Fatal("unknown dead records added")
	}
	if e := a.members["10.9.9.7:7000"]; e == nil || e.State != Alive {
		t.Fatal("unknown live record not added")
	}
	out, events := a.Ready()
	var corrections []Member
	for _, e := range out {
		if e.Msg.Kind == MsgGossip {
			if e.To != b.Self().Addr {
				t.Fatalf("eager push to %s of a sync answer", e.To)
			}
			corrections = append(corrections, e.Msg.Updates...)
		}
	}
	if len(corrections) != 1 || corrections[0].Addr != SimAddr(5) || corrections[0].State != Failed {
		t.Fatalf("corrections %+v, want node 5 failed", corrections)
	}
	if len(events) != 1 || events[0].Kind != Joined {
		t.Fatalf("events %+v", events)
	}
}

// TestSyncSteadyStateTraffic: a converged cluster sends one digest per node per
// SyncInterval and no answers.
func TestSyncSteadyStateTraffic(t *testing.T) {
	s := newSim(30, 2, 0, true)
	s.Run(3 * time.Second)
	var syncs0, acks0 uint64
	for _, n := range s.Nodes {
		syncs0 += n.PacketsByKind[MsgSync]
		acks0 += n.PacketsByKind[MsgSyncAck]
	}
	s.Run(10 * time.Second)
	var syncs, acks uint64
	for _, n := range s.Nodes {
		syncs += n.PacketsByKind[MsgSync]
		acks += n.PacketsByKind[MsgSyncAck]
	}
	syncs, acks = syncs-syncs0, acks-acks0
	if syncs < 290 || syncs > 310 || acks != 0 {
		t.Fatalf("in 10 s of 30 nodes: %d syncs (want ~300), %d answers (want 0)", syncs, acks)
	}
	if size := EncodedSize(syncMsg(s.Nodes[0].M)); size > 250 {
		t.Fatalf("sync packet of %d bytes", size)
	}
}
