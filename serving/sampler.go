package serving

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// MethodNode is the rpc method that returns a node's own figures for the dashboard's
// node table.
const MethodNode = "http.node"

// NodeFigures are a node's own figures: its process's CPU and memory, its worker's tasks,
// what it serves.
type NodeFigures struct {
	CPUPercent float64     `json:"cpu_percent"` // of one core, over the last sample interval; -1 unknown
	RSSBytes   int64       `json:"rss_bytes"`   // -1 unknown
	Goroutines int         `json:"goroutines"`
	Tasks      *TaskCounts `json:"tasks,omitempty"` // nil: unknown
	Models     int         `json:"models"`          // models it serves
	// Requests are the requests that entered at this node over the last sample interval,
	// per model (summed over the nodes: the cluster's).
	Requests map[string]ModelPoint `json:"requests,omitempty"`
}

// TaskCounts are a node's worker's inference tasks (the scheduler's WorkerTasks): running
// now, leased and waiting, done since the node started.
type TaskCounts struct {
	Running int `json:"running"`
	Queued  int `json:"queued"`
	Done    int `json:"done"`
}

// NodeRow is one row of the dashboard's node table.
type NodeRow struct {
	Name  string `json:"name"`
	State string `json:"state"` // alive, or failed (once live, no longer)
	Role  string `json:"role"`  // the scheduler's: coordinator, standby, worker; "" unknown
	NodeFigures
	Jobs  int    `json:"jobs"` // jobs it is a worker of
	Error string `json:"error,omitempty"`
}

// TrainStats is a training job as the dashboard shows it (the scheduler's "sched.train.list").
type TrainStats struct {
	Name          string    `json:"name"`
	Step          int       `json:"step"`
	StepsTotal    int       `json:"steps_total"`
	Epoch         int       `json:"epoch"`
	Epochs        int       `json:"epochs"`
	SamplesPerSec float64   `json:"samples_per_sec"`
	Loss          *float64  `json:"loss"`
	EvalAccuracy  *float64  `json:"eval_accuracy"`
	Complete      bool      `json:"complete"`
	Losses        []float32 `json:"losses,omitempty"`
}

// TrainSource gives the training jobs (optional; RPCStats is one).
type TrainSource interface {
	Trains(ctx context.Context) ([]TrainStats, error)
}

// Trains implements TrainSource.
func (r *RPCStats) Trains(ctx context.Context) ([]TrainStats, error) {
	var ts []TrainStats
	if err := r.Client.CallJSON(ctx, r.Addr, "sched.train.list", struct{}{}, &ts); err != nil {
		return nil, fmt.Errorf("serving: training jobs: %w", err)
	}
	return ts, nil
}

var errNoStats = errors.New("serving: no statistics source")

// schedStatus is the part of a node's "sched.status" the dashboard uses.
type schedStatus struct {
	Role        string `json:"role"`
	Coordinator string `json:"coordinator"`
	Epoch       uint64 `json:"epoch"`
}

// sampler is the NodeService's dashboard state, owned by its sample goroutine: the
// previous request histograms, the jobs and nodes seen, the coordinator.
type sampler struct {
	cpu       cpuMeter
	at        time.Time
	requests  map[string]*dto.Histogram
	jobs      map[string]bool // job → finished
	trains    map[string]bool // training job → complete
	nodes     map[string]bool // every node seen live → live now
	coord     string
	firstPass bool

	mu      sync.Mutex // guards figures (also read by http.node)
	figures NodeFigures
}

// sample runs until Stop: every historyEvery it adds a history sample, refreshes the node
// table and notes job, training and coordinator events.
func (s *NodeService) sample() {
	defer s.wg.Done()
	tick := time.NewTicker(historyEvery)
	defer tick.Stop()
	sp := &s.sampler
	sp.jobs, sp.trains, sp.nodes, sp.firstPass = map[string]bool{}, map[string]bool{}, map[string]bool{}, true
	for {
		s.sampleOnce(time.Now())
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

func (s *NodeService) sampleOnce(now time.Time) {
	sp := &s.sampler
	pct, rss := sp.cpu.percent(now)
	smp := Sample{At: now.UnixMilli(), Models: map[string]ModelPoint{}, Jobs: map[string]JobPoint{}, Trains: map[string]TrainPoint{}}
	cur := s.srv.Metrics.requestHistograms()
	if !sp.at.IsZero() {
		for name, h := range cur {
			smp.Models[name] = windowPoint(sp.requests[name], h, now.Sub(sp.at))
		}
	}
	sp.requests, sp.at = cur, now
	sp.mu.Lock()
	sp.figures = NodeFigures{CPUPercent: pct, RSSBytes: rss, Goroutines: runtime.NumGoroutine(), Requests: smp.Models}
	sp.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), s.srv.cfg.StatsTimeout)
	defer cancel()
	var jobs []JobStats
	jobsErr := errNoStats
	if rs, ok := s.srv.Stats.(RateSource); ok {
		jobs, jobsErr = rs.JobRates(ctx)
	} else if s.srv.Stats != nil {
		jobs, jobsErr = s.srv.Stats.JobStats(ctx)
	}
	workerOf := map[string]int{}
	if jobsErr == nil {
		seen := map[string]bool{}
		for _, j := range jobs {
			seen[j.Job] = true
			smp.Jobs[j.Job] = JobPoint{Rate: j.Rate10s, P50Ms: j.LatencyMs.P50, P99Ms: j.LatencyMs.P99}
			for _, w := range j.Workers {
				workerOf[w.Name]++
			}
			finished := j.Total > 0 && j.Done >= j.Total
			was, known := sp.jobs[j.Job]
			if !known && !sp.firstPass {
				s.event("job started", fmt.Sprintf("%s (%d queries)", j.Job, j.Total))
			}
			if finished && (!was || !known) && (known || !sp.firstPass) {
				s.event("job finished", j.Job)
			}
			sp.jobs[j.Job] = finished
		}
		for name := range sp.jobs {
			if !seen[name] {
				delete(sp.jobs, name)
				s.event("job removed", name)
			}
		}
	}
	var trains []TrainStats
	if src, ok := s.srv.Stats.(TrainSource); ok {
		if ts, err := src.Trains(ctx); err == nil {
			trains = ts
			for _, t := range ts {
				smp.Trains[t.Name] = TrainPoint{Loss: t.Loss, EvalAccuracy: t.EvalAccuracy, SamplesPerSec: t.SamplesPerSec}
				was, known := sp.trains[t.Name]
				if !known && !sp.firstPass {
					s.event("training started", t.Name)
				}
				if t.Complete && (!was || !known) && (known || !sp.firstPass) {
					s.event("training finished", t.Name)
				}
				sp.trains[t.Name] = t.Complete
			}
		}
	}
	s.srv.History.Add(smp)
	s.srv.setLive(s.nodeRows(ctx, workerOf), trains)
	sp.firstPass = false
}

// nodeRows asks this node and every live peer for their scheduling role and figures (in
// parallel, each call bounded) and lists every node seen live since this one started.
func (s *NodeService) nodeRows(ctx context.Context, workerOf map[string]int) []NodeRow {
	sp := &s.sampler
	self := Peer{Name: s.o.Config.Node, RPCAddr: s.o.SelfRPC}
	peers := []Peer{self}
	if s.o.Peers != nil {
		peers = append(peers, s.o.Peers.Peers()...)
	}
	rows := make([]NodeRow, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		rows[i] = NodeRow{Name: p.Name, State: "alive", Jobs: workerOf[p.Name]}
		if s.o.Client == nil || p.RPCAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &rows[i]
			var st schedStatus
			if err := s.o.Client.CallJSON(ctx, p.RPCAddr, "sched.status", struct{}{}, &st); err != nil {
				r.Error = err.Error()
			}
			r.Role = st.Role
			if err := s.o.Client.CallJSON(ctx, p.RPCAddr, MethodNode, struct{}{}, &r.NodeFigures); err != nil {
				r.Error = err.Error()
			}
			if p.Name == self.Name && st.Coordinator != "" && st.Coordinator != sp.coord {
				if sp.coord != "" {
					s.event("coordinator", fmt.Sprintf("%s took over from %s (epoch %d)", st.Coordinator, sp.coord, st.Epoch))
				}
				sp.coord = st.Coordinator
			}
		}()
	}
	wg.Wait()
	live := map[string]bool{}
	for _, r := range rows {
		live[r.Name] = true
		sp.nodes[r.Name] = true
	}
	for name := range sp.nodes {
		if !live[name] {
			rows = append(rows, NodeRow{Name: name, State: "failed", NodeFigures: NodeFigures{CPUPercent: -1, RSSBytes: -1}})
		}
	}
	slices.SortFunc(rows, func(a, b NodeRow) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return rows
}

// nodeFigures answers http.node.
func (s *NodeService) nodeFigures() NodeFigures {
	s.sampler.mu.Lock()
	f := s.sampler.figures
	s.sampler.mu.Unlock()
	f.Models = len(s.local.Served())
	if s.o.Tasks != nil {
		t := s.o.Tasks()
		f.Tasks = &t
	}
	return f
}
