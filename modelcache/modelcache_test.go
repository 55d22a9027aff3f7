package modelcache

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

func lenet(t *testing.T) *onnx.Model {
	t.Helper()
	m, err := zoo.Build("lenet5", zoo.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// loader counts its loads of om.
func loader(t *testing.T, om *onnx.Model, n *atomic.Int32) func() (*kernel.Model, error) {
	return func() (*kernel.Model, error) {
		n.Add(1)
		m, err := kernel.LoadModel(om, kernel.Options{Threads: 1})
		if err != nil {
			t.Fatalf("the kernel library is needed (make; IDUNNO_KERNEL_LIB): %v", err)
		}
		return m, err
	}
}

func runs(m *kernel.Model) error {
	_, err := m.Run([]*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: []int64{1, 1, 28, 28}, F32: make([]float32, 784)}})
	return err
}

func TestOneLoadForConcurrentHoldersAndEvictionWaitsForRelease(t *testing.T) {
	om := lenet(t)
	c := New(1)
	var loads atomic.Int32
	var wg sync.WaitGroup
	hs := make([]*Handle, 8)
	for i := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := c.Acquire("a", loader(t, om, &loads))
			if err != nil {
				t.Error(err)
				return
			}
			hs[i] = h
		}()
	}
	wg.Wait()
	if loads.Load() != 1 || hs[0].Model() != hs[7].Model() {
		t.Fatalf("%d loads for 8 concurrent holders", loads.Load())
	}
	// "b" pushes "a" out of the one-model cache, but a's holders still run it.
	hb, err := c.Acquire("b", loader(t, om, &loads))
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 1 {
		t.Fatalf("cache holds %d models, bound 1", c.Len())
	}
	for _, h := range hs[1:] {
		h.Release()
	}
	if err := runs(hs[0].Model()); err != nil {
		t.Fatalf("an evicted model in use was closed: %v", err)
	}
	hs[0].Release()
	hs[0].Release() // twice: nothing more
	if err := runs(hs[0].Model()); err == nil {
		t.Fatal("an evicted model was not closed at its last release")
	}
	// Released but still cached: the next holder gets it without a load.
	hb.Release()
	before := loads.Load()
	hb2, err := c.Acquire("b", loader(t, om, &loads))
	if err != nil || loads.Load() != before || runs(hb2.Model()) != nil {
		t.Fatalf("cached model reloaded or closed: %v, loads %d → %d", err, before, loads.Load())
	}
	hb2.Release()
}

func TestFailedLoadIsNotCached(t *testing.T) {
	c := New(2)
	boom := errors.New("boom")
	if _, err := c.Acquire("x", func() (*kernel.Model, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if c.Len() != 0 {
		t.Fatalf("failed load cached: %d", c.Len())
	}
	var loads atomic.Int32
	h, err := c.Acquire("x", loader(t, lenet(t), &loads))
	if err != nil || loads.Load() != 1 {
		t.Fatalf("retry after a failed load: %v (%d loads)", err, loads.Load())
	}
	h.Release()
	if Key([]byte("m"), 1, kernel.FP32) == Key([]byte("m"), 2, kernel.FP32) || Key([]byte("m"), 1, kernel.FP32) != Key([]byte("m"), 1, kernel.FP32) || Key([]byte("m"), 1, kernel.FP32) == Key([]byte("m"), 1, kernel.BF16) {
		t.Fatal("keys must name the bytes and the threads")
	}
}
