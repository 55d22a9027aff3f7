package sched

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"idunno/rpc"
	"idunno/sched/dispatch"
)

// SchedConfig gathers the scheduler's timing knobs and bounds, with defaults from
// DefaultSchedConfig. The dispatch core's (leases, fair time, task sizes) are the embedded
// dispatch.Config, documented there.
type SchedConfig struct {
	dispatch.Config
	Tick             time.Duration // how often roles, leases and standby are checked (50 ms)
	TakeoverGrace    time.Duration // a node that is not the standby waits this long before electing itself (2 s)
	PollEvery        time.Duration // a node without a coordinator asks the others for theirs this often (200 ms)
	StatusTimeout    time.Duration // deadline of one such status call (500 ms)
	StandbyFresh     time.Duration // the standby takes over at once only if the coordinator replicated to it this recently (3 s)
	StandbyBeat      time.Duration // with nothing to replicate, the coordinator sends the standby an empty batch this often (200 ms; well under StandbyFresh)
	PullEvery        time.Duration // a worker asks for work (and reports) at least this often (200 ms)
	Depth            int           // tasks a worker holds: one running, the rest prefetched (2)
	MaxBuffered      int           // completions a worker buffers while no coordinator answers (1,024)
	ReplicateTimeout time.Duration // deadline of one replication call to the standby (300 ms)
	AckTimeout       time.Duration // how long a client's change waits for the standby (or the disk) to hold it (5 s)
	// RemoveAfter: a member the coordinator has seen failed this long, while it saw a
	// majority, no longer counts toward the majority of the coordinator and its standby
	// (3 s; see Scheduler.quorumKnown). Members that crashed one after another then do
	// not hold up a later takeover until the detector forgets them (fd's RetainDead).
	RemoveAfter time.Duration
	// StandbyQuiet: after replacing its standby, a coordinator confirms no change for this
	// long (1 s), so that if the old standby fell silent in a partition, the detector has
	// also failed the other members cut off with it, and the majority check sees it.
	StandbyQuiet time.Duration
	CallTimeout  time.Duration // deadline of other scheduler calls (2 s)
	Writers      int           // result writes a worker keeps in flight (3)
	PutTimeout   time.Duration // deadline of one result write (retried); above twice SDFS's StatTimeout (15 s)
	RetryBackoff time.Duration // a failed task or result write is retried after this, times the attempt (200 ms)
	ReadTimeout  time.Duration // deadline of reading one task's result while assembling a job's (30 s)
	WriteTimeout time.Duration // deadline of writing a job's result, labels read included (1 min)
	// CostTau is the time constant of a job's measured cost per query (see
	// DefaultCostTau): long enough that a loaded machine's heavy-tailed task times average
	// out, short enough that a real change is followed within a few of it. 10 s.
	CostTau time.Duration
}

// DefaultSchedConfig returns the defaults.
func DefaultSchedConfig() SchedConfig {
	return SchedConfig{
		Config:           dispatch.DefaultConfig(),
		Tick:             50 * time.Millisecond,
		TakeoverGrace:    2 * time.Second,
		PollEvery:        200 * time.Millisecond,
		StatusTimeout:    500 * time.Millisecond,
		StandbyFresh:     3 * time.Second,
		StandbyBeat:      200 * time.Millisecond,
		PullEvery:        200 * time.Millisecond,
		Depth:            2,
		MaxBuffered:      1024,
		ReplicateTimeout: 300 * time.Millisecond,
		AckTimeout:       5 * time.Second,
		RemoveAfter:      3 * time.Second,
		StandbyQuiet:     time.Second,
		CallTimeout:      2 * time.Second,
		Writers:          3,
		PutTimeout:       15 * time.Second,
		RetryBackoff:     200 * time.Millisecond,
		ReadTimeout:      30 * time.Second,
		WriteTimeout:     time.Minute,
		CostTau:          DefaultCostTau,
	}
}

// Dispatch is the part of the config the dispatch core reads.
func (c SchedConfig) Dispatch() dispatch.Config { return c.Config }

type role int

const (
	roleFollower role = iota
	roleStandby
	roleCoordinator
)

func (r role) String() string { return [...]string{"follower", "standby", "coordinator"}[r] }

// Scheduler is one node's part of IDunno's scheduling: every node runs the worker executor,
// follows the coordinator's journal when it is the standby, and runs the coordinator when
// it is elected. Its mutex guards the role, the state and the coordinator's tables; the
// worker's queue has its own (see worker.go).
type Scheduler struct {
	name, addr string
	cfg        SchedConfig
	mem        Membership
	blobs      Blobs
	exec       Executor
	rpc        *rpc.Client
	logf       func(string, ...any)
	now        func() time.Time
	journal    *Journal

	mu        sync.Mutex
	st        *State
	role      role
	maxEpoch  uint64 // highest coordinator epoch seen anywhere
	coordName string // who this node believes coordinates ("" if none)
	coordAddr string
	lostSince time.Time // since when no live coordinator is known
	standbyOf string    // the coordinator whose journal this node receives
	lastBeat  time.Time // when the coordinator last replicated to this node
	// released: this node was a standby and its coordinator moved to another, so its
	// journal may lack changes the new standby confirmed (cleared by a new snapshot).
	released  bool
	waitNoted bool // the wait for a node holding the newest journal was logged
	// removed: members the coordinator no longer counts toward a majority (see
	// SchedConfig.RemoveAfter): its own choice while it coordinates, as of the last
	// replication call while this node is its standby, empty otherwise.
	removed  []string
	lastPoll time.Time
	co       *coordTables // non-nil while coordinator
	// stats holds each job's latencies, rates and costs, fed by every task-done entry this
	// node applies (as coordinator or standby), so a standby takes over with them.
	stats map[string]*JobStats

	w workerState
	// tt are the training jobs this node runs as coordinator (train_coord.go).
	tt trainTables

	stop chan struct{}
	wg   sync.WaitGroup
}

// Deps are what a Scheduler is built on.
type Deps struct {
	Name, RPCAddr string
	DataDir       string
	Membership    Membership
	Blobs         Blobs
	Executor      Executor
	Client        *rpc.Client
	Logf          func(string, ...any)
	Now           func() time.Time // nil: time.Now
}

// NewScheduler opens the node's journal (DATA_DIR/sched/journal) and registers the
// scheduler's RPC methods on srv. Start runs it.
func NewScheduler(d Deps, cfg SchedConfig, srv *rpc.Server) (*Scheduler, error) {
	j, st, err := OpenJournal(filepath.Join(d.DataDir, "sched"))
	if err != nil {
		return nil, err
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logf == nil {
		d.Logf = func(string, ...any) {}
	}
	s := &Scheduler{
		name: d.Name, addr: d.RPCAddr, cfg: cfg, mem: d.Membership, blobs: d.Blobs, exec: d.Executor,
		rpc: d.Client, logf: d.Logf, now: d.Now, journal: j, st: st, maxEpoch: st.Epoch,
		stop: make(chan struct{}), stats: map[string]*JobStats{},
	}
	s.lostSince = s.now()
	s.restoreStats(j.TakeRecovered())
	s.w.init(cfg)
	s.register(srv)
	if st.Seq > 0 {
		s.logf("sched: journal recovered: epoch %d, %d entries applied, %d jobs", st.Epoch, st.Seq, len(st.Jobs))
	}
	return s, nil
}

// Start runs the control loop and the worker.
func (s *Scheduler) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(6 + max(s.cfg.Writers, 1))
	go s.trainWorkerLoop(ctx)
	go func() { defer s.wg.Done(); <-s.stop; cancel() }()
	go s.controlLoop()
	go s.workerPullLoop()
	go s.workerRunLoop(ctx)
	go s.workerSideLoop(ctx)
	for i := 0; i < max(s.cfg.Writers, 1); i++ {
		go s.writerLoop(ctx)
	}
}

// Stop stops every goroutine and closes the journal.
func (s *Scheduler) Stop() {
	close(s.stop)
	s.w.wake()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.journal.Close()
}

func (s *Scheduler) controlLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.tick()
		}
	}
}

// tick runs one round of role keeping: a coordinator maintains its standby, leases and
// shares; any other node makes sure it knows a live coordinator, and takes over when the
// coordinator is gone and it is the one to replace it.
func (s *Scheduler) tick() {
	alive := s.mem.Alive()
	live := map[string]string{}
	for _, p := range alive {
		live[p.Name] = p.RPCAddr
	}
	s.mu.Lock()
	if s.role == roleCoordinator {
		s.coordTick(alive, live)
		s.trainTick()
		s.mu.Unlock()
		return
	}
	if _, ok := live[s.coordName]; ok && s.coordName != "" {
		s.mu.Unlock()
		return
	}
	now := s.now()
	if s.coordName != "" {
		s.logf("sched: coordinator %s is gone", s.coordName)
		s.coordName, s.coordAddr, s.lostSince = "", "", now
	}
	// The standby holds the newest journal: it takes over at once.
	if s.role == roleStandby && s.standbyOf == s.st.Coordinator && s.standbyOf != "" &&
		now.Sub(s.lastBeat) < s.cfg.StandbyFresh {
		if _, ok := live[s.standbyOf]; !ok {
			if !majorityOf(len(alive), s.quorumKnown()) {
				// Cut off in a minority (the coordinator may be alive on the majority's
				// side): taking over would make a second coordinator.
				s.mu.Unlock()
				return
			}
			// The detector's view alone is not enough: a node whose link just went down
			// sees every member fall silent at once, and may fail the coordinator a beat
			// before the others, so for a moment its view still holds a majority. Ask
			// the live nodes themselves: a majority must answer, and none may show that
			// this standby was replaced or that a newer coordinator exists.
			coord := s.standbyOf
			s.lastPoll = now
			s.mu.Unlock()
			sts := s.pollStatus(alive)
			s.mu.Lock()
			if s.role == roleStandby && s.standbyOf == coord && s.coordName == "" {
				ok, why := standbyMayTakeOver(s.name, s.st.Epoch, s.st.Seq, sts, s.quorumKnown())
				if ok {
					s.takeOver("standby of failed coordinator " + coord)
					s.mu.Unlock()
					return
				}
				if !s.waitNoted {
					s.waitNoted = true
					s.logf("sched: standby of %s, not taking over: %s", coord, why)
				}
			}
			s.mu.Unlock()
			return
		}
	}
	if now.Sub(s.lastPoll) < s.cfg.PollEvery {
		s.mu.Unlock()
		return
	}
	s.lastPoll = now
	lost := now.Sub(s.lostSince)
	s.mu.Unlock()

	sts := s.pollStatus(alive)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role == roleCoordinator || s.coordName != "" {
		return
	}
	var best *StatusReply
	for i := range sts {
		r := &sts[i]
		if r.Role == roleCoordinator.String() && r.Epoch >= s.maxEpoch && (best == nil || r.Epoch > best.Epoch) {
			best = r
		}
	}
	if best != nil {
		s.follow(best.Name, live[best.Name], best.Epoch)
		return
	}
	if lost < s.cfg.TakeoverGrace || !s.majority(alive) {
		return
	}
	// No coordinator anywhere: the node with the newest journal takes over (ties: lowest
	// name). Only when every live node answered: a node that did not may be the coordinator
	// (slow, not dead), and only the journal holders (the standby) know the jobs.
	if len(sts) < len(alive) {
		return
	}
	// Only a journal of the newest epoch anyone has seen, kept by a node that was not
	// released as standby, can hold every change acknowledged in that epoch: the
	// coordinator's and its standby's. A node with an older one (a worker, or a node cut
	// off from them) taking over would drop those changes when it won on its higher epoch,
	// so without such a node nobody takes over: the coordinator or the standby must come
	// back (a restart recovers its journal from disk).
	newest := s.maxEpoch
	for _, r := range sts {
		newest = max(newest, r.Epoch, r.Seen)
	}
	if s.st.Epoch < newest || s.released {
		if !s.waitNoted {
			s.waitNoted = true
			s.logf("sched: no coordinator, and this node's journal (epoch %d%s) may lack changes of epoch %d: waiting for a node that holds them",
				s.st.Epoch, map[bool]string{true: ", released as standby"}[s.released], newest)
		}
		return
	}
	me := StatusReply{Name: s.name, Epoch: s.st.Epoch, Seq: s.st.Seq}
	for _, r := range sts {
		if r.Name == s.name || r.Epoch < newest || r.Released {
			continue
		}
		if r.Epoch > me.Epoch || (r.Epoch == me.Epoch && (r.Seq > me.Seq || (r.Seq == me.Seq && NameLess(r.Name, me.Name)))) {
			return
		}
	}
	s.takeOver("no coordinator among the live nodes")
}

// standbyMayTakeOver decides whether the standby self, whose journal is of epoch
// journalEpoch up to entry journalSeq and whose detector has failed its coordinator, may
// take over, from the status answers of the nodes it sees alive (itself included) and the
// number of members it counts. It may only when a majority of those members answered (it
// is not cut off, whatever its view says), none of them coordinates (the coordinator, or a
// newer one, is reachable after all), none has seen an epoch newer than its journal, and
// none holds more entries of its epoch (its coordinator replaced it by a standby that may
// hold confirmed changes it lacks; a stale standby that holds no more does not count).
func standbyMayTakeOver(self string, journalEpoch, journalSeq uint64, answers []StatusReply, known int) (bool, string) {
	if !majorityOf(len(answers), known) {
		return false, fmt.Sprintf("only %d of the %d members it knows answered (cut off?)", len(answers), known)
	}
	for _, r := range answers {
		if r.Name == self {
			continue
		}
		switch {
		case r.Role == roleCoordinator.String():
			return false, fmt.Sprintf("%s coordinates epoch %d", r.Name, r.Epoch)
		case r.Epoch > journalEpoch || r.Seen > journalEpoch:
			return false, fmt.Sprintf("%s has seen epoch %d, newer than this journal's %d", r.Name, max(r.Epoch, r.Seen), journalEpoch)
		case r.Epoch == journalEpoch && r.Seq > journalSeq:
			return false, fmt.Sprintf("%s holds entries of epoch %d up to %d, this journal only to %d (a newer standby?)", r.Name, r.Epoch, r.Seq, journalSeq)
		}
	}
	return true, ""
}

func (s *Scheduler) follow(name, addr string, epoch uint64) {
	if epoch > s.maxEpoch {
		s.maxEpoch = epoch
	}
	s.waitNoted = false
	if name != s.coordName {
		s.logf("sched: following coordinator %s (epoch %d)", name, epoch)
	}
	s.coordName, s.coordAddr = name, addr
}

// majority reports whether alive (this node's live view, itself included) holds more than
// half the members the view knows. A node cut off in a minority neither takes over nor
// confirms a change: the majority's side may elect a coordinator whose journal lacks it.
// (The detector forgets failed members after its RetainDead, so a minority cut off for
// longer than that counts itself a majority again.)
func (s *Scheduler) majority(alive []Peer) bool {
	return majorityOf(len(alive), s.mem.Known())
}

// majorityOf reports whether alive members are more than half of known (any number, when
// the view knows no one).
func majorityOf(alive, known int) bool { return known == 0 || 2*alive > known }

// quorumKnown is the number of members the majority of the coordinator and its standby is
// taken of: those the detector knows, but the ones the coordinator removed (it saw them
// failed for SchedConfig.RemoveAfter while it saw a majority) that this node also holds
// failed. Only the coordinator decides a removal, and only while it sees a majority, so
// members cut off from it are never removed, and a node in a minority that lost them all at
// once still counts them; but members that crashed one after another do not hold up a
// later takeover until the detector forgets them. Called with s.mu held.
func (s *Scheduler) quorumKnown() int {
	k := s.mem.Known()
	if len(s.removed) == 0 || s.role == roleFollower {
		return k
	}
	failed := map[string]bool{}
	for _, n := range s.mem.Failed() {
		failed[n] = true
	}
	for _, n := range s.removed {
		if failed[n] && n != s.name {
			k--
		}
	}
	return k
}

// removals decides which failed members a coordinator no longer counts toward its
// majority: those down for at least after since it first saw them failed (downSince, kept
// up to date here), and none while it does not see a majority of what it counts now.
func removals(downSince map[string]time.Time, failed []string, now time.Time, after time.Duration,
	prev []string, alive, known int) []string {
	seen := map[string]bool{}
	for _, n := range failed {
		seen[n] = true
		if _, ok := downSince[n]; !ok {
			downSince[n] = now
		}
	}
	for n := range downSince {
		if !seen[n] {
			delete(downSince, n)
		}
	}
	removedBefore := map[string]bool{}
	for _, n := range prev {
		removedBefore[n] = true
	}
	// Members removed before stay removed while they are still failed (one that comes
	// back alive counts again). New ones are removed only while the coordinator sees a
	// majority of what it counts now: members cut off with it in a minority never are.
	var out, fresh []string
	for n, t := range downSince {
		switch {
		case removedBefore[n]:
			out = append(out, n)
		case now.Sub(t) >= after:
			fresh = append(fresh, n)
		}
	}
	if majorityOf(alive, known-len(out)) {
		out = append(out, fresh...)
	}
	sort.Slice(out, func(i, j int) bool { return NameLess(out[i], out[j]) })
	return out
}

// pollStatus asks every live node for its role and journal position, in parallel.
func (s *Scheduler) pollStatus(alive []Peer) []StatusReply {
	var mu sync.Mutex
	var out []StatusReply
	var wg sync.WaitGroup
	for _, p := range alive {
		wg.Add(1)
		go func(p Peer) {
			defer wg.Done()
			if p.Name == s.name {
				mu.Lock()
				out = append(out, s.status())
				mu.Unlock()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatusTimeout)
			defer cancel()
			var r StatusReply
			if err := s.rpc.CallJSON(ctx, p.RPCAddr, "sched.status", struct{}{}, &r); err == nil {
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return NameLess(out[i].Name, out[j].Name) })
	return out
}

// StatusReply is a node's scheduling role and journal position.
type StatusReply struct {
	Name        string `json:"name"`
	Role        string `json:"role"`
	Epoch       uint64 `json:"epoch"`
	Seq         uint64 `json:"seq"`
	Coordinator string `json:"coordinator"`
	CoordAddr   string `json:"coord_addr"`
	Phase       Phase  `json:"phase"`
	// Seen is the highest coordinator epoch the node has seen (its journal may be older);
	// Released says it was a standby its coordinator replaced. Either way a node whose
	// journal is not of the newest epoch, or was released, cannot take over.
	Seen     uint64 `json:"seen,omitempty"`
	Released bool   `json:"released,omitempty"`
}

func (s *Scheduler) status() StatusReply {
	if s.role == roleCoordinator {
		return StatusReply{Name: s.name, Role: s.role.String(), Epoch: s.st.Epoch, Seq: s.st.Seq,
			Coordinator: s.name, CoordAddr: s.addr, Phase: s.st.Phase}
	}
	return StatusReply{Name: s.name, Role: s.role.String(), Epoch: s.st.Epoch, Seq: s.st.Seq,
		Coordinator: s.coordName, CoordAddr: s.coordAddr, Phase: s.st.Phase, Seen: s.maxEpoch, Released: s.released}
}

// Status returns this node's scheduling role and journal position.
func (s *Scheduler) Status() StatusReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status()
}

// fenced checks a coordinator's epoch against the highest seen; a newer one makes this
// node step down if it coordinates.
func (s *Scheduler) fenced(epoch uint64) error {
	if epoch < s.maxEpoch {
		return &FencedError{Epoch: epoch, Newest: s.maxEpoch, Reason: fmt.Sprintf("%s has seen epoch %d", s.name, s.maxEpoch)}
	}
	if epoch > s.maxEpoch {
		s.maxEpoch = epoch
	}
	if s.role == roleCoordinator && epoch > s.st.Epoch {
		s.stepDown(fmt.Sprintf("a coordinator of epoch %d exists", epoch))
	}
	return nil
}

// handleEpoch registers a JSON method whose request and reply carry a coordinator epoch.
func handleEpoch[A, R any](srv *rpc.Server, method string, f func(epoch uint64, a A) (R, uint64, error)) {
	srv.Handle(method, func(ctx context.Context, req *rpc.Message) (*rpc.Message, error) {
		var a A
		if err := json.Unmarshal(req.Args, &a); err != nil {
			return nil, fmt.Errorf("sched: %s: bad arguments: %w", method, err)
		}
		r, ep, err := f(req.Epoch, a)
		if err != nil {
			return &rpc.Message{Err: err.Error(), Code: rpc.CodeOf(err), Epoch: ep, Args: encodeFence(err)}, nil
		}
		raw, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		return &rpc.Message{Args: raw, Epoch: ep}, nil
	})
}

// handleEpochBody is handleEpoch for methods whose bulk data travels in the message body
// (not JSON-encoded, up to rpc.MaxBody), both ways.
func handleEpochBody[A, R any](srv *rpc.Server, method string, f func(epoch uint64, a A, body []byte) (R, []byte, uint64, error)) {
	srv.Handle(method, func(ctx context.Context, req *rpc.Message) (*rpc.Message, error) {
		var a A
		if err := json.Unmarshal(req.Args, &a); err != nil {
			return nil, fmt.Errorf("sched: %s: bad arguments: %w", method, err)
		}
		r, body, ep, err := f(req.Epoch, a, req.Body)
		if err != nil {
			return &rpc.Message{Err: err.Error(), Code: rpc.CodeOf(err), Epoch: ep}, nil
		}
		raw, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		return &rpc.Message{Args: raw, Epoch: ep, Body: body}, nil
	})
}

// callEpochBody is callEpoch with a request body; it returns the reply's body.
func (s *Scheduler) callEpochBody(ctx context.Context, addr, method string, epoch uint64, args any, body []byte, reply any) ([]byte, uint64, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.rpc.Call(ctx, addr, &rpc.Message{Method: method, Args: raw, Epoch: epoch, Body: body})
	if resp != nil && err == nil && reply != nil {
		if err := json.Unmarshal(resp.Args, reply); err != nil {
			return nil, resp.Epoch, fmt.Errorf("sched: %s: bad reply: %w", method, err)
		}
	}
	if resp != nil {
		return resp.Body, resp.Epoch, err
	}
	return nil, 0, err
}

// callEpoch calls a method with an epoch and decodes the reply; it returns the reply's epoch.
// A refusal for fencing comes back as a *FencedError.
func (s *Scheduler) callEpoch(ctx context.Context, addr, method string, epoch uint64, args, reply any) (uint64, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return 0, err
	}
	resp, err := s.rpc.Call(ctx, addr, &rpc.Message{Method: method, Args: raw, Epoch: epoch})
	if resp != nil && err != nil && rpc.IsRemote(err) {
		if f := decodeFence(resp.Args); f != nil {
			return resp.Epoch, f
		}
	}
	if resp != nil && err == nil && reply != nil {
		if err := json.Unmarshal(resp.Args, reply); err != nil {
			return resp.Epoch, fmt.Errorf("sched: %s: bad reply: %w", method, err)
		}
	}
	if resp != nil {
		return resp.Epoch, err
	}
	return 0, err
}

func (s *Scheduler) register(srv *rpc.Server) {
	rpc.HandleJSON(srv, "sched.status", func(ctx context.Context, _ struct{}) (StatusReply, error) {
		return s.Status(), nil
	})
	handleEpoch(srv, "sched.replicate", s.handleReplicate)
	handleEpoch(srv, "sched.pull", s.handlePull)
	handleEpoch(srv, "sched.train.pull", s.handleTrainPull)
	handleEpochBody(srv, "sched.train.state", s.handleTrainState)
	handleEpochBody(srv, "sched.train.push", s.handleTrainPush)
	s.registerClientAPI(srv)
}
