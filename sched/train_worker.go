package sched

import (
	"context"
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
			continue
		}
		idle = 0
		var pr ParamsReply
		t0 := time.Now()
		cctx, cancel = context.WithTimeout(ctx, time.Minute)
		params, _, err := s.callEpochBody(cctx, addr, "sched.train.params", epoch, ParamsArgs{Job: o.Job, Step: o.Step}, nil, &pr)
		cancel()
		if err != nil || len(params) != pr.Bytes {
			if err != nil {
				s.logf("sched: training job %s: step %d: parameters: %v", o.Job, o.Step, err)
			}
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
		cctx, cancel = context.WithTimeout(ctx, time.Minute)
		_, _, err = s.callEpochBody(cctx, addr, "sched.train.push", epoch, *push, body, nil)
		cancel()
		s.logf("sched: training job %s: step %d shard %d computed (%d ms; parameters in %d ms, result out %d ms)", o.Job, o.Step, o.Shard,
			push.Millis, fetch.Milliseconds(), time.Since(t0).Milliseconds())
		if err != nil {
			s.logf("sched: training job %s: step %d shard %d: sending: %v", o.Job, o.Step, o.Shard, err)
		}
	}
}
