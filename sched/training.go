package sched

import (
	"fmt"
	"slices"

	"idunno/kernel"
	"idunno/sched/dataset"
	"idunno/sched/train"
)

// TrainSpec is a training job as a client asks for it; Samples is filled in by the
// coordinator from the dataset.
type TrainSpec struct {
	Name       string             `json:"name"`
	Model      string             `json:"model"`  // SDFS name of the initial ONNX model
	Data       string             `json:"data"`   // SDFS name of the training images (IDX or .npy)
	Labels     string             `json:"labels"` // SDFS name of the labels (IDX or .npy)
	EvalData   string             `json:"eval_data,omitempty"`
	EvalLabels string             `json:"eval_labels,omitempty"`
	Pre        dataset.Preprocess `json:"pre"`
	Epochs     int                `json:"epochs"`
	Batch      int                `json:"batch"`
	Shards     int                `json:"shards"`
	LR         float64            `json:"lr"`
	Optimizer  kernel.Optimizer   `json:"optimizer"`
	Schedule   train.Schedule     `json:"schedule"`
	Seed       uint64             `json:"seed"`
	// Threads is the kernel thread count of every shard computation: part of the job,
	// because gradients are bit-identical only for equal thread counts.
	Threads int `json:"threads"`
	// CheckpointEvery: steps between checkpoints (0: every epoch's end only).
	CheckpointEvery int `json:"checkpoint_every,omitempty"`
	Samples         int `json:"samples"`
}

// Plan is the job's step plan.
func (t TrainSpec) Plan() train.Plan {
	return train.Plan{Samples: t.Samples, Batch: t.Batch, Shards: t.Shards, Epochs: t.Epochs, Seed: t.Seed}
}

// Config is the job's hyperparameters as train.Local takes them (so a local run with the
// same settings computes the same bytes).
func (t TrainSpec) Config() train.Config {
	return train.Config{Plan: t.Plan(), LR: t.LR, Optimizer: t.Optimizer, Schedule: t.Schedule, Threads: t.Threads}
}

// ValidateRequest checks a client's request (before the dataset is read).
func (t TrainSpec) ValidateRequest() error {
	if t.Name == "" || len(t.Name) > 128 {
		return fmt.Errorf("sched: training job name %q: want 1 to 128 characters", t.Name)
	}
	if t.Model == "" || t.Data == "" || t.Labels == "" {
		return fmt.Errorf("sched: training job %s needs --model, --data and --labels", t.Name)
	}
	if (t.EvalData == "") != (t.EvalLabels == "") {
		return fmt.Errorf("sched: --eval-data and --eval-labels go together")
	}
	if t.Threads < 1 || t.Threads > 256 {
		return fmt.Errorf("sched: training threads %d out of range", t.Threads)
	}
	if t.CheckpointEvery < 0 {
		return fmt.Errorf("sched: checkpoint every %d steps", t.CheckpointEvery)
	}
	c := t.Config()
	c.Plan.Samples = max(t.Batch, 1)
	return c.Check()
}

func (t TrainSpec) check() error {
	if err := t.ValidateRequest(); err != nil {
		return err
	}
	if t.Samples < t.Batch {
		return fmt.Errorf("sched: training job %s: %d samples for a batch of %d", t.Name, t.Samples, t.Batch)
	}
	return nil
}

// StepFacts is what a committed step reports: its loss and accuracy, and the exactly-once
// evidence of the samples its shards used (count and a sum of per-sample hashes).
type StepFacts struct {
	Loss    float64  `json:"loss"`
	Correct int64    `json:"correct"`
	Count   int64    `json:"count"`
	Digest  uint64   `json:"digest"`
	Workers []string `json:"workers,omitempty"` // who computed each shard
	Millis  int64    `json:"millis,omitempty"`  // wall time of the step
}

// SampleDigest sums a hash of each sample id: equal digests and counts over an epoch mean
// every sample exactly once (a sample missing or repeated changes both, up to hash collisions).
func SampleDigest(ids []int) uint64 {
	var d uint64
	for _, id := range ids {
		d += mixID(uint64(id))
	}
	return d
}

func mixID(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// FullDigest is the digest of every sample 0..n-1 once.
func FullDigest(n int) uint64 {
	var d uint64
	for i := 0; i < n; i++ {
		d += mixID(uint64(i))
	}
	return d
}

// EpochRecord is the exactly-once record of one epoch: which steps were committed, and the
// count and digest of the samples they used.
type EpochRecord struct {
	Steps  []byte `json:"steps"` // bitmap over the epoch's steps
	NSteps int    `json:"nsteps"`
	Count  int64  `json:"count"`
	Digest uint64 `json:"digest"`
}

// TrainState is a training job as the journal knows it.
type TrainState struct {
	Spec     TrainSpec     `json:"spec"`
	Added    int64         `json:"added"`
	Step     int           `json:"step"`      // steps committed (the next step to run)
	Ckpt     int           `json:"ckpt"`      // step of the last checkpoint (0: none)
	CkptName string        `json:"ckpt_name"` // its SDFS file
	Complete bool          `json:"complete"`
	Finished int64         `json:"finished,omitempty"`
	Output   string        `json:"output,omitempty"` // the trained model's SDFS name
	Last     StepFacts     `json:"last"`
	Losses   []float32     `json:"losses,omitempty"` // every committed step's loss, in step order
	Epochs   []EpochRecord `json:"epochs"`
	Replays  int           `json:"replays,omitempty"` // steps committed again after a resume
	Evals    []EvalPoint   `json:"evals,omitempty"`   // evaluations at epochs' ends, in step order
}

// EvalPoint is one evaluation of a training job's weights on its evaluation set, taken
// after the last step of an epoch (carried by that epoch's checkpoint entry).
type EvalPoint struct {
	Epoch    int     `json:"epoch"` // 1-based: the epoch just finished
	Step     int     `json:"step"`  // steps committed when evaluated
	Correct  int64   `json:"correct"`
	Count    int64   `json:"count"`
	Accuracy float64 `json:"accuracy"`
}

func (t *TrainState) clone() *TrainState {
	c := *t
	c.Losses = slices.Clone(t.Losses)
	c.Evals = slices.Clone(t.Evals)
	c.Epochs = make([]EpochRecord, len(t.Epochs))
	for i, e := range t.Epochs {
		e.Steps = slices.Clone(e.Steps)
		c.Epochs[i] = e
	}
	c.Last.Workers = slices.Clone(t.Last.Workers)
	return &c
}

// EpochComplete reports whether epoch e's record shows every step and every sample once.
func (t *TrainState) EpochComplete(e int) (done, exactlyOnce bool) {
	if e >= len(t.Epochs) {
		return false, false
	}
	r := t.Epochs[e]
	spe := t.Spec.Plan().StepsPerEpoch()
	if r.NSteps != spe {
		return false, false
	}
	return true, r.Count == int64(t.Spec.Samples) && r.Digest == FullDigest(t.Spec.Samples)
}

func (s *State) checkTrain(e *Entry) error {
	if e.Kind == EntryTrainAdd {
		if e.Train == nil {
			return fmt.Errorf("sched: journal: train-add without a job")
		}
		if err := e.Train.check(); err != nil {
			return err
		}
		if _, dup := s.Trains[e.Train.Name]; dup {
			return fmt.Errorf("sched: training job name %q is already in use", e.Train.Name)
		}
		if _, dup := s.Jobs[e.Train.Name]; dup {
			return fmt.Errorf("sched: name %q is already an inference job", e.Train.Name)
		}
		return nil
	}
	t, ok := s.Trains[e.Name]
	if !ok {
		return fmt.Errorf("sched: no training job %q", e.Name)
	}
	total := t.Spec.Plan().TotalSteps()
	switch e.Kind {
	case EntryTrainStep:
		// a step after the last checkpoint may be committed again after a resume
		if e.TrainStep == nil || e.Task < t.Ckpt || e.Task > t.Step || e.Task >= total || t.Complete {
			return fmt.Errorf("sched: journal: training job %s: step %d cannot be committed (checkpoint %d, next %d)", e.Name, e.Task, t.Ckpt, t.Step)
		}
	case EntryTrainCkpt:
		if e.Model == "" || e.Task < t.Ckpt || e.Task > t.Step {
			return fmt.Errorf("sched: journal: training job %s: bad checkpoint at step %d", e.Name, e.Task)
		}
		if f := e.TrainStep; f != nil && (f.Count < 0 || f.Correct < 0 || f.Correct > f.Count || e.Task%t.Spec.Plan().StepsPerEpoch() != 0) {
			return fmt.Errorf("sched: journal: training job %s: bad evaluation at step %d", e.Name, e.Task)
		}
	case EntryTrainDone:
		if e.Model == "" || t.Step != total {
			return fmt.Errorf("sched: journal: training job %s done at step %d of %d", e.Name, t.Step, total)
		}
	}
	return nil
}

func (s *State) applyTrain(e *Entry) {
	switch e.Kind {
	case EntryTrainAdd:
		spec := *e.Train
		if s.Trains == nil {
			s.Trains = map[string]*TrainState{}
		}
		s.Trains[spec.Name] = &TrainState{Spec: spec, Added: e.Time}
		return
	case EntryTrainRemove:
		delete(s.Trains, e.Name)
		return
	}
	t := s.Trains[e.Name]
	switch e.Kind {
	case EntryTrainStep:
		f := *e.TrainStep
		p := t.Spec.Plan()
		epoch := e.Task / p.StepsPerEpoch()
		for len(t.Epochs) <= epoch {
			t.Epochs = append(t.Epochs, EpochRecord{Steps: make([]byte, (p.StepsPerEpoch()+7)/8)})
		}
		r := &t.Epochs[epoch]
		i := e.Task % p.StepsPerEpoch()
		if r.Steps[i/8]&(1<<(i%8)) == 0 {
			r.Steps[i/8] |= 1 << (i % 8)
			r.NSteps++
			r.Count += f.Count
			r.Digest += f.Digest
		} else {
			t.Replays++
		}
		if e.Task < len(t.Losses) {
			t.Losses[e.Task] = float32(f.Loss)
		} else {
			t.Losses = append(t.Losses, float32(f.Loss))
		}
		t.Last = f
		if e.Task+1 > t.Step {
			t.Step = e.Task + 1
		}
	case EntryTrainCkpt:
		t.Ckpt, t.CkptName = e.Task, e.Model
		if f := e.TrainStep; f != nil && f.Count > 0 {
			// an evaluation at an epoch's end; a recomputed epoch end replaces its point
			pt := EvalPoint{Epoch: e.Task / t.Spec.Plan().StepsPerEpoch(), Step: e.Task, Correct: f.Correct, Count: f.Count,
				Accuracy: float64(f.Correct) / float64(f.Count)}
			t.Evals = slices.DeleteFunc(t.Evals, func(p EvalPoint) bool { return p.Step >= e.Task })
			t.Evals = append(t.Evals, pt)
		}
	case EntryTrainDone:
		t.Complete, t.Finished, t.Output = true, e.Time, e.Model
		s.Models[e.Name] = e.Model
	}
}
