package serving

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"idunno/kernel/onnx"
)

// ServedModel is one model this node serves and how.
type ServedModel struct {
	Name      string      `json:"name"`
	Batch     BatchConfig `json:"batch"`
	Instances int         `json:"instances"`           // kernel calls of this model that may run at once
	Precision string      `json:"precision,omitempty"` // kernel compute precision: "" (fp32), "bf16", "int8"
}

// LocalModels is the set of models this node serves: each one's metadata comes from the
// backend, and each has a modelRunner doing its dynamic batching.
type LocalModels struct {
	backend Backend
	timeout time.Duration
	onBatch atomic.Pointer[func(batchRecord)] // metrics hook
	// onChange, if set before use, is called after a model starts or stops being served.
	onChange func()

	mu      sync.RWMutex
	runners map[string]*modelRunner
	served  map[string]ServedModel
}

// NewLocalModels returns an empty set over backend; timeout bounds one backend call.
func NewLocalModels(b Backend, timeout time.Duration) *LocalModels {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return &LocalModels{backend: b, timeout: timeout, runners: map[string]*modelRunner{}, served: map[string]ServedModel{}}
}

// Serve starts serving a model the backend already has. Serving it again replaces its
// batching policy.
func (l *LocalModels) Serve(m ServedModel) error {
	if _, ok := l.backend.Metadata(m.Name); !ok {
		return fmt.Errorf("serving: serve %q: the backend has no such model", m.Name)
	}
	m.Batch = m.Batch.withDefaults()
	if m.Instances <= 0 {
		m.Instances = 1
	}
	r := newModelRunner(m.Name, l.backend, m.Batch, m.Instances, l.timeout)
	r.onBatch = func(b batchRecord) {
		if f := l.onBatch.Load(); f != nil {
			(*f)(b)
		}
	}
	l.mu.Lock()
	old := l.runners[m.Name]
	l.runners[m.Name], l.served[m.Name] = r, m
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
	if l.onChange != nil {
		l.onChange()
	}
	return nil
}

// Unserve stops serving a model.
func (l *LocalModels) Unserve(name string) {
	l.mu.Lock()
	r := l.runners[name]
	delete(l.runners, name)
	delete(l.served, name)
	l.mu.Unlock()
	if r != nil {
		r.Close()
		if l.onChange != nil {
			l.onChange()
		}
	}
}

// Close stops every model.
func (l *LocalModels) Close() {
	for _, m := range l.Served() {
		l.Unserve(m.Name)
	}
}

// Served lists the served models, sorted by name.
func (l *LocalModels) Served() []ServedModel {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := make([]ServedModel, 0, len(l.served))
	for _, m := range l.served {
		r = append(r, m)
	}
	slices.SortFunc(r, func(a, b ServedModel) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return r
}

// ServedAs returns how this node serves a model.
func (l *LocalModels) ServedAs(name string) (ServedModel, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	m, ok := l.served[name]
	return m, ok
}

// Metadata returns a served model's metadata.
func (l *LocalModels) Metadata(name string) (ModelMetadata, bool) {
	l.mu.RLock()
	_, ok := l.runners[name]
	l.mu.RUnlock()
	if !ok {
		return ModelMetadata{}, false
	}
	return l.backend.Metadata(name)
}

// Depths returns each served model's queue depth.
func (l *LocalModels) Depths() map[string]int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	d := make(map[string]int, len(l.runners))
	for n, r := range l.runners {
		d[n] = r.Depth()
	}
	return d
}

// InferOptions are a request's scheduling parameters.
type InferOptions struct {
	Priority uint64 // 1 is the highest level; 0 the default (see PriorityLevels)
}

// Infer checks in against the model's metadata and runs it through the model's batcher.
// It returns ok=false when this node does not serve the model.
func (l *LocalModels) Infer(ctx context.Context, name string, in []*onnx.Tensor, opt InferOptions) (out []*onnx.Tensor, ok bool, err error) {
	l.mu.RLock()
	r := l.runners[name]
	l.mu.RUnlock()
	if r == nil {
		return nil, false, nil
	}
	meta, _ := l.backend.Metadata(name)
	ordered, rows, err := CheckInputs(meta, in)
	if err != nil {
		return nil, true, err
	}
	out, err = r.Infer(ctx, ordered, rows, priorityLevel(opt.Priority))
	return out, true, err
}

// CheckInputs matches a request's inputs to the model's by name, converts each to the
// model's datatype where that is lossless or standard (convertTensor; otherwise a 400), and
// checks shape (every dimension but the first, the batch, must match where the model fixes it;
// all inputs must agree on the batch). It returns the inputs in model order and the rows.
func CheckInputs(meta ModelMetadata, in []*onnx.Tensor) ([]*onnx.Tensor, int, error) {
	if len(in) != len(meta.Inputs) {
		return nil, 0, badf("model %q takes %d inputs, request has %d", meta.Name, len(meta.Inputs), len(in))
	}
	ordered := make([]*onnx.Tensor, len(meta.Inputs))
	rows := -1
	for i, want := range meta.Inputs {
		var t *onnx.Tensor
		for _, c := range in {
			if c.Name == want.Name {
				t = c
				break
			}
		}
		if t == nil {
			return nil, 0, badf("model %q: input %q is missing", meta.Name, want.Name)
		}
		if got := DatatypeName(t.DType); got != want.Datatype {
			wt, ok := dtypeByName[want.Datatype]
			if !ok {
				return nil, 0, badf("model %q: input %q has datatype %s, which the protocol cannot express", meta.Name, want.Name, want.Datatype)
			}
			c, err := convertTensor(t, wt)
			if err != nil {
				return nil, 0, err
			}
			t = c
		}
		if !shapeFits(want.Shape, t.Dims) {
			return nil, 0, badf("model %q: input %q has shape %v, model wants %v", meta.Name, want.Name, t.Dims, want.Shape)
		}
		if rows >= 0 && int(t.Dims[0]) != rows {
			return nil, 0, badf("model %q: inputs disagree on the batch dimension", meta.Name)
		}
		rows = int(t.Dims[0])
		ordered[i] = t
	}
	if rows < 1 {
		return nil, 0, badf("model %q: batch dimension must be at least 1", meta.Name)
	}
	return ordered, rows, nil
}

func shapeFits(want, got []int64) bool {
	if len(want) != len(got) {
		return false
	}
	for i := 1; i < len(want); i++ {
		if want[i] >= 0 && want[i] != got[i] {
			return false
		}
	}
	return true
}
