package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"idunno/rpc"
)

// FencedError is an order refused because it carried an old coordinator epoch, or because
// the node it went to coordinates itself. A coordinator that gets one steps down; a worker
// forgets that coordinator. It crosses the network as a value (fenceReply), not as text.
type FencedError struct {
	Epoch  uint64 `json:"epoch"`  // the epoch the order carried
	Newest uint64 `json:"newest"` // the highest epoch the refusing node has seen
	Reason string `json:"reason"`
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("sched: fenced: epoch %d refused (%s)", e.Epoch, e.Reason)
}

// IsFenced reports whether err is (or wraps) a *FencedError, or is a node's refusal that
// carries CodeFenced (methods whose reply has no room for the *FencedError itself).
func IsFenced(err error) bool {
	var f *FencedError
	return errors.As(err, &f) || rpc.CodeOf(err) == CodeFenced
}

// fenceReply rides in the Args of a refused epoch call, so that the caller gets the
// *FencedError back.
type fenceReply struct {
	Fenced *FencedError `json:"fenced"`
}

// Replication bounds.
const (
	maxBatch   = 512  // entries in one replication call
	maxPending = 8192 // entries queued for the standby; past it the standby gets a snapshot instead
)

// replicator makes a coordinator's journal entries durable without holding the scheduler's
// mutex. commit applies an entry, writes it to the local journal and queues it here; run
// (one goroutine per coordinator term, the only one that calls the standby) sends the queue
// in batches, so entries committed while one call is in flight go together in the next. A
// failed call, or a new standby, costs a snapshot (which holds every entry queued before
// it). When there is no other live node to be standby, an fsync of the journal makes the
// entries durable instead. Clients' changes wait (wait) until their entry is held; a
// worker's task-done entry does not: losing one only means the task runs again and writes
// the same bytes. With nothing to send, an empty batch every StandbyBeat is the
// standby's heartbeat. mu guards the fields below it.
type replicator struct {
	s     *Scheduler
	epoch uint64
	quit  chan struct{} // closed by halt
	kick  chan struct{} // wakes run (1-buffered)

	mu       sync.Mutex
	pending  []queued
	last     uint64 // highest seq committed in this term
	want     uint64 // highest seq a client waits for (without a standby, the disk syncs up to it)
	target   string // the standby ("" while there is no other live node)
	addr     string
	released [2]string // a former standby (name, address) to tell it no longer is one
	synced   bool      // target holds a snapshot and every entry sent since
	acked    uint64    // every entry up to acked is held by ackedBy, or on disk if ackedBy == ""
	ackedBy  string    //
	held     uint64    // every entry up to held is held by the current standby (0 until it is synced)
	removed  []string  // members the coordinator no longer counts toward a majority, for the standby
	replaced time.Time // when a standby was last replaced by another (or by none)
	lastSent time.Time // last call to target (a heartbeat is due StandbyBeat later)
	retryAt  time.Time // after a failed call, wait until then
	stopped  error     // why the replicator stopped (nil while running)
	changed  chan struct{}
}

// queued is a committed entry as JSON (encoded once, for the journal and the standby).
type queued struct {
	seq uint64
	raw json.RawMessage
}

func newReplicator(s *Scheduler, epoch, seq uint64) *replicator {
	return &replicator{s: s, epoch: epoch, quit: make(chan struct{}), kick: make(chan struct{}, 1),
		last: seq, changed: make(chan struct{})}
}

// enqueue queues a committed entry (seq, its JSON) for the standby. Called with s.mu held,
// in seq order.
func (r *replicator) enqueue(seq uint64, raw json.RawMessage) {
	r.mu.Lock()
	r.last = seq
	// Queued even while the standby is not synced: the snapshot that syncs it drops what it
	// holds (under s.mu), and what is committed after it must follow.
	if r.target != "" {
		if len(r.pending) >= maxPending {
			// The standby is far behind: a snapshot is cheaper than the queue.
			r.pending, r.synced = nil, false
		} else {
			r.pending = append(r.pending, queued{seq, raw})
		}
	}
	r.mu.Unlock()
	r.wake()
}

func (r *replicator) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// setTarget names the standby ("" for none). A new one needs a snapshot. Called with s.mu
// held.
func (r *replicator) setTarget(name, addr string) {
	r.mu.Lock()
	changed := name != r.target || addr != r.addr
	if changed {
		if r.target != "" && r.synced {
			r.released = [2]string{r.target, r.addr}
		}
		if r.target != "" {
			r.replaced = time.Now()
		}
		r.target, r.addr, r.synced, r.pending, r.held = name, addr, false, nil, 0
		r.retryAt = time.Time{}
	}
	r.mu.Unlock()
	if changed {
		r.wake()
	}
}

// setRemoved sets the members the standby is told not to count (Scheduler.removed).
// Called with s.mu held.
func (r *replicator) setRemoved(names []string) {
	r.mu.Lock()
	r.removed = names
	r.mu.Unlock()
}

// removedNow returns what setRemoved last set.
func (r *replicator) removedNow() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removed
}

// standby returns the standby that holds the journal so far ("" if none or not synced).
func (r *replicator) standby() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.synced {
		return r.target
	}
	return ""
}

// halt stops the replicator; waiters get why. Safe to call more than once.
func (r *replicator) halt(why error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped != nil {
		return
	}
	r.stopped = why
	close(r.quit)
	close(r.changed)
	r.changed = make(chan struct{})
}

// ack records that every entry up to seq is held (by the standby by, or on disk).
func (r *replicator) ack(seq uint64, by string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	moved := false
	if seq > r.acked {
		r.acked, r.ackedBy, moved = seq, by, true
	}
	if by != "" && by == r.target && seq > r.held {
		r.held, moved = seq, true
	}
	if moved {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// errNotConfirmed wraps why a change could not be confirmed: it may still take effect
// (CodeUnconfirmed).
var errNotConfirmed error = &codedError{CodeUnconfirmed, errors.New("sched: change not confirmed: it may or may not have taken effect; retry")}

// wait blocks until every entry up to seq is held, and returns the standby holding it (""
// when it is only on the coordinator's disk because no other node is live).
func (r *replicator) wait(ctx context.Context, seq uint64) (string, error) {
	return r.waitUntil(ctx, seq, true, func() (string, bool) { return r.ackedBy, r.acked >= seq })
}

// waitHeld blocks until the current standby holds every entry up to seq (not only the
// coordinator's disk), and returns it.
func (r *replicator) waitHeld(ctx context.Context, seq uint64) (string, error) {
	return r.waitUntil(ctx, seq, false, func() (string, bool) { return r.target, r.held >= seq && r.target != "" })
}

// durable finishes a wait that answered by (see wait): an entry only on this node's disk
// counts while the node sees no other live one (alive of them, itself included);
// otherwise one of those could take over without it, so it waits for the standby to hold
// it too.
func (r *replicator) durable(ctx context.Context, seq uint64, by string, alive int) (string, error) {
	if by != "" || alive <= 1 {
		return by, nil
	}
	return r.waitHeld(ctx, seq)
}

// waitUntil blocks until done (called with r.mu held) reports true, and returns what it
// names; disk: a waiter asks for an fsync of the journal when there is no standby.
func (r *replicator) waitUntil(ctx context.Context, seq uint64, disk bool, done func() (string, bool)) (string, error) {
	for {
		r.mu.Lock()
		if by, ok := done(); ok {
			r.mu.Unlock()
			return by, nil
		}
		if r.stopped != nil {
			why := r.stopped
			r.mu.Unlock()
			return "", fmt.Errorf("%w: %v", errNotConfirmed, why)
		}
		ch, target := r.changed, r.target
		if disk && seq > r.want {
			r.want = seq
		}
		r.mu.Unlock()
		r.wake()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", fmt.Errorf("%w: standby %q has not confirmed it (%v)", errNotConfirmed, target, ctx.Err())
		}
	}
}

// run sends entries to the standby until the replicator halts or the scheduler stops.
func (r *replicator) run() {
	defer r.s.wg.Done()
	t := time.NewTicker(r.s.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-r.s.stop:
			r.halt(errors.New("sched: node stopping"))
			return
		case <-r.quit:
			return
		case <-r.kick:
		case <-t.C:
		}
		for r.step() {
		}
	}
}

// step makes one call (or one fsync) if one is due, and reports whether another may be due
// at once.
func (r *replicator) step() bool {
	r.mu.Lock()
	target, addr, synced := r.target, r.addr, r.synced
	wait := time.Now().Before(r.retryAt)
	r.mu.Unlock()
	switch {
	case r.halted() || wait:
		return false
	case target == "":
		r.syncDisk()
		return false
	case !synced:
		r.release()
		return r.sendSnapshot(target, addr)
	}
	return r.sendBatch(target, addr)
}

func (r *replicator) halted() bool {
	select {
	case <-r.quit:
		return true
	default:
		return false
	}
}

// syncDisk makes every committed entry durable on the local disk when a client waits for
// one: there is no standby. (Task-done entries alone are not worth an fsync each.)
func (r *replicator) syncDisk() {
	r.mu.Lock()
	last, acked, want := r.last, r.acked, r.want
	r.mu.Unlock()
	if want <= acked {
		return
	}
	if err := r.s.journal.Sync(); err != nil {
		r.s.logf("sched: %v", err)
		r.backoff()
		return
	}
	r.ack(last, "")
}

// release tells a former standby that it no longer is one, before a new standby is synced:
// otherwise, within its heartbeat window, it would take over at once on a stale journal if
// the coordinator died. Best effort: a former standby that cannot be reached hears no more
// heartbeats either.
func (r *replicator) release() {
	r.mu.Lock()
	old := r.released
	r.released = [2]string{}
	r.mu.Unlock()
	if old[0] == "" {
		return
	}
	if err := r.call(old[1], ReplicateArgs{From: r.s.name, Release: true}); err != nil && IsFenced(err) {
		r.failed(old[0], err)
	}
}

// sendSnapshot sends the standby the whole state (and the job statistics) as of now.
func (r *replicator) sendSnapshot(target, addr string) bool {
	s := r.s
	s.mu.Lock()
	if s.role != roleCoordinator || s.st.Epoch != r.epoch {
		s.mu.Unlock()
		return false
	}
	snap := s.st.Clone()
	stats := s.statsSnapshot()
	r.mu.Lock()
	r.pending = r.pending[:0] // all in the snapshot; later entries queue from here
	r.mu.Unlock()
	s.mu.Unlock()
	if err := r.call(addr, ReplicateArgs{From: s.name, Snapshot: snap, Stats: stats, Removed: r.removedNow()}); err != nil {
		r.failed(target, err)
		return false
	}
	r.mu.Lock()
	ok := r.target == target && r.addr == addr
	if ok {
		r.synced = true
	}
	r.mu.Unlock()
	if ok {
		r.ack(snap.Seq, target)
		s.logf("sched: standby %s has the journal (entry %d)", target, snap.Seq)
	}
	return ok
}

// sendBatch sends the queued entries (at most maxBatch), or an empty heartbeat when one is due.
func (r *replicator) sendBatch(target, addr string) bool {
	r.mu.Lock()
	n := min(len(r.pending), maxBatch)
	batch := make([]json.RawMessage, n)
	for i, q := range r.pending[:n] {
		batch[i] = q.raw
	}
	lastSeq := uint64(0)
	if n > 0 {
		lastSeq = r.pending[n-1].seq
	}
	beat := time.Since(r.lastSent) >= r.s.cfg.StandbyBeat
	r.mu.Unlock()
	if n == 0 && !beat {
		return false
	}
	if err := r.call(addr, ReplicateArgs{From: r.s.name, Entries: batch, Removed: r.removedNow()}); err != nil {
		r.failed(target, err)
		return false
	}
	r.mu.Lock()
	ok := r.target == target && r.addr == addr && r.synced
	if ok && len(r.pending) >= n {
		r.pending = r.pending[n:]
	}
	more := ok && len(r.pending) > 0
	r.lastSent = time.Now()
	r.mu.Unlock()
	if ok && n > 0 {
		r.ack(lastSeq, target)
	}
	return more
}

func (r *replicator) call(addr string, a ReplicateArgs) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.s.cfg.ReplicateTimeout)
	defer cancel()
	_, err := r.s.callEpoch(ctx, addr, "sched.replicate", r.epoch, a, nil)
	return err
}

// failed handles a failed call: fencing makes the coordinator step down; anything else
// costs the standby a snapshot at the next try.
func (r *replicator) failed(target string, err error) {
	if IsFenced(err) {
		s := r.s
		s.mu.Lock()
		if s.role == roleCoordinator && s.st.Epoch == r.epoch {
			s.stepDown(err.Error())
		}
		s.mu.Unlock()
		return
	}
	r.mu.Lock()
	if r.target == target && r.synced {
		r.s.logf("sched: standby %s missed entries after %d: %v (it gets a snapshot)", target, r.acked, err)
	}
	if r.target == target {
		r.synced, r.pending = false, nil
	}
	r.mu.Unlock()
	r.backoff()
}

func (r *replicator) backoff() {
	r.mu.Lock()
	r.retryAt = time.Now().Add(r.s.cfg.Tick)
	r.mu.Unlock()
}

// durability is implemented by the replies of client changes: they say which standby holds
// the change, or that only the coordinator's disk does (the cluster has no other live node).
type durability interface{ setDurability(standby string) }

func (r *JobAddReply) setDurability(standby string) { r.Standby, r.NoStandby = standby, standby == "" }
func (c *ClusterInfo) setDurability(standby string) { c.Standby, c.NoStandby = standby, standby == "" }

// confirm waits until every change this coordinator has committed so far is held by the
// standby (or, with no other live node, on disk), at most AckTimeout. Called without s.mu.
func (s *Scheduler) confirm(ctx context.Context) (string, error) {
	s.mu.Lock()
	if s.role != roleCoordinator || s.co == nil {
		s.mu.Unlock()
		return "", fmt.Errorf("%w: %s stopped coordinating", errNotConfirmed, s.name)
	}
	r, seq := s.co.repl, s.st.Seq
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AckTimeout)
	defer cancel()
	standby, err := r.wait(ctx, seq)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	quiet := s.cfg.StandbyQuiet - time.Since(r.replaced)
	r.mu.Unlock()
	if quiet > 0 {
		select {
		case <-time.After(quiet):
		case <-ctx.Done():
			return "", fmt.Errorf("%w: the standby was just replaced (%v)", errNotConfirmed, ctx.Err())
		}
	}
	// While this call waited, the coordinator may have stepped down (a newer epoch took
	// over without what it committed).
	alive := s.mem.Alive()
	s.mu.Lock()
	still := s.role == roleCoordinator && s.co != nil && s.co.repl == r
	known := s.quorumKnown()
	s.mu.Unlock()
	if !still {
		return "", fmt.Errorf("%w: %s stopped coordinating", errNotConfirmed, s.name)
	}
	if !majorityOf(len(alive), known) {
		return "", fmt.Errorf("%w: %s sees %d of the %d members it counts alive (cut off in a minority?)",
			errNotConfirmed, s.name, len(alive), known)
	}
	// A change synced to disk while the node saw no other live one counts only while it
	// still sees none.
	return r.durable(ctx, seq, standby, len(alive))
}

// isRetryOf reports whether a job add request repeats the add of job j: the same name
// and idempotency key (JobSpec.Request). A client whose add was applied but not confirmed
// (errNotConfirmed) retries it with the same key, and must get the job it asked for rather
// than "name already in use". Called with s.mu held.
func (s *Scheduler) isRetryOf(j *JobState, req JobSpec) bool {
	return req.Request != "" && req.Request == j.Spec.Request
}

// ReplicateArgs carries journal entries (or a whole snapshot, with the job statistics the
// entries since the journal's start built) to the standby. Entries travel as the JSON the
// coordinator wrote to its journal, and the standby writes the same bytes to its own.
type ReplicateArgs struct {
	From     string                    `json:"from"`
	Snapshot *State                    `json:"snapshot,omitempty"`
	Stats    map[string]*StatsSnapshot `json:"stats,omitempty"`
	Entries  []json.RawMessage         `json:"entries,omitempty"`
	// Release: the coordinator has another standby now; the receiver stops being one.
	Release bool `json:"release,omitempty"`
	// Removed: the members the coordinator no longer counts toward a majority
	// (SchedConfig.RemoveAfter); the standby counts them out too while it holds them failed.
	Removed []string `json:"removed,omitempty"`
}

func (s *Scheduler) handleReplicate(epoch uint64, a ReplicateArgs) (struct{}, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenced(epoch); err != nil {
		return struct{}{}, s.maxEpoch, err
	}
	if s.role == roleCoordinator {
		return struct{}{}, s.maxEpoch, &FencedError{Epoch: epoch, Newest: s.maxEpoch,
			Reason: fmt.Sprintf("%s coordinates epoch %d", s.name, s.st.Epoch)}
	}
	if a.Release {
		if s.role == roleStandby && s.standbyOf == a.From {
			s.logf("sched: no longer the standby of coordinator %s", a.From)
			s.role, s.standbyOf, s.released, s.removed = roleFollower, "", true, nil
		}
		return struct{}{}, s.maxEpoch, nil
	}
	if a.Snapshot != nil {
		if err := a.Snapshot.validate(); err != nil {
			return struct{}{}, s.maxEpoch, err
		}
		if err := s.journal.ResetWithStats(a.Snapshot, a.Stats); err != nil {
			return struct{}{}, s.maxEpoch, err
		}
		s.st = a.Snapshot
		s.released = false
		s.stats = map[string]*JobStats{}
		for n, ss := range a.Stats {
			if _, ok := s.st.Jobs[n]; !ok || ss == nil {
				continue
			}
			st, err := ss.Restore()
			if err != nil {
				return struct{}{}, s.maxEpoch, err
			}
			s.stats[n] = st
		}
		if s.role != roleStandby || s.standbyOf != a.From {
			s.logf("sched: standby of coordinator %s (epoch %d)", a.From, epoch)
		}
	} else if s.role != roleStandby || s.standbyOf != a.From {
		return struct{}{}, s.maxEpoch, fmt.Errorf("sched: %s needs a snapshot first", s.name)
	}
	for _, raw := range a.Entries {
		e := &Entry{}
		if err := json.Unmarshal(raw, e); err != nil {
			return struct{}{}, s.maxEpoch, fmt.Errorf("sched: replicate: bad entry: %w", err)
		}
		if e.Seq <= s.st.Seq {
			continue
		}
		if err := s.st.Apply(e); err != nil {
			s.role = roleFollower
			// %v, not %w: an entry this journal cannot take (even one of an older epoch
			// than the journal's) means this node needs a snapshot, not that the
			// coordinator, whose epoch passed the check above, is fenced.
			return struct{}{}, s.maxEpoch, fmt.Errorf("sched: %s needs a snapshot: %v", s.name, err)
		}
		if err := s.journal.AppendEncoded(raw); err != nil {
			return struct{}{}, s.maxEpoch, err
		}
		s.observe(e)
	}
	s.role, s.standbyOf, s.lastBeat, s.removed = roleStandby, a.From, s.now(), a.Removed
	s.follow(a.From, s.lookupAddr(a.From), epoch)
	return struct{}{}, s.maxEpoch, nil
}

func (s *Scheduler) lookupAddr(name string) string {
	for _, p := range s.mem.Alive() {
		if p.Name == name {
			return p.RPCAddr
		}
	}
	return ""
}

// encodeFence puts a *FencedError inside err (if any) into a reply's Args.
func encodeFence(err error) json.RawMessage {
	var f *FencedError
	if !errors.As(err, &f) {
		return nil
	}
	b, _ := json.Marshal(fenceReply{Fenced: f})
	return b
}

// decodeFence returns the *FencedError a refused call's reply carries, if any.
func decodeFence(args json.RawMessage) *FencedError {
	if len(args) == 0 {
		return nil
	}
	var fr fenceReply
	if json.Unmarshal(args, &fr) != nil || fr.Fenced == nil {
		return nil
	}
	return fr.Fenced
}
