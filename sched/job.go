package sched

import (
	"fmt"
	"idunno/kernel"
	"idunno/sched/dataset"
	"math"
	"regexp"
	"strconv"
)

// Phase is the cluster's current phase: training and inference never overlap.
type Phase string

// The phases. Idle is neither: jobs of either kind can't be added.
const (
	PhaseIdle      Phase = "idle"
	PhaseTraining  Phase = "training"
	PhaseInference Phase = "inference"
)

// JobSpec is what a client asks for. Queries and TaskSize are filled in by the coordinator
// when it accepts the job (from the dataset's length and the batch size).
type JobSpec struct {
	Name   string `json:"name"`
	Model  string `json:"model"`  // SDFS name of the ONNX file
	Data   string `json:"data"`   // SDFS name of the dataset
	Format string `json:"format"` // idx, npy, images ("" = guess from the name)
	// Inputs binds model inputs by name to SDFS .npy arrays of one row per query (token ids,
	// masks), instead of Data: every model input must be bound, and the arrays must have the
	// same number of rows. Absent in journals written before multi-input jobs.
	Inputs   map[string]string  `json:"inputs,omitempty"`
	Batch    int                `json:"batch"`
	Pre      dataset.Preprocess `json:"pre"`
	Queries  int                `json:"queries"`   // number of queries (dataset length)
	TaskSize int                `json:"task_size"` // queries per task, a multiple of Batch
	ID       int64              `json:"id"`        // set by the coordinator: tells a re-added name from the old job
	// FLOPsPerQuery is the model's compute per query, measured by the coordinator when it
	// accepts the job (0: unknown). The fair-time controller's cost prior until the job's
	// cost is measured.
	FLOPsPerQuery float64 `json:"flops_per_query,omitempty"`
	// Weight makes the job's query rate Weight times that of a job of weight 1 under fair
	// time (0: 1, so journals written before weights read the same).
	Weight float64 `json:"weight,omitempty"`
	// A job's tasks can be split differently (job-resize entries), up to MaxSplits times:
	// from task Splits[k].From on (no task of which was ever committed), tasks are
	// Splits[k].Size queries, and their results are named by Splits[k].ID instead of ID, so
	// a stale worker still running an old task of that index writes elsewhere and its
	// report is ignored. Set by the coordinator. ResizeFrom, ResizeSize and ResizeID are the
	// one resize journals written before Splits hold: a split before every one of Splits.
	ResizeFrom int         `json:"resize_from,omitempty"`
	ResizeSize int         `json:"resize_size,omitempty"`
	ResizeID   int64       `json:"resize_id,omitempty"`
	Splits     []TaskSplit `json:"splits,omitempty"`
	// SizeChosen: the coordinator chose TaskSize (the client gave none), so it may resize.
	SizeChosen bool `json:"size_chosen,omitempty"`
	// Labels is the SDFS name of the dataset's labels (IDX or .npy): the job then also
	// counts right answers (JobState.Correct) when its result is assembled.
	Labels string `json:"labels,omitempty"`
	// Request is the client's idempotency key (random, at most 64 bytes; optional): an add
	// repeated with the same name and key is a retry of one that was applied but not
	// confirmed, and gets that job instead of "already in use".
	Request string `json:"request,omitempty"`
	// Precision is the kernel's compute precision for the job: "" or "fp32", "bf16", "int8"
	// (kernel.ParsePrecision). Absent in journals written before precisions: fp32.
	Precision string `json:"precision,omitempty"`
}

// TaskSplit is one job-resize: from task From on, tasks of Size queries named by ID.
type TaskSplit struct {
	From int   `json:"from"`
	Size int   `json:"size"`
	ID   int64 `json:"id"`
}

// MaxSplits bounds the resizes of one job.
const MaxSplits = 8

// splits lists the job's resizes in order, the one of an older journal first.
func (s JobSpec) splits() []TaskSplit {
	if s.ResizeSize <= 0 {
		return s.Splits
	}
	return append([]TaskSplit{{From: s.ResizeFrom, Size: s.ResizeSize, ID: s.ResizeID}}, s.Splits...)
}

func (s JobSpec) resized() bool { return s.ResizeSize > 0 || len(s.Splits) > 0 }

// layout returns, for task i, the first query of its split's first task, that task's
// index, its size and its result ID.
func (s JobSpec) layout(i int) (start, from, size int, id int64) {
	start, from, size, id = 0, 0, s.TaskSize, s.ID
	for _, sp := range s.splits() {
		if sp.From > i {
			break
		}
		start += (sp.From - from) * size
		from, size, id = sp.From, sp.Size, sp.ID
	}
	return start, from, size, id
}

// CurrentTaskSize is the size of the job's tasks not yet split off: the last resize's,
// else TaskSize.
func (s JobSpec) CurrentTaskSize() int {
	if sp := s.splits(); len(sp) > 0 {
		return sp[len(sp)-1].Size
	}
	return s.TaskSize
}

// ResultID is the ID that names task i's result (and that its report carries).
func (s JobSpec) ResultID(i int) int64 {
	_, _, _, id := s.layout(i)
	return id
}

// MaxWeight bounds a job's weight: rates more than this far apart are not fair time.
const MaxWeight = 1000

// RateWeight is the job's weight, 1 when unset.
func (s JobSpec) RateWeight() float64 {
	if s.Weight > 0 {
		return s.Weight
	}
	return 1
}

// MaxTasks bounds the number of tasks of one job, and with it the journal's size.
const MaxTasks = 100000

var jobNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidateRequest checks what a client can get wrong before anything is looked up.
func (s JobSpec) ValidateRequest() error {
	switch {
	case !jobNameRE.MatchString(s.Name):
		return fmt.Errorf("sched: job name %q: use 1-64 letters, digits, '.', '_' or '-'", s.Name)
	case len(s.Request) > 64:
		return fmt.Errorf("sched: job %s: request key of %d bytes (at most 64)", s.Name, len(s.Request))
	case s.Model == "":
		return fmt.Errorf("sched: job %s: no model given", s.Name)
	case s.Data == "" && len(s.Inputs) == 0:
		return fmt.Errorf("sched: job %s: no dataset given", s.Name)
	case s.Data != "" && len(s.Inputs) > 0:
		return fmt.Errorf("sched: job %s: give a dataset or named inputs, not both", s.Name)
	case len(s.Inputs) > 64:
		return fmt.Errorf("sched: job %s: %d named inputs (limit 64)", s.Name, len(s.Inputs))
	case s.Batch <= 0:
		return fmt.Errorf("sched: job %s: batch size must be at least 1 (got %d)", s.Name, s.Batch)
	case s.Batch > 4096:
		return fmt.Errorf("sched: job %s: batch size %d is over the limit 4096", s.Name, s.Batch)
	case s.Weight < 0 || s.Weight > MaxWeight || math.IsNaN(s.Weight) || (s.Weight > 0 && s.Weight < 1/MaxWeight):
		return fmt.Errorf("sched: job %s: weight %v: use a number from %g to %d", s.Name, s.Weight, 1.0/MaxWeight, MaxWeight)
	}
	if err := s.Pre.Validate(); err != nil {
		return fmt.Errorf("sched: job %s: %w", s.Name, err)
	}
	if _, err := kernel.ParsePrecision(s.Precision); err != nil {
		return fmt.Errorf("sched: job %s: %w", s.Name, err)
	}
	return nil
}

// NumTasks is how many tasks the job splits into.
func (s JobSpec) NumTasks() int {
	if s.TaskSize <= 0 || s.Queries <= 0 {
		return 0
	}
	start, from, size, _ := s.layout(math.MaxInt)
	if size <= 0 {
		return 0
	}
	return from + (max(s.Queries-start, 0)+size-1)/size
}

// TaskRange is the half-open range of query ids task i covers.
func (s JobSpec) TaskRange(i int) (from, to int) {
	start, first, size, _ := s.layout(i)
	from = start + (i-first)*size
	return from, min(from+size, s.Queries)
}

// ChooseTaskSize picks queries per task: whole batches, about target queries, and no more
// than MaxTasks tasks. Small tasks make failures cheap and new jobs start fast; large ones
// keep the coordinator's per-task cost negligible.
func ChooseTaskSize(queries, batch, target int) int {
	if batch <= 0 {
		return 0
	}
	batches := max(1, target/batch)
	for (queries+batches*batch-1)/(batches*batch) > MaxTasks {
		batches *= 2
	}
	return batches * batch
}

// TaskResultName is the SDFS name of one task's result lines.
// The job's ID is part of it, so a late worker of a removed job can never overwrite the
// results of a new job of the same name.
func TaskResultName(job string, id int64, task int) string {
	return "idunno/jobs/" + job + "/" + strconv.FormatInt(id, 10) + "/task-" + strconv.Itoa(task) + ".csv"
}

// JobResultName is the SDFS name of a job's result CSV.
func JobResultName(job string) string { return "idunno/jobs/" + job + "/result.csv" }

// ResultHeader is the first line of every job's result CSV.
const ResultHeader = "query,top1,score\n"

// Prediction is the answer to one query.
type Prediction struct {
	Top1  int
	Score float32
}

// FormatResultLines renders predictions for queries from, from+1, ... as CSV lines. Floats
// use the shortest representation that round-trips a float32, so equal results give
// equal bytes.
func FormatResultLines(from int, preds []Prediction) []byte {
	b := make([]byte, 0, len(preds)*24)
	for i, p := range preds {
		b = strconv.AppendInt(b, int64(from+i), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(p.Top1), 10)
		b = append(b, ',')
		b = strconv.AppendFloat(b, float64(p.Score), 'g', -1, 32)
		b = append(b, '\n')
	}
	return b
}

// Argmax returns the index and value of the largest of each row of a rows×cols matrix.
func Argmax(data []float32, rows, cols int) []Prediction {
	out := make([]Prediction, rows)
	for r := 0; r < rows; r++ {
		row := data[r*cols : (r+1)*cols]
		best := 0
		for c := 1; c < cols; c++ {
			if row[c] > row[best] {
				best = c
			}
		}
		out[r] = Prediction{Top1: best, Score: row[best]}
	}
	return out
}
