package serving

import (
	"context"
	_ "embed"
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
		Models: []DashboardModel{}, Cluster: map[string][]string{}}
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
	return d
}

func (s *Server) handleDashboard(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Cache-Control", "no-store")
	writeJSON(ctx, 200, s.dashboardData())
}
