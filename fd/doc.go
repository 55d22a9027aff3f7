/*
Package fd is IDunno's membership and failure detector: UDP heartbeats with the membership
list piggybacked on them, suspicion refuted by incarnation numbers, joins through introducers.

# The protocol

Every node has a record {name, addr, rpc and http addresses, incarnation, state}. A node's
identity is its fd address plus its incarnation; a restarted node starts with the current
time in microseconds as its incarnation, so it is always newer than its previous life.

Members are arranged in a ring sorted by address. Every HeartbeatInterval a node sends a
heartbeat to its Monitors successors, so each node is watched by Monitors predecessors
(with 4, any 3 simultaneous crashes leave every crashed node at least one live watcher
that was already watching it). A watcher that hears nothing for SuspectTimeout marks the
node suspect; the suspicion is pushed at once to Fanout random members and to the
suspect itself, and piggybacked on heartbeats RetransmitMult*log2(n) times. Every member
holding the suspicion for SuspicionTimeout declares the node failed. A live suspect refutes
by raising its incarnation and telling every member directly; precedence follows SWIM:
a higher incarnation wins, and at equal incarnation left > failed > suspect > alive.

A node joins by asking its introducers (all of them, again every JoinRetry while it is
alone); any one that answers sends its membership list. Leave announces state left to
every member. A node that finds its own tick delayed by more than PauseThreshold (it was
stopped or starved) restarts its silence timers instead of blaming others. Failed members
are probed now and then so that the two sides of a healed partition find each other.

Piggybacking reaches a node only while an update is being retransmitted, and nobody
watches a member on another's behalf: a node that misses every copy (it was stopped, cut
off, or lost them) would keep a stale view for good, heartbeat the wrong successors, and be
suspected by the watchers it no longer reaches. Anti-entropy closes that gap: every
SyncInterval (and at once after a detected pause) a node sends one random live member a
digest of its view: 32 buckets (a member falls in hash(addr) mod 32), each a hash of the
(addr, incarnation, state) of its alive and suspect members, self included. Dead records
are left out, since how long they are retained may differ from node to node. The receiver
answers with all its records, dead ones included, in the buckets where its digest differs,
at most once per requester per half SyncInterval and 4 times per SyncInterval in all. The
requester merges the answer by the usual precedence, but does not add dead members it does
not know (it may have forgotten them on purpose), and sends back the records where its own
view is newer. A converged cluster costs one packet of about 200-250 bytes (128 of them
the digest) per node per SyncInterval, and no answers.

# Layers

Membership is the pure core: Tick(now), Receive(now, msg), Leave(now), and Ready() for the
messages to send and the events that happened. Detector runs a Membership over a
Transport (UDPTransport, or a MemNetwork endpoint with loss, delay and partitions) on the
real clock and seals every packet with a Codec (HMAC-SHA256 keyed by the cluster secret).
Sim runs many Memberships on a fake clock for deterministic scenario tests and for the
1,000-node benchmark.

# Usage

	cfg := fd.DefaultConfig()
	cfg.Name, cfg.Addr, cfg.Secret = "node0", "10.0.0.1:7000", secret
	cfg.Introducers = []string{"10.0.0.1:7000", "10.0.0.2:7000"}
	cfg.Logf = logf
	d, err := fd.Start(cfg)
	if err != nil { ... }
	defer d.Leave()
	events, cancel := d.Subscribe(64) // never blocks the detector; see Subscribe
	defer cancel()
	for e := range events {
		if e.Kind == fd.FailedDetected { ... re-replicate, reassign ... }
	}

Members() is the authoritative view (self included; failed and left members stay listed for
RetainDead); events are notifications and may be dropped for a subscriber that falls
behind.
*/
package fd
