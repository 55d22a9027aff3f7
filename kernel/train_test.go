package kernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

func randBatch(seed uint64, n int, dims []int64, classes int) ([]float32, []int64) {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, volume(dims))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]int64, n)
	for i := range y {
		y[i] = int64(r.IntN(classes))
	}
	return x, y
}

func zooModel(t testing.TB, name string, shape []int64) *onnx.Model {
	t.Helper()
	m, err := zoo.Build(name, zoo.Options{InputShape: shape, Classes: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTrainerLearnsAFixedBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape []int64
		opt   Optimizer
		lr    float64
	}{
		{"lenet5", []int64{1, 28, 28}, Optimizer{Kind: "sgd", Momentum: 0.9}, 0.005},
		{"resnet18", []int64{1, 32, 32}, Optimizer{Kind: "adam"}, 1e-3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := zooModel(t, tc.name, tc.shape)
			const n = 8
			tr, err := NewTrainer(m, n, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			x, y := randBatch(1, n, tr.Input().Dims, 10)
			var first, last float64
			for step := int64(1); step <= 15; step++ {
				loss, _, err := tr.Run(x, y, 1.0/n, 7)
				if err != nil {
					t.Fatal(err)
				}
				if math.IsNaN(loss) {
					t.Fatalf("step %d: NaN loss", step)
				}
				if step == 1 {
					first = loss / n
					g := make([]float32, tr.Len(Grads))
					if err := tr.Get(Grads, g); err != nil {
						t.Fatal(err)
					}
					for _, p := range tr.Params() {
						var s float64
						for _, v := range g[p.Offset : p.Offset+p.Len()] {
							s += math.Abs(float64(v))
						}
						if s == 0 {
							t.Errorf("parameter %s has an all-zero gradient", p.Name)
						}
					}
				}
				last = loss / n
				if err := tr.ApplyBatchStats(nil); err != nil {
					t.Fatal(err)
				}
				if err := tr.Optimize(tc.opt, tc.lr, step); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s: loss %.4f -> %.4f", tc.name, first, last)
			if !(last < first*0.5) {
				t.Errorf("loss %.4f -> %.4f: did not learn one batch", first, last)
			}
			for _, fold := range []bool{false, true} {
				em, err := tr.Model(fold)
				if err != nil {
					t.Fatal(err)
				}
				im, err := LoadModel(em, Options{Threads: 2})
				if err != nil {
					t.Fatalf("fold %v: %v", fold, err)
				}
				out, err := im.Run([]*onnx.Tensor{{Name: "input", DType: onnx.Float, Dims: tr.Input().Dims, F32: x}})
				im.Close()
				if err != nil {
					t.Fatal(err)
				}
				if len(out[0].F32) != n*10 {
					t.Fatalf("output has %d values", len(out[0].F32))
				}
			}
		})
	}
}
