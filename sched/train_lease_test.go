package sched

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"idunno/kernel"
	"idunno/sched/train"
)

// TestTrainLeaseStraggler drives the shard leasing decision on an injected clock: free
// shards first, no twin for a shard within the straggler bound, a twin for a worker at 2x
// the median shard time, never a twin to the holder itself, and a shard of a dead worker
// handed out again.
func TestTrainLeaseStraggler(t *testing.T) {
	spec := TrainSpec{Name: "j", Epochs: 1, Batch: 4, Shards: 2, Samples: 40, LR: 0.1, Threads: 1,
		Optimizer: kernel.Optimizer{Kind: "sgd"}, Schedule: train.Schedule{Kind: "constant"}}
	r := &trainRun{spec: spec, ready: true, results: map[int]*ShardPush{}, leases: map[int][]shardLease{},
		durs: []float64{2, 2, 2, 2}} // median shard time 2 s
	alive := map[string]bool{"a": true, "b": true, "c": true}
	t0 := time.Unix(1000, 0)
	lease := func(w string, at time.Duration) (int, bool) {
		o, ok := r.lease(w, alive, t0.Add(at))
		return o.Shard, ok
	}
	if k, ok := lease("a", 0); !ok || k != 0 {
		t.Fatalf("a: shard %d %v, want 0", k, ok)
	}
	if k, ok := lease("b", 0); !ok || k != 1 {
		t.Fatalf("b: shard %d %v, want 1", k, ok)
	}
	r.results[1] = &ShardPush{} // b is back after 2 s (the median); a is at 2x
	if _, ok := lease("c", 2*time.Second); ok {
		t.Fatal("a twin within 1x the median")
	}
	if _, ok := lease("a", 4*time.Second); ok {
		t.Fatal("the straggler was given its own shard again")
	}
	if k, ok := lease("c", 4*time.Second); !ok || k != 0 {
		t.Fatalf("no twin for a shard at 2x the median: %d %v", k, ok)
	}
	if _, ok := lease("b", 5*time.Second); ok {
		t.Fatal("a third copy of a shard already twinned")
	}

	// millisecond shards: no twin below the floor, however many medians late
	r = &trainRun{spec: spec, ready: true, results: map[int]*ShardPush{}, leases: map[int][]shardLease{}, durs: []float64{0.005}}
	lease("a", 0)
	lease("b", 0)
	if _, ok := lease("c", 500*time.Millisecond); ok {
		t.Fatal("a twin below StragglerFloor")
	}
	// a dead holder's shard goes to the next worker at once
	delete(alive, "a")
	if k, ok := lease("c", 600*time.Millisecond); !ok || k != 0 {
		t.Fatalf("a dead worker's shard was not handed out again: %d %v", k, ok)
	}
}

// TestTrainTwinBoundAdapts: a twin that loses to the shard's first holder doubles the
// straggler bound (two workers sharing CPUs otherwise twin every step, each slowing the
// other), a twin that wins brings it back, and committed steps decay it.
func TestTrainTwinBoundAdapts(t *testing.T) {
	spec := TrainSpec{Name: "j", Epochs: 1, Batch: 4, Shards: 1, Samples: 40, LR: 0.1, Threads: 1,
		Optimizer: kernel.Optimizer{Kind: "sgd"}, Schedule: train.Schedule{Kind: "constant"}}
	r := &trainRun{spec: spec, ready: true, results: map[int]*ShardPush{}, leases: map[int][]shardLease{},
		durs: []float64{2, 2, 2, 2}} // median shard time 2 s
	alive := map[string]bool{"a": true, "b": true}
	t0 := time.Unix(1000, 0)
	twinAt := func(at time.Duration) bool {
		_, ok := r.lease("b", alive, t0.Add(at))
		return ok
	}
	newStep := func() {
		r.results, r.leases = map[int]*ShardPush{}, map[int][]shardLease{}
		if _, ok := r.lease("a", alive, t0); !ok {
			t.Fatal("no shard for a")
		}
	}
	newStep()
	if !twinAt(3100 * time.Millisecond) { // 1.55x the median
		t.Fatal("no twin past 1.5x the median")
	}
	r.twinOutcome(0, "a") // a answered first: the twin lost
	if r.twin != 3 {
		t.Fatalf("factor %v after a lost twin, want 3", r.twin)
	}
	newStep()
	if twinAt(5 * time.Second) { // 2.5x: under the raised bound
		t.Fatal("a twin at 2.5x the median after a twin lost")
	}
	if !twinAt(6100 * time.Millisecond) {
		t.Fatal("no twin past the raised bound of 3x")
	}
	r.twinOutcome(0, "a")
	if r.twin != 6 {
		t.Fatalf("factor %v after two lost twins, want 6", r.twin)
	}
	for range 10 {
		r.twinOutcome(0, "a")
	}
	if r.twin != StragglerMaxFactor {
		t.Fatalf("factor %v, want the cap %v", r.twin, StragglerMaxFactor)
	}
	newStep()
	if !twinAt(33 * time.Second) {
		t.Fatal("no twin for a shard 16.5x late (a frozen holder)")
	}
	r.twinOutcome(0, "b") // the twin won
	if r.twin != StragglerFactor {
		t.Fatalf("factor %v after a twin won, want %v", r.twin, StragglerFactor)
	}
	r.twinOutcome(0, "a") // twin lost again (3), then committed steps bring it down
	r.decayTwin()
	if r.twin >= 3 || r.twin <= StragglerFactor {
		t.Fatalf("factor %v after one decay from 3", r.twin)
	}
}

// TestFloatBytes: the in-place views and the copying fallback (a misaligned buffer) give
// the same little-endian bytes and floats.
func TestFloatBytes(t *testing.T) {
	v := []float32{1, -2.5, 3e-38, float32(math.Inf(1)), float32(math.NaN())}
	b := floatsToBytes(v)
	want := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(want[4*i:], math.Float32bits(f))
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("bytes % x, want % x", b, want)
	}
	odd := make([]byte, len(want)+1)[1:] // misaligned: read by copying
	copy(odd, want)
	for _, in := range [][]byte{want, odd} {
		got, err := bytesToFloats(in)
		if err != nil || len(got) != len(v) {
			t.Fatal(err, len(got))
		}
		for i := range v {
			if math.Float32bits(got[i]) != math.Float32bits(v[i]) {
				t.Fatalf("float %d: %v, want %v", i, got[i], v[i])
			}
		}
	}
	if _, err := bytesToFloats(want[:5]); err == nil {
		t.Fatal("5 bytes read as floats")
	}
	if f, err := bytesToFloats(nil); err != nil || len(f) != 0 {
		t.Fatal(f, err)
	}
}

// FuzzAddChunk feeds the coordinator's assembly of chunked shard results arbitrary chunk
// offsets, sizes and totals: it must never panic, never hold more than it bounds, and give
// back exactly the bytes sent when the chunks came in order.
func FuzzAddChunk(f *testing.F) {
	f.Add([]byte{0, 8, 3, 5, 8}, uint16(16))
	f.Add([]byte{1, 0, 200, 7}, uint16(300))
	f.Fuzz(func(t *testing.T, ops []byte, total16 uint16) {
		r := &trainRun{nbytes: 64, partial: map[partKey]*partialPush{}}
		total := int(total16)
		src := make([]byte, total)
		for i := range src {
			src[i] = byte(i * 7)
		}
		off := 0
		for i := 0; i+1 < len(ops); i += 2 {
			worker := string('a' + rune(ops[i]%4))
			at, n := int(ops[i+1])%(total+2), int(ops[i])%40+1
			if ops[i]&0x80 == 0 { // mostly the next chunk in order from worker a
				worker, at = "a", off
			}
			end := min(at+n, total)
			if at > total || end <= at {
				continue
			}
			others := 0 // results of shard 0 from other workers being assembled
			for k := range r.partial {
				if k.worker != worker {
					others++
				}
			}
			whole, err := r.addChunk(&ShardPush{Shard: 0, Worker: worker, Offset: at, Total: total}, src[at:end])
			if worker != "a" {
				continue
			}
			if at != off && at != 0 {
				if err == nil {
					t.Fatalf("a chunk at %d accepted when %d bytes were in", at, off)
				}
				continue
			}
			if err != nil && at == 0 && others >= 2 {
				continue // the bound on results assembled at once
			}
			if err != nil {
				if total <= 2*r.nbytes+(1<<20) {
					t.Fatalf("chunk %d-%d of %d from a refused: %v", at, end, total, err)
				}
				return
			}
			off = end // in order, or a restart from the first byte
			if whole != nil {
				if !bytes.Equal(whole, src) {
					t.Fatalf("assembled %d bytes differ from the %d sent", len(whole), total)
				}
				return
			}
		}
		if len(r.partial) > 4 {
			t.Fatalf("%d results assembled at once", len(r.partial))
		}
	})
}

// TestTrainResumeStep: a new coordinator resumes from the newest checkpoint SDFS holds when
// the journal lacks its train-ckpt entry (the old coordinator stopped between storing it
// and journaling it), as long as the journal holds its step; before, such a checkpoint was
// refused again every 2 s and the job never resumed.
func TestTrainResumeStep(t *testing.T) {
	for _, c := range []struct {
		ck, ckpt, steps, want int
		ok                    bool
	}{
		{100, 100, 125, 100, true}, // the journal's checkpoint
		{125, 100, 125, 125, true}, // stored, not journaled: its step is committed
		{125, 100, 130, 125, true},
		{314, 300, 314, 314, true}, // the last step: only the model is missing
		{75, 100, 125, 0, false},   // older than the journal's
		{150, 100, 125, 0, false},  // a step the journal does not hold
	} {
		got, err := resumeStep(c.ck, c.ckpt, c.steps)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("resumeStep(%d, journal checkpoint %d, %d steps) = %d, %v; want %d (ok %v)", c.ck, c.ckpt, c.steps, got, err, c.want, c.ok)
		}
	}
}

// TestTrainPullQueue drives the pull queue and the lease release: waiting pulls get free
// shards in arrival order (a worker pulling again after a push does not jump the line), a
// newer pull of a worker replaces its older one, and a worker that pulls again (restarted
// under its name, alive to the detector all along) gives back the shard it held.
func TestTrainPullQueue(t *testing.T) {
	spec := TrainSpec{Name: "j", Epochs: 1, Batch: 4, Shards: 2, Samples: 40, LR: 0.1, Threads: 1,
		Optimizer: kernel.Optimizer{Kind: "sgd"}, Schedule: train.Schedule{Kind: "constant"}}
	r := &trainRun{spec: spec, ready: true, results: map[int]*ShardPush{}, leases: map[int][]shardLease{}}
	tt := &trainTables{runs: map[string]*trainRun{"j": r}}
	alive := map[string]bool{"a": true, "b": true, "c": true, "hot": true}
	now := time.Unix(1000, 0)
	wait := func(w string) *pullWaiter {
		p := &pullWaiter{worker: w}
		tt.release(w)
		tt.enqueue(p)
		return p
	}
	a, b, c := wait("a"), wait("b"), wait("c")
	if _, ok, _ := tt.tryHead(c, alive, now); ok {
		t.Fatal("the third in line took a shard before the first two")
	}
	if o, ok, _ := tt.tryHead(a, alive, now); !ok || o.Shard != 0 || o.Job != "j" {
		t.Fatalf("first in line: %+v %v", o, ok)
	}
	tt.dequeue(a)
	if o, ok, _ := tt.tryHead(b, alive, now); !ok || o.Shard != 1 {
		t.Fatalf("second in line: %+v %v", o, ok)
	}
	tt.dequeue(b)
	// the step's shards are out: c waits
	if _, ok, _ := tt.tryHead(c, alive, now); ok {
		t.Fatal("a shard with every shard of the step leased")
	}
	// a's push was lost and a pulls again behind c: it holds no shard now, so shard 0 is
	// free again, and c, first in line, gets it
	a = wait("a")
	if len(r.leases[0]) != 0 {
		t.Fatalf("a pulled again but still holds shard 0: %+v", r.leases)
	}
	if _, ok, _ := tt.tryHead(a, alive, now); ok {
		t.Fatal("a jumped the line")
	}
	if o, ok, _ := tt.tryHead(c, alive, now); !ok || o.Shard != 0 {
		t.Fatalf("c: %+v %v", o, ok)
	}
	tt.dequeue(c)
	// b is killed and restarted under its name: its new life's pull frees shard 1 (no
	// wait for the straggler bound), and the line gets it
	b2 := wait("b")
	if len(r.leases[1]) != 0 {
		t.Fatalf("the restarted b's shard is still leased to its previous life: %+v", r.leases)
	}
	if o, ok, _ := tt.tryHead(a, alive, now); !ok || o.Shard != 1 {
		t.Fatalf("a: %+v %v", o, ok)
	}
	tt.dequeue(a)
	// a newer pull of the same worker replaces the older one in line
	b3 := wait("b")
	if !b2.gone {
		t.Fatal("the older pull of b was not replaced")
	}
	r.step, r.leases = 1, map[int][]shardLease{} // the next step's shards
	if _, ok, _ := tt.tryHead(b2, alive, now); ok {
		t.Fatal("a replaced pull took a shard")
	}
	if o, ok, _ := tt.tryHead(b3, alive, now); !ok || o.Step != 1 {
		t.Fatalf("b's newer pull: %+v %v", o, ok)
	}
	// without training runs a pull is answered at once
	if _, ok, some := (&trainTables{}).tryHead(&pullWaiter{worker: "a"}, alive, now); ok || some {
		t.Fatal("a shard, or a wait, without any training run")
	}
}

// TestTrainPullWaitsInLine runs handleTrainPull: a pull that finds no free shard waits on
// the coordinator, and when a shard comes free it goes to the worker that waited, not to a
// worker that pulled later (one that just pushed a result); a pull that waits in vain is
// answered with Again.
func TestTrainPullWaitsInLine(t *testing.T) {
	spec := TrainSpec{Name: "j", Epochs: 1, Batch: 4, Shards: 1, Samples: 40, LR: 0.1, Threads: 1,
		Optimizer: kernel.Optimizer{Kind: "sgd"}, Schedule: train.Schedule{Kind: "constant"}}
	r := &trainRun{spec: spec, ready: true, results: map[int]*ShardPush{}, leases: map[int][]shardLease{0: {{"x", time.Now()}}}}
	st := NewState()
	st.Phase = PhaseTraining
	s := &Scheduler{st: st, role: roleCoordinator, mem: NewStaticMembership(Peer{Name: "new"}, Peer{Name: "hot"}, Peer{Name: "x"}),
		logf: func(string, ...any) {}}
	s.tt.runs = map[string]*trainRun{"j": r}
	type res struct {
		o   ShardOrder
		err error
	}
	pull := func(w string) chan res {
		ch := make(chan res, 1)
		go func() {
			o, _, err := s.handleTrainPull(0, TrainPullArgs{Worker: w})
			ch <- res{o, err}
		}()
		return ch
	}
	inLine := func(n int) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			s.tt.qmu.Lock()
			k := len(s.tt.waiters)
			s.tt.qmu.Unlock()
			if k == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d pulls waiting, want %d", k, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	newc := pull("new")
	inLine(1)
	hot := pull("hot")
	inLine(2)
	// x's shard is back and the next step's single shard is free
	r.mu.Lock()
	r.step, r.leases = 1, map[int][]shardLease{}
	r.mu.Unlock()
	s.tt.notify()
	got := <-newc
	if got.err != nil || got.o.Job != "j" || got.o.Step != 1 {
		t.Fatalf("the worker waiting first: %+v", got)
	}
	h := <-hot
	if h.err != nil || h.o.Job != "" || !h.o.Again {
		t.Fatalf("the worker in line second: %+v (want no shard, Again)", h)
	}
}

// TestTrainLeaseNext: a worker whose result completed a one-shard step keeps the job's next
// step (its replica holds the weights), ahead of the workers in line; not when another
// run, further behind its fair share, has a shard free, nor when the step is out already.
func TestTrainLeaseNext(t *testing.T) {
	spec := func(name string) TrainSpec {
		return TrainSpec{Name: name, Epochs: 1, Batch: 4, Shards: 1, Samples: 40, LR: 0.1, Threads: 1,
			Optimizer: kernel.Optimizer{Kind: "sgd"}, Schedule: train.Schedule{Kind: "constant"}}
	}
	run := func(name string, busy float64) *trainRun {
		return &trainRun{spec: spec(name), ready: true, busy: busy, results: map[int]*ShardPush{}, leases: map[int][]shardLease{}}
	}
	a, b := run("a", 5), run("b", 9)
	tt := &trainTables{runs: map[string]*trainRun{"a": a, "b": b}}
	alive := map[string]bool{"w1": true, "w2": true}
	now := time.Unix(1000, 0)
	tt.enqueue(&pullWaiter{worker: "w2"}) // waiting in line
	o, ok := tt.leaseNext("a", "w1", alive, now)
	if !ok || o.Job != "a" || o.Step != 0 || o.Shard != 0 || len(a.leases[0]) != 1 || a.leases[0][0].worker != "w1" {
		t.Fatalf("the pusher did not keep its job: %+v %v %+v", o, ok, a.leases)
	}
	if _, ok := tt.leaseNext("a", "w2", alive, now); ok {
		t.Fatal("a leased shard given again")
	}
	// b is further behind its share and has a shard free: a's pusher pulls like the others
	b.busy = 1
	a.leases = map[int][]shardLease{}
	if _, ok := tt.leaseNext("a", "w1", alive, now); ok {
		t.Fatal("the pusher kept its job while another run further behind had a shard free")
	}
	// b's shard is out: a is the first with a free shard again
	b.leases[0] = []shardLease{{"w2", now}}
	if o, ok := tt.leaseNext("a", "w1", alive, now); !ok || o.Job != "a" {
		t.Fatalf("%+v %v", o, ok)
	}
}

// TestFlightAhead: a worker computes the next step before the answer to its result only in
// a streak of one-shard steps, and never past the job's last step.
func TestFlightAhead(t *testing.T) {
	spec := func(batch, shards int) *TrainSpec {
		return &TrainSpec{Name: "j", Epochs: 1, Batch: batch, Shards: shards, Samples: 10}
	}
	for _, tc := range []struct {
		name   string
		spec   *TrainSpec
		step   int
		streak bool
		want   bool
	}{
		{"one shard, streak", spec(4, 1), 0, true, true},
		{"one shard, no streak", spec(4, 1), 0, false, false},
		{"two shards", spec(4, 2), 0, true, false},
		{"last step", spec(4, 1), 2, true, false},
		{"next step is the last, one shard", spec(4, 1), 1, true, true},
		{"two shards, next step of one sample", spec(3, 2), 2, true, false}, // step 3 has 1 sample: 1 shard, but step 2 has 3
		{"no spec", nil, 0, true, false},
	} {
		f := &flight{o: ShardOrder{Job: "j", Spec: tc.spec, Step: tc.step}, streak: tc.streak}
		if got := f.aheadOK(); got != tc.want {
			t.Errorf("%s: aheadOK %v, want %v", tc.name, got, tc.want)
		}
		if a := f.ahead(); a.Step != tc.step+1 || a.Shard != 0 || a.Job != "j" {
			t.Errorf("%s: ahead %+v", tc.name, a)
		}
	}
}
