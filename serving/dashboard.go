package serving

import (
	"context"
	_ "embed"
	"maps"
	"slices"
	"time"

	"github.com/valyala/fasthttp"
)

// dashboardHTML is the whole dashboard: one page, its script inline, no outside assets.
//
//go:embed dashboard.html
var dashboardHTML []byte

// DashboardData is the body of GET /api/dashboard, which the page polls every second.
type DashboardData struct {
	Node      string           `json:"node"`
	Time      string           `json:"time"`
	Members   int              `json:"members"`
	SDFSBytes int64            `json:"sdfs_bytes"`
	Jobs      []JobStats       `json:"jobs"`
	JobsError string           `json:"jobs_error,omitempty"`
	Models    []DashboardModel `json:"models"`
	// Cluster maps every model served anywhere (as far as this node knows) to its nodes.
	Cluster map[string][]string `json:"cluster"`
	// Events are the latest events this node saw, newest first.
	Events []Event `json:"events"`
	// History is the last minutes, a sample every 2 s, oldest first.
	History []Sample `json:"history"`
	// Nodes is the node table (every node seen live since this one started).
	Nodes []NodeRow `json:"nodes"`
	// Trains are the training jobs.
	Trains []TrainStats `json:"trains"`
	// Serving is the cluster's serving figures per model: requests summed over the nodes
	// they entered at, the worst p99 among those nodes.
	Serving []ClusterModel `json:"serving"`
}

// ClusterModel is one model's cluster-wide serving figures over the last sample interval.
type ClusterModel struct {
	Name  string   `json:"name"`
	Nodes []string `json:"nodes"` // nodes serving it
	Rate  float64  `json:"rate"`  // requests per second, all nodes
	P99Ms float64  `json:"p99_ms"`
}

// DashboardModel is one served model's row.
type DashboardModel struct {
	Name       string  `json:"name"`
	QueueDepth int     `json:"queue_depth"`
	MaxBatch   int     `json:"max_batch"`
	MaxDelayMs float64 `json:"max_delay_ms"`
	ModelSummary
}

func (s *Server) dashboardData() DashboardData {
	d := DashboardData{Node: s.cfg.Node, Time: time.Now().UTC().Format(time.RFC3339), Members: -1, SDFSBytes: -1, Jobs: []JobStats{},
		Models: []DashboardModel{}, Cluster: map[string][]string{}, Events: s.Events.List()}
	if s.Gauges != nil {
		g := s.Gauges.Gauges()
		d.Members, d.SDFSBytes = g.Members, g.SDFSBytesStored
	}
	if s.Stats != nil {
		c, cancel := context.WithTimeout(context.Background(), s.cfg.StatsTimeout)
		jobs, err := s.Stats.JobStats(c)
		cancel()
		if err != nil {
			d.JobsError = err.Error()
		} else if jobs != nil {
			d.Jobs = jobs
		}
	}
	if r, ok := s.Remote.(*Router); ok {
		c, cancel := context.WithTimeout(context.Background(), s.cfg.StatsTimeout)
		d.Cluster = r.Models(c)
		cancel()
	}
	sums := s.Metrics.Summaries()
	depths := s.Local.Depths()
	for _, m := range s.Local.Served() {
		d.Models = append(d.Models, DashboardModel{
			Name: m.Name, QueueDepth: depths[m.Name], MaxBatch: m.Batch.MaxBatch,
			MaxDelayMs: float64(m.Batch.MaxDelay) / float64(time.Millisecond), ModelSummary: sums[m.Name],
		})
		d.Cluster[m.Name] = append([]string{s.cfg.Node}, d.Cluster[m.Name]...)
	}
	d.History = s.History.List()
	d.Nodes, d.Trains = s.live()
	if d.Nodes == nil {
		d.Nodes = []NodeRow{}
	}
	if d.Trains == nil {
		d.Trains = []TrainStats{}
	}
	d.Serving = clusterServing(d.Cluster, d.Nodes)
	return d
}

// clusterServing sums each model's requests over the nodes' figures.
func clusterServing(cluster map[string][]string, nodes []NodeRow) []ClusterModel {
	byName := map[string]*ClusterModel{}
	get := func(name string) *ClusterModel {
		m := byName[name]
		if m == nil {
			m = &ClusterModel{Name: name, Nodes: []string{}}
			byName[name] = m
		}
		return m
	}
	for name, ns := range cluster {
		get(name).Nodes = slices.Sorted(slices.Values(ns))
	}
	for _, n := range nodes {
		for name, p := range n.Requests {
			m := get(name)
			m.Rate += p.Rate
			m.P99Ms = max(m.P99Ms, p.P99Ms)
		}
	}
	out := make([]ClusterModel, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, *byName[name])
	}
	return out
}

func (s *Server) handleDashboard(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Cache-Control", "no-store")
	writeJSON(ctx, 200, s.dashboardData())
}
