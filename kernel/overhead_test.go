package kernel

import (
	"math"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"idunno/kernel/onnx"
)

// inPlaceInputs sums idk_plan_inputs_in_place over m's compiled plans (a split batch's parts
// each count).
func inPlaceInputs(m *Model) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.plans {
		if e.p != nil {
			n += int(idkPlanInPlace(e.p.h))
		}
		for _, s := range e.parts {
			n += int(idkPlanInPlace(s.p.h))
		}
	}
	return n
}

// runInputs loads c's graph on two threads and runs it on each input in turn, returning
// every run's first output and how many inputs the plans read in place.
func runInputs(t *testing.T, c *catGraph, xs ...*onnx.Tensor) ([][]float32, int) {
	t.Helper()
	m, err := LoadModel(&onnx.Model{IRVersion: 8, Opset: 13, Graph: c.g}, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var outs [][]float32
	for _, x := range xs {
		out, err := m.Run([]*onnx.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out[0].F32)
	}
	return outs, inPlaceInputs(m)
}

// TestInputInPlace: an input that only oneDNN primitives read is read in the caller's
// buffer, not copied into the arena (alias_inputs in plan.c); the outputs are the copying
// plan's (IDK_INPUT_ALIAS=0) bit for bit, also when each run passes another buffer (the
// memory objects follow it) and when the same buffer comes back; the caller's buffers are
// never written, also where the input is the summand of a residual sum that would run in
// place into a dying summand (there the input keeps its copy); and the same input gives the
// same bytes on every run.
func TestInputInPlace(t *testing.T) {
	chain := newCatGraph("x", -1, 16, 12, 12)
	chain.outputs(chain.conv("b", chain.node("Relu", "a.relu", nil, chain.conv("a", "x", 16, 32, 3)), 32, 24, 1))
	resid := newCatGraph("x", -1, 16, 12, 12)
	resid.outputs(resid.node("Add", "y", nil, resid.conv("a", "x", 16, 16, 3), "x"))
	// a Pad by 0.5 is a C loop, which reads the arena's copy
	pad := newCatGraph("x", -1, 16, 12, 12)
	pad.g.Initializers["pads"] = &onnx.Tensor{Name: "pads", DType: onnx.Int64, Dims: []int64{8}, I64: []int64{0, 0, 1, 1, 0, 0, 1, 1}}
	pad.g.Initializers["half"] = &onnx.Tensor{Name: "half", DType: onnx.Float, F32: []float32{0.5}}
	pad.outputs(pad.conv("a", pad.node("Pad", "p", nil, "x", "pads", "half"), 16, 8, 3))
	cases := []struct {
		name    string
		c       *catGraph
		inPlace int // 1: must be read in place, 0: must not, -1: either
	}{{"conv chain", chain, 1}, {"residual on the input", resid, -1}, {"pad by 0.5", pad, 0}}
	for _, tc := range cases {
		for _, n := range []int64{1, 3} {
			x1, x2 := seeded(21, n, 16, 12, 12), seeded(22, n, 16, 12, 12)
			keep1, keep2 := slices.Clone(x1.F32), slices.Clone(x2.F32)
			setCEnv(t, "IDK_INPUT_ALIAS", "0")
			off, offIn := runInputs(t, tc.c, x1, x2)
			setCEnv(t, "IDK_INPUT_ALIAS", "")
			on, onIn := runInputs(t, tc.c, x1, x2, x1, x1)
			if offIn != 0 || (tc.inPlace >= 0 && (onIn > 0) != (tc.inPlace > 0)) {
				t.Fatalf("%s batch %d: inputs read in place: %d with IDK_INPUT_ALIAS=0, %d without (want some: %d)",
					tc.name, n, offIn, onIn, tc.inPlace)
			}
			want := [][]float32{off[0], off[1], off[0], off[0]}
			for r := range on {
				for i := range on[r] {
					if math.Float32bits(on[r][i]) != math.Float32bits(want[r][i]) {
						t.Fatalf("%s batch %d run %d output %d: %v, copying the input gives %v", tc.name, n, r, i, on[r][i], want[r][i])
					}
				}
			}
			if !slices.Equal(x1.F32, keep1) || !slices.Equal(x2.F32, keep2) {
				t.Fatalf("%s batch %d: a run wrote into the caller's input", tc.name, n)
			}
		}
	}
}

// TestThreadReleaseFreesPool: idk_thread_release, which a plan's thread calls before it
// ends, frees the OpenMP worker pool its parallel regions started (its worker thread ends
// at once), so it does not depend on the thread's exit (which Go never makes the main
// thread do); with IDK_POOL_RELEASE=0 the worker stays.
func TestThreadReleaseFreesPool(t *testing.T) {
	if err := load(); err != nil {
		t.Skip(err)
	}
	tasks := func() int {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Skip(err)
		}
		return len(ents)
	}
	for _, off := range []bool{true, false} {
		if off {
			setCEnv(t, "IDK_POOL_RELEASE", "0")
		} else {
			setCEnv(t, "IDK_POOL_RELEASE", "")
		}
		before, with, after := 0, 0, 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread() // the thread lives on: only the release frees the pool
			before = tasks()
			idkPeakGflops(2, 0.01) // one parallel region on two threads: a pool of one worker
			with = tasks()
			idkThreadRelease()
			// a worker told to end is gone from /proc a moment later: wait up to a second
			for i := 0; i < 100; i++ {
				if after = tasks(); after == before || off {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if off { // free it anyway, so the rest of the tests run with one pool less
				setCEnv(t, "IDK_POOL_RELEASE", "")
				idkThreadRelease()
			}
		}()
		<-done
		if with != before+1 {
			t.Skipf("threads %d before a two-thread region, %d with its pool: cannot tell the worker", before, with)
		}
		if want := map[bool]int{true: with, false: before}[off]; after != want {
			t.Fatalf("IDK_POOL_RELEASE off=%v: %d threads after the release, want %d (%d before the pool)", off, after, want, before)
		}
	}
}
