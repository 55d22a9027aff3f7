package sched

import (
	"context"
	"fmt"
	"sort"
)

// TrainWorker is one worker's share of a training job's shards.
type TrainWorker struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// EpochSummary is one epoch's exactly-once record.
type EpochSummary struct {
	Epoch       int    `json:"epoch"`
	Steps       int    `json:"steps"`
	Samples     int64  `json:"samples"`
	Complete    bool   `json:"complete"`
	ExactlyOnce bool   `json:"exactly_once"`
	Digest      string `json:"digest"`
}

// TrainSummary is `train stats --json`.
type TrainSummary struct {
	Name           string         `json:"name"`
	Epoch          int            `json:"epoch"`
	Epochs         int            `json:"epochs"`
	Step           int            `json:"step"`
	StepsTotal     int            `json:"steps_total"`
	SamplesDone    int64          `json:"samples_done"`
	SamplesPerSec  float64        `json:"samples_per_sec"`
	Loss           *float64       `json:"loss"`
	EvalAccuracy   *float64       `json:"eval_accuracy"`
	Workers        []TrainWorker  `json:"workers"`
	CheckpointStep int            `json:"checkpoint_step"`
	Complete       bool           `json:"complete"`
	Output         string         `json:"output,omitempty"`
	Replays        int            `json:"replays"`
	EpochRecords   []EpochSummary `json:"epoch_records"`
	Losses         []float32      `json:"losses,omitempty"` // every committed step's loss, in step order
	// EvalHistory is every evaluation so far (one per finished epoch when the job has an
	// evaluation set): the points of an eval-accuracy curve; its last is EvalAccuracy.
	EvalHistory []EvalPoint `json:"eval_history"`
	Shards      int         `json:"shards"`
	Batch       int         `json:"batch"`
}

// apiTrainAdd accepts a training job in the training phase.
func (s *Scheduler) apiTrainAdd(ctx context.Context, spec TrainSpec) (TrainSummary, error) {
	fail := func(err error) (TrainSummary, error) {
		s.logf("sched: training job %s refused: %v", spec.Name, err)
		return TrainSummary{}, err
	}
	if !jobNameRE.MatchString(spec.Name) {
		return fail(fmt.Errorf("sched: training job name %q: use letters, digits, '-', '_' and '.'", spec.Name))
	}
	if err := spec.ValidateRequest(); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	if s.st.Phase != PhaseTraining {
		ph := s.st.Phase
		s.mu.Unlock()
		return fail(fmt.Errorf("sched: training jobs need the training phase (idunno train start); phase is %s", ph))
	}
	if _, dup := s.st.Trains[spec.Name]; dup {
		s.mu.Unlock()
		return fail(fmt.Errorf("sched: training job name %q is already in use", spec.Name))
	}
	if _, dup := s.st.Models[spec.Name]; dup {
		s.mu.Unlock()
		return fail(fmt.Errorf("sched: a model named %q is already registered", spec.Name))
	}
	s.mu.Unlock()
	sc, ok := s.exec.(ShardComputer)
	if !ok {
		return fail(fmt.Errorf("sched: this node cannot train"))
	}
	n, err := sc.ProbeTrain(ctx, spec)
	if err != nil {
		return fail(err)
	}
	spec.Samples = n
	if n < spec.Batch {
		return fail(fmt.Errorf("sched: batch %d is larger than the dataset (%d samples)", spec.Batch, n))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return fail(retryErrorf("sched: %s stopped coordinating; retry", s.name))
	}
	if err := s.commit(&Entry{Kind: EntryTrainAdd, Train: &spec}); err != nil {
		return fail(err)
	}
	s.logf("sched: training job %s accepted: %d samples, %d epochs of %d steps, %d shards a step", spec.Name, n,
		spec.Epochs, spec.Plan().StepsPerEpoch(), spec.Shards)
	s.trainTick()
	return s.trainSummary(spec.Name), nil
}

func (s *Scheduler) apiTrainRemove(_ context.Context, a NameArgs) (struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.st.Trains[a.Name]; !ok {
		return struct{}{}, noTrainJobError(a.Name)
	}
	if err := s.commit(&Entry{Kind: EntryTrainRemove, Name: a.Name}); err != nil {
		return struct{}{}, err
	}
	s.tt.mu.Lock()
	r := s.tt.runs[a.Name]
	delete(s.tt.runs, a.Name)
	s.tt.mu.Unlock()
	if r != nil {
		go func() {
			r.mu.Lock()
			if r.eng != nil {
				r.eng.Close()
				r.eng = nil
			}
			r.ready = false
			r.mu.Unlock()
		}()
	}
	return struct{}{}, nil
}

func (s *Scheduler) apiTrainList(_ context.Context, _ struct{}) ([]TrainSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.st.Trains))
	for n := range s.st.Trains {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []TrainSummary{}
	for _, n := range names {
		out = append(out, s.trainSummary(n))
	}
	return out, nil
}

func (s *Scheduler) apiTrainGet(_ context.Context, a NameArgs) (TrainSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.st.Trains[a.Name]; !ok {
		return TrainSummary{}, noTrainJobError(a.Name)
	}
	return s.trainSummary(a.Name), nil
}

// trainSummary reports a training job (s.mu held).
func (s *Scheduler) trainSummary(name string) TrainSummary {
	t := s.st.Trains[name]
	p := t.Spec.Plan()
	sum := TrainSummary{Name: name, Epochs: t.Spec.Epochs, Step: t.Step, StepsTotal: p.TotalSteps(),
		CheckpointStep: t.Ckpt, Complete: t.Complete, Output: t.Output, Replays: t.Replays, Losses: t.Losses,
		Shards: t.Spec.Shards, Batch: t.Spec.Batch, Workers: []TrainWorker{}, EvalHistory: append([]EvalPoint{}, t.Evals...)}
	if n := len(t.Evals); n > 0 {
		a := t.Evals[n-1].Accuracy
		sum.EvalAccuracy = &a
	}
	sum.Epoch = min(t.Step/p.StepsPerEpoch(), t.Spec.Epochs-1)
	for i, r := range t.Epochs {
		done, once := t.EpochComplete(i)
		sum.SamplesDone += r.Count
		sum.EpochRecords = append(sum.EpochRecords, EpochSummary{Epoch: i + 1, Steps: r.NSteps, Samples: r.Count,
			Complete: done, ExactlyOnce: once, Digest: fmt.Sprintf("%016x", r.Digest)})
	}
	if t.Step > 0 {
		l := t.Last.Loss
		sum.Loss = &l
	}
	end := s.now().UnixNano()
	if t.Complete {
		end = t.Finished
	}
	if secs := float64(end-t.Added) / 1e9; secs > 0 {
		sum.SamplesPerSec = float64(sum.SamplesDone) / secs
	}
	counts := map[string]int{}
	for _, w := range t.Last.Workers {
		counts[w]++
	}
	for _, w := range sortedKeys(counts) {
		sum.Workers = append(sum.Workers, TrainWorker{Name: w, Share: float64(counts[w]) / float64(len(t.Last.Workers))})
	}
	return sum
}
