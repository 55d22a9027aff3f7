package sched

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/sched/dataset"
	"idunno/sched/train"
)

// ShardComputer computes training work on a node: checking a training job before it is
// accepted, and one shard's gradient.
type ShardComputer interface {
	ProbeTrain(ctx context.Context, spec TrainSpec) (samples int, err error)
	ComputeShard(ctx context.Context, spec TrainSpec, params []byte, step, shard int) (*ShardPush, error)
	// EvaluateTrain counts the right answers of m on the job's evaluation set.
	EvaluateTrain(ctx context.Context, spec TrainSpec, m *onnx.Model) (correct, n int, err error)
}

// trainCache is what a worker keeps per training job: its labels, epoch orders and plans.
type trainCache struct {
	mu     sync.Mutex
	model  *onnx.Model
	labels []int64
	order  []int
	epoch  int
	plans  map[int]*kernel.Trainer
	params map[int]int // step whose parameters each plan holds
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
	key := fmt.Sprintf("%s|%s|%d", spec.Name, spec.Model, spec.Seed)
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
		c = &trainCache{plans: map[int]*kernel.Trainer{}, params: map[int]int{}, epoch: -1}
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
	for _, t := range c.plans {
		t.Close()
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
	size := (spec.Batch + spec.Shards - 1) / spec.Shards
	var t *kernel.Trainer
	x.lowered(func() { t, err = c.plan(size, spec.Threads) })
	if err != nil {
		return 0, err
	}
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

func (c *trainCache) plan(size, threads int) (*kernel.Trainer, error) {
	if t := c.plans[size]; t != nil {
		return t, nil
	}
	t, err := kernel.NewTrainer(c.model, size, kernel.Options{Threads: threads})
	if err != nil {
		return nil, fmt.Errorf("sched: %w", err)
	}
	c.plans[size] = t
	c.params[size] = -1
	return t, nil
}

// ComputeShard computes shard `shard` of step `step` with the given master parameters.
func (x *KernelExecutor) ComputeShard(ctx context.Context, spec TrainSpec, params []byte, step, shard int) (*ShardPush, error) {
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
	defer c.mu.Unlock()
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
	var t *kernel.Trainer
	x.lowered(func() { t, err = c.plan(b-a, spec.Threads) })
	if err != nil {
		return nil, err
	}
	if c.params[b-a] != step {
		v, err := bytesToFloats(params)
		if err != nil {
			return nil, err
		}
		if err := t.Set(kernel.Params, v); err != nil {
			return nil, err
		}
		c.params[b-a] = step
	}
	d := train.Data{Images: ds, Labels: c.labels, Prep: spec.Pre}
	xb, yb, err := d.Batch(idx, t.Input().Dims)
	if err != nil {
		return nil, err
	}
	var g train.ShardGrad
	x.lowered(func() {
		g, err = train.ComputeShard(t, train.Shard{X: xb, Y: yb, Seed: p.ShardSeed(step, shard)}, to-from)
	})
	if err != nil {
		return nil, err
	}
	// gradients and statistics in one buffer, so the message body (Grads then Stats) is
	// built without another copy
	ng := 4 * len(g.Grads)
	body := make([]byte, ng+4*len(g.Stats))
	copy(body, floatsToBytes(g.Grads))
	copy(body[ng:], floatsToBytes(g.Stats))
	return &ShardPush{Job: spec.Name, Step: step, Shard: shard, Grads: body[:ng], Stats: body[ng:],
		N: g.N, Loss: g.Loss, Correct: g.Correct, Count: int64(len(idx)), Digest: SampleDigest(idx),
		Millis: time.Since(t0).Milliseconds()}, nil
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
