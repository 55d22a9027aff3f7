package sched

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"sync"
	"time"
	"unsafe"

	"idunno/kernel/onnx"
	"idunno/sched/train"
)

// The coordinator is the parameter server of every training job: it holds the master
// weights and optimizer state of the job's current step, hands the step's shards to
// workers, sums their gradients in shard order when all are back, applies the optimizer
// step, journals the step, and checkpoints to SDFS. A new coordinator resumes each job from
// its last checkpoint and recomputes the steps after it (the same bytes).

// shardLease is a shard handed to a worker.
type shardLease struct {
	worker string
	start  time.Time
}

// trainRun is the coordinator's soft state of one training job.
type trainRun struct {
	mu       sync.Mutex
	spec     TrainSpec
	eng      *train.Engine
	ready    bool
	err      error
	step     int
	nbytes   int    // bytes of the model's parameters (float32)
	state    []byte // the encoded state after stateStep steps, made when a worker asks for it
	stateAt  int
	updateAt int // the step whose reduced update the engine holds (-1: none)
	results  map[int]*ShardPush
	partial  map[partKey]*partialPush // results arriving in chunks
	leases   map[int][]shardLease
	durs     []float64 // recent shard seconds (straggler detection)
	twin     float64   // the straggler bound's factor now (twinBound); 0 means StragglerFactor
	busy     float64   // worker-seconds spent (fair share between training jobs)
	start    time.Time
	reducing bool
}

// trainTables are the coordinator's training runs, and the workers waiting for a shard.
// Lock order: qmu, then mu, then a run's mu; cmu is taken alone.
type trainTables struct {
	mu   sync.Mutex
	runs map[string]*trainRun

	qmu     sync.Mutex
	waiters []*pullWaiter // pulls waiting for a shard, in arrival order

	cmu     sync.Mutex
	changed chan struct{} // closed (and replaced) when a shard may have come free
}

// pullWaiter is a worker's pull waiting in the queue for a shard.
type pullWaiter struct {
	worker string
	gone   bool // a newer pull of the same worker replaced it
}

// TrainPullWait is how long a pull waits on the coordinator for a shard to come free
// before it is answered empty (with Again set), well under the worker's 5 s deadline.
// Waiting pulls are served in arrival order: a worker that just pushed a result queues
// behind the workers already waiting, so a worker that joins or restarts gets shards in
// its turn instead of losing every race to the workers that finish a shard and pull again
// at once; and a free shard goes to a waiting worker at once, not at its next poll.
const TrainPullWait = time.Second

// trainPullRecheck: a waiting pull looks again this often even without a notification
// (shards of a dead or silent holder and straggler twins come free with time).
const trainPullRecheck = 50 * time.Millisecond

// signal returns the channel closed at the next notify.
func (t *trainTables) signal() <-chan struct{} {
	t.cmu.Lock()
	defer t.cmu.Unlock()
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	return t.changed
}

// notify wakes the waiting pulls: a shard may have come free (a new step, a run ready, a
// lease released), or the runs changed.
func (t *trainTables) notify() {
	t.cmu.Lock()
	defer t.cmu.Unlock()
	if t.changed != nil {
		close(t.changed)
	}
	t.changed = make(chan struct{})
}

// enqueue adds w behind the waiting pulls; an older pull of the same worker (a worker
// computes one shard at a time, so that pull's worker gave up on it, or restarted) is
// dropped.
func (t *trainTables) enqueue(w *pullWaiter) {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	for _, o := range t.waiters {
		if o.worker == w.worker {
			o.gone = true
		}
	}
	t.waiters = append(t.waiters, w)
}

// dequeue removes w from the waiting pulls.
func (t *trainTables) dequeue(w *pullWaiter) {
	t.qmu.Lock()
	for i, o := range t.waiters {
		if o == w {
			t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
			break
		}
	}
	t.qmu.Unlock()
	t.notify() // the next in line may take a shard
}

// tryHead leases a shard to w if w is the first waiting pull (replaced pulls are skipped):
// of the run furthest behind its fair share that has one. some reports that training runs
// exist (without any, a pull is answered at once).
func (t *trainTables) tryHead(w *pullWaiter, alive map[string]bool, now time.Time) (o ShardOrder, ok, some bool) {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	for len(t.waiters) > 0 && t.waiters[0].gone && t.waiters[0] != w {
		t.waiters = t.waiters[1:]
	}
	names, runs := t.fairOrder()
	if len(names) == 0 || w.gone || len(t.waiters) == 0 || t.waiters[0] != w {
		return ShardOrder{}, false, len(names) > 0
	}
	for _, n := range names {
		if o, ok := runs[n].lease(w.worker, alive, now); ok {
			o.Job = n
			return o, true, true
		}
	}
	return ShardOrder{}, false, true
}

// fairOrder is the runs' names, the one furthest behind its fair share (least worker
// time) first, and the runs.
func (t *trainTables) fairOrder() ([]string, map[string]*trainRun) {
	t.mu.Lock()
	names := make([]string, 0, len(t.runs))
	for n := range t.runs {
		names = append(names, n)
	}
	runs := t.runs
	t.mu.Unlock()
	busy := make(map[string]float64, len(names))
	for _, n := range names {
		r := runs[n]
		r.mu.Lock()
		busy[n] = r.busy
		r.mu.Unlock()
	}
	sort.Slice(names, func(i, j int) bool {
		return busy[names[i]] < busy[names[j]] || (busy[names[i]] == busy[names[j]] && names[i] < names[j])
	})
	return names, runs
}

// leaseNext leases job's next shard to worker when job is the first run, in fair order
// (tryHead's), with a shard free.
func (t *trainTables) leaseNext(job, worker string, alive map[string]bool, now time.Time) (ShardOrder, bool) {
	names, runs := t.fairOrder()
	for _, n := range names {
		if n == job {
			o, ok := runs[n].lease(worker, alive, now)
			o.Job = n
			return o, ok
		}
		if runs[n].free(alive, now) {
			return ShardOrder{}, false
		}
	}
	return ShardOrder{}, false
}

// release drops worker's leases on the shards of every run: it pulls again, so it holds
// none (a worker computes one shard at a time). A worker killed and restarted under the
// same name is alive to the failure detector all along; without this the shard its
// previous life held would wait for the straggler bound (or a minute) and never go back
// to it.
func (t *trainTables) release(worker string) {
	t.mu.Lock()
	runs := make([]*trainRun, 0, len(t.runs))
	for _, r := range t.runs {
		runs = append(runs, r)
	}
	t.mu.Unlock()
	freed := false
	for _, r := range runs {
		r.mu.Lock()
		freed = r.release(worker) || freed
		r.mu.Unlock()
	}
	if freed {
		t.notify()
	}
}

// release drops worker's leases on the current step's shards (r.mu held) and reports
// whether it held any.
func (r *trainRun) release(worker string) bool {
	freed := false
	for k, ls := range r.leases {
		kept := ls[:0]
		for _, l := range ls {
			if l.worker == worker {
				freed = true
				continue
			}
			kept = append(kept, l)
		}
		if len(kept) == 0 {
			delete(r.leases, k)
		} else {
			r.leases[k] = kept
		}
	}
	return freed
}

// ShardOrder is a shard given to a worker.
type ShardOrder struct {
	Job   string     `json:"job,omitempty"`
	Spec  *TrainSpec `json:"spec,omitempty"`
	Step  int        `json:"step"`
	Shard int        `json:"shard"`
	// Again: no shard came free while the pull waited (TrainPullWait); ask again at once.
	Again bool `json:"again,omitempty"`
}

// TrainPullArgs asks for a shard.
type TrainPullArgs struct {
	Worker string `json:"worker"`
}

// Parameters and shard results travel in chunks of at most TrainChunk bytes, each in one
// RPC body with its own deadline and a CRC-32C, so a model's size is not bounded by one
// RPC body; MaxTrainBytes bounds the parameters of a model trained on the cluster.
const (
	TrainChunk    = 56 << 20
	MaxTrainBytes = 1 << 31
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StateArgs asks for a chunk of a job's state: Kind "state" is the whole state after Step
// steps (a checkpoint's encoding), Kind "update" the reduced update of step Step (gradient
// sum then batch statistics, float32 LE); Limit bytes (0 or more than TrainChunk:
// TrainChunk) from Offset.
type StateArgs struct {
	Job    string `json:"job"`
	Kind   string `json:"kind"`
	Step   int    `json:"step"`
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// StateReply describes the chunk in the reply's body: the size of the whole, the chunk's
// offset and its CRC-32C.
type StateReply struct {
	Bytes  int    `json:"bytes"`
	Offset int    `json:"offset"`
	CRC    uint32 `json:"crc"`
}

// TrainPushReply answers a shard result: Committed when it completed its step and the step
// is committed; Sole when it was the step's only shard (the worker's replica then takes the
// step itself instead of fetching the update).
type TrainPushReply struct {
	Committed bool `json:"committed,omitempty"`
	Sole      bool `json:"sole,omitempty"`
	// Next: the next step's shard, leased to the worker whose replica just took the step
	// (see handleTrainPush).
	Next *ShardOrder `json:"next,omitempty"`
}

// partKey names a result arriving in chunks: one per shard and worker.
type partKey struct {
	shard  int
	worker string
}

// partialPush is a result being assembled; chunks come in order.
type partialPush struct {
	buf []byte
	got int
}

// ShardPush is a worker's result for one shard.
type ShardPush struct {
	Job     string  `json:"job"`
	Step    int     `json:"step"`
	Shard   int     `json:"shard"`
	Worker  string  `json:"worker"`
	Grads   []byte  `json:"-"` // in the message body, then Stats
	Stats   []byte  `json:"-"`
	NGrads  int     `json:"ngrads"` // bytes of Grads in the body
	N       int     `json:"n"`
	Loss    float64 `json:"loss"`
	Correct int64   `json:"correct"`
	Count   int64   `json:"count"`
	Digest  uint64  `json:"digest"`
	Millis  int64   `json:"millis"`
	// FetchMillis: of Millis, the time the worker's replica took to catch up (an update or
	// the whole state fetched and applied).
	FetchMillis int64 `json:"fetch_millis,omitempty"`
	// A result larger than TrainChunk comes in several pushes: Total bytes of body in
	// all, this push's body at Offset, with its CRC-32C (every push carries one).
	Offset int    `json:"offset,omitempty"`
	Total  int    `json:"total,omitempty"`
	CRC    uint32 `json:"crc"`
}

// nativeLE: float32 slices can be read as their little-endian bytes in place.
var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatsToBytes returns v as float32 little-endian bytes: v's own memory on a
// little-endian machine (no copy of a ResNet-18's 45 MB per transfer; v must not change
// while the bytes are in use), a converted copy elsewhere.
func floatsToBytes(v []float32) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	if nativeLE {
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	}
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// bytesToFloats reads float32 little-endian bytes: in place when the machine is
// little-endian and b 4-byte aligned (b must not change while the floats are in use), else
// a converted copy.
func bytesToFloats(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("sched: %d bytes is not a float32 array", len(b))
	}
	if len(b) == 0 {
		return []float32{}, nil
	}
	if nativeLE && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), nil
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// CheckpointName is the SDFS file of a training job's checkpoints (versioned by SDFS).
func CheckpointName(job string) string { return "idunno/train/" + job + "/checkpoint" }

// TrainedModelName is where a finished training job's model goes.
func TrainedModelName(job string) string { return "idunno/models/" + job + ".onnx" }

// trainTick (coordinator, s.mu held) starts a run for every unfinished training job.
func (s *Scheduler) trainTick() {
	if s.st.Phase != PhaseTraining {
		return
	}
	s.tt.mu.Lock()
	defer s.tt.mu.Unlock()
	if s.tt.runs == nil {
		s.tt.runs = map[string]*trainRun{}
	}
	for name, ts := range s.st.Trains {
		if ts.Complete || s.tt.runs[name] != nil {
			continue
		}
		r := &trainRun{spec: ts.Spec, results: map[int]*ShardPush{}, leases: map[int][]shardLease{}, partial: map[partKey]*partialPush{}}
		s.tt.runs[name] = r
		go s.loadRun(name, r, ts.CkptName, ts.Ckpt)
	}
}

// dropRuns forgets every run (this node stopped coordinating).
func (s *Scheduler) dropRuns() {
	s.tt.mu.Lock()
	runs := s.tt.runs
	s.tt.runs = nil
	s.tt.mu.Unlock()
	for _, r := range runs {
		r.mu.Lock()
		if r.eng != nil {
			r.eng.Close()
			r.eng = nil
		}
		r.ready = false
		r.mu.Unlock()
	}
	s.tt.notify()
}

// loadRun builds a run's engine from the initial model, or from its last checkpoint.
func (s *Scheduler) loadRun(name string, r *trainRun, ckptName string, ckptStep int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fail := func(err error) {
		s.logf("sched: training job %s: cannot start: %v", name, err)
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		time.AfterFunc(2*time.Second, func() { // try again later
			s.tt.mu.Lock()
			if s.tt.runs[name] == r {
				delete(s.tt.runs, name)
			}
			s.tt.mu.Unlock()
		})
	}
	mb, err := s.blobs.Get(ctx, r.spec.Model)
	if err != nil {
		fail(err)
		return
	}
	m, err := onnx.Decode(mb)
	if err != nil {
		fail(err)
		return
	}
	p := r.spec.Plan()
	eng, err := train.NewEngine(m, (p.Batch+p.Shards-1)/p.Shards, r.spec.Threads)
	if err != nil {
		fail(err)
		return
	}
	if n := 4 * eng.Master().Len(0); n > MaxTrainBytes {
		eng.Close()
		fail(fmt.Errorf("the model's %d MiB of parameters exceed the %d MiB cluster training takes", n>>20, MaxTrainBytes>>20))
		return
	}
	step := 0
	if ckptName != "" {
		cb, err := s.blobs.Get(ctx, ckptName)
		if err == nil {
			var ck *train.Checkpoint
			if ck, err = train.DecodeCheckpoint(cb); err == nil {
				if step, err = resumeStep(int(ck.Step), ckptStep, s.committedSteps(name)); err == nil {
					err = eng.Restore(ck.State)
				}
			}
		}
		if err != nil {
			eng.Close()
			fail(fmt.Errorf("checkpoint %s: %w", ckptName, err))
			return
		}
	}
	r.mu.Lock()
	r.eng, r.step, r.nbytes, r.updateAt = eng, step, 4*eng.Master().Len(0), -1
	r.mu.Unlock()
	if step > ckptStep {
		// The previous coordinator stored this checkpoint and stopped before journaling it:
		// journal it now (with the epoch-end evaluation it may lack).
		s.logf("sched: training job %s: checkpoint at step %d is newer than the journal's (%d): resuming from it", name, step, ckptStep)
		if err := s.recordCheckpoint(name, r, step); err != nil {
			s.logf("sched: training job %s: checkpoint at step %d: %v", name, step, err)
		}
	}
	if step == p.TotalSteps() {
		// Every step is committed and checkpointed: only the model is missing (the previous
		// coordinator stopped before storing it).
		if err := s.finishTraining(name, r); err != nil {
			r.mu.Lock()
			if r.eng != nil {
				r.eng.Close()
				r.eng = nil
			}
			r.mu.Unlock()
			fail(err)
		}
		return
	}
	r.mu.Lock()
	r.ready, r.start = true, time.Now()
	r.mu.Unlock()
	s.tt.notify()
	s.logf("sched: training job %s: running from step %d of %d", name, step, p.TotalSteps())
}

// committedSteps is the number of steps of a training job the journal holds.
func (s *Scheduler) committedSteps(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.st.Trains[name]; t != nil {
		return t.Step
	}
	return 0
}

// resumeStep decides from which step a new coordinator resumes a training job, given the
// step of the checkpoint SDFS holds (its newest version) and the journal's last checkpoint
// and committed steps. The journal's checkpoint is the usual answer. A newer one is what
// the previous coordinator stored before it stopped, too soon to journal it; it holds the
// weights after a step the journal has (a checkpoint is stored only once the standby holds
// its step), so it is as good: those weights are the same bytes whoever computes them, and
// the steps before it are in the epoch records. A checkpoint older than the journal's, or
// of a step the journal lacks, cannot be used.
func resumeStep(ck, journalCkpt, journalSteps int) (int, error) {
	switch {
	case ck < journalCkpt:
		return 0, fmt.Errorf("checkpoint holds step %d, older than the journal's %d", ck, journalCkpt)
	case ck > journalSteps:
		return 0, fmt.Errorf("checkpoint holds step %d, beyond the %d steps the journal holds", ck, journalSteps)
	}
	return ck, nil
}

// handleTrainPull gives a worker a shard of the training job furthest behind its fair
// share. The worker holds no shard when it pulls, so its leases are released first; then
// the pull waits in line, up to TrainPullWait, for a shard to come free (see
// TrainPullWait).
func (s *Scheduler) handleTrainPull(epoch uint64, a TrainPullArgs) (ShardOrder, uint64, error) {
	deadline := time.Now().Add(TrainPullWait)
	var w *pullWaiter
	defer func() {
		if w != nil {
			s.tt.dequeue(w)
		}
	}()
	for {
		s.mu.Lock()
		if err := s.fenced(epoch); err != nil {
			s.mu.Unlock()
			return ShardOrder{}, s.st.Epoch, err
		}
		if s.role != roleCoordinator || s.st.Phase != PhaseTraining {
			e := s.st.Epoch
			s.mu.Unlock()
			return ShardOrder{}, e, nil
		}
		e := s.st.Epoch
		alive := map[string]bool{}
		for _, p := range s.mem.Alive() {
			alive[p.Name] = true
		}
		s.mu.Unlock()
		if w == nil {
			w = &pullWaiter{worker: a.Worker}
			s.tt.release(a.Worker)
			s.tt.enqueue(w)
		}
		ch := s.tt.signal()
		o, ok, some := s.tt.tryHead(w, alive, time.Now())
		if ok {
			return o, e, nil
		}
		if !some || w.replaced(&s.tt) {
			return ShardOrder{}, e, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return ShardOrder{Again: true}, e, nil
		}
		select {
		case <-ch:
		case <-time.After(min(left, trainPullRecheck)):
		}
	}
}

// replaced reports whether a newer pull of the same worker replaced w.
func (w *pullWaiter) replaced(t *trainTables) bool {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	return w.gone
}

// lease picks a shard of the current step for worker: one nobody holds (or whose holder
// is gone or silent for a minute), else a straggler's (held by one other worker for more
// than StragglerFactor times the median shard time, and over StragglerFloor), computed
// twice, first answer wins.
func (r *trainRun) lease(worker string, alive map[string]bool, now time.Time) (ShardOrder, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.spec.Plan()
	if !r.ready || r.reducing || r.step >= p.TotalSteps() {
		return ShardOrder{}, false
	}
	_, from, to := p.Step(r.step)
	n := 0
	for k := 0; k < p.Shards; k++ {
		if a, b := p.ShardRange(from, to, k); a < b {
			n++
		}
	}
	give := func(k int) (ShardOrder, bool) {
		r.leases[k] = append(r.leases[k], shardLease{worker, now})
		spec := r.spec
		return ShardOrder{Spec: &spec, Step: r.step, Shard: k}, true
	}
	for k := 0; k < n; k++ {
		if r.results[k] != nil {
			continue
		}
		live := 0
		for _, l := range r.leases[k] {
			if alive[l.worker] && now.Sub(l.start) < time.Minute {
				live++
			}
		}
		if live == 0 {
			return give(k)
		}
	}
	med, f := median(r.durs), max(r.twin, StragglerFactor)
	for k := 0; k < n; k++ {
		ls := r.leases[k]
		if r.results[k] != nil || len(ls) != 1 || ls[0].worker == worker || med <= 0 {
			continue
		}
		if age := now.Sub(ls[0].start).Seconds(); age > f*med && age > StragglerFloor.Seconds() {
			return give(k)
		}
	}
	return ShardOrder{}, false
}

// free reports whether a shard of the run's current step is held by no live worker.
func (r *trainRun) free(alive map[string]bool, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.spec.Plan()
	if !r.ready || r.reducing || r.step >= p.TotalSteps() {
		return false
	}
	_, from, to := p.Step(r.step)
	for k := 0; k < p.Shards; k++ {
		if a, b := p.ShardRange(from, to, k); a >= b || r.results[k] != nil {
			continue
		}
		live := false
		for _, l := range r.leases[k] {
			live = live || alive[l.worker] && now.Sub(l.start) < time.Minute
		}
		if !live {
			return true
		}
	}
	return false
}

// A shard held by one worker for longer than StragglerFactor times the median shard time of
// the job's recent shards, and longer than StragglerFloor, is given to a second worker too.
// 1.5 catches DLRover's straggler at 2x the median within one shard time; the floor keeps
// millisecond shards (whose times are mostly scheduling noise) from being computed twice.
//
// A twin that loses to the shard's first holder was work for nothing, and where workers
// share CPUs (a local cluster, or a host of several nodes) it slowed the holder too, so the
// next step's shard is late again and gets a twin again: a cycle that doubles every step's
// work. So the factor doubles (up to StragglerMaxFactor) each time a twin loses, is back to
// StragglerFactor when a twin wins (a frozen or much slower holder), and decays toward it
// by twinDecay every committed step.
const (
	StragglerFactor    = 1.5
	StragglerMaxFactor = 16.0
	StragglerFloor     = time.Second
	twinDecay          = 0.95
)

// decayTwin brings the straggler bound a step closer to StragglerFactor. Called with r.mu
// held when a step is committed.
func (r *trainRun) decayTwin() { r.twin = max(StragglerFactor, r.twin*twinDecay) }

// twinOutcome adjusts the straggler bound once shard's result from worker is taken: a
// twinned shard's first holder answering first means the twin lost. Called with r.mu held.
func (r *trainRun) twinOutcome(shard int, worker string) {
	ls := r.leases[shard]
	if len(ls) < 2 {
		return
	}
	if ls[0].worker == worker {
		r.twin = min(2*max(r.twin, StragglerFactor), StragglerMaxFactor)
	} else {
		r.twin = StragglerFactor
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	return c[len(c)/2]
}

// handleTrainState serves a worker's replica: the job's whole state at the current step,
// or the reduced update of the step before it.
func (s *Scheduler) handleTrainState(epoch uint64, a StateArgs, _ []byte) (StateReply, []byte, uint64, error) {
	s.mu.Lock()
	e := s.st.Epoch
	err := s.fenced(epoch)
	s.mu.Unlock()
	if err != nil {
		return StateReply{}, nil, e, err
	}
	s.tt.mu.Lock()
	r := s.tt.runs[a.Job]
	s.tt.mu.Unlock()
	if r == nil {
		return StateReply{}, nil, e, fmt.Errorf("sched: no running training job %q", a.Job)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ready || r.eng == nil {
		return StateReply{}, nil, e, fmt.Errorf("sched: training job %s is not running", a.Job)
	}
	n := a.Limit
	if n <= 0 || n > TrainChunk {
		n = TrainChunk
	}
	var chunk []byte
	total := 0
	switch a.Kind {
	case "state":
		if r.step != a.Step {
			return StateReply{}, nil, e, fmt.Errorf("sched: training job %s is at step %d, not %d", a.Job, r.step, a.Step)
		}
		if r.state == nil || r.stateAt != r.step {
			st, err := r.eng.Snapshot()
			if err != nil {
				return StateReply{}, nil, e, err
			}
			var buf bytes.Buffer
			if err := (&train.Checkpoint{Step: int64(r.step), State: st}).Encode(&buf); err != nil {
				return StateReply{}, nil, e, err
			}
			r.state, r.stateAt = buf.Bytes(), r.step
		}
		total = len(r.state)
		if a.Offset < 0 || a.Offset > total {
			break
		}
		chunk = r.state[a.Offset:min(a.Offset+n, total)] // r.state is replaced, never changed
	case "update":
		if r.updateAt != a.Step || r.step != a.Step+1 {
			return StateReply{}, nil, e, fmt.Errorf("sched: training job %s holds the update of step %d, not %d", a.Job, r.updateAt, a.Step)
		}
		g, st := r.eng.Update()
		gb, sb := floatsToBytes(g), floatsToBytes(st)
		total = len(gb) + len(sb)
		if a.Offset < 0 || a.Offset > total {
			break
		}
		// copied under the lock: the engine's buffers change with the next step
		chunk = make([]byte, min(n, total-a.Offset))
		k := 0
		if a.Offset < len(gb) {
			k = copy(chunk, gb[a.Offset:])
		}
		copy(chunk[k:], sb[max(a.Offset-len(gb), 0):])
	default:
		return StateReply{}, nil, e, fmt.Errorf("sched: training job %s: no %q to send", a.Job, a.Kind)
	}
	if a.Offset < 0 || a.Offset > total {
		return StateReply{}, nil, e, fmt.Errorf("sched: training job %s: %s from byte %d of %d", a.Job, a.Kind, a.Offset, total)
	}
	return StateReply{Bytes: total, Offset: a.Offset, CRC: crc32.Checksum(chunk, castagnoli)}, chunk, e, nil
}

// handleTrainPush takes a shard result; the last shard of a step completes the step.
func (s *Scheduler) handleTrainPush(epoch uint64, a ShardPush, body []byte) (TrainPushReply, []byte, uint64, error) {
	s.mu.Lock()
	e := s.st.Epoch
	err := s.fenced(epoch)
	s.mu.Unlock()
	if err != nil {
		return TrainPushReply{}, nil, e, err
	}
	if crc32.Checksum(body, castagnoli) != a.CRC {
		return TrainPushReply{}, nil, e, fmt.Errorf("sched: train push: shard %d from %s: checksum mismatch", a.Shard, a.Worker)
	}
	s.tt.mu.Lock()
	r := s.tt.runs[a.Job]
	s.tt.mu.Unlock()
	if r == nil {
		return TrainPushReply{}, nil, e, nil // a job removed, or a result for another coordinator: dropped
	}
	r.mu.Lock()
	p := r.spec.Plan()
	if !r.ready || a.Step != r.step || a.Shard < 0 || a.Shard >= p.Shards || r.results[a.Shard] != nil {
		r.mu.Unlock()
		return TrainPushReply{}, nil, e, nil // late or duplicate (a straggler's twin): the first answer won
	}
	if a.Total > 0 { // one chunk of a larger result
		whole, err := r.addChunk(&a, body)
		if err != nil || whole == nil {
			r.mu.Unlock()
			return TrainPushReply{}, nil, e, err
		}
		body = whole
	}
	if a.NGrads < 0 || a.NGrads > len(body) {
		r.mu.Unlock()
		return TrainPushReply{}, nil, e, fmt.Errorf("sched: train push: %d gradient bytes in a body of %d", a.NGrads, len(body))
	}
	a.Grads, a.Stats = body[:a.NGrads], body[a.NGrads:]
	r.results[a.Shard] = &a
	r.twinOutcome(a.Shard, a.Worker)
	r.busy += float64(a.Millis) / 1e3
	r.durs = append(r.durs, float64(a.Millis)/1e3)
	if len(r.durs) > 64 {
		r.durs = r.durs[len(r.durs)-64:]
	}
	_, from, to := p.Step(r.step)
	n := 0
	for k := 0; k < p.Shards; k++ {
		if x, y := p.ShardRange(from, to, k); x < y {
			n++
		}
	}
	if len(r.results) < n {
		r.mu.Unlock()
		return TrainPushReply{}, nil, e, nil
	}
	r.reducing = true
	r.mu.Unlock()
	err = s.finishStep(a.Job, r, n)
	r.mu.Lock()
	r.reducing = false
	r.mu.Unlock()
	if err != nil {
		s.tt.notify() // the step's shards are free again
		s.logf("sched: training job %s: step %d: %v", a.Job, a.Step, err)
		return TrainPushReply{}, nil, e, nil
	}
	rep := TrainPushReply{Committed: true, Sole: n == 1}
	if rep.Sole {
		// The pusher's replica takes this step itself: the next step's shard goes to it
		// (when the job is the one its pull would get), which spares a transfer of the
		// update; workers waiting in line are passed over only for a job one worker at a
		// time can work on.
		s.mu.Lock()
		alive := map[string]bool{}
		for _, p := range s.mem.Alive() {
			alive[p.Name] = true
		}
		s.mu.Unlock()
		if o, ok := s.tt.leaseNext(a.Job, a.Worker, alive, time.Now()); ok {
			rep.Next = &o
		}
	}
	s.tt.notify() // the next step's shards are free
	return rep, nil, e, nil
}

// addChunk adds one chunk of a result sent in pieces (r.mu held) and returns the whole
// body once the last chunk is in. Chunks come in order; a first chunk starts the result
// afresh (a worker that retries), anything else out of order is refused. At most two
// results per shard are assembled at once, each at most twice the parameters' size.
func (r *trainRun) addChunk(a *ShardPush, body []byte) ([]byte, error) {
	key := partKey{a.Shard, a.Worker}
	if a.Total > 2*r.nbytes+(1<<20) || a.Offset < 0 || a.Offset+len(body) > a.Total || len(body) == 0 {
		return nil, fmt.Errorf("sched: train push: chunk of %d bytes at %d of a %d-byte result", len(body), a.Offset, a.Total)
	}
	pp := r.partial[key]
	if a.Offset == 0 {
		n := 0
		for k := range r.partial {
			if k.shard == a.Shard && k.worker != a.Worker {
				n++
			}
		}
		if n >= 2 {
			return nil, fmt.Errorf("sched: train push: shard %d is already arriving from %d workers", a.Shard, n)
		}
		pp = &partialPush{buf: make([]byte, a.Total)}
		r.partial[key] = pp
	}
	if pp == nil || pp.got != a.Offset || len(pp.buf) != a.Total {
		return nil, fmt.Errorf("sched: train push: shard %d from %s: chunk at %d out of order", a.Shard, a.Worker, a.Offset)
	}
	pp.got += copy(pp.buf[a.Offset:], body)
	if pp.got < a.Total {
		return nil, nil
	}
	delete(r.partial, key)
	return pp.buf, nil
}

// finishStep reduces the step's shards, journals the step, checkpoints when due and, after
// the last step, stores and registers the model.
func (s *Scheduler) finishStep(name string, r *trainRun, n int) error {
	r.mu.Lock()
	step, spec := r.step, r.spec
	shards := make([]train.ShardGrad, n)
	facts := StepFacts{}
	for k := 0; k < n; k++ {
		res := r.results[k]
		g, err1 := bytesToFloats(res.Grads)
		st, err2 := bytesToFloats(res.Stats)
		if err1 != nil || err2 != nil {
			delete(r.results, k)
			r.mu.Unlock()
			return fmt.Errorf("shard %d from %s: malformed result", k, res.Worker)
		}
		shards[k] = train.ShardGrad{Grads: g, Stats: st, N: res.N, Loss: res.Loss, Correct: res.Correct}
		facts.Count += res.Count
		facts.Digest += res.Digest
		facts.Correct += res.Correct
		facts.Workers = append(facts.Workers, res.Worker)
	}
	p := spec.Plan()
	lr := spec.Schedule.LR(spec.LR, step, p.StepsPerEpoch(), p.TotalSteps())
	t0 := time.Now()
	res, err := r.eng.Reduce(shards, spec.Optimizer, lr, int64(step+1))
	if err != nil {
		r.mu.Unlock()
		return err
	}
	facts.Loss = res.Loss
	facts.Millis = time.Since(t0).Milliseconds()
	r.step++
	r.decayTwin()
	r.updateAt = step
	r.state = nil // of an older step now
	r.results = map[int]*ShardPush{}
	r.partial = map[partKey]*partialPush{}
	r.leases = map[int][]shardLease{}
	r.mu.Unlock()
	t1 := time.Now()
	s.mu.Lock()
	if s.role != roleCoordinator || s.co == nil {
		s.mu.Unlock()
		return fmt.Errorf("no longer the coordinator")
	}
	err = s.commit(&Entry{Kind: EntryTrainStep, Name: name, Task: step, TrainStep: &facts})
	seq, repl := s.st.Seq, s.co.repl
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.logf("sched: training job %s: step %d of %d committed, loss %.4f (shards by %v; reduce %d ms, journal %d ms)",
		name, step+1, p.TotalSteps(), facts.Loss, facts.Workers, facts.Millis, time.Since(t1).Milliseconds())
	done := step+1 == p.TotalSteps()
	if (step+1)%p.StepsPerEpoch() == 0 || (spec.CheckpointEvery > 0 && (step+1)%spec.CheckpointEvery == 0) || done {
		if err := s.checkpoint(name, r, step+1, repl, seq); err != nil {
			s.logf("sched: training job %s: checkpoint at step %d: %v", name, step+1, err)
		}
	}
	if done {
		return s.finishTraining(name, r)
	}
	return nil
}

// checkpoint stores the weights after step to SDFS and journals it. The step's entry (seq)
// must be held by the standby first (or be on disk when no other node is live): a new
// coordinator resumes from the newest checkpoint SDFS holds even if its train-ckpt entry
// was lost with the old coordinator (resumeStep), which is only sound if its journal has
// the step.
func (s *Scheduler) checkpoint(name string, r *trainRun, step int, repl *replicator, seq uint64) error {
	if repl != nil {
		wctx, wcancel := context.WithTimeout(context.Background(), s.cfg.AckTimeout)
		by, err := repl.wait(wctx, seq)
		if err == nil {
			_, err = repl.durable(wctx, seq, by, len(s.mem.Alive()))
		}
		wcancel()
		if err != nil {
			return fmt.Errorf("skipped, the standby does not hold step %d: %w", step, err)
		}
	}
	r.mu.Lock()
	if r.eng == nil {
		r.mu.Unlock()
		return fmt.Errorf("the run stopped")
	}
	st, err := r.eng.Snapshot()
	r.mu.Unlock()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := (&train.Checkpoint{Step: int64(step), State: st}).Encode(&buf); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.blobs.Put(ctx, CheckpointName(name), buf.Bytes()); err != nil {
		return err
	}
	return s.recordCheckpoint(name, r, step)
}

// recordCheckpoint journals the checkpoint stored at step, with the evaluation of the
// weights when step ends an epoch.
func (s *Scheduler) recordCheckpoint(name string, r *trainRun, step int) error {
	eval := s.evaluateEpoch(name, r, step)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return fmt.Errorf("no longer the coordinator")
	}
	if err := s.commit(&Entry{Kind: EntryTrainCkpt, Name: name, Task: step, Model: CheckpointName(name), TrainStep: eval}); err != nil {
		return err
	}
	s.logf("sched: training job %s: checkpoint at step %d", name, step)
	return nil
}

// evaluateEpoch evaluates the weights after step on the job's evaluation set when step ends
// an epoch and the job has one; nil otherwise (or when evaluation fails: training goes on).
// The weights are the same bytes whoever computes them, so a recomputed epoch end gives the
// same figure.
func (s *Scheduler) evaluateEpoch(name string, r *trainRun, step int) *StepFacts {
	spec := r.spec
	sc, ok := s.exec.(ShardComputer)
	if spec.EvalData == "" || step%spec.Plan().StepsPerEpoch() != 0 || !ok {
		return nil
	}
	r.mu.Lock()
	if r.eng == nil {
		r.mu.Unlock()
		return nil
	}
	m, err := r.eng.Model(true)
	r.mu.Unlock()
	if err != nil {
		s.logf("sched: training job %s: evaluation at step %d: %v", name, step, err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	correct, n, err := sc.EvaluateTrain(ctx, spec, m)
	if err != nil || n == 0 {
		s.logf("sched: training job %s: evaluation at step %d: %v", name, step, err)
		return nil
	}
	s.logf("sched: training job %s: evaluation after step %d: %d of %d right (%.2f%%)", name, step, correct, n, 100*float64(correct)/float64(n))
	return &StepFacts{Correct: int64(correct), Count: int64(n)}
}

func (s *Scheduler) finishTraining(name string, r *trainRun) error {
	r.mu.Lock()
	m, err := r.eng.Model(true)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := TrainedModelName(name)
	if err := s.blobs.Put(ctx, out, onnx.Encode(m)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return fmt.Errorf("no longer the coordinator")
	}
	if err := s.commit(&Entry{Kind: EntryTrainDone, Name: name, Model: out}); err != nil {
		return err
	}
	s.logf("sched: training job %s: complete; model %s registered", name, out)
	s.tt.mu.Lock()
	delete(s.tt.runs, name)
	s.tt.mu.Unlock()
	r.mu.Lock()
	r.eng.Close()
	r.mu.Unlock()
	return nil
}
