package serving

import (
	"context"
	"fmt"
	"sync"

	"idunno/kernel/onnx"
)

// Backend runs models on this node: the seam between the HTTP endpoint and the kernel.
// KernelBackend is the real one; FakeBackend stands in for it in tests.
// Infer gets inputs in the order of the model's metadata inputs, first dimension the batch,
// and must be safe for concurrent calls on different models.
type Backend interface {
	Metadata(model string) (ModelMetadata, bool)
	Infer(ctx context.Context, model string, in []*onnx.Tensor) ([]*onnx.Tensor, error)
}

// FakeFunc computes a fake model's outputs.
type FakeFunc func(in []*onnx.Tensor) ([]*onnx.Tensor, error)

// FakeBackend is an in-memory Backend for tests: each model is a metadata record and a Go
// function. It records the batch size (rows) of every call.
type FakeBackend struct {
	mu     sync.Mutex
	models map[string]fakeModel
	Calls  []int // rows of each Infer call, in order
	gates  map[string]chan struct{}
}

type fakeModel struct {
	meta ModelMetadata
	fn   FakeFunc
}

// NewFakeBackend returns an empty fake.
func NewFakeBackend() *FakeBackend { return &FakeBackend{models: map[string]fakeModel{}} }

// Add registers a model.
func (f *FakeBackend) Add(meta ModelMetadata, fn FakeFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.models[meta.Name] = fakeModel{meta, fn}
}

// Metadata implements Backend.
func (f *FakeBackend) Metadata(model string) (ModelMetadata, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.models[model]
	return m.meta, ok
}

// Infer implements Backend.
func (f *FakeBackend) Infer(ctx context.Context, model string, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	f.mu.Lock()
	m, ok := f.models[model]
	if ok && len(in) > 0 && len(in[0].Dims) > 0 {
		f.Calls = append(f.Calls, int(in[0].Dims[0]))
	}
	gate := f.gates[model]
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("fake: no model %q", model)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return m.fn(in)
}

// SetGate makes every Infer of model wait for a value from gate (nil: no waiting).
func (f *FakeBackend) SetGate(model string, gate chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gates == nil {
		f.gates = map[string]chan struct{}{}
	}
	f.gates[model] = gate
}

// CallRows returns a copy of the recorded batch sizes.
func (f *FakeBackend) CallRows() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.Calls...)
}
