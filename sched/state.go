package sched

import (
	"fmt"
	"math"
	"slices"
)

// Entry kinds of the coordinator's journal.
const (
	EntryEpoch       = "epoch"        // a coordinator took over: Epoch, Node
	EntryPhase       = "phase"        // Phase
	EntryModel       = "model"        // training job: Name registered as Model (SDFS name)
	EntryModelRemove = "model-remove" // Name
	EntryJobAdd      = "job-add"      // Job
	EntryJobRemove   = "job-remove"   // Name
	EntryTaskDone    = "task-done"    // Name, Task, Node (the worker), Report (its measurements)
	EntryJobSplit    = "job-split"    // Name, Text: the split of workers chosen when the job was added
	EntryJobComplete = "job-complete" // Name: the result CSV is in SDFS
	EntryJobResize   = "job-resize"   // Name, Task: from this task on, tasks of Size queries
	EntryTrainAdd    = "train-add"    // Train: a training job
	EntryTrainStep   = "train-step"   // Name, Task: the step committed, TrainStep: its figures
	EntryTrainCkpt   = "train-ckpt"   // Name, Task: the step checkpointed, Model: the SDFS file
	EntryTrainDone   = "train-done"   // Name, Model: the trained model's SDFS file (registered)
	EntryTrainRemove = "train-remove" // Name
)

// Entry is one state change of the coordinator. Entries are applied in Seq order; the
// coordinator writes each to its journal, applies it and replicates it to the standby, and
// acknowledges a client's change only once the standby holds it (see replicator).
type Entry struct {
	Seq   uint64   `json:"seq"`
	Epoch uint64   `json:"epoch"`
	Kind  string   `json:"kind"`
	Time  int64    `json:"time"` // unix nanoseconds, the coordinator's clock
	Node  string   `json:"node,omitempty"`
	Name  string   `json:"name,omitempty"`
	Task  int      `json:"task,omitempty"`
	Phase Phase    `json:"phase,omitempty"`
	Model string   `json:"model,omitempty"`
	Job   *JobSpec `json:"job,omitempty"`
	Text  string   `json:"text,omitempty"`
	Size  int      `json:"size,omitempty"`
	// Report is the worker's measurements of a done task: journaled so that the standby
	// (and any coordinator after it) has the job's latencies, rates and costs.
	Report *TaskReport `json:"report,omitempty"`
	// Training entries.
	Train     *TrainSpec `json:"train,omitempty"`
	TrainStep *StepFacts `json:"train_step,omitempty"`
}

// JobState is a job as the journal knows it: its spec and which tasks are committed.
type JobState struct {
	Spec     JobSpec `json:"spec"`
	Done     []byte  `json:"done"` // bitmap over tasks
	NDone    int     `json:"ndone"`
	Added    int64   `json:"added"`
	Complete bool    `json:"complete"`
	Finished int64   `json:"finished,omitempty"`
	// Split is the split of workers chosen when the job was added; FirstStart (unix
	// nanoseconds) is when the earliest committed task of the job started on its worker.
	Split      string `json:"split,omitempty"`
	FirstStart int64  `json:"first_start,omitempty"`
	LastDone   int64  `json:"last_done,omitempty"` // when the last task was committed (unix ns)
	// Correct counts right top-1 answers against Spec.Labels (set when the job completes).
	Correct  int  `json:"correct,omitempty"`
	Labelled bool `json:"labelled,omitempty"`
}

// IsDone reports whether task i is committed.
func (j *JobState) IsDone(i int) bool { return j.Done[i/8]&(1<<(i%8)) != 0 }

// State is the coordinator's durable state: everything the journal rebuilds.
// It is owned by whoever holds it (the Coordinator guards it with its mutex).
type State struct {
	Seq         uint64                 `json:"seq"`
	Epoch       uint64                 `json:"epoch"`
	Coordinator string                 `json:"coordinator"`
	Phase       Phase                  `json:"phase"`
	Models      map[string]string      `json:"models"` // trained model name -> SDFS name
	Jobs        map[string]*JobState   `json:"jobs"`
	Order       []string               `json:"order"` // job names in the order they were added
	Trains      map[string]*TrainState `json:"trains,omitempty"`
}

// NewState is the state of a cluster that never had a coordinator.
func NewState() *State {
	return &State{Phase: PhaseIdle, Models: map[string]string{}, Jobs: map[string]*JobState{}, Trains: map[string]*TrainState{}}
}

// Clone returns a deep copy (for snapshots sent to a standby).
func (s *State) Clone() *State {
	c := *s
	c.Models = make(map[string]string, len(s.Models))
	for k, v := range s.Models {
		c.Models[k] = v
	}
	c.Jobs = make(map[string]*JobState, len(s.Jobs))
	for k, j := range s.Jobs {
		jj := *j
		jj.Done = slices.Clone(j.Done)
		c.Jobs[k] = &jj
	}
	c.Order = slices.Clone(s.Order)
	c.Trains = make(map[string]*TrainState, len(s.Trains))
	for k, t := range s.Trains {
		c.Trains[k] = t.clone()
	}
	return &c
}

// Check reports whether e can be applied next, without changing anything. The coordinator
// checks before it replicates, so an entry that would fail is never written anywhere.
func (s *State) Check(e *Entry) error {
	if e.Seq != s.Seq+1 {
		return fmt.Errorf("sched: journal: entry %d out of order (state at %d)", e.Seq, s.Seq)
	}
	if e.Epoch < s.Epoch || (e.Kind == EntryEpoch && e.Epoch == s.Epoch && s.Epoch != 0) {
		return &FencedError{Epoch: e.Epoch, Newest: s.Epoch, Reason: fmt.Sprintf("journal entry %d: the journal is at epoch %d", e.Seq, s.Epoch)}
	}
	if e.Kind != EntryEpoch && e.Epoch != s.Epoch {
		return fmt.Errorf("sched: journal: %s entry of epoch %d without its epoch entry", e.Kind, e.Epoch)
	}
	switch e.Kind {
	case EntryEpoch:
		if e.Node == "" {
			return fmt.Errorf("sched: journal: epoch entry without a node")
		}
	case EntryPhase:
		if e.Phase != PhaseIdle && e.Phase != PhaseTraining && e.Phase != PhaseInference {
			return fmt.Errorf("sched: journal: unknown phase %q", e.Phase)
		}
	case EntryModel:
		if e.Name == "" || e.Model == "" {
			return fmt.Errorf("sched: journal: model entry without name or file")
		}
	case EntryModelRemove:
		if _, ok := s.Models[e.Name]; !ok {
			return fmt.Errorf("sched: no trained model %q", e.Name)
		}
	case EntryJobAdd:
		if e.Job == nil {
			return fmt.Errorf("sched: journal: job-add without a job")
		}
		if err := e.Job.ValidateRequest(); err != nil {
			return err
		}
		if _, dup := s.Jobs[e.Job.Name]; dup {
			return fmt.Errorf("sched: job name %q is already in use", e.Job.Name)
		}
		if f := e.Job.FLOPsPerQuery; f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("sched: journal: job %s has a bad FLOPs per query %v", e.Job.Name, f)
		}
		if e.Job.resized() || e.Job.ResizeFrom != 0 || e.Job.ResizeID != 0 || len(e.Job.Splits) > 0 {
			return fmt.Errorf("sched: journal: job %s is added resized", e.Job.Name)
		}
		if n := e.Job.NumTasks(); n <= 0 || n > MaxTasks || e.Job.TaskSize%e.Job.Batch != 0 {
			return fmt.Errorf("sched: journal: job %s has a bad task split (%d queries, %d per task)",
				e.Job.Name, e.Job.Queries, e.Job.TaskSize)
		}
	case EntryJobRemove, EntryJobComplete, EntryJobSplit:
		if _, ok := s.Jobs[e.Name]; !ok {
			return noJobError(e.Name)
		}
	case EntryJobResize:
		return s.checkResize(e)
	case EntryTrainAdd, EntryTrainStep, EntryTrainCkpt, EntryTrainDone, EntryTrainRemove:
		return s.checkTrain(e)
	case EntryTaskDone:
		j, ok := s.Jobs[e.Name]
		if !ok {
			return noJobError(e.Name)
		}
		if e.Task < 0 || e.Task >= j.Spec.NumTasks() {
			return fmt.Errorf("sched: job %s has no task %d", e.Name, e.Task)
		}
		if j.IsDone(e.Task) {
			return fmt.Errorf("sched: job %s task %d is already done", e.Name, e.Task)
		}
	default:
		return fmt.Errorf("sched: journal: unknown entry kind %q", e.Kind)
	}
	return nil
}

// Apply checks e and applies it.
func (s *State) Apply(e *Entry) error {
	if err := s.Check(e); err != nil {
		return err
	}
	s.Seq = e.Seq
	switch e.Kind {
	case EntryEpoch:
		s.Epoch, s.Coordinator = e.Epoch, e.Node
	case EntryPhase:
		s.Phase = e.Phase
	case EntryModel:
		s.Models[e.Name] = e.Model
	case EntryModelRemove:
		delete(s.Models, e.Name)
	case EntryJobAdd:
		spec := *e.Job
		s.Jobs[spec.Name] = &JobState{Spec: spec, Done: make([]byte, (spec.NumTasks()+7)/8), Added: e.Time}
		s.Order = append(s.Order, spec.Name)
	case EntryJobRemove:
		delete(s.Jobs, e.Name)
		s.Order = slices.DeleteFunc(s.Order, func(n string) bool { return n == e.Name })
	case EntryTaskDone:
		j := s.Jobs[e.Name]
		j.Done[e.Task/8] |= 1 << (e.Task % 8)
		j.NDone++
		j.LastDone = e.Time
		if r := e.Report; r != nil && r.StartNanos > 0 && (j.FirstStart == 0 || r.StartNanos < j.FirstStart) {
			j.FirstStart = r.StartNanos
		}
	case EntryJobSplit:
		s.Jobs[e.Name].Split = e.Text
	case EntryJobResize:
		j := s.Jobs[e.Name]
		j.Spec.Splits = append(slices.Clip(j.Spec.Splits), TaskSplit{From: e.Task, Size: e.Size, ID: e.Time})
		done := make([]byte, (j.Spec.NumTasks()+7)/8)
		copy(done, j.Done) // every done task is below ResizeFrom (checkResize)
		j.Done = done
	case EntryJobComplete:
		j := s.Jobs[e.Name]
		j.Complete, j.Finished = true, e.Time
		if e.Job == nil && e.Size > 0 { // Size: 1 + the right answers, for a job with labels
			j.Correct, j.Labelled = e.Size-1, true
		}
	case EntryTrainAdd, EntryTrainStep, EntryTrainCkpt, EntryTrainDone, EntryTrainRemove:
		s.applyTrain(e)
	}
	return nil
}

// checkResize checks a job-resize entry: a running job resized fewer than MaxSplits times,
// whose tasks from e.Task on are none of them done, split into whole batches under a new
// result ID, within MaxTasks.
func (s *State) checkResize(e *Entry) error {
	j, ok := s.Jobs[e.Name]
	if !ok {
		return noJobError(e.Name)
	}
	sp := j.Spec
	if j.Complete || len(sp.splits()) >= MaxSplits {
		return fmt.Errorf("sched: journal: job %s cannot be resized (complete, or resized %d times)", e.Name, MaxSplits)
	}
	if e.Size <= 0 || e.Size%sp.Batch != 0 || e.Task < 0 || e.Task > sp.NumTasks() {
		return fmt.Errorf("sched: journal: job %s: bad resize (from task %d, size %d)", e.Name, e.Task, e.Size)
	}
	if f, _ := sp.TaskRange(e.Task); f >= sp.Queries {
		return fmt.Errorf("sched: journal: job %s: bad resize (from task %d, past the end)", e.Name, e.Task)
	}
	if ls := sp.splits(); len(ls) > 0 && e.Task < ls[len(ls)-1].From {
		return fmt.Errorf("sched: journal: job %s: resize from task %d before the last one's %d", e.Name, e.Task, ls[len(ls)-1].From)
	}
	if e.Time == sp.ID || slices.ContainsFunc(sp.splits(), func(x TaskSplit) bool { return x.ID == e.Time }) {
		return fmt.Errorf("sched: journal: job %s: resize reuses a result ID", e.Name)
	}
	for i := e.Task; i < sp.NumTasks(); i++ {
		if j.IsDone(i) {
			return fmt.Errorf("sched: journal: job %s: resize from task %d but task %d is done", e.Name, e.Task, i)
		}
	}
	sp.Splits = append(slices.Clip(sp.Splits), TaskSplit{From: e.Task, Size: e.Size, ID: e.Time})
	if n := sp.NumTasks(); n > MaxTasks {
		return fmt.Errorf("sched: journal: job %s: resize to %d tasks is over %d", e.Name, n, MaxTasks)
	}
	return nil
}

// checkSplits checks a decoded job's resizes (from disk or the network).
func (sp JobSpec) checkSplits() error {
	ls := sp.splits()
	if sp.ResizeFrom < 0 || sp.ResizeSize < 0 || len(ls) > MaxSplits || (len(ls) > 0 && (sp.TaskSize <= 0 || sp.Batch <= 0)) {
		return fmt.Errorf("bad resize")
	}
	prev := 0
	for _, x := range ls {
		if x.From < prev || x.From > MaxTasks || x.Size <= 0 || x.Size%sp.Batch != 0 || x.Size > 1<<31 || sp.TaskSize > 1<<31 {
			return fmt.Errorf("bad resize")
		}
		prev = x.From
		if start, _, _, _ := sp.layout(x.From); start >= sp.Queries || start < 0 {
			return fmt.Errorf("bad resize")
		}
	}
	return nil
}

// validate checks a decoded snapshot's internal consistency (it came from disk or the network).
func (s *State) validate() error {
	if s.Models == nil {
		s.Models = map[string]string{}
	}
	if s.Jobs == nil {
		s.Jobs = map[string]*JobState{}
	}
	if s.Trains == nil {
		s.Trains = map[string]*TrainState{}
	}
	for n, t := range s.Trains {
		if t == nil || t.Spec.Name != n || t.Spec.check() != nil || t.Step < 0 || t.Ckpt < 0 || t.Ckpt > t.Step {
			return fmt.Errorf("sched: snapshot: training job %q inconsistent", n)
		}
	}
	if len(s.Order) != len(s.Jobs) {
		return fmt.Errorf("sched: snapshot: %d jobs but %d in order", len(s.Jobs), len(s.Order))
	}
	for _, n := range s.Order {
		j, ok := s.Jobs[n]
		if !ok || j == nil || j.Spec.Name != n {
			return fmt.Errorf("sched: snapshot: job %q inconsistent", n)
		}
		if j.Spec.checkSplits() != nil {
			return fmt.Errorf("sched: snapshot: job %q has a bad resize", n)
		}
		nt := j.Spec.NumTasks()
		if nt <= 0 || nt > MaxTasks || j.Spec.Batch <= 0 || len(j.Done) != (nt+7)/8 || j.NDone < 0 || j.NDone > nt {
			return fmt.Errorf("sched: snapshot: job %q has a bad task table", n)
		}
	}
	return nil
}
