package sched

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/sched/dataset"
	"idunno/sched/train"
)

// ShardComputer computes training work on a node: checking a training job before it is
// accepted, one shard's gradient on the node's replica of the job's state, and the
// evaluation of a model of the job.
type ShardComputer interface {
	ProbeTrain(ctx context.Context, spec TrainSpec) (samples int, err error)
	// ComputeShard computes shard `shard` of step `step` with the weights after `step`
	// steps, bringing the node's replica of the job's state to that step first (from src).
	// When the shard is the step's only one the replica takes the step itself, while the
	// result travels; otherwise it fetches the step's reduced update when it needs it.
	// The result's Grads and Stats stay as they are until the second ComputeShard after
	// it of the same job (a result may still be on its way while the next is computed).
	ComputeShard(ctx context.Context, spec TrainSpec, src StateSource, step, shard int) (*ShardPush, error)
	// EvaluateTrain counts the right answers of m on the job's evaluation set.
	EvaluateTrain(ctx context.Context, spec TrainSpec, m *onnx.Model) (correct, n int, err error)
}

// StateSource is where a worker's replica catches up: the job's whole state at the step of
// its order (a checkpoint's encoding), or the reduced update of one step (gradient sum then
// batch statistics, float32 little-endian).
type StateSource interface {
	State(ctx context.Context) ([]byte, error)
	Update(ctx context.Context, step int) ([]byte, error)
}

// trainCache is a worker's replica of one training job: its labels, epoch order and an
// engine holding the weights, optimizer state and running statistics after `step` steps
// (-1: none yet), which it moves forward by the job's committed updates.
type trainCache struct {
	mu     sync.Mutex
	model  *onnx.Model
	labels []int64
	order  []int
	epoch  int
	eng    *train.Engine
	step   int
	grad   train.ShardGrad // the last result computed
	// bodies are the message bodies of results (gradient then statistics), used in turn:
	// a result's body stays as it is while the next one is computed (it may still be on
	// its way), until the one after.
	bodies [2][]float32
	turn   int
	used   time.Time
}

func (x *KernelExecutor) labels(ctx context.Context, name string) ([]int64, error) {
	b, err := x.Blobs.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("sched: labels %q: %w", name, err)
	}
	l, err := dataset.ReadLabels(name, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(l))
	for i, v := range l {
		out[i] = int64(v)
	}
	return out, nil
}

func (x *KernelExecutor) trainJob(ctx context.Context, spec TrainSpec) (*trainCache, error) {
	// A replica serves one exact job: any setting changes its steps. The sample count is
	// the data's (ProbeTrain, before the job is accepted, does not know it yet).
	ks := spec
	ks.Samples = 0
	kb, _ := json.Marshal(ks)
	key := string(kb)
	x.mu.Lock()
	if x.trains == nil {
		x.trains = map[string]*trainCache{}
	}
	c := x.trains[key]
	if c == nil {
		for k, o := range x.trains { // keep at most 4 jobs' plans
			if len(x.trains) >= 4 && time.Since(o.used) > time.Minute {
				o.close()
				delete(x.trains, k)
			}
		}
		c = &trainCache{epoch: -1, step: -1}
		x.trains[key] = c
	}
	c.used = time.Now()
	x.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.model == nil {
		b, err := x.Blobs.Get(ctx, spec.Model)
		if err != nil {
			return nil, fmt.Errorf("sched: model %q: %w", spec.Model, err)
		}
		m, err := onnx.Decode(b)
		if err != nil {
			return nil, fmt.Errorf("sched: model %q: %w", spec.Model, err)
		}
		l, err := x.labels(ctx, spec.Labels)
		if err != nil {
			return nil, err
		}
		c.model, c.labels = m, l
	}
	return c, nil
}

func (c *trainCache) close() {
	if c.eng != nil {
		c.eng.Close()
	}
}

// ProbeTrain loads a training job's model, data and labels and checks they fit: the model
// trains (every op has a backward pass, the output is (batch, classes)), one label per
// image, every label a class of the model.
func (x *KernelExecutor) ProbeTrain(ctx context.Context, spec TrainSpec) (int, error) {
	ds, err := x.dataset(ctx, spec.Data, "")
	if err != nil {
		return 0, err
	}
	c, err := x.trainJob(ctx, spec)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	x.lowered(func() { err = c.engine(spec) })
	if err != nil {
		return 0, err
	}
	t := c.eng.Master()
	d := train.Data{Images: ds, Labels: c.labels, Prep: spec.Pre}
	if err := d.Check(t.Input().Dims, t.Classes()); err != nil {
		return 0, err
	}
	if spec.EvalData != "" {
		eds, err := x.dataset(ctx, spec.EvalData, "")
		if err != nil {
			return 0, err
		}
		el, err := x.labels(ctx, spec.EvalLabels)
		if err != nil {
			return 0, err
		}
		if err := (train.Data{Images: eds, Labels: el, Prep: spec.Pre}).Check(t.Input().Dims, t.Classes()); err != nil {
			return 0, fmt.Errorf("evaluation data: %w", err)
		}
	}
	return ds.Len(), nil
}

// engine makes the replica's engine, its master plan of the job's shard size.
func (c *trainCache) engine(spec TrainSpec) error {
	if c.eng != nil {
		return nil
	}
	eng, err := train.NewEngine(c.model, (spec.Batch+spec.Shards-1)/spec.Shards, spec.Threads)
	if err != nil {
		return fmt.Errorf("sched: %w", err)
	}
	c.eng, c.step = eng, -1
	return nil
}

// catchUp brings the replica to step: by the reduced update of the step before when it
// holds that one, else by the job's state at step.
func (x *KernelExecutor) catchUp(ctx context.Context, c *trainCache, spec TrainSpec, src StateSource, step int) error {
	if c.step == step {
		return nil
	}
	if c.step == step-1 && c.step >= 0 {
		err := x.applyUpdate(ctx, c, spec, src, step-1)
		if err == nil {
			return nil
		}
		x.logf("sched: training job %s: update of step %d: %v; fetching the state", spec.Name, step-1, err)
	}
	c.step = -1
	b, err := src.State(ctx)
	if err != nil {
		return fmt.Errorf("sched: training job %s: state at step %d: %w", spec.Name, step, err)
	}
	ck, err := train.DecodeCheckpoint(b)
	if err != nil {
		return fmt.Errorf("sched: training job %s: state at step %d: %w", spec.Name, step, err)
	}
	if int(ck.Step) != step {
		return fmt.Errorf("sched: training job %s: state of step %d sent for step %d", spec.Name, ck.Step, step)
	}
	x.lowered(func() { err = c.eng.Restore(ck.State) })
	if err != nil {
		return fmt.Errorf("sched: training job %s: %w", spec.Name, err)
	}
	c.step = step
	return nil
}

// applyUpdate takes step `step` on the replica with the step's reduced update.
func (x *KernelExecutor) applyUpdate(ctx context.Context, c *trainCache, spec TrainSpec, src StateSource, step int) error {
	b, err := src.Update(ctx, step)
	if err != nil {
		return err
	}
	v, err := bytesToFloats(b)
	if err != nil {
		return err
	}
	np := c.eng.Master().Len(kernel.Grads)
	if len(v) < np {
		return fmt.Errorf("sched: an update of %d values for %d parameters", len(v), np)
	}
	p := spec.Plan()
	lr := spec.Schedule.LR(spec.LR, step, p.StepsPerEpoch(), p.TotalSteps())
	c.step = -1
	x.lowered(func() { err = c.eng.ApplyUpdate(v[:np], v[np:], spec.Optimizer, lr, int64(step+1)) })
	if err != nil {
		return err
	}
	c.step = step + 1
	return nil
}

// ComputeShard computes shard `shard` of step `step` on the node's replica of the job.
func (x *KernelExecutor) ComputeShard(ctx context.Context, spec TrainSpec, src StateSource, step, shard int) (*ShardPush, error) {
	t0 := time.Now()
	ds, err := x.dataset(ctx, spec.Data, "")
	if err != nil {
		return nil, err
	}
	c, err := x.trainJob(ctx, spec)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	handoff := false // c.mu passed on to the replica's own step
	defer func() {
		if !handoff {
			c.mu.Unlock()
		}
	}()
	p := spec.Plan()
	epoch, from, to := p.Step(step)
	a, b := p.ShardRange(from, to, shard)
	if a >= b {
		return nil, fmt.Errorf("sched: step %d has no shard %d", step, shard)
	}
	if c.epoch != epoch {
		c.order, c.epoch = p.Order(epoch), epoch
	}
	idx := c.order[a:b]
	x.lowered(func() { err = c.engine(spec) })
	if err != nil {
		return nil, err
	}
	if err := x.catchUp(ctx, c, spec, src, step); err != nil {
		return nil, err
	}
	fetched := time.Since(t0)
	d := train.Data{Images: ds, Labels: c.labels, Prep: spec.Pre}
	xb, yb, err := d.Batch(idx, c.eng.Master().Input().Dims)
	if err != nil {
		return nil, err
	}
	// the result's gradient and statistics are computed into one buffer, the message body
	np, ns := c.eng.Master().Len(kernel.Grads), c.eng.Master().Len(kernel.BatchStats)
	c.turn ^= 1
	buf := c.bodies[c.turn]
	if len(buf) != np+ns {
		buf = make([]float32, np+ns)
		c.bodies[c.turn] = buf
	}
	c.grad.Grads, c.grad.Stats = buf[:np], buf[np:]
	x.lowered(func() {
		err = c.eng.Shard(train.Shard{X: xb, Y: yb, Seed: p.ShardSeed(step, shard)}, to-from, &c.grad)
	})
	if err != nil {
		return nil, err
	}
	if len(c.grad.Grads) != np || len(c.grad.Stats) != ns {
		return nil, fmt.Errorf("sched: shard %d of step %d: plan of %d values, model of %d", shard, step, len(c.grad.Grads)+len(c.grad.Stats), np+ns)
	}
	body := floatsToBytes(buf)
	g := c.grad
	if soleShard(p, step) {
		// The step is this one shard: the replica takes it now, as the coordinator will
		// (the same bytes), while the result travels; the next shard waits for c.mu. The
		// body is only read meanwhile.
		handoff = true
		lr := spec.Schedule.LR(spec.LR, step, p.StepsPerEpoch(), p.TotalSteps())
		c.step = -1
		go func() {
			defer c.mu.Unlock()
			var err error
			x.lowered(func() { err = c.eng.ApplySole(g, spec.Optimizer, lr, int64(step+1)) })
			if err != nil {
				x.logf("sched: training job %s: step %d on the replica: %v", spec.Name, step, err)
				return
			}
			c.step = step + 1
		}()
	}
	return &ShardPush{Job: spec.Name, Step: step, Shard: shard, Grads: body[:4*np], Stats: body[4*np:],
		N: g.N, Loss: g.Loss, Correct: g.Correct, Count: int64(len(idx)), Digest: SampleDigest(idx),
		Millis: time.Since(t0).Milliseconds(), FetchMillis: fetched.Milliseconds()}, nil
}

// soleShard reports whether step has a single non-empty shard.
func soleShard(p train.Plan, step int) bool {
	_, from, to := p.Step(step)
	n := 0
	for k := 0; k < p.Shards; k++ {
		if a, b := p.ShardRange(from, to, k); a < b {
			n++
		}
	}
	return n == 1
}

// EvaluateTrain runs m (an inference model of the job's current weights) over the job's
// evaluation set and counts its right answers.
func (x *KernelExecutor) EvaluateTrain(ctx context.Context, spec TrainSpec, m *onnx.Model) (int, int, error) {
	if spec.EvalData == "" {
		return 0, 0, fmt.Errorf("sched: training job %s has no evaluation set", spec.Name)
	}
	ds, err := x.dataset(ctx, spec.EvalData, "")
	if err != nil {
		return 0, 0, err
	}
	l, err := x.labels(ctx, spec.EvalLabels)
	if err != nil {
		return 0, 0, err
	}
	var correct, n int
	x.lowered(func() {
		correct, n, err = train.Evaluate(m, train.Data{Images: ds, Labels: l, Prep: spec.Pre}, max(spec.Batch, 64), spec.Threads)
	})
	return correct, n, err
}

func (x *KernelExecutor) logf(format string, a ...any) {
	if x.Logf != nil {
		x.Logf(format, a...)
	}
}
