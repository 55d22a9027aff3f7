package kernel

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"idunno/kernel/onnx"
)

// TestEnvAB is a measurement, not a check: on a machine where one build's speed changes
// by 20-30% from one process to the next (benchmarks/README.md, branch h12t), it compares
// a switch inside ONE process. It loads IDK_AB_MODEL twice on 2 threads, the first with
// the variable IDK_AB_ENV (NAME=VALUE) set in C's environment and Go's while it loads and
// builds its plan, the second with NAME unset, then alternates one run of each for
// IDK_AB_SECONDS (default 10) at batch IDK_AB_BATCH (default 1) and logs each one's
// minimum, 25th and 50th percentile and mean. Skipped unless IDK_AB_MODEL is set; run it under the
// exclusive lock.
func TestEnvAB(t *testing.T) {
	path := os.Getenv("IDK_AB_MODEL")
	if path == "" {
		t.Skip("IDK_AB_MODEL unset (a measurement, see the comment)")
	}
	batch, err := strconv.Atoi(os.Getenv("IDK_AB_BATCH"))
	if err != nil || batch < 1 {
		batch = 1
	}
	secs, err := strconv.ParseFloat(os.Getenv("IDK_AB_SECONDS"), 64)
	if err != nil || secs <= 0 {
		secs = 10
	}
	kv := strings.SplitN(os.Getenv("IDK_AB_ENV"), "=", 2)
	if len(kv) != 2 || kv[0] == "" {
		t.Fatalf("IDK_AB_ENV=%q: want NAME=VALUE", os.Getenv("IDK_AB_ENV"))
	}
	var ms [2]*Model
	var ins []*onnx.Tensor
	for i := range ms {
		if i == 0 { // in C's environment and Go's: kernel (C) and graph (Go) switches alike
			setCEnv(t, kv[0], kv[1])
			os.Setenv(kv[0], kv[1])
		}
		m, err := Load(path, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ins = nil
		for _, vi := range m.Inputs() {
			dims := append([]int64(nil), vi.Dims...)
			if len(dims) == 0 {
				t.Fatalf("input %s has no shape", vi.Name)
			}
			dims[0] = int64(batch)
			n := int64(1)
			for _, d := range dims {
				n *= d
			}
			x := &onnx.Tensor{Name: vi.Name, DType: vi.DType, Dims: dims}
			if vi.DType == onnx.Float {
				x.F32 = make([]float32, n)
				for j := range x.F32 {
					x.F32[j] = float32(j%997) / 997
				}
			} else {
				x.I64 = make([]int64, n)
				for j := range x.I64 {
					x.I64[j] = 1
				}
			}
			ins = append(ins, x)
		}
		for range 2 { // builds the plan for this batch
			if _, err := m.Run(ins); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			setCEnv(t, kv[0], "")
			os.Unsetenv(kv[0])
		}
		ms[i] = m
	}
	var lat [2][]float64
	start := time.Now()
	for time.Since(start).Seconds() < secs {
		for i, m := range ms {
			t0 := time.Now()
			if _, err := m.Run(ins); err != nil {
				t.Fatal(err)
			}
			lat[i] = append(lat[i], float64(time.Since(t0))/1e6)
		}
	}
	for i, name := range []string{"A (" + os.Getenv("IDK_AB_ENV") + ")", "B (default)"} {
		l := lat[i]
		sort.Float64s(l)
		mean := 0.0
		for _, v := range l {
			mean += v / float64(len(l))
		}
		t.Logf("%s: %d runs, min %.2f ms, p25 %.2f, p50 %.2f, mean %.2f", name, len(l), l[0], l[len(l)/4], l[len(l)/2], mean)
	}
}
