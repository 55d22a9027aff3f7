package kernel

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// splitOf reports how the cached plan for a batch of this size runs: the sub-batch sizes
// of a split batch, nil for one plan, or false when there is no such plan.
func splitOf(m *Model, batch int64) ([]int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.plans {
		if e.inputs[0].dims[0] == batch {
			var rows []int64
			for _, s := range e.parts {
				rows = append(rows, s.rows)
			}
			return rows, true
		}
	}
	return nil, false
}

func seededInput(dims []int64, seed uint64) *onnx.Tensor {
	rng := rand.New(rand.NewPCG(seed, 3))
	t := &onnx.Tensor{DType: onnx.Float, Dims: dims, F32: make([]float32, volume(dims))}
	for i := range t.F32 {
		t.F32[i] = rng.Float32()
	}
	return t
}

// addWeight puts a seeded weight of dims, centred on 0 and divided by div, into init.
func addWeight(init map[string]*onnx.Tensor, name string, dims []int64, seed uint64, div float32) {
	w := seededInput(dims, seed)
	for i := range w.F32 {
		w.F32[i] = (w.F32[i] - 0.5) / div
	}
	w.Name = name
	init[name] = w
}

// TestSplitBatch: on two threads, a batch of B >= 2 runs as two sub-batches on one
// thread each; the output bytes are the same on every run, and close to the whole batch's
// on one plan (IDK_SPLIT=0) and to a one-thread model's.
func TestSplitBatch(t *testing.T) {
	cases := []struct {
		name    string
		shape   []int64
		batches []int64
	}{
		{"lenet5", nil, []int64{2, 5, 8}},
		{"mobilenet_v2", []int64{3, 64, 64}, []int64{5}},
		{"squeezenet", []int64{3, 64, 64}, []int64{4}},
	}
	for _, c := range cases {
		src, err := zoo.Build(c.name, zoo.Options{Seed: 5, InputShape: c.shape})
		if err != nil {
			t.Fatal(err)
		}
		split, err := LoadModel(src, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer split.Close()
		t.Setenv(SplitEnv, "0")
		whole, err := LoadModel(src, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer whole.Close()
		one, err := LoadModel(src, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer one.Close()
		for _, b := range c.batches {
			dims := append([]int64{b}, split.Inputs()[0].Dims[1:]...)
			in := []*onnx.Tensor{seededInput(dims, uint64(b))}
			t.Setenv(SplitEnv, "")
			var first []*onnx.Tensor
			for run := 0; run < 3; run++ {
				out, err := split.Run(in)
				if err != nil {
					t.Fatal(err)
				}
				if run == 0 {
					first = out
				} else if !sameBits(first[0].F32, out[0].F32) {
					t.Fatalf("%s batch %d: run %d gave other bytes than run 0", c.name, b, run)
				}
			}
			want := []int64{(b + 1) / 2, b / 2}
			if rows, _ := splitOf(split, b); !reflect.DeepEqual(rows, want) {
				t.Fatalf("%s batch %d: ran as %v, want sub-batches %v", c.name, b, rows, want)
			}
			if ns := split.LastRunKernelNanos(int(b)); ns <= 0 {
				t.Errorf("%s batch %d: LastRunKernelNanos = %d", c.name, b, ns)
			}
			if !reflect.DeepEqual(first[0].Dims, []int64{b, 1000}) && !reflect.DeepEqual(first[0].Dims, []int64{b, 10}) {
				t.Fatalf("%s batch %d: output dims %v", c.name, b, first[0].Dims)
			}
			t.Setenv(SplitEnv, "0")
			ref, err := whole.Run(in)
			if err != nil {
				t.Fatal(err)
			}
			if rows, ok := splitOf(whole, b); !ok || rows != nil {
				t.Fatalf("%s batch %d: split with %s=0", c.name, b, SplitEnv)
			}
			checkClose(t, c.name+", split against whole", ref[0].F32, first[0].F32, 1e-5)
			ref1, err := one.Run(in)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, c.name+", split against one thread", ref1[0].F32, first[0].F32, 1e-5)
		}
	}
}

// TestSplitRefused: a Reshape to a fixed batch of 4 is per-sample at batch 4 but not at
// 2, a ReduceMean over the batch mixes samples: both run whole, with the right result.
func TestSplitRefused(t *testing.T) {
	vi := func(name string, dims ...int64) onnx.ValueInfo {
		return onnx.ValueInfo{Name: name, DType: onnx.Float, Dims: dims, DimParams: make([]string, len(dims)), HasShape: true}
	}
	model := func(nodes []*onnx.Node, inits map[string]*onnx.Tensor) *onnx.Model {
		return &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: &onnx.Graph{
			Name: "refused", Nodes: nodes, Inputs: []onnx.ValueInfo{vi("x", -1, 6)}, Outputs: []onnx.ValueInfo{vi("y")},
			Initializers: inits,
		}}
	}
	shape := &onnx.Tensor{Name: "shape", DType: onnx.Int64, Dims: []int64{2}, I64: []int64{4, -1}}
	fixed := model([]*onnx.Node{
		{Name: "r", OpType: "Reshape", Inputs: []string{"x", "shape"}, Outputs: []string{"r"}},
		{Name: "y", OpType: "Relu", Inputs: []string{"r"}, Outputs: []string{"y"}},
	}, map[string]*onnx.Tensor{"shape": shape})
	mean := model([]*onnx.Node{
		{Name: "m", OpType: "ReduceMean", Inputs: []string{"x"}, Outputs: []string{"m"},
			Attrs: map[string]*onnx.Attribute{"axes": {Name: "axes", Type: onnx.AttrInts, Ints: []int64{0}}}},
		{Name: "y", OpType: "Sub", Inputs: []string{"x", "m"}, Outputs: []string{"y"}},
	}, nil)
	x := &onnx.Tensor{DType: onnx.Float, Dims: []int64{4, 6}, F32: make([]float32, 24)}
	for i := range x.F32 {
		x.F32[i] = float32(i*i%7) - 3
	}
	for name, src := range map[string]*onnx.Model{"fixed reshape": fixed, "mean over batch": mean} {
		m, err := loadModel(src, Options{Threads: 2}, false) // the fixed reshape fails at batch 1
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		out, err := m.Run([]*onnx.Tensor{x})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rows, ok := splitOf(m, 4); !ok || rows != nil {
			t.Fatalf("%s: ran as sub-batches %v", name, rows)
		}
		for i, v := range out[0].F32 {
			var want float32
			switch name {
			case "fixed reshape":
				want = max(x.F32[i], 0)
			default:
				c := i % 6
				want = x.F32[i] - (x.F32[c]+x.F32[6+c]+x.F32[12+c]+x.F32[18+c])/4
			}
			if math.Abs(float64(v-want)) > 1e-6 {
				t.Fatalf("%s: output %d = %v, want %v", name, i, v, want)
			}
		}
	}
}

// TestSplitPlansCount: a split batch holds one plan per part against maxPlans, and
// Close frees them all.
func TestSplitPlansCount(t *testing.T) {
	m := lenet(t, 2)
	for b := 2; b <= maxPlans+2; b++ {
		if err := m.Prepare(b); err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		held := 0
		for _, e := range m.plans {
			held += e.plans()
		}
		m.mu.Unlock()
		if held > maxPlans {
			t.Fatalf("after batch %d: %d plans held", b, held)
		}
	}
	if rows, ok := splitOf(m, int64(maxPlans+2)); !ok || len(rows) != 2 {
		t.Fatalf("Prepare(%d) built %v", maxPlans+2, rows)
	}
	if _, err := m.Run([]*onnx.Tensor{images(maxPlans+2, 1)}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := m.Run([]*onnx.Tensor{images(3, 1)}); err == nil {
		t.Fatal("run after Close succeeded")
	}
}

// TestSplitStreamBound: a classifier layer read for a few rows per sub-batch streams its
// weights once per part; past maxSplitStreamBytes the batch runs whole by default, and at
// batches where each part reads it for enough rows it splits.
func TestSplitStreamBound(t *testing.T) {
	const k, n = 16, maxSplitStreamBytes/4/16 + 1024
	w := &onnx.Tensor{Name: "w", DType: onnx.Float, Dims: []int64{k, n}, F32: make([]float32, k*n)}
	src := &onnx.Model{IRVersion: 8, Opset: 13, Opsets: map[string]int64{"": 13}, Graph: &onnx.Graph{
		Name:         "fc",
		Nodes:        []*onnx.Node{{Name: "fc", OpType: "Gemm", Inputs: []string{"x", "w"}, Outputs: []string{"y"}}},
		Inputs:       []onnx.ValueInfo{{Name: "x", DType: onnx.Float, Dims: []int64{-1, k}, DimParams: make([]string, 2), HasShape: true}},
		Outputs:      []onnx.ValueInfo{{Name: "y"}},
		Initializers: map[string]*onnx.Tensor{"w": w},
	}}
	m, err := LoadModel(src, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		batch int
		split bool
	}{{8, false}, {2 * streamRows, true}} {
		if err := m.Prepare(c.batch); err != nil {
			t.Fatal(err)
		}
		if rows, _ := splitOf(m, int64(c.batch)); (rows != nil) != c.split {
			t.Errorf("batch %d of a %d MB classifier: sub-batches %v, want split %v", c.batch, k*n*4>>20, rows, c.split)
		}
	}
}

// TestSplitConcurrentEviction: split batches of many sizes from several goroutines at once,
// more than the cache holds; evicted entries are rebuilt, and every output is the batch's.
func TestSplitConcurrentEviction(t *testing.T) { runBatchesPastCache(t, lenet(t, 2), 2) }

// TestSplitShareWeights: the parts of a split batch after the first read its constants
// (IDK_SPLIT_SHARE), all of them when the sub-batches are equal; the outputs are the same
// bytes as with a copy per part (the same arithmetic on the same weights) on every run, and
// the model closes cleanly with its donor destroyed first.
func TestSplitShareWeights(t *testing.T) {
	cases := []struct {
		name    string
		shape   []int64
		batches []int64
	}{
		{"lenet5", nil, []int64{4, 5}},
		{"mobilenet_v2", []int64{3, 64, 64}, []int64{4, 5}},
		{"squeezenet", []int64{3, 64, 64}, []int64{4}},
		{"resnet18", []int64{3, 64, 64}, []int64{2}},
	}
	for _, c := range cases {
		src, err := zoo.Build(c.name, zoo.Options{Seed: 7, InputShape: c.shape})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(SplitShareEnv, "")
		shared, err := LoadModel(src, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(SplitShareEnv, "0")
		own, err := LoadModel(src, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range c.batches {
			dims := append([]int64{b}, shared.Inputs()[0].Dims[1:]...)
			in := []*onnx.Tensor{seededInput(dims, uint64(b)+11)}
			t.Setenv(SplitShareEnv, "0")
			ref, err := own.Run(in)
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv(SplitShareEnv, "")
			for run := 0; run < 3; run++ {
				out, err := shared.Run(in)
				if err != nil {
					t.Fatal(err)
				}
				if !sameBits(ref[0].F32, out[0].F32) {
					t.Fatalf("%s batch %d run %d: shared weights gave other bytes than a copy per part", c.name, b, run)
				}
			}
			sp, op := splitPlans(t, shared, b), splitPlans(t, own, b)
			donorOwn := idkPlanConstBytes(sp[0], 0)
			if donorOwn <= 0 || donorOwn != idkPlanConstBytes(op[0], 0) {
				t.Fatalf("%s batch %d: the first part holds %d bytes of constants, %d without sharing", c.name, b, donorOwn, idkPlanConstBytes(op[0], 0))
			}
			borrowed, owned := idkPlanConstBytes(sp[1], 1), idkPlanConstBytes(sp[1], 0)
			if idkPlanConstBytes(op[1], 1) != 0 || borrowed <= 0 || borrowed+owned != idkPlanConstBytes(op[1], 0) {
				t.Fatalf("%s batch %d: second part borrows %d and holds %d bytes; without sharing it borrows %d and holds %d",
					c.name, b, borrowed, owned, idkPlanConstBytes(op[1], 1), idkPlanConstBytes(op[1], 0))
			}
			if b%2 == 0 && owned != 0 {
				t.Fatalf("%s batch %d: equal sub-batches, the second part still holds %d bytes of its own constants", c.name, b, owned)
			}
			t.Logf("%s batch %d: second part borrows %d bytes, holds %d", c.name, b, borrowed, owned)
		}
		shared.Close()
		own.Close()
	}
}

// splitPlans returns the plan handles of the split batch of this size.
func splitPlans(t *testing.T, m *Model, batch int64) []uintptr {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.plans {
		if e.inputs[0].dims[0] == batch {
			var hs []uintptr
			for _, s := range e.parts {
				hs = append(hs, s.p.h)
			}
			if len(hs) == 2 {
				return hs
			}
		}
	}
	t.Fatalf("batch %d is not split in two", batch)
	return nil
}

// TestSplitChunks: with IDK_SPLIT_ROWS, a batch runs as chunks of that many rows taken by
// the threads from a shared counter; the bytes are the same on every run whichever thread
// takes which chunk, the same as a one-thread model's at the chunk's batch size on each
// chunk (rows 2: both compile with the batch >= 2 options), and within 1e-5 of the default
// split. A number that does not divide the batch into at least Threads chunks is ignored.
func TestSplitChunks(t *testing.T) {
	src, err := zoo.Build("squeezenet", zoo.Options{Seed: 5, InputShape: []int64{3, 64, 64}})
	if err != nil {
		t.Fatal(err)
	}
	dims := []int64{8, 3, 64, 64}
	in := []*onnx.Tensor{seededInput(dims, 8)}
	def, err := LoadModel(src, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	ref, err := def.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	one, err := LoadModel(src, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	for _, c := range []struct {
		env   string
		batch int64
		want  []int64
	}{
		{"2", 8, []int64{2, 2}},
		{"1", 8, []int64{1, 1}},
		{"4", 8, []int64{4, 4}},
		{"3", 8, []int64{4, 4}}, // does not divide 8
		{"8", 8, []int64{4, 4}}, // one chunk for two threads
		{"2", 5, []int64{3, 2}},
	} {
		t.Setenv(SplitRowsEnv, c.env)
		m, err := LoadModel(src, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		x := in
		if c.batch != 8 {
			x = []*onnx.Tensor{seededInput([]int64{c.batch, 3, 64, 64}, 5)}
		}
		var first []*onnx.Tensor
		for run := 0; run < 4; run++ {
			out, err := m.Run(x)
			if err != nil {
				t.Fatal(err)
			}
			if run == 0 {
				first = out
			} else if !sameBits(first[0].F32, out[0].F32) {
				t.Fatalf("rows %s batch %d: run %d gave other bytes than run 0", c.env, c.batch, run)
			}
		}
		if rows, _ := splitOf(m, c.batch); !reflect.DeepEqual(rows, c.want) {
			t.Fatalf("rows %s batch %d: ran as %v, want %v", c.env, c.batch, rows, c.want)
		}
		if ns := m.LastRunKernelNanos(int(c.batch)); ns <= 0 {
			t.Errorf("rows %s batch %d: LastRunKernelNanos = %d", c.env, c.batch, ns)
		}
		m.Close()
		if c.batch != 8 {
			continue
		}
		checkClose(t, "rows "+c.env+" against the default split", ref[0].F32, first[0].F32, 1e-5)
		if c.env == "2" {
			per := volume(first[0].Dims[1:])
			for k := int64(0); k < 4; k++ {
				chunk := &onnx.Tensor{DType: onnx.Float, Dims: []int64{2, 3, 64, 64}, F32: in[0].F32[k*2*3*64*64 : (k+1)*2*3*64*64]}
				out, err := one.Run([]*onnx.Tensor{chunk})
				if err != nil {
					t.Fatal(err)
				}
				if !sameBits(out[0].F32, first[0].F32[k*2*per:(k+1)*2*per]) {
					t.Fatalf("rows 2: chunk %d differs from a one-thread model's batch of 2", k)
				}
			}
		}
	}
}
