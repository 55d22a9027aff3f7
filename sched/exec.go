package sched

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/modelcache"
	"idunno/sched/dataset"

	lru "github.com/hashicorp/golang-lru/v2"
)

// KernelExecutor is the worker's Executor: models and datasets come from the store (and
// stay cached in memory, a few of each), inputs are preprocessed by sched/dataset, and the
// kernel runs the model with Threads threads. The kernel's calls (plan builds and runs)
// run on threads at nice Nice (0: as the process), and so do the OpenMP threads they start;
// preprocessing stays on ordinary goroutines (see lowThreads).
type KernelExecutor struct {
	Blobs   Blobs
	Threads int
	Keep    int // models and datasets kept in memory (each); default 4
	Nice    int
	// FetchTimeout is the deadline of reading one image of a folder dataset from the store
	// (0: DefaultFetchTimeout).
	FetchTimeout time.Duration
	Logf         func(string, ...any) // nil: no log
	// Models is the node's model cache, shared with HTTP serving; nil: models are loaded
	// for the executor alone.
	Models *modelcache.Cache

	lowOnce sync.Once
	low     *lowThreads

	// models and data are LRU caches (hashicorp/golang-lru/v2) of Keep entries each, made
	// at first use; mu makes a lookup and the insert that follows one step.
	mu     sync.Mutex
	models *lru.Cache[string, *cachedModel]
	data   *lru.Cache[string, *cachedData]
	trains map[string]*trainCache
}

type cachedModel struct {
	once sync.Once
	done atomic.Bool // once has run and m is loaded (Ready reads it without waiting)
	// prepared holds the batch sizes whose plan is built (Ready reads it while a run holds mu)
	prepared sync.Map
	m        *kernel.Model
	h        *modelcache.Handle // Models' hold on m (nil: m is the executor's own)
	dims     []int64
	err      error
	buf      []float32 // reused input buffer (the worker runs one task at a time)
	mu       sync.Mutex
}

type cachedData struct {
	once sync.Once
	done atomic.Bool // once has run without error
	ds   dataset.Dataset
	arr  *dataset.Array // format "array": a named input's .npy
	err  error
	// A gzip dataset's decompressed copy in the store (UnzippedName): its name, and its
	// bytes when this executor decompressed the file itself (nil when it read the copy).
	unzippedName string
	unzipped     []byte
	publish      sync.Once
}

// UnzippedName is the store name of the decompressed copy of the gzip dataset file gz
// (content-addressed: the same bytes under any name share it). The coordinator writes it
// when a job's probe decompresses the file (Probe), and workers read it instead of the
// compressed file: gunzip ran at about 30 MB/s on the local cluster's shared cores,
// Fashion-MNIST's 26 MB of training images took 0.4-0.9 CPU-s on every worker that
// joined a job, at the nodes' normal priority, above the compute of every other worker.
func UnzippedName(gz []byte) string {
	sum := sha256.Sum256(gz)
	return "idunno/cache/unzipped/" + hex.EncodeToString(sum[:16])
}

func (x *KernelExecutor) keep() int {
	if x.Keep <= 0 {
		return 4
	}
	return x.Keep
}

// model returns the model stored as name, loaded at precision prec ("": fp32); each
// precision is its own cache entry.
func (x *KernelExecutor) model(ctx context.Context, name, prec string) (*cachedModel, error) {
	pr, err := kernel.ParsePrecision(prec)
	if err != nil {
		return nil, fmt.Errorf("sched: model %q: %w", name, err)
	}
	key := modelKey(name, pr)
	x.mu.Lock()
	if x.models == nil {
		// An evicted model is let go of once no run holds it (see release).
		x.models, _ = lru.NewWithEvict(x.keep(), func(_ string, c *cachedModel) {
			go func() {
				c.once.Do(func() {})
				c.mu.Lock()
				defer c.mu.Unlock()
				c.release()
			}()
		})
	}
	c, ok := x.models.Get(key)
	if !ok {
		c = &cachedModel{}
		x.models.Add(key, c)
	}
	x.mu.Unlock()
	c.once.Do(func() {
		b, err := x.Blobs.Get(ctx, name)
		if err != nil {
			c.err = fmt.Errorf("sched: model %q: %w", name, err)
			return
		}
		om, err := onnx.Decode(b)
		if err != nil {
			c.err = fmt.Errorf("sched: model %q: %w", name, err)
			return
		}
		var m *kernel.Model
		load := func() (*kernel.Model, error) {
			// The load compiles batch 1 (its check), and the job's batch is built after it
			// (prepare): a load compiling the job's batch at once, which saves that plan
			// build, made make demo's worst fair-time sample read 17.6-27.8% in four runs,
			// against 11.4-14.6% in four without (2026-11-28; not traced).
			x.lowered(func() { m, err = kernel.LoadModel(om, kernel.Options{Threads: max(x.Threads, 1), Precision: pr}) })
			return m, err
		}
		if x.Models != nil {
			c.h, err = x.Models.Acquire(modelcache.Key(b, max(x.Threads, 1), pr), load)
			if err == nil {
				m = c.h.Model()
			}
		} else {
			m, err = load()
		}
		if err != nil {
			c.err = fmt.Errorf("sched: model %q: %w", name, err)
			return
		}
		if in := m.Inputs(); len(in) < 1 || len(m.Outputs()) < 1 {
			c.err = fmt.Errorf("sched: model %q has %d inputs and %d outputs: jobs need at least one of each", name, len(in), len(m.Outputs()))
			c.m = m
			c.release()
			c.m, c.h = nil, nil
			return
		}
		c.m, c.dims = m, m.Inputs()[0].Dims
		c.done.Store(true)
	})
	if c.err != nil {
		x.mu.Lock()
		if cur, ok := x.models.Peek(key); ok && cur == c {
			x.models.Remove(key) // a failed load is retried next time (the file may appear)
		}
		x.mu.Unlock()
	}
	return c, c.err
}

func modelKey(name string, pr kernel.Precision) string {
	if pr != kernel.FP32 {
		return name + "\x00" + pr.String()
	}
	return name
}

// ModelKey names a job's model as workers report the models they have loaded: the SDFS
// name, and the precision unless fp32 (jobs of one model and precision share it).
func ModelKey(spec JobSpec) string {
	pr, err := kernel.ParsePrecision(spec.Precision)
	if err != nil {
		return spec.Model
	}
	return modelKey(spec.Model, pr)
}

// Loaded lists the models loaded (Preparer).
func (x *KernelExecutor) Loaded() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := []string{}
	if x.models == nil {
		return out
	}
	for _, k := range x.models.Keys() {
		if c, ok := x.models.Peek(k); ok && c.done.Load() {
			out = append(out, k)
		}
	}
	return out
}

// Ready reports whether a task of the job would start computing at once: its model is
// loaded, the plan for its batch size built, and its dataset read (Preparer). It never
// waits for a load in progress.
func (x *KernelExecutor) Ready(spec JobSpec) bool {
	pr, err := kernel.ParsePrecision(spec.Precision)
	if err != nil {
		return true // Run reports the error at once
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.models == nil {
		return false
	}
	c, ok := x.models.Peek(modelKey(spec.Model, pr))
	if !ok || !c.done.Load() {
		return false
	}
	if _, ok := c.prepared.Load(spec.Batch); !ok {
		return false
	}
	if len(spec.Inputs) > 0 {
		return true
	}
	if x.data == nil {
		return false
	}
	d, ok := x.data.Peek(dataKey(spec.Data, spec.Format))
	return ok && d.done.Load()
}

// Prepare gets the job ready to run (Preparer): it loads the model, builds the plan for
// the job's batch size and reads the dataset, as the job's first task would.
func (x *KernelExecutor) Prepare(ctx context.Context, spec JobSpec) error {
	c, err := x.model(ctx, spec.Model, spec.Precision)
	if err != nil {
		return err
	}
	if len(spec.Inputs) == 0 {
		if _, err := x.dataset(ctx, spec.Data, spec.Format); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.prepare(x, spec.Batch)
}

// prepare builds the plan for batch size batch. Called with c.mu held.
func (c *cachedModel) prepare(x *KernelExecutor, batch int) error {
	if c.m == nil {
		return fmt.Errorf("sched: model released")
	}
	var err error
	x.lowered(func() { err = c.m.Prepare(batch) })
	if err == nil {
		c.prepared.Store(batch, true)
	}
	return err
}

// lowered runs f (a kernel call) on a thread at nice x.Nice.
func (x *KernelExecutor) lowered(f func()) {
	x.lowOnce.Do(func() { x.low = &lowThreads{nice: x.Nice, logf: x.Logf} })
	x.low.do(f)
}

// release lets go of the model: back to the node's cache, or closed if it is the
// executor's own.
func (c *cachedModel) release() {
	switch {
	case c.h != nil:
		c.h.Release()
	case c.m != nil:
		c.m.Close()
	}
}

// Lister is a Blobs that can list names by prefix (for datasets that are folders of images).
type Lister interface {
	List(ctx context.Context, prefix string) ([]string, error)
}

// MaxImageCache bounds the bytes of image files one folder dataset keeps in memory.
const MaxImageCache = 512 << 20

// DefaultFetchTimeout is KernelExecutor.FetchTimeout's default: 30 s, the same as
// SchedConfig.ReadTimeout's for a task's result.
const DefaultFetchTimeout = 30 * time.Second

// openImages opens a folder of PNG/JPEG files stored under an SDFS prefix; files are fetched
// on first use and kept (up to MaxImageCache bytes).
func (x *KernelExecutor) openImages(ctx context.Context, prefix string) (dataset.Dataset, error) {
	l, ok := x.Blobs.(Lister)
	if !ok {
		return nil, fmt.Errorf("sched: the store cannot list %s", prefix)
	}
	names, err := l.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("sched: dataset %q: no files under that prefix", prefix)
	}
	var mu sync.Mutex
	cache, size := map[string][]byte{}, 0
	return dataset.OpenImages(names, func(name string) ([]byte, error) {
		mu.Lock()
		b, ok := cache[name]
		mu.Unlock()
		if ok {
			return b, nil
		}
		limit := x.FetchTimeout
		if limit <= 0 {
			limit = DefaultFetchTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		b, err := x.Blobs.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		if size+len(b) <= MaxImageCache {
			cache[name], size = b, size+len(b)
		}
		mu.Unlock()
		return b, nil
	})
}

func (x *KernelExecutor) dataset(ctx context.Context, name, format string) (dataset.Dataset, error) {
	c, err := x.cachedDataset(ctx, name, format)
	if err != nil {
		return nil, err
	}
	return c.ds, nil
}

// dataKey names a dataset's entry in the LRU cache of datasets (cachedDataset, Ready).
func dataKey(name, format string) string { return format + "|" + name }

// cachedDataset returns the dataset stored as name in format, loaded once and kept in the
// LRU cache of datasets; a failed load is not kept.
func (x *KernelExecutor) cachedDataset(ctx context.Context, name, format string) (*cachedData, error) {
	key := dataKey(name, format)
	x.mu.Lock()
	if x.data == nil {
		x.data, _ = lru.New[string, *cachedData](x.keep())
	}
	c, ok := x.data.Get(key)
	if !ok {
		c = &cachedData{}
		x.data.Add(key, c)
	}
	x.mu.Unlock()
	c.once.Do(func() {
		if format == "array" {
			b, err := x.Blobs.Get(ctx, name)
			if err != nil {
				c.err = fmt.Errorf("sched: input array %q: %w", name, err)
				return
			}
			if c.arr, c.err = dataset.ReadArray(b); c.err != nil {
				c.err = fmt.Errorf("sched: input array %q: %w", name, c.err)
			}
			return
		}
		if format == "images" {
			c.ds, c.err = x.openImages(ctx, name)
			return
		}
		if format != "" && format != "idx" && format != "npy" {
			c.err = fmt.Errorf("sched: dataset format %q: want idx, npy or images (a folder of PNG/JPEG)", format)
			return
		}
		b, err := x.Blobs.Get(ctx, name)
		if err != nil {
			c.err = fmt.Errorf("sched: dataset %q: %w", name, err)
			return
		}
		if dataset.Gzipped(b) {
			c.unzippedName = UnzippedName(b)
			// The copy, when the coordinator has written it; one that is missing or does
			// not open is only a lost shortcut.
			if raw, err := x.Blobs.Get(ctx, c.unzippedName); err == nil {
				if c.ds, c.err = dataset.OpenBytes(raw); c.err == nil {
					return
				}
				x.logf("sched: dataset %q: its decompressed copy %s does not open (%v): decompressing the file", name, c.unzippedName, c.err)
			}
			if b, c.err = dataset.Gunzip(b); c.err != nil {
				c.err = fmt.Errorf("sched: dataset %q: %w", name, c.err)
				return
			}
			c.unzipped = b
		}
		c.ds, c.err = dataset.OpenBytes(b)
		if c.err != nil {
			c.err = fmt.Errorf("sched: dataset %q: %w", name, c.err)
		}
	})
	if c.err == nil {
		c.done.Store(true)
	}
	if c.err != nil {
		x.mu.Lock()
		if cur, ok := x.data.Peek(key); ok && cur == c {
			x.data.Remove(key)
		}
		x.mu.Unlock()
		return nil, c.err
	}
	return c, nil
}

// arrays loads a multi-input job's arrays in the model's input order and checks them
// against the model: every input bound, one row count, each row of the input's shape.
func (x *KernelExecutor) arrays(ctx context.Context, spec JobSpec, c *cachedModel) ([]*dataset.Array, []onnx.ValueInfo, error) {
	ins := c.m.Inputs()
	if len(ins) != len(spec.Inputs) {
		return nil, nil, fmt.Errorf("sched: model %s has %d inputs, job binds %d", spec.Model, len(ins), len(spec.Inputs))
	}
	var out []*dataset.Array
	for _, in := range ins {
		name, ok := spec.Inputs[in.Name]
		if !ok {
			return nil, nil, fmt.Errorf("sched: model %s input %q is not bound (--input %s=ARRAY.npy)", spec.Model, in.Name, in.Name)
		}
		a, err := x.cachedDataset(ctx, name, "array")
		if err != nil {
			return nil, nil, err
		}
		arr := a.arr
		if len(in.Dims) != len(arr.Dims) {
			return nil, nil, fmt.Errorf("sched: input %q of model %s has dims %v, array %s rows are %v", in.Name, spec.Model, in.Dims, name, arr.Dims[1:])
		}
		for i := 1; i < len(in.Dims); i++ {
			if in.Dims[i] >= 0 && in.Dims[i] != arr.Dims[i] {
				return nil, nil, fmt.Errorf("sched: input %q of model %s has dims %v, array %s rows are %v", in.Name, spec.Model, in.Dims, name, arr.Dims[1:])
			}
		}
		if (in.DType == onnx.Float) != (arr.DType == onnx.Float) {
			return nil, nil, fmt.Errorf("sched: input %q of model %s is %s, array %s is %s", in.Name, spec.Model, in.DType, name, arr.DType)
		}
		if len(out) > 0 && arr.Len() != out[0].Len() {
			return nil, nil, fmt.Errorf("sched: arrays differ in rows: %d and %d", out[0].Len(), arr.Len())
		}
		out = append(out, arr)
	}
	return out, ins, nil
}

// publishUnzipped writes the decompressed copy of a gzip dataset this executor
// decompressed (see UnzippedName), once, in the background: the coordinator's probe of a
// new job does, before any worker reads the dataset. Failing costs workers the shortcut
// only, so it is logged, not returned.
func (x *KernelExecutor) publishUnzipped(c *cachedData) {
	if c.unzipped == nil {
		return
	}
	c.publish.Do(func() {
		name, b := c.unzippedName, c.unzipped
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
			defer cancel()
			if err := x.Blobs.Put(ctx, name, b); err != nil {
				x.logf("sched: writing the decompressed copy %s: %v", name, err)
			}
		}()
	})
}

// publishTimeout bounds the write of a dataset's decompressed copy (up to 2 GB, 4
// replicas).
const publishTimeout = 5 * time.Minute

// ProbeModel loads the model.
func (x *KernelExecutor) ProbeModel(ctx context.Context, name string) error {
	_, err := x.model(ctx, name, "")
	return err
}

// Probe loads the model and the dataset and preprocesses one sample into the model's input.
func (x *KernelExecutor) Probe(ctx context.Context, spec JobSpec) (int, error) {
	c, err := x.model(ctx, spec.Model, spec.Precision)
	if err != nil {
		return 0, err
	}
	if len(spec.Inputs) > 0 {
		arrs, ins, err := x.arrays(ctx, spec, c)
		if err != nil {
			return 0, err
		}
		for _, in := range ins {
			if len(in.Dims) > 0 && in.Dims[0] > 0 && int(in.Dims[0]) != spec.Batch {
				return 0, fmt.Errorf("sched: model %s has a fixed batch of %d, job asks for %d", spec.Model, in.Dims[0], spec.Batch)
			}
		}
		return arrs[0].Len(), nil
	}
	if n := len(c.m.Inputs()); n != 1 {
		return 0, fmt.Errorf("sched: model %s has %d inputs: bind each with --input NAME=ARRAY.npy instead of --data", spec.Model, n)
	}
	cd, err := x.cachedDataset(ctx, spec.Data, spec.Format)
	if err != nil {
		return 0, err
	}
	ds := cd.ds
	x.publishUnzipped(cd)
	if err := dataset.Check(ds, spec.Pre, c.dims); err != nil {
		return 0, fmt.Errorf("sched: model %s does not fit dataset %s: %w", spec.Model, spec.Data, err)
	}
	if len(c.dims) > 0 && c.dims[0] > 0 && int(c.dims[0]) != spec.Batch {
		return 0, fmt.Errorf("sched: model %s has a fixed batch of %d, job asks for %d", spec.Model, c.dims[0], spec.Batch)
	}
	return ds.Len(), nil
}

// FLOPsPerQuery returns the kernel's count of the model's FLOPs per query at the job's batch
// size (0 if the model can't be loaded or counted).
func (x *KernelExecutor) FLOPsPerQuery(ctx context.Context, spec JobSpec) float64 {
	c, err := x.model(ctx, spec.Model, spec.Precision)
	if err != nil || spec.Batch <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.m.FLOPs(spec.Batch) / float64(spec.Batch)
	if f <= 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// Run preprocesses and runs queries [from, to) batch by batch.
func (x *KernelExecutor) Run(ctx context.Context, spec JobSpec, from, to int) ([]Prediction, []int64, error) {
	c, err := x.model(ctx, spec.Model, spec.Precision)
	if err != nil {
		return nil, nil, err
	}
	if len(spec.Inputs) > 0 {
		return x.runArrays(ctx, spec, c, from, to)
	}
	if n := len(c.m.Inputs()); n != 1 {
		return nil, nil, fmt.Errorf("sched: model %s has %d inputs: bind each with --input NAME=ARRAY.npy instead of --data", spec.Model, n)
	}
	ds, err := x.dataset(ctx, spec.Data, spec.Format)
	if err != nil {
		return nil, nil, err
	}
	if to > ds.Len() {
		return nil, nil, fmt.Errorf("sched: dataset %s has %d queries, task wants up to %d", spec.Data, ds.Len(), to)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The plan for this batch size is built before the first batch is timed: that one-off
	// belongs to the task's busy time (the controller's cost leaves it out, see
	// JobStats.Record), not to the latency of the queries in the batch.
	if err := c.prepare(x, spec.Batch); err != nil {
		return nil, nil, err
	}
	preds := make([]Prediction, 0, to-from)
	lat := make([]int64, 0, (to-from+spec.Batch-1)/spec.Batch)
	for b := from; b < to; b += spec.Batch {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		e := min(b+spec.Batch, to)
		start := time.Now()
		in, err := dataset.BatchInto(c.buf, ds, b, e, spec.Pre, c.dims)
		if err != nil {
			return nil, nil, err
		}
		if cap(in.F32) > cap(c.buf) {
			c.buf = in.F32[:cap(in.F32)]
		}
		var outs []*onnx.Tensor
		x.lowered(func() { outs, err = c.m.Run([]*onnx.Tensor{in}) })
		if err != nil {
			return nil, nil, err
		}
		out := outs[0]
		rows := e - b
		if len(out.F32) == 0 || len(out.F32)%rows != 0 {
			return nil, nil, fmt.Errorf("sched: model %s output of %d values for a batch of %d", spec.Model, len(out.F32), rows)
		}
		preds = append(preds, Argmax(out.F32, rows, len(out.F32)/rows)...)
		lat = append(lat, time.Since(start).Microseconds())
	}
	return preds, lat, nil
}

// runArrays runs queries [from, to) of a multi-input job batch by batch.
func (x *KernelExecutor) runArrays(ctx context.Context, spec JobSpec, c *cachedModel, from, to int) ([]Prediction, []int64, error) {
	arrs, ins, err := x.arrays(ctx, spec, c)
	if err != nil {
		return nil, nil, err
	}
	if to > arrs[0].Len() {
		return nil, nil, fmt.Errorf("sched: input arrays have %d rows, task wants up to %d", arrs[0].Len(), to)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.prepare(x, spec.Batch); err != nil {
		return nil, nil, err
	}
	preds := make([]Prediction, 0, to-from)
	lat := make([]int64, 0, (to-from+spec.Batch-1)/spec.Batch)
	for b := from; b < to; b += spec.Batch {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		e := min(b+spec.Batch, to)
		start := time.Now()
		batch := make([]*onnx.Tensor, len(arrs))
		for i, a := range arrs {
			if batch[i], err = a.Rows(b, e, ins[i].DType); err != nil {
				return nil, nil, err
			}
		}
		outs, err := c.m.Run(batch)
		if err != nil {
			return nil, nil, err
		}
		out := outs[0]
		rows := e - b
		if len(out.F32) == 0 || len(out.F32)%rows != 0 {
			return nil, nil, fmt.Errorf("sched: model %s output of %d values for a batch of %d", spec.Model, len(out.F32), rows)
		}
		preds = append(preds, Argmax(out.F32, rows, len(out.F32)/rows)...)
		lat = append(lat, time.Since(start).Microseconds())
	}
	return preds, lat, nil
}
