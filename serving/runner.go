package serving

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"idunno/kernel/onnx"
)

// ErrQueueFull is returned when a model's batching queue is at its bound; the client gets 503.
var ErrQueueFull = errors.New("serving: model queue is full, try again later")

// call is one request waiting in a model's queue.
type call struct {
	ctx    context.Context
	in     []*onnx.Tensor // in the model's input order
	rows   int
	queued time.Time
	done   chan callResult // capacity 1: the runner never blocks on it
}

type callResult struct {
	out []*onnx.Tensor
	err error
}

// modelRunner serves one model: it owns the model's batchQueue (under mu) and one
// goroutine that forms batches and hands them to the backend, at most `instances` at once.
type modelRunner struct {
	name      string
	backend   Backend
	cfg       BatchConfig
	timeout   time.Duration // bound on one backend call
	now       func() time.Time
	onBatch   func(batchRecord) // metrics hook, may be nil
	mu        sync.Mutex
	q         *batchQueue[*call]
	wake      chan struct{}
	slots     chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

func newModelRunner(name string, b Backend, cfg BatchConfig, instances int, timeout time.Duration) *modelRunner {
	cfg = cfg.withDefaults()
	if instances <= 0 {
		instances = 1
	}
	r := &modelRunner{
		name: name, backend: b, cfg: cfg, timeout: timeout, now: time.Now,
		q:    newBatchQueue[*call](cfg),
		wake: make(chan struct{}, 1), slots: make(chan struct{}, instances), stop: make(chan struct{}),
	}
	r.wg.Add(1)
	go r.loop()
	return r
}

// Depth is the number of requests waiting for a batch.
func (r *modelRunner) Depth() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.q.Len()
}

// Infer queues in (rows rows, in model input order) at a priority level and waits for its
// share of a batch.
func (r *modelRunner) Infer(ctx context.Context, in []*onnx.Tensor, rows, level int) ([]*onnx.Tensor, error) {
	c := &call{ctx: ctx, in: in, rows: rows, done: make(chan callResult, 1)}
	r.mu.Lock()
	c.queued = r.now()
	ok := r.q.PushLevel(c.queued, rows, level, c)
	r.mu.Unlock()
	if !ok {
		return nil, ErrQueueFull
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	select {
	case res := <-c.done:
		return res.out, res.err
	case <-ctx.Done():
		return nil, fmt.Errorf("serving: %s: %w", r.name, ctx.Err())
	case <-r.stop:
		return nil, fmt.Errorf("serving: %s: model is being unloaded", r.name)
	}
}

// Close stops the runner; queued requests fail, running batches finish.
func (r *modelRunner) Close() {
	r.closeOnce.Do(func() { close(r.stop) })
	r.wg.Wait()
}

func (r *modelRunner) loop() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select { // a free instance first: while all are busy, requests pile up into bigger batches
		case r.slots <- struct{}{}:
		case <-r.stop:
			return
		}
		for {
			r.mu.Lock()
			batch, wait := r.q.Next(r.now())
			r.mu.Unlock()
			if batch != nil {
				r.wg.Add(1)
				go r.run(batch)
				break
			}
			var tc <-chan time.Time
			if wait > 0 {
				timer.Reset(wait)
				tc = timer.C
			}
			select {
			case <-r.wake:
			case <-tc:
			case <-r.stop:
				return
			}
			if tc != nil && !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	}
}

// run executes one batch and delivers each call its rows of the outputs.
func (r *modelRunner) run(batch []*call) {
	defer r.wg.Done()
	defer func() { <-r.slots }()
	start := r.now()
	live := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() == nil {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	rec := batchRecord{model: r.name, queued: make([]time.Duration, len(live))}
	for i, c := range live {
		rec.rows += c.rows
		rec.queued[i] = start.Sub(c.queued)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	in := live[0].in
	if len(live) > 1 {
		in = concatBatch(live)
	}
	t1 := r.now()
	out, err := r.backend.Infer(ctx, r.name, in)
	t2 := r.now()
	if err != nil {
		err = fmt.Errorf("serving: %s: %w", r.name, err)
	}
	var parts [][]*onnx.Tensor
	if err == nil && len(live) > 1 {
		parts, err = splitBatch(out, live, rec.rows)
	}
	rec.input, rec.infer, rec.output, rec.failed = t1.Sub(start), t2.Sub(t1), r.now().Sub(t2), err != nil
	if r.onBatch != nil {
		r.onBatch(rec)
	}
	for i, c := range live {
		if parts != nil {
			c.done <- callResult{out: parts[i]}
		} else {
			c.done <- callResult{out: out, err: err}
		}
	}
}

// concatBatch joins the calls' inputs along the first dimension. Validation made every
// call's tensors agree in type and in every dimension but the first.
func concatBatch(calls []*call) []*onnx.Tensor {
	first := calls[0].in
	in := make([]*onnx.Tensor, len(first))
	for i, t := range first {
		dims := append([]int64(nil), t.Dims...)
		dims[0] = 0
		j := &onnx.Tensor{Name: t.Name, DType: t.DType, Dims: dims}
		for _, c := range calls {
			ct := c.in[i]
			j.Dims[0] += ct.Dims[0]
			switch {
			case ct.F32 != nil:
				j.F32 = append(j.F32, ct.F32...)
			case ct.F64 != nil:
				j.F64 = append(j.F64, ct.F64...)
			default:
				j.I64 = append(j.I64, ct.I64...)
			}
		}
		in[i] = j
	}
	return in
}

// splitBatch cuts each output along its first dimension, which must equal rows.
func splitBatch(out []*onnx.Tensor, calls []*call, rows int) ([][]*onnx.Tensor, error) {
	parts := make([][]*onnx.Tensor, len(calls))
	for _, t := range out {
		if len(t.Dims) == 0 || t.Dims[0] != int64(rows) {
			return nil, fmt.Errorf("serving: output %q has shape %v, not %d rows: cannot split a batch", t.Name, t.Dims, rows)
		}
		per := elements(t) / rows
		r0 := 0
		for i, c := range calls {
			dims := append([]int64(nil), t.Dims...)
			dims[0] = int64(c.rows)
			p := &onnx.Tensor{Name: t.Name, DType: t.DType, Dims: dims}
			lo, hi := r0*per, (r0+c.rows)*per
			switch {
			case t.F32 != nil:
				p.F32 = t.F32[lo:hi:hi]
			case t.F64 != nil:
				p.F64 = t.F64[lo:hi:hi]
			case t.I64 != nil:
				p.I64 = t.I64[lo:hi:hi]
			default:
				s := elemSize(t.DType)
				p.Raw = t.Raw[lo*s : hi*s : hi*s]
			}
			parts[i] = append(parts[i], p)
			r0 += c.rows
		}
	}
	return parts, nil
}
