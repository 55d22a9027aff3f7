package serving

import (
	"context"
	"fmt"
	"math/bits"
	"os"
	"sync"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/modelcache"
)

// KernelBackend runs models through IDunno's kernel. The kernel compiles one plan per batch
// size and keeps 8 per model, so batches of more than exactRows rows whose size is not a
// power of two are padded with zero rows up to the next one (and the padding cut from the
// outputs): batch sizes 1-4, 8, 16, 32 and 64 are 8 plans, and dynamic batching up to 64
// rows never evicts one. Small batches run exactly, where padding would waste the most.
type KernelBackend struct {
	threads int
	cache   *modelcache.Cache // nil: each model loaded for this backend alone

	mu     sync.RWMutex
	models map[string]*kernelModel
}

type kernelModel struct {
	m        *kernel.Model
	h        *modelcache.Handle // the cache's hold on m (nil: m is this backend's own)
	meta     ModelMetadata
	outTypes map[string]onnx.DataType // declared output datatypes
}

// exactRows is the largest batch that runs without padding.
const exactRows = 4

// NewKernelBackend returns an empty backend whose model instances use threads kernel threads.
func NewKernelBackend(threads int) *KernelBackend {
	return &KernelBackend{threads: threads, models: map[string]*kernelModel{}}
}

// NewKernelBackendCached is NewKernelBackend taking its models from the node's model
// cache (shared with the jobs' executor), so a model file the node already holds is not
// loaded again.
func NewKernelBackendCached(threads int, cache *modelcache.Cache) *KernelBackend {
	b := NewKernelBackend(threads)
	b.cache = cache
	return b
}

// LoadFile loads an ONNX file under name, replacing any model of that name.
func (b *KernelBackend) LoadFile(name, path string) error {
	return b.LoadFileAt(name, path, kernel.FP32)
}

// LoadFileAt is LoadFile computing at precision prec.
func (b *KernelBackend) LoadFileAt(name, path string, prec kernel.Precision) error {
	opt := kernel.Options{Threads: b.threads, Precision: prec}
	if b.cache == nil {
		m, err := kernel.Load(path, opt)
		if err != nil {
			return fmt.Errorf("serving: load %s: %w", name, err)
		}
		b.add(name, m, nil)
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("serving: load %s: %w", name, err)
	}
	h, err := b.cache.Acquire(modelcache.Key(raw, b.threads, prec), func() (*kernel.Model, error) {
		om, err := onnx.Decode(raw)
		if err != nil {
			return nil, err
		}
		return kernel.LoadModel(om, opt)
	})
	if err != nil {
		return fmt.Errorf("serving: load %s: %w", name, err)
	}
	b.add(name, h.Model(), h)
	return nil
}

// LoadModel loads a decoded ONNX model under name.
func (b *KernelBackend) LoadModel(name string, om *onnx.Model) error {
	m, err := kernel.LoadModel(om, kernel.Options{Threads: b.threads})
	if err != nil {
		return fmt.Errorf("serving: load %s: %w", name, err)
	}
	b.add(name, m, nil)
	return nil
}

func (b *KernelBackend) add(name string, m *kernel.Model, h *modelcache.Handle) {
	km := &kernelModel{m: m, h: h, meta: MetadataFromONNX(name, m.Inputs(), m.Outputs()), outTypes: map[string]onnx.DataType{}}
	for _, o := range m.Outputs() {
		if o.DType != onnx.Undefined {
			km.outTypes[o.Name] = o.DType
		}
	}
	b.mu.Lock()
	old := b.models[name]
	b.models[name] = km
	b.mu.Unlock()
	if old != nil {
		old.close()
	}
}

// close lets go of the model: back to the cache, or closed if it is this backend's own.
func (km *kernelModel) close() {
	if km.h != nil {
		km.h.Release()
	} else {
		km.m.Close()
	}
}

// Unload closes one model.
func (b *KernelBackend) Unload(name string) {
	b.mu.Lock()
	km := b.models[name]
	delete(b.models, name)
	b.mu.Unlock()
	if km != nil {
		km.close()
	}
}

// Close unloads every model.
func (b *KernelBackend) Close() {
	b.mu.Lock()
	ms := b.models
	b.models = map[string]*kernelModel{}
	b.mu.Unlock()
	for _, km := range ms {
		km.close()
	}
}

// Metadata implements Backend.
func (b *KernelBackend) Metadata(model string) (ModelMetadata, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	km, ok := b.models[model]
	if !ok {
		return ModelMetadata{}, false
	}
	return km.meta, true
}

// Infer implements Backend.
func (b *KernelBackend) Infer(ctx context.Context, model string, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	b.mu.RLock()
	km, ok := b.models[model]
	b.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("serving: kernel backend has no model %q", model)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows := int(in[0].Dims[0])
	padded := rows
	if rows > exactRows && rows&(rows-1) != 0 {
		padded = 1 << bits.Len(uint(rows))
		in = padRows(in, padded)
	}
	out, err := km.m.Run(in)
	if err != nil {
		return nil, err
	}
	if padded != rows {
		for i, t := range out {
			out[i] = cutRows(t, padded, rows)
		}
	}
	realTypes(out, km.outTypes)
	return out, nil
}

// realTypes gives integer outputs the datatype the model declares: the kernel hands every
// non-float tensor back as int64 values, which fit the declared type.
func realTypes(out []*onnx.Tensor, types map[string]onnx.DataType) {
	for _, t := range out {
		if want, ok := types[t.Name]; ok && t.I64 != nil && t.DType != want {
			if _, _, isInt := intRange(want); isInt {
				t.DType = want
			}
		}
	}
}

// padRows returns copies of ts grown along the first dimension to rows, with zeros.
func padRows(ts []*onnx.Tensor, rows int) []*onnx.Tensor {
	r := make([]*onnx.Tensor, len(ts))
	for i, t := range ts {
		per := elements(t) / int(t.Dims[0])
		p := &onnx.Tensor{Name: t.Name, DType: t.DType, Dims: append([]int64(nil), t.Dims...)}
		p.Dims[0] = int64(rows)
		switch {
		case t.F32 != nil:
			p.F32 = append(make([]float32, 0, rows*per), t.F32...)[:rows*per]
		case t.F64 != nil:
			p.F64 = append(make([]float64, 0, rows*per), t.F64...)[:rows*per]
		default:
			p.I64 = append(make([]int64, 0, rows*per), t.I64...)[:rows*per]
		}
		r[i] = p
	}
	return r
}

// cutRows keeps the first rows of t's first dimension (which is padded); other outputs
// (no batch dimension) pass unchanged.
func cutRows(t *onnx.Tensor, padded, rows int) *onnx.Tensor {
	if len(t.Dims) == 0 || t.Dims[0] != int64(padded) {
		return t
	}
	per := elements(t) / padded
	c := *t
	c.Dims = append([]int64(nil), t.Dims...)
	c.Dims[0] = int64(rows)
	switch {
	case t.F32 != nil:
		c.F32 = t.F32[:rows*per]
	case t.F64 != nil:
		c.F64 = t.F64[:rows*per]
	case t.I64 != nil:
		c.I64 = t.I64[:rows*per]
	}
	return &c
}
