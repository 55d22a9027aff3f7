package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/sched/dataset"
)

// Data is a labelled dataset and the preprocessing that turns its images into model input.
type Data struct {
	Images dataset.Dataset
	Labels []int64
	Prep   dataset.Preprocess
}

// Check tells whether the data fits a model with these input dims and classes.
func (d Data) Check(inputDims []int64, classes int) error {
	if d.Images == nil || d.Images.Len() == 0 {
		return fmt.Errorf("train: the dataset is empty")
	}
	if len(d.Labels) != d.Images.Len() {
		return fmt.Errorf("train: %d labels for %d images", len(d.Labels), d.Images.Len())
	}
	for i, l := range d.Labels {
		if l < 0 || l >= int64(classes) {
			return fmt.Errorf("train: label %d at index %d out of range for the model's %d classes", l, i, classes)
		}
	}
	if err := d.Prep.Validate(); err != nil {
		return err
	}
	return dataset.Check(d.Images, d.Prep, inputDims)
}

// view is the samples idx of a dataset, in that order.
type view struct {
	ds  dataset.Dataset
	idx []int
}

func (v view) Len() int                            { return len(v.idx) }
func (v view) Sample(i int) (dataset.Image, error) { return v.ds.Sample(v.idx[i]) }
func (d Data) label(idx []int, y []int64) []int64 {
	y = y[:0]
	for _, i := range idx {
		y = append(y, d.Labels[i])
	}
	return y
}

// Batch preprocesses samples idx (in that order) for a model input of dims inputDims.
func (d Data) Batch(idx []int, inputDims []int64) ([]float32, []int64, error) {
	t, err := dataset.Batch(view{d.Images, idx}, 0, len(idx), d.Prep, inputDims)
	if err != nil {
		return nil, nil, err
	}
	return t.F32, d.label(idx, nil), nil
}

// Config is a run's hyperparameters and bookkeeping.
type Config struct {
	Plan      Plan
	LR        float64
	Optimizer kernel.Optimizer
	Schedule  Schedule
	Threads   int
	// EvalPrecision is the kernel precision of the per-epoch evaluation (zero: fp32).
	EvalPrecision kernel.Precision
	// Checkpoint is the file the run's state goes to after every epoch (and every
	// CheckpointEvery steps when > 0); "" keeps none. Resume continues from it if present.
	Checkpoint      string
	CheckpointEvery int
	Resume          bool
}

// Check validates the hyperparameters.
func (c Config) Check() error {
	if err := c.Plan.Check(); err != nil {
		return err
	}
	if !(c.LR > 0) || c.LR > 1e3 {
		return fmt.Errorf("train: learning rate %g must be positive", c.LR)
	}
	switch c.Optimizer.Kind {
	case "sgd", "adam", "adamw":
	default:
		return fmt.Errorf("train: optimizer %q unknown (sgd, adam, adamw)", c.Optimizer.Kind)
	}
	o := c.Optimizer
	if o.Momentum < 0 || o.Momentum >= 1 || o.WeightDecay < 0 || (o.Nesterov && o.Momentum == 0) {
		return fmt.Errorf("train: momentum %g / weight decay %g / Nesterov %v out of range", o.Momentum, o.WeightDecay, o.Nesterov)
	}
	if c.CheckpointEvery < 0 {
		return fmt.Errorf("train: checkpoint every %d steps", c.CheckpointEvery)
	}
	return nil
}

// Fingerprint identifies a run: the model and every setting that changes its steps.
func Fingerprint(m *onnx.Model, c Config, prep dataset.Preprocess) string {
	h := sha256.New()
	h.Write(onnx.Encode(m))
	cfg := struct {
		Plan      Plan
		LR        float64
		Optimizer kernel.Optimizer
		Schedule  Schedule
		Threads   int
		Prep      dataset.Preprocess
	}{c.Plan, c.LR, c.Optimizer, c.Schedule, c.Threads, prep}
	b, _ := json.Marshal(cfg)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Progress is reported after every step.
type Progress struct {
	Step, TotalSteps, Epoch int
	Loss                    float64
	SamplesPerSec           float64
}

// EpochReport sums up one epoch.
type EpochReport struct {
	Epoch         int      `json:"epoch"`
	Loss          float64  `json:"loss"`
	TrainAccuracy float64  `json:"train_accuracy"`
	EvalAccuracy  *float64 `json:"eval_accuracy"`
	SamplesPerSec float64  `json:"samples_per_sec"`
	Seconds       float64  `json:"seconds"`
}

// Hooks receive a run's progress; nil hooks are skipped.
type Hooks struct {
	Step  func(Progress)
	Epoch func(EpochReport)
}

// Local trains m on one machine: every step's shards run in order through this machine's
// plans, with exactly the arithmetic a cluster run of the same plan does. It returns the
// trained model (BatchNormalization folded) and one report per epoch run.
func Local(ctx context.Context, m *onnx.Model, cfg Config, data Data, eval *Data, h Hooks) (*onnx.Model, []EpochReport, error) {
	cfg.Plan.Samples = data.Images.Len()
	if err := cfg.Check(); err != nil {
		return nil, nil, err
	}
	p := cfg.Plan
	firstShard := p.Batch / p.Shards
	if p.Batch%p.Shards != 0 {
		firstShard++
	}
	eng, err := NewEngine(m, firstShard, cfg.Threads)
	if err != nil {
		return nil, nil, err
	}
	defer eng.Close()
	master := eng.Master()
	inDims := master.Input().Dims
	if err := data.Check(inDims, master.Classes()); err != nil {
		return nil, nil, err
	}
	if eval != nil {
		if err := eval.Check(inDims, master.Classes()); err != nil {
			return nil, nil, fmt.Errorf("evaluation data: %w", err)
		}
	}
	fp := Fingerprint(m, cfg, data.Prep)
	start := 0
	if cfg.Resume && cfg.Checkpoint != "" {
		ck, err := ReadCheckpointFile(cfg.Checkpoint)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, nil, err
		case ck.Fingerprint != fp:
			return nil, nil, fmt.Errorf("train: checkpoint %s belongs to another run (model or settings differ)", cfg.Checkpoint)
		default:
			if err := eng.Restore(ck.State); err != nil {
				return nil, nil, err
			}
			start = int(ck.Step)
		}
	}
	save := func(step int) error {
		if cfg.Checkpoint == "" {
			return nil
		}
		st, err := eng.Snapshot()
		if err != nil {
			return err
		}
		ck := &Checkpoint{Step: int64(step), Fingerprint: fp, State: st}
		return WriteFileAtomic(cfg.Checkpoint, ck.Encode)
	}
	total, spe := p.TotalSteps(), p.StepsPerEpoch()
	var reports []EpochReport
	var order []int
	orderEpoch := -1
	var epLoss float64
	var epCorrect, epSamples int64
	epStart := time.Now()
	for s := start; s < total; s++ {
		if err := ctx.Err(); err != nil {
			return nil, reports, err
		}
		epoch, from, to := p.Step(s)
		if epoch != orderEpoch {
			order, orderEpoch = p.Order(epoch), epoch
			epLoss, epCorrect, epSamples, epStart = 0, 0, 0, time.Now()
		}
		shards := make([]Shard, 0, p.Shards)
		for k := 0; k < p.Shards; k++ {
			a, b := p.ShardRange(from, to, k)
			if a == b {
				continue
			}
			x, y, err := data.Batch(order[a:b], inDims)
			if err != nil {
				return nil, reports, err
			}
			shards = append(shards, Shard{X: x, Y: y, Seed: p.ShardSeed(s, k)})
		}
		lr := cfg.Schedule.LR(cfg.LR, s, spe, total)
		r, err := eng.Step(shards, cfg.Optimizer, lr, int64(s+1))
		if err != nil {
			return nil, reports, err
		}
		epLoss += r.Loss * float64(r.Samples)
		epCorrect += r.Correct
		epSamples += int64(r.Samples)
		if h.Step != nil {
			h.Step(Progress{Step: s + 1, TotalSteps: total, Epoch: epoch, Loss: r.Loss,
				SamplesPerSec: float64(epSamples) / time.Since(epStart).Seconds()})
		}
		endEpoch := (s+1)%spe == 0
		if cfg.CheckpointEvery > 0 && (s+1)%cfg.CheckpointEvery == 0 && !endEpoch {
			if err := save(s + 1); err != nil {
				return nil, reports, err
			}
		}
		if !endEpoch {
			continue
		}
		secs := time.Since(epStart).Seconds()
		rep := EpochReport{Epoch: epoch + 1, Loss: epLoss / float64(epSamples),
			TrainAccuracy: float64(epCorrect) / float64(epSamples), SamplesPerSec: float64(epSamples) / secs, Seconds: secs}
		if eval != nil {
			em, err := eng.Model(true)
			if err != nil {
				return nil, reports, err
			}
			c, n, err := EvaluateAt(em, *eval, 256, cfg.Threads, cfg.EvalPrecision)
			if err != nil {
				return nil, reports, err
			}
			acc := float64(c) / float64(n)
			rep.EvalAccuracy = &acc
		}
		if err := save(s + 1); err != nil {
			return nil, reports, err
		}
		reports = append(reports, rep)
		if h.Epoch != nil {
			h.Epoch(rep)
		}
	}
	out, err := eng.Model(true)
	return out, reports, err
}

// Evaluate runs m over d in batches and counts right top-1 answers.
func Evaluate(m *onnx.Model, d Data, batch, threads int) (correct, n int, err error) {
	return EvaluateAt(m, d, batch, threads, kernel.FP32)
}

// EvaluateAt is Evaluate with the kernel computing at precision prec.
func EvaluateAt(m *onnx.Model, d Data, batch, threads int, prec kernel.Precision) (correct, n int, err error) {
	pred, err := Predict(m, d, batch, threads, prec)
	if err != nil {
		return 0, 0, err
	}
	if len(d.Labels) != len(pred) {
		return 0, 0, fmt.Errorf("train: %d labels for %d images", len(d.Labels), len(pred))
	}
	for i, p := range pred {
		if p == d.Labels[i] {
			correct++
		}
	}
	return correct, len(pred), nil
}

// Predict runs m over d's images in batches at precision prec and returns each image's
// top-1 class (d's labels are not read).
func Predict(m *onnx.Model, d Data, batch, threads int, prec kernel.Precision) ([]int64, error) {
	km, err := kernel.LoadModel(m, kernel.Options{Threads: threads, Precision: prec})
	if err != nil {
		return nil, err
	}
	defer km.Close()
	ins := km.Inputs()
	if len(ins) != 1 || len(km.Outputs()) < 1 {
		return nil, fmt.Errorf("train: evaluation needs a model with one input")
	}
	dims := ins[0].Dims
	pred := make([]int64, 0, d.Images.Len())
	for from := 0; from < d.Images.Len(); from += batch {
		to := min(from+batch, d.Images.Len())
		t, err := dataset.Batch(d.Images, from, to, d.Prep, dims)
		if err != nil {
			return nil, err
		}
		t.Name = ins[0].Name
		outs, err := km.Run([]*onnx.Tensor{t})
		if err != nil {
			return nil, err
		}
		o := outs[0]
		if len(o.Dims) != 2 || o.Dims[0] != int64(to-from) {
			return nil, fmt.Errorf("train: model output dims %v, want (batch, classes)", o.Dims)
		}
		k := int(o.Dims[1])
		for i := 0; i < to-from; i++ {
			row := o.F32[i*k : (i+1)*k]
			best := 0
			for j := 1; j < k; j++ {
				if row[j] > row[best] {
					best = j
				}
			}
			pred = append(pred, int64(best))
		}
	}
	return pred, nil
}
