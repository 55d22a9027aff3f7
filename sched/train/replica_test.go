package train

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/kernel/zoo"
)

// stateBytes is an engine's whole master state as bytes.
func stateBytes(t *testing.T, e *Engine) []byte {
	t.Helper()
	s, err := e.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, v := range [][]float32{s.Params, s.Opt1, s.Opt2, s.Stats} {
		for _, f := range v {
			binary.Write(&b, binary.LittleEndian, math.Float32bits(f))
		}
	}
	return b.Bytes()
}

// TestReplicasFollowTheMaster: a coordinator's engine reduces shards computed on worker
// replicas; a replica that computed a whole step takes it itself (ApplySole), the others take
// the reduced update (ApplyUpdate). After every step each replica holds the master's bytes,
// and the master holds what one engine taking the same steps locally holds. LeNet-5 has no
// batch statistics; the small ResNet has BatchNormalization (running statistics in the
// update), and its last step of an epoch is shorter (a second plan size).
func TestReplicasFollowTheMaster(t *testing.T) {
	resnet, err := zoo.Build("resnet18", zoo.Options{InputShape: []int64{1, 32, 32}, Classes: 4, Seed: 3, Init: zoo.InitTorch})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		m       *onnx.Model
		side    int
		shards  int
		samples int
		steps   int
		batch   int
	}{
		{"lenet5/1 shard", lenet(t, 16), 16, 1, 20, 6, 8},
		{"lenet5/3 shards", lenet(t, 16), 16, 3, 20, 6, 8},
		{"resnet18/1 shard", resnet, 32, 1, 6, 2, 4},
		{"resnet18/2 shards", resnet, 32, 2, 6, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := synthetic(t, tc.samples, tc.side, 4, 1)
			cfg := testConfig(tc.shards)
			cfg.Plan.Batch = tc.batch
			cfg.Plan.Samples = tc.samples
			if tc.samples%cfg.Plan.Batch == 0 {
				t.Fatal("want a short last step")
			}
			p := cfg.Plan
			size := (p.Batch + p.Shards - 1) / p.Shards
			mk := func() *Engine {
				e, err := NewEngine(tc.m, size, cfg.Threads)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(e.Close)
				return e
			}
			master, local, worker, follower := mk(), mk(), mk(), mk()
			for step := 0; step < tc.steps; step++ {
				ep, from, to := p.Step(step)
				ord := p.Order(ep)
				lr := cfg.Schedule.LR(cfg.LR, step, p.StepsPerEpoch(), p.TotalSteps())
				var shards []Shard
				var grads []ShardGrad
				for k := 0; k < p.Shards; k++ {
					a, b := p.ShardRange(from, to, k)
					if a >= b {
						continue
					}
					x, y, err := data.Batch(ord[a:b], worker.Master().Input().Dims)
					if err != nil {
						t.Fatal(err)
					}
					s := Shard{X: x, Y: y, Seed: p.ShardSeed(step, k)}
					shards = append(shards, s)
					var g ShardGrad
					if err := worker.Shard(s, to-from, &g); err != nil {
						t.Fatal(err)
					}
					grads = append(grads, g)
				}
				if _, err := local.Step(shards, cfg.Optimizer, lr, int64(step+1)); err != nil {
					t.Fatal(err)
				}
				if _, err := master.Reduce(grads, cfg.Optimizer, lr, int64(step+1)); err != nil {
					t.Fatal(err)
				}
				g, st := master.Update()
				if err := follower.ApplyUpdate(g, st, cfg.Optimizer, lr, int64(step+1)); err != nil {
					t.Fatal(err)
				}
				if len(grads) == 1 {
					err = worker.ApplySole(grads[0], cfg.Optimizer, lr, int64(step+1))
				} else {
					err = worker.ApplyUpdate(g, st, cfg.Optimizer, lr, int64(step+1))
				}
				if err != nil {
					t.Fatal(err)
				}
				want := stateBytes(t, master)
				for name, e := range map[string]*Engine{"local": local, "worker": worker, "follower": follower} {
					if !bytes.Equal(stateBytes(t, e), want) {
						t.Fatalf("step %d: the %s engine's state differs from the master's", step, name)
					}
				}
			}
		})
	}
}

// TestApplyUpdateRefusesAWrongSize: an update of another model is an error, not a step.
func TestApplyUpdateRefusesAWrongSize(t *testing.T) {
	e, err := NewEngine(lenet(t, 16), 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	n := e.Master().Len(kernel.Grads)
	opt := kernel.Optimizer{Kind: "sgd"}
	if err := e.ApplyUpdate(make([]float32, n-1), nil, opt, 0.1, 1); err == nil {
		t.Fatal("a short update was applied")
	}
	if err := e.ApplyUpdate(make([]float32, n), make([]float32, 3), opt, 0.1, 1); err == nil {
		t.Fatal("an update with statistics the model lacks was applied")
	}
}
