package train

import (
	"fmt"
	"math"

	"idunno/kernel"
	"idunno/kernel/onnx"
)

// Shard is one shard's batch: the preprocessed inputs, one label per sample, and the seed
// of its dropout masks.
type Shard struct {
	X    []float32
	Y    []int64
	Seed uint64
}

// StepResult is what one step reports.
type StepResult struct {
	Loss    float64 // mean cross-entropy over the step's samples
	Correct int64   // right top-1 answers among them
	Samples int
}

// Engine computes steps on this machine: one training plan per shard size, all reading one
// master copy of the parameters, optimizer state and running statistics (held by the first
// plan made).
type Engine struct {
	model    *onnx.Model
	threads  int
	plans    map[int]*kernel.Trainer
	synced   map[int]int64 // params version each plan holds
	master   *kernel.Trainer
	version  int64
	acc, tmp []float32
	stats    []float32
	sbuf     []float32
	params   []float32
	ran      *kernel.Trainer // the plan Shard last ran on
}

// NewEngine compiles the model's training plan for the first shard size.
func NewEngine(m *onnx.Model, shardSize, threads int) (*Engine, error) {
	e := &Engine{model: m, threads: threads, plans: map[int]*kernel.Trainer{}, synced: map[int]int64{}}
	t, err := e.plan(shardSize)
	if err != nil {
		return nil, err
	}
	e.master = t
	return e, nil
}

// Master is the plan holding the master parameters.
func (e *Engine) Master() *kernel.Trainer { return e.master }

// Close frees every plan.
func (e *Engine) Close() {
	for _, t := range e.plans {
		t.Close()
	}
	e.plans = map[int]*kernel.Trainer{}
}

func (e *Engine) plan(size int) (*kernel.Trainer, error) {
	if t, ok := e.plans[size]; ok {
		return t, nil
	}
	if len(e.plans) >= 8 {
		return nil, fmt.Errorf("train: more than 8 shard sizes")
	}
	t, err := kernel.NewTrainer(e.model, size, kernel.Options{Threads: e.threads})
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	e.plans[size] = t
	e.synced[size] = -1
	if e.master == nil {
		e.synced[size] = e.version
	}
	return t, nil
}

// sync gives plan t (of shard size size) the master's current parameters.
func (e *Engine) sync(size int, t *kernel.Trainer) error {
	if t == e.master || e.synced[size] == e.version {
		return nil
	}
	if e.params == nil {
		e.params = make([]float32, e.master.Len(kernel.Params))
	}
	if err := e.master.Get(kernel.Params, e.params); err != nil {
		return err
	}
	if err := t.Set(kernel.Params, e.params); err != nil {
		return err
	}
	e.synced[size] = e.version
	return nil
}

// Prepare compiles the plan of a shard size ahead of its first use.
func (e *Engine) Prepare(size int) error {
	_, err := e.plan(size)
	return err
}

// Gradients runs the shards in order and leaves their summed gradient (each computed with
// scale 1/total samples, summed left to right in shard order) and their combined batch
// statistics in the master plan. It changes no parameter.
func (e *Engine) Gradients(shards []Shard) (StepResult, error) {
	var r StepResult
	for _, s := range shards {
		r.Samples += len(s.Y)
	}
	if r.Samples == 0 {
		return r, fmt.Errorf("train: a step without samples")
	}
	scale := float32(1.0 / float64(r.Samples))
	var loss float64
	combine := len(shards) > 1
	for k, s := range shards {
		if len(s.Y) == 0 {
			continue
		}
		t, err := e.plan(len(s.Y))
		if err != nil {
			return r, err
		}
		combine = combine || t != e.master
		if err := e.sync(len(s.Y), t); err != nil {
			return r, err
		}
		l, c, err := t.Run(s.X, s.Y, scale, s.Seed)
		if err != nil {
			return r, fmt.Errorf("train: shard %d: %w", k, err)
		}
		loss += l
		r.Correct += c
		if !combine {
			break
		}
		if err := e.accumulate(t, k == 0, len(s.Y), r.Samples); err != nil {
			return r, err
		}
	}
	if combine {
		if err := e.master.Set(kernel.Grads, e.acc); err != nil {
			return r, err
		}
	}
	r.Loss = loss / float64(r.Samples)
	return r, nil
}

// accumulate adds plan t's gradient and batch statistics to the step's sums (addShard).
func (e *Engine) accumulate(t *kernel.Trainer, first bool, n, total int) error {
	np, ns := t.Len(kernel.Grads), t.Len(kernel.BatchStats)
	if len(e.tmp) != np {
		e.tmp = make([]float32, np)
	}
	if len(e.sbuf) != ns {
		e.sbuf = make([]float32, ns)
	}
	if err := t.Get(kernel.Grads, e.tmp); err != nil {
		return err
	}
	if ns > 0 {
		if err := t.Get(kernel.BatchStats, e.sbuf); err != nil {
			return err
		}
	}
	e.addShard(first, e.tmp, e.sbuf, n, total)
	return nil
}

// addShard adds one shard's gradient (copied when first, then summed left to right in shard
// order) and its batch statistics weighted by its n of total samples to the step's sums.
// Gradients (this machine's shards) and Reduce (shards computed anywhere) both sum here,
// which is what makes a cluster step the same bytes as a local one.
func (e *Engine) addShard(first bool, grads, stats []float32, n, total int) {
	if len(e.acc) != len(grads) {
		e.acc = make([]float32, len(grads))
	}
	if len(e.stats) != len(stats) {
		e.stats = make([]float32, len(stats))
	}
	if first {
		copy(e.acc, grads)
	} else {
		AddInto(e.acc, grads)
	}
	w := float32(float64(n) / float64(total))
	for i, v := range stats {
		if first {
			e.stats[i] = w * v
		} else {
			e.stats[i] += w * v
		}
	}
}

// AddInto adds src to dst elementwise (the shard-order gradient sum).
func AddInto(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}

// Apply finishes a step after Gradients: running statistics, then one optimizer step
// (step counts from 1) at learning rate lr.
func (e *Engine) Apply(opt kernel.Optimizer, lr float64, step int64, combined bool) error {
	var stats []float32
	if combined && len(e.stats) > 0 {
		stats = e.stats
	}
	if err := e.master.ApplyBatchStats(stats); err != nil {
		return err
	}
	if err := e.master.Optimize(opt, lr, step); err != nil {
		return err
	}
	e.version++
	return nil
}

// Step runs Gradients and Apply; a NaN or infinite loss applies nothing and is an error.
func (e *Engine) Step(shards []Shard, opt kernel.Optimizer, lr float64, step int64) (StepResult, error) {
	r, err := e.Gradients(shards)
	if err != nil {
		return r, err
	}
	if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
		return r, &DivergedError{Step: step, Loss: r.Loss}
	}
	combined := len(shards) > 1 || e.plans[len(shards[0].Y)] != e.master
	return r, e.Apply(opt, lr, step, combined)
}

// DivergedError reports a step whose loss is not finite.
type DivergedError struct {
	Step int64
	Loss float64
}

func (d *DivergedError) Error() string {
	return fmt.Sprintf("train: step %d: loss is %v (diverged; lower the learning rate)", d.Step, d.Loss)
}

// State is the master state a checkpoint holds.
type State struct {
	Params, Opt1, Opt2, Stats []float32
}

// Snapshot copies the master state.
func (e *Engine) Snapshot() (*State, error) {
	m := e.master
	s := &State{
		Params: make([]float32, m.Len(kernel.Params)),
		Opt1:   make([]float32, m.Len(kernel.Opt1)),
		Opt2:   make([]float32, m.Len(kernel.Opt2)),
		Stats:  make([]float32, m.Len(kernel.State)),
	}
	for _, x := range []struct {
		a kernel.Array
		v []float32
	}{{kernel.Params, s.Params}, {kernel.Opt1, s.Opt1}, {kernel.Opt2, s.Opt2}, {kernel.State, s.Stats}} {
		if err := m.Get(x.a, x.v); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Restore loads a master state (from a checkpoint).
func (e *Engine) Restore(s *State) error {
	m := e.master
	for _, x := range []struct {
		a kernel.Array
		v []float32
	}{{kernel.Params, s.Params}, {kernel.Opt1, s.Opt1}, {kernel.Opt2, s.Opt2}, {kernel.State, s.Stats}} {
		if len(x.v) != m.Len(x.a) {
			return fmt.Errorf("train: checkpoint holds %d values where the model has %d", len(x.v), m.Len(x.a))
		}
		if err := m.Set(x.a, x.v); err != nil {
			return err
		}
	}
	e.version++
	return nil
}

// Model exports the trained model (BatchNormalization folded into Conv where it can be).
func (e *Engine) Model(foldBN bool) (*onnx.Model, error) { return e.master.Model(foldBN) }

// ShardGrad is one shard's computed contribution to a step (what a worker sends).
type ShardGrad struct {
	Grads   []float32 // gradient of scale x the shard's summed loss, scale = 1/step samples
	Stats   []float32 // the shard's batch statistics (BatchStats layout)
	N       int       // samples in the shard
	Loss    float64   // summed loss
	Correct int64
}

// ComputeShard runs one shard on plan t (whose parameters the caller has set) with the
// step's gradient scale 1/total.
func ComputeShard(t *kernel.Trainer, s Shard, total int) (ShardGrad, error) {
	g := ShardGrad{N: len(s.Y), Grads: make([]float32, t.Len(kernel.Grads)), Stats: make([]float32, t.Len(kernel.BatchStats))}
	loss, c, err := t.Run(s.X, s.Y, float32(1.0/float64(total)), s.Seed)
	if err != nil {
		return g, err
	}
	g.Loss, g.Correct = loss, c
	if err := t.Get(kernel.Grads, g.Grads); err != nil {
		return g, err
	}
	if len(g.Stats) > 0 {
		if err := t.Get(kernel.BatchStats, g.Stats); err != nil {
			return g, err
		}
	}
	return g, nil
}

// Shard computes one shard on the plan of its size, with the master's parameters, into g
// (its Grads and Stats are reused when they have the right sizes): the gradient of scale
// 1/total × the shard's summed loss. It changes no parameter.
func (e *Engine) Shard(s Shard, total int, g *ShardGrad) error {
	t, err := e.plan(len(s.Y))
	if err != nil {
		return err
	}
	if err := e.sync(len(s.Y), t); err != nil {
		return err
	}
	np, ns := t.Len(kernel.Grads), t.Len(kernel.BatchStats)
	if len(g.Grads) != np {
		g.Grads = make([]float32, np)
	}
	if len(g.Stats) != ns {
		g.Stats = make([]float32, ns)
	}
	loss, c, err := t.Run(s.X, s.Y, float32(1.0/float64(total)), s.Seed)
	if err != nil {
		return err
	}
	g.N, g.Loss, g.Correct = len(s.Y), loss, c
	if err := t.Get(kernel.Grads, g.Grads); err != nil {
		return err
	}
	if ns > 0 {
		if err := t.Get(kernel.BatchStats, g.Stats); err != nil {
			return err
		}
	}
	e.ran = t
	return nil
}

// ApplySole finishes a step whose only shard is g, which Shard just computed on this
// engine: the same bytes as Reduce([]ShardGrad{g}) (a replica's step when it computed the
// whole step itself). When g ran on the master plan its gradient and batch statistics are
// still there, and the step is applied as a local one-shard step is, without copying them.
func (e *Engine) ApplySole(g ShardGrad, opt kernel.Optimizer, lr float64, step int64) error {
	if e.ran == e.master && g.N == e.master.Batch() {
		if math.IsNaN(g.Loss) || math.IsInf(g.Loss, 0) {
			return &DivergedError{Step: step, Loss: g.Loss / float64(g.N)}
		}
		return e.Apply(opt, lr, step, false)
	}
	_, err := e.Reduce([]ShardGrad{g}, opt, lr, step)
	return err
}

// Update is the last Reduce's summed gradient and combined batch statistics: what another
// engine holding the same state needs (ApplyUpdate) to take the same step. They are the
// engine's own buffers, valid until the next Reduce or ApplyUpdate.
func (e *Engine) Update() (grads, stats []float32) { return e.acc, e.stats }

// ApplyUpdate takes a step reduced elsewhere, given its Update: the same arithmetic as the
// end of Reduce, so a replica that started from the same state holds the same bytes after.
func (e *Engine) ApplyUpdate(grads, stats []float32, opt kernel.Optimizer, lr float64, step int64) error {
	np, ns := e.master.Len(kernel.Grads), e.master.Len(kernel.BatchStats)
	if len(grads) != np || len(stats) != ns {
		return fmt.Errorf("train: an update of %d gradients and %d statistics, the model has %d and %d", len(grads), len(stats), np, ns)
	}
	if len(e.stats) != ns {
		e.stats = make([]float32, ns)
	}
	copy(e.stats, stats)
	if err := e.master.Set(kernel.Grads, grads); err != nil {
		return err
	}
	return e.Apply(opt, lr, step, true)
}

// Reduce finishes a step from its shards' contributions, in shard order, with exactly the
// arithmetic of Gradients and Apply: gradients summed left to right, batch statistics
// weighted by shard size, then the running statistics and one optimizer step.
func (e *Engine) Reduce(shards []ShardGrad, opt kernel.Optimizer, lr float64, step int64) (StepResult, error) {
	var r StepResult
	var loss float64
	for _, s := range shards {
		r.Samples += s.N
	}
	if r.Samples == 0 {
		return r, fmt.Errorf("train: a step without samples")
	}
	np, ns := e.master.Len(kernel.Grads), e.master.Len(kernel.BatchStats)
	first := true
	for k, s := range shards {
		if s.N == 0 {
			continue
		}
		if len(s.Grads) != np || len(s.Stats) != ns {
			return r, fmt.Errorf("train: shard %d has %d gradients and %d statistics, the model %d and %d", k, len(s.Grads), len(s.Stats), np, ns)
		}
		e.addShard(first, s.Grads, s.Stats, s.N, r.Samples)
		first = false
		loss += s.Loss
		r.Correct += s.Correct
	}
	r.Loss = loss / float64(r.Samples)
	if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
		return r, &DivergedError{Step: step, Loss: r.Loss}
	}
	if err := e.master.Set(kernel.Grads, e.acc); err != nil {
		return r, err
	}
	return r, e.Apply(opt, lr, step, true)
}
