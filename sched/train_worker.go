package sched

import (
	"context"
	"fmt"
	"hash/crc32"
	"time"
)

// trainWorkerLoop asks the coordinator for training shards while the cluster is in the
// training phase, computes them and sends the results back.
func (s *Scheduler) trainWorkerLoop(ctx context.Context) {
	defer s.wg.Done()
	sc, ok := s.exec.(ShardComputer)
	if !ok {
		return
	}
	idle := 200 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(idle):
		}
		_, addr, epoch, _ := s.coordinator()
		if addr == "" {
			continue
		}
		var o ShardOrder
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.callEpoch(cctx, addr, "sched.train.pull", epoch, TrainPullArgs{Worker: s.name}, &o)
		cancel()
		if err != nil || o.Job == "" || o.Spec == nil {
			idle = 200 * time.Millisecond
			if err == nil && o.Again {
				idle = 0 // the pull waited in line on the coordinator: back in line at once
			}
			continue
		}
		idle = 0
		t0 := time.Now()
		params, err := s.fetchParams(ctx, addr, epoch, o)
		if err != nil {
			s.logf("sched: training job %s: step %d: parameters: %v", o.Job, o.Step, err)
			idle = 200 * time.Millisecond
			continue
		}
		fetch := time.Since(t0)
		cctx, cancel = context.WithTimeout(ctx, 10*time.Minute)
		push, err := sc.ComputeShard(cctx, *o.Spec, params, o.Step, o.Shard)
		cancel()
		if err != nil {
			s.logf("sched: training job %s: step %d shard %d: %v", o.Job, o.Step, o.Shard, err)
			idle = time.Second
			continue
		}
		push.Worker = s.name
		body := append(push.Grads, push.Stats...) // in place: Stats follows Grads in one buffer
		push.NGrads = len(push.Grads)
		t0 = time.Now()
		err = s.pushResult(ctx, addr, epoch, push, body)
		s.logf("sched: training job %s: step %d shard %d computed (%d ms; parameters in %d ms, result out %d ms)", o.Job, o.Step, o.Shard,
			push.Millis, fetch.Milliseconds(), time.Since(t0).Milliseconds())
		if err != nil {
			s.logf("sched: training job %s: step %d shard %d: sending: %v", o.Job, o.Step, o.Shard, err)
		}
	}
}

// fetchParams gets the parameters of o's step in chunks of at most TrainChunk bytes, each
// with its own deadline and checked against its CRC-32C.
func (s *Scheduler) fetchParams(ctx context.Context, addr string, epoch uint64, o ShardOrder) ([]byte, error) {
	var all []byte
	for off, total := 0, -1; total < 0 || off < total; {
		var pr ParamsReply
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		chunk, _, err := s.callEpochBody(cctx, addr, "sched.train.params", epoch, ParamsArgs{Job: o.Job, Step: o.Step, Offset: off, Limit: TrainChunk}, nil, &pr)
		cancel()
		if err != nil {
			return nil, err
		}
		switch {
		case pr.Offset != off || pr.Bytes < 0 || pr.Bytes > MaxTrainBytes || (total >= 0 && pr.Bytes != total):
			return nil, fmt.Errorf("sched: parameters chunk at %d of %d bytes, asked for %d of %d", pr.Offset, pr.Bytes, off, total)
		case len(chunk) == 0 && pr.Bytes > off || off+len(chunk) > pr.Bytes:
			return nil, fmt.Errorf("sched: parameters chunk of %d bytes at %d of %d", len(chunk), off, pr.Bytes)
		case crc32.Checksum(chunk, castagnoli) != pr.CRC:
			return nil, fmt.Errorf("sched: parameters chunk at %d: checksum mismatch", off)
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
func (s *Scheduler) pushResult(ctx context.Context, addr string, epoch uint64, push *ShardPush, body []byte) error {
	if len(body) > TrainChunk {
		push.Total = len(body)
	}
	for off := 0; off == 0 || off < len(body); {
		chunk := body[off:min(off+TrainChunk, len(body))]
		push.Offset, push.CRC = off, crc32.Checksum(chunk, castagnoli)
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, _, err := s.callEpochBody(cctx, addr, "sched.train.push", epoch, *push, chunk, nil)
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
