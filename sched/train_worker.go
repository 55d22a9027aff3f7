package sched

import (
	"context"
	"fmt"
	"hash/crc32"
	"time"
)

// trainWorkerLoop asks the coordinator for training shards while the cluster is in the
// training phase, computes them and sends the results back.
//
// A job of one shard a step is pipelined: the worker whose replica took step s (its own
// result) computes step s+1 while the result of s travels and the coordinator reduces and
// journals it, when the answer to its previous result leased it that job's next step
// (a streak). The answer to s decides: s+1 leased to this worker, and its result goes out;
// anything else, and the result computed ahead is dropped (it is still right, but not
// this worker's to send), and the worker pulls.
func (s *Scheduler) trainWorkerLoop(ctx context.Context) {
	defer s.wg.Done()
	sc, ok := s.exec.(ShardComputer)
	if !ok {
		return
	}
	idle := 200 * time.Millisecond
	var next *ShardOrder // leased to this worker with its last result's answer
	var nextFrom string
	var fl *flight // a result on its way whose answer is not in
	defer func() {
		if fl != nil {
			fl.wait()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(idle):
		}
		_, addr, epoch, _ := s.coordinator()
		if fl != nil && (fl.addr != addr || !fl.aheadOK()) {
			next, nextFrom = fl.wait()
			fl = nil
		}
		if addr == "" {
			continue
		}
		var o ShardOrder
		var err error
		streak := false
		switch {
		case fl != nil:
			o, streak = fl.ahead(), true
		case next != nil && nextFrom == addr:
			o, streak = *next, true
		default:
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = s.callEpoch(cctx, addr, "sched.train.pull", epoch, TrainPullArgs{Worker: s.name}, &o)
			cancel()
		}
		next = nil
		if err != nil || o.Job == "" || o.Spec == nil {
			idle = 200 * time.Millisecond
			if err == nil && o.Again {
				idle = 0 // the pull waited in line on the coordinator: back in line at once
			}
			continue
		}
		idle = 0
		src := &replicaSource{s: s, addr: addr, epoch: epoch, job: o.Job, step: o.Step}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		push, err := sc.ComputeShard(cctx, *o.Spec, src, o.Step, o.Shard)
		cancel()
		if fl != nil { // computed ahead: is it ours?
			n, _ := fl.wait()
			fl = nil
			if n == nil || n.Job != o.Job || n.Step != o.Step || n.Shard != o.Shard {
				s.logf("sched: training job %s: step %d shard %d computed ahead, not leased to this worker: dropped", o.Job, o.Step, o.Shard)
				continue
			}
		}
		if err != nil {
			s.logf("sched: training job %s: step %d shard %d: %v", o.Job, o.Step, o.Shard, err)
			idle = time.Second
			continue
		}
		fl = s.send(ctx, addr, epoch, o, push)
		fl.streak = streak
	}
}

// flight is a shard result on its way to the coordinator.
type flight struct {
	o      ShardOrder
	addr   string
	streak bool // its order came with the answer to the worker's result before
	done   chan struct{}
	rep    TrainPushReply
	err    error
}

// send sends a result in the background.
func (s *Scheduler) send(ctx context.Context, addr string, epoch uint64, o ShardOrder, push *ShardPush) *flight {
	f := &flight{o: o, addr: addr, done: make(chan struct{})}
	push.Worker = s.name
	body := append(push.Grads, push.Stats...) // in place: Stats follows Grads in one buffer
	push.NGrads = len(push.Grads)
	go func() {
		defer close(f.done)
		t0 := time.Now()
		f.err = s.pushResult(ctx, addr, epoch, push, body, &f.rep)
		s.logf("sched: training job %s: step %d shard %d computed (%d ms, of which catching up %d ms; result out %d ms, committed %v)", o.Job, o.Step, o.Shard,
			push.Millis, push.FetchMillis, time.Since(t0).Milliseconds(), f.rep.Committed)
		if f.err != nil {
			s.logf("sched: training job %s: step %d shard %d: sending: %v", o.Job, o.Step, o.Shard, f.err)
		}
	}()
	return f
}

// wait waits for the answer and returns the order it leased to this worker, if any.
func (f *flight) wait() (*ShardOrder, string) {
	<-f.done
	if f.err != nil || f.rep.Next == nil || f.rep.Next.Spec == nil {
		return nil, ""
	}
	return f.rep.Next, f.addr
}

// aheadOK reports whether the step after the result's can be computed before its answer:
// the result is of a one-shard step, sent in a streak, and the next step is one shard too.
func (f *flight) aheadOK() bool {
	if !f.streak || f.o.Spec == nil {
		return false
	}
	p := f.o.Spec.Plan()
	return f.o.Step+1 < p.TotalSteps() && soleShard(p, f.o.Step) && soleShard(p, f.o.Step+1)
}

// ahead is the order the answer is expected to lease: the job's next step.
func (f *flight) ahead() ShardOrder {
	o := f.o
	o.Step++
	o.Shard = 0
	return o
}

// replicaSource fetches a job's state or a step's update from the coordinator for the
// worker's replica.
type replicaSource struct {
	s     *Scheduler
	addr  string
	epoch uint64
	job   string
	step  int
}

func (r *replicaSource) State(ctx context.Context) ([]byte, error) {
	return r.s.fetchState(ctx, r.addr, r.epoch, StateArgs{Job: r.job, Kind: "state", Step: r.step})
}

func (r *replicaSource) Update(ctx context.Context, step int) ([]byte, error) {
	return r.s.fetchState(ctx, r.addr, r.epoch, StateArgs{Job: r.job, Kind: "update", Step: step})
}

// fetchState gets a job's state or update in chunks of at most TrainChunk bytes, each with
// its own deadline and checked against its CRC-32C.
func (s *Scheduler) fetchState(ctx context.Context, addr string, epoch uint64, a StateArgs) ([]byte, error) {
	var all []byte
	for off, total := 0, -1; total < 0 || off < total; {
		var pr StateReply
		a.Offset, a.Limit = off, TrainChunk
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		chunk, _, err := s.callEpochBody(cctx, addr, "sched.train.state", epoch, a, nil, &pr)
		cancel()
		if err != nil {
			return nil, err
		}
		switch {
		case pr.Offset != off || pr.Bytes < 0 || pr.Bytes > 4*MaxTrainBytes || (total >= 0 && pr.Bytes != total):
			return nil, fmt.Errorf("sched: %s chunk at %d of %d bytes, asked for %d of %d", a.Kind, pr.Offset, pr.Bytes, off, total)
		case len(chunk) == 0 && pr.Bytes > off || off+len(chunk) > pr.Bytes:
			return nil, fmt.Errorf("sched: %s chunk of %d bytes at %d of %d", a.Kind, len(chunk), off, pr.Bytes)
		case crc32.Checksum(chunk, castagnoli) != pr.CRC:
			return nil, fmt.Errorf("sched: %s chunk at %d: checksum mismatch", a.Kind, off)
		}
		if total < 0 {
			total = pr.Bytes
			if len(chunk) == total {
				return chunk, nil // one chunk: no copy
			}
			all = make([]byte, total)
		}
		off += copy(all[off:], chunk)
	}
	return all, nil
}

// pushResult sends a shard's result: in one push, or in chunks of at most TrainChunk bytes
// (each with its own deadline and CRC-32C) when it is larger.
func (s *Scheduler) pushResult(ctx context.Context, addr string, epoch uint64, push *ShardPush, body []byte, rep *TrainPushReply) error {
	if len(body) > TrainChunk {
		push.Total = len(body)
	}
	for off := 0; off == 0 || off < len(body); {
		chunk := body[off:min(off+TrainChunk, len(body))]
		push.Offset, push.CRC = off, crc32.Checksum(chunk, castagnoli)
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		*rep = TrainPushReply{}
		_, _, err := s.callEpochBody(cctx, addr, "sched.train.push", epoch, *push, chunk, rep)
		cancel()
		if err != nil {
			return err
		}
		off += len(chunk)
		if len(body) == 0 {
			break
		}
	}
	return nil
}
