package sched

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"idunno/sched/dataset"
	"sort"
	"time"

	"idunno/rpc"
)

// JobSummary is one job in `idunno job list` and what `job wait` polls.
type JobSummary struct {
	Name         string  `json:"name"`
	Model        string  `json:"model"`
	Data         string  `json:"data"`
	Batch        int     `json:"batch"`
	Queries      int     `json:"queries"`
	Tasks        int     `json:"tasks"`
	TaskSize     int     `json:"task_size"`
	DoneTasks    int     `json:"done_tasks"`
	Done         int     `json:"done"`
	Complete     bool    `json:"complete"`
	Share        float64 `json:"share"`
	Rate10s      float64 `json:"rate_10s"`
	AddedUnix    float64 `json:"added_unix"`
	Seconds      float64 `json:"seconds"`        // since added, or until finished
	FirstQueryMS float64 `json:"first_query_ms"` // from added to the first task starting (-1: not yet known)
	LastDoneMS   float64 `json:"last_done_ms"`   // from added to the latest task's commit (-1: none yet)
	SplitAtAdd   string  `json:"split_at_add,omitempty"`
	Weight       float64 `json:"weight"`
	Result       string  `json:"result"` // SDFS name of the result CSV
}

// JobAddReply says how a job was split.
type JobAddReply struct {
	Queries  int    `json:"queries"`
	Tasks    int    `json:"tasks"`
	TaskSize int    `json:"task_size"`
	Split    string `json:"split"` // shares of the running jobs right after the add
	// Standby holds the job as well as the coordinator; NoStandby says no other node was
	// live, so the job is only on the coordinator's disk.
	Standby   string `json:"standby,omitempty"`
	NoStandby bool   `json:"no_standby,omitempty"`
}

// PhaseArgs sets the cluster's phase.
type PhaseArgs struct {
	Phase Phase `json:"phase"`
}

// ModelArgs registers a trained model.
type ModelArgs struct {
	Name  string `json:"name"`
	Model string `json:"model"` // SDFS name
}

// NameArgs names a job.
type NameArgs struct {
	Name string `json:"name"`
}

// ClusterInfo is `idunno job phase`: the phase, the coordinator and the trained models.
type ClusterInfo struct {
	Phase       Phase             `json:"phase"`
	Coordinator string            `json:"coordinator"`
	Epoch       uint64            `json:"epoch"`
	Models      map[string]string `json:"models"`
	Standby     string            `json:"standby"`
	// NoStandby (in the reply to a change) says no other node was live: the change is only
	// on the coordinator's disk.
	NoStandby bool `json:"no_standby,omitempty"`
}

// coordMethod registers a client method that runs on the coordinator: any node accepts it
// and forwards it once (to method+"!", which never forwards again).
func coordMethod[A, R any](s *Scheduler, srv *rpc.Server, method string, f func(ctx context.Context, a A) (R, error)) {
	rpc.HandleJSON(srv, method+"!", func(ctx context.Context, a A) (R, error) {
		if !s.IsCoordinator() {
			var zero R
			return zero, retryErrorf("sched: %s is no longer the coordinator; retry", s.name)
		}
		r, err := f(ctx, a)
		return r, notAuthoritative(err, s.IsCoordinator())
	})
	rpc.HandleJSON(srv, method, func(ctx context.Context, a A) (R, error) {
		if s.IsCoordinator() {
			r, err := f(ctx, a)
			return r, notAuthoritative(err, s.IsCoordinator())
		}
		var r R
		name, addr, _, _ := s.coordinator()
		if addr == "" {
			return r, retryErrorf("sched: no coordinator right now (a new one is being elected); retry shortly")
		}
		if err := s.rpc.CallJSON(ctx, addr, method+"!", a, &r); err != nil {
			if rpc.IsRemote(err) {
				return r, err
			}
			// The call may have reached the coordinator and its answer been lost: a change
			// in it may or may not have been made.
			return r, &codedError{CodeUnconfirmed, fmt.Errorf("sched: coordinator %s unreachable (a new one may be taking over); retry: %w", name, err)}
		}
		return r, nil
	})
}

// IsCoordinator reports whether this node coordinates now.
func (s *Scheduler) IsCoordinator() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role == roleCoordinator
}

// confirmed wraps a client method that changes the journal: its answer waits until the
// standby holds the change (or, with no other live node, the coordinator's disk does), and
// an answer that cannot be confirmed is an error (the change may or may not have been made).
func confirmed[A, R any](s *Scheduler, f func(ctx context.Context, a A) (R, error)) func(ctx context.Context, a A) (R, error) {
	return func(ctx context.Context, a A) (R, error) {
		r, err := f(ctx, a)
		if err != nil {
			return r, err
		}
		standby, err := s.confirm(ctx)
		if err != nil {
			var zero R
			return zero, err
		}
		if d, ok := any(&r).(durability); ok {
			d.setDurability(standby)
		}
		return r, nil
	}
}

func (s *Scheduler) registerClientAPI(srv *rpc.Server) {
	coordMethod(s, srv, "sched.phase", confirmed(s, s.apiPhase))
	coordMethod(s, srv, "sched.info", s.apiInfo)
	coordMethod(s, srv, "sched.model.add", confirmed(s, s.apiModelAdd))
	coordMethod(s, srv, "sched.model.remove", confirmed(s, s.apiModelRemove))
	coordMethod(s, srv, "sched.job.add", confirmed(s, s.apiJobAdd))
	coordMethod(s, srv, "sched.job.remove", confirmed(s, s.apiJobRemove))
	coordMethod(s, srv, "sched.job.list", s.apiJobList)
	coordMethod(s, srv, "sched.job.get", s.apiJobGet)
	coordMethod(s, srv, "sched.job.stats", s.apiJobStats)
	coordMethod(s, srv, "sched.job.stats.all", s.apiJobStatsAll)
	coordMethod(s, srv, "sched.job.histogram", s.apiJobHistogram)
	coordMethod(s, srv, "sched.train.add", confirmed(s, s.apiTrainAdd))
	coordMethod(s, srv, "sched.train.remove", confirmed(s, s.apiTrainRemove))
	coordMethod(s, srv, "sched.train.list", s.apiTrainList)
	coordMethod(s, srv, "sched.train.get", s.apiTrainGet)
	srv.Handle("sched.job.result", func(ctx context.Context, req *rpc.Message) (*rpc.Message, error) {
		var a NameArgs
		if err := json.Unmarshal(req.Args, &a); err != nil || !jobNameRE.MatchString(a.Name) {
			return nil, fmt.Errorf("sched: job.result: bad job name")
		}
		b, err := s.blobs.Get(ctx, JobResultName(a.Name))
		if err != nil {
			return nil, fmt.Errorf("sched: result of job %s: %w", a.Name, err)
		}
		return &rpc.Message{Body: b}, nil
	})
}

func (s *Scheduler) apiPhase(_ context.Context, a PhaseArgs) (ClusterInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return ClusterInfo{}, fmt.Errorf("sched: %s is not the coordinator", s.name)
	}
	switch {
	case a.Phase == s.st.Phase:
	case a.Phase == PhaseIdle:
		if err := s.commit(&Entry{Kind: EntryPhase, Phase: a.Phase}); err != nil {
			return ClusterInfo{}, err
		}
		s.logf("sched: %s phase stopped", s.st.Phase)
	case a.Phase == PhaseTraining || a.Phase == PhaseInference:
		if s.st.Phase != PhaseIdle {
			return ClusterInfo{}, fmt.Errorf("sched: the %s phase is running: stop it first", s.st.Phase)
		}
		if err := s.commit(&Entry{Kind: EntryPhase, Phase: a.Phase}); err != nil {
			return ClusterInfo{}, err
		}
		s.logf("sched: %s phase started", a.Phase)
	default:
		return ClusterInfo{}, fmt.Errorf("sched: unknown phase %q (idle, training, inference)", a.Phase)
	}
	s.w.wake()
	return s.info(), nil
}

func (s *Scheduler) info() ClusterInfo {
	ci := ClusterInfo{Phase: s.st.Phase, Coordinator: s.name, Epoch: s.st.Epoch, Models: map[string]string{}}
	for k, v := range s.st.Models {
		ci.Models[k] = v
	}
	if s.co != nil && s.co.repl != nil {
		ci.Standby = s.co.repl.standby()
	}
	return ci
}

func (s *Scheduler) apiInfo(_ context.Context, _ struct{}) (ClusterInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info(), nil
}

func (s *Scheduler) apiModelAdd(ctx context.Context, a ModelArgs) (ClusterInfo, error) {
	s.mu.Lock()
	phase := s.st.Phase
	s.mu.Unlock()
	if phase != PhaseTraining {
		return ClusterInfo{}, fmt.Errorf("sched: training jobs need the training phase (idunno train start); phase is %s", phase)
	}
	if !jobNameRE.MatchString(a.Name) {
		return ClusterInfo{}, fmt.Errorf("sched: model name %q: use 1-64 letters, digits, '.', '_' or '-'", a.Name)
	}
	s.logf("sched: training job received: model %s from %s", a.Name, a.Model)
	if err := s.exec.ProbeModel(ctx, a.Model); err != nil {
		return ClusterInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return ClusterInfo{}, retryErrorf("sched: %s stopped coordinating; retry", s.name)
	}
	if err := s.commit(&Entry{Kind: EntryModel, Name: a.Name, Model: a.Model}); err != nil {
		return ClusterInfo{}, err
	}
	s.logf("sched: training job completed: model %s ready for inference", a.Name)
	return s.info(), nil
}

func (s *Scheduler) apiModelRemove(_ context.Context, a NameArgs) (ClusterInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return ClusterInfo{}, retryErrorf("sched: %s stopped coordinating; retry", s.name)
	}
	if s.st.Phase != PhaseTraining {
		return ClusterInfo{}, fmt.Errorf("sched: training jobs are removed in the training phase (idunno train start); phase is %s", s.st.Phase)
	}
	if err := s.commit(&Entry{Kind: EntryModelRemove, Name: a.Name}); err != nil {
		return ClusterInfo{}, err
	}
	s.logf("sched: training job %s removed", a.Name)
	return s.info(), nil
}

func (s *Scheduler) apiJobAdd(ctx context.Context, spec JobSpec) (JobAddReply, error) {
	s.logf("sched: job received: %s (model %s, data %s, batch %d)", spec.Name, spec.Model, spec.Data, spec.Batch)
	fail := func(err error) (JobAddReply, error) {
		s.logf("sched: job %s refused: %v", spec.Name, err)
		return JobAddReply{}, err
	}
	if err := spec.ValidateRequest(); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	if s.st.Phase != PhaseInference {
		phase := s.st.Phase
		s.mu.Unlock()
		return fail(fmt.Errorf("sched: inference jobs need the inference phase (idunno inference start); phase is %s", phase))
	}
	if j, dup := s.st.Jobs[spec.Name]; dup {
		if s.isRetryOf(j, spec) {
			r := retryReply(j)
			s.mu.Unlock()
			return r, nil // confirmed (again) by the caller, see confirmed
		}
		s.mu.Unlock()
		return fail(fmt.Errorf("sched: job name %q is already in use", spec.Name))
	}
	if m, ok := s.st.Models[spec.Model]; ok {
		spec.Model = m
	}
	s.mu.Unlock()
	n, err := s.exec.Probe(ctx, spec)
	if err != nil {
		return fail(err)
	}
	if n <= 0 {
		return fail(fmt.Errorf("sched: dataset %s is empty", spec.Data))
	}
	if spec.Labels != "" {
		lb, err := s.blobs.Get(ctx, spec.Labels)
		if err != nil {
			return fail(fmt.Errorf("sched: labels %q: %w", spec.Labels, err))
		}
		labels, err := dataset.ReadLabels(spec.Labels, bytes.NewReader(lb))
		if err != nil {
			return fail(err)
		}
		if len(labels) != n {
			return fail(fmt.Errorf("sched: %d labels in %s for the %d queries of %s", len(labels), spec.Labels, n, spec.Data))
		}
	}
	spec.Queries = n
	spec.ID = s.now().UnixNano()
	spec.ResizeFrom, spec.ResizeSize, spec.ResizeID, spec.Splits, spec.SizeChosen = 0, 0, 0, nil, false // the coordinator's
	// The model's compute per query is the controller's cost prior until the job's own
	// cost is measured, so the split chosen now is already close to fair. Never the client's.
	spec.FLOPsPerQuery = s.exec.FLOPsPerQuery(ctx, spec)
	if spec.TaskSize <= 0 {
		// The dispatch core's choice (see dispatch.Core.TaskTarget); a coordinator that
		// stepped down meanwhile is caught below.
		s.mu.Lock()
		target := s.cfg.TaskQueries
		if s.co != nil {
			target = s.co.core.TaskTarget(spec.FLOPsPerQuery, spec.RateWeight(), spec.Batch)
		}
		s.mu.Unlock()
		spec.TaskSize = ChooseTaskSize(n, spec.Batch, target)
		spec.SizeChosen = true
	} else if spec.TaskSize%spec.Batch != 0 {
		return fail(fmt.Errorf("sched: task size %d is not a whole number of batches of %d", spec.TaskSize, spec.Batch))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return fail(retryErrorf("sched: %s stopped coordinating; retry", s.name))
	}
	if j, dup := s.st.Jobs[spec.Name]; dup && s.isRetryOf(j, spec) {
		// The same add arrived twice and the other copy committed while this one probed
		// (a client that gave up on a node cut off from the coordinator and asked another,
		// both requests reaching the coordinator once the partition healed): one job, and
		// both callers get it.
		return retryReply(j), nil
	}
	if err := s.commit(&Entry{Kind: EntryJobAdd, Job: &spec}); err != nil {
		return fail(err)
	}
	js := s.st.Jobs[spec.Name]
	s.coreAdd(js)
	s.control(s.now())
	split := s.splitString()
	if err := s.commit(&Entry{Kind: EntryJobSplit, Name: spec.Name, Text: split}); err != nil {
		s.logf("sched: job %s: recording its split: %v", spec.Name, err)
	}
	s.logf("sched: job %s accepted: %d queries in %d tasks of %d, %.3g FLOPs per query; split %s",
		spec.Name, n, spec.NumTasks(), spec.TaskSize, spec.FLOPsPerQuery, split)
	return JobAddReply{Queries: n, Tasks: spec.NumTasks(), TaskSize: spec.TaskSize, Split: split}, nil
}

// retryReply answers a retried add of job j (see isRetryOf).
func retryReply(j *JobState) JobAddReply {
	return JobAddReply{Queries: j.Spec.Queries, Tasks: j.Spec.NumTasks(), TaskSize: j.Spec.TaskSize, Split: j.Split}
}

func (s *Scheduler) apiJobRemove(_ context.Context, a NameArgs) (struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return struct{}{}, retryErrorf("sched: %s stopped coordinating; retry", s.name)
	}
	if err := s.commit(&Entry{Kind: EntryJobRemove, Name: a.Name}); err != nil {
		return struct{}{}, err
	}
	s.co.core.RemoveJob(a.Name)
	s.control(s.now())
	s.logf("sched: job %s removed", a.Name)
	return struct{}{}, nil
}

func (s *Scheduler) summary(n string, now time.Time) JobSummary {
	j := s.st.Jobs[n]
	sum := JobSummary{Name: n, Model: j.Spec.Model, Data: j.Spec.Data, Batch: j.Spec.Batch,
		Queries: j.Spec.Queries, Tasks: j.Spec.NumTasks(), TaskSize: j.Spec.TaskSize, DoneTasks: j.NDone,
		Done: doneQueries(j), Complete: j.Complete, AddedUnix: float64(j.Added) / 1e9,
		FirstQueryMS: -1, Result: JobResultName(n)}
	end := now.UnixNano()
	if j.Complete {
		end = j.Finished
	}
	sum.Seconds = float64(end-j.Added) / 1e9
	if s.co != nil {
		sum.Share = s.co.core.Share(n)
	}
	if st := s.stats[n]; st != nil {
		sum.Rate10s = st.Rate(now, rateWindow)
	}
	sum.LastDoneMS = -1
	if j.LastDone > 0 {
		sum.LastDoneMS = float64(j.LastDone-j.Added) / 1e6
	}
	if j.FirstStart > 0 {
		sum.FirstQueryMS = float64(j.FirstStart-j.Added) / 1e6
	}
	sum.SplitAtAdd = j.Split
	sum.Weight = j.Spec.RateWeight()
	return sum
}

func (s *Scheduler) apiJobList(_ context.Context, _ struct{}) ([]JobSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := []JobSummary{}
	for _, n := range s.st.Order {
		out = append(out, s.summary(n, now))
	}
	return out, nil
}

func (s *Scheduler) apiJobGet(_ context.Context, a NameArgs) (JobSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.st.Jobs[a.Name]; !ok {
		return JobSummary{}, noJobError(a.Name)
	}
	return s.summary(a.Name, s.now()), nil
}

// apiJobHistogram returns a job's per-query latency histogram (for /metrics).
func (s *Scheduler) apiJobHistogram(_ context.Context, a NameArgs) (LatencyHistogram, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.st.Jobs[a.Name]; !ok {
		return LatencyHistogram{}, noJobError(a.Name)
	}
	h := LatencyHistogram{BoundsMS: LatencyBucketsMS, Counts: make([]int64, len(LatencyBucketsMS))}
	st := s.stats[a.Name]
	if st != nil {
		h = st.Histogram(LatencyBucketsMS)
	} else {
		st = NewJobStats()
	}
	q, c := st.Times()
	h.Job, h.Queue, h.Compute = a.Name, &q, &c
	return h, nil
}

// rateRatio is a job's rate over the mean rate per unit of weight of the other running
// jobs (0 when none runs or none has a rate yet). Called with s.mu held.
func (s *Scheduler) rateRatio(job string, rate float64, now time.Time) float64 {
	sum, n := 0.0, 0
	for _, o := range s.running() {
		if st := s.stats[o]; o != job && st != nil {
			if r := st.Rate(now, rateWindow); r > 0 {
				sum += r / s.st.Jobs[o].Spec.RateWeight()
				n++
			}
		}
	}
	if n == 0 || sum <= 0 {
		return 0
	}
	return rate / (sum / float64(n))
}

func (s *Scheduler) apiJobStats(_ context.Context, a NameArgs) (JobStatsReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.st.Jobs[a.Name]; !ok {
		return JobStatsReport{}, noJobError(a.Name)
	}
	if s.role != roleCoordinator {
		return JobStatsReport{}, retryErrorf("sched: %s stopped coordinating; retry", s.name)
	}
	return s.statsReport(a.Name, s.now(), s.sharesByJob()), nil
}

// apiJobStatsAll returns every job's statistics, in the order of the job list, in one
// call: every node's dashboard sampler reads them every 2 s, and a call per job made ten
// nodes and a hundred jobs 500 calls a second, each walking the whole split.
func (s *Scheduler) apiJobStatsAll(_ context.Context, _ struct{}) ([]JobStatsReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleCoordinator {
		return nil, retryErrorf("sched: %s stopped coordinating; retry", s.name)
	}
	now, shares := s.now(), s.sharesByJob()
	out := make([]JobStatsReport, 0, len(s.st.Order))
	for _, n := range s.st.Order {
		out = append(out, s.statsReport(n, now, shares))
	}
	return out, nil
}

// sharesByJob is the current split by job: each job's workers and their shares, in
// worker order. Called with s.mu held, on the coordinator.
func (s *Scheduler) sharesByJob() map[string][]WorkerShare {
	out := map[string][]WorkerShare{}
	assign := s.co.core.Assignment()
	for _, w := range sortedKeys(assign) {
		for _, sh := range assign[w] {
			out[sh.Job] = append(out[sh.Job], WorkerShare{Name: w, Share: sh.Weight})
		}
	}
	for _, ws := range out {
		sort.Slice(ws, func(i, k int) bool { return NameLess(ws[i].Name, ws[k].Name) })
	}
	return out
}

// statsReport is one job's statistics (the job exists). Called with s.mu held.
func (s *Scheduler) statsReport(name string, now time.Time, shares map[string][]WorkerShare) JobStatsReport {
	j := s.st.Jobs[name]
	r := JobStatsReport{Job: name, Done: doneQueries(j), Total: j.Spec.Queries, Workers: []WorkerShare{}, Weight: j.Spec.RateWeight()}
	if st := s.stats[name]; st != nil {
		r.Rate10s = st.Rate(now, rateWindow)
		r.LatencyMS = st.Latency()
	}
	r.RateRatio = s.rateRatio(name, r.Rate10s, now)
	if j.Labelled && j.Spec.Queries > 0 {
		acc := float64(j.Correct) / float64(j.Spec.Queries)
		r.Accuracy = &acc
	}
	if !j.Complete {
		r.Workers = append(r.Workers, shares[name]...)
	}
	return r
}
