package serving

import (
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The dashboard's history: a sample every historyEvery, the last historyLen of them.
const (
	historyEvery = 2 * time.Second
	historyLen   = 300 // 10 minutes
)

// Sample is one point of the dashboard's history.
type Sample struct {
	At     int64                 `json:"at"`     // unix milliseconds
	Models map[string]ModelPoint `json:"models"` // this node's requests, over the last interval
	Jobs   map[string]JobPoint   `json:"jobs"`
	Trains map[string]TrainPoint `json:"trains"`
}

// ModelPoint is a model's requests at this node over one interval.
type ModelPoint struct {
	Rate  float64 `json:"rate"` // requests per second
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// JobPoint is a job's figures when sampled (the scheduler's own windows).
type JobPoint struct {
	Rate  float64 `json:"rate"` // queries per second over 10 s
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// TrainPoint is a training job's figures when sampled (nil: not known yet).
type TrainPoint struct {
	Loss          *float64 `json:"loss"`
	EvalAccuracy  *float64 `json:"eval_accuracy"`
	SamplesPerSec float64  `json:"samples_per_sec"`
}

// History keeps the latest samples, at most Len (oldest dropped first). Safe for
// concurrent use.
type History struct {
	Len int

	mu   sync.Mutex
	list []Sample
}

// Add appends a sample.
func (h *History) Add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	limit := h.Len
	if limit <= 0 {
		limit = historyLen
	}
	if len(h.list) >= limit {
		h.list = append(h.list[:0], h.list[len(h.list)-limit+1:]...)
	}
	h.list = append(h.list, s)
}

// List returns the samples, oldest first.
func (h *History) List() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample{}, h.list...)
}

// windowPoint turns two cumulative snapshots of a request-duration histogram, taken dt
// apart, into the rate and latency percentiles of the requests in between.
func windowPoint(prev, cur *dto.Histogram, dt time.Duration) ModelPoint {
	if cur == nil || dt <= 0 {
		return ModelPoint{}
	}
	d := &dto.Histogram{}
	n := cur.GetSampleCount()
	if prev != nil && prev.GetSampleCount() <= n && len(prev.GetBucket()) == len(cur.GetBucket()) {
		n -= prev.GetSampleCount()
	} else {
		prev = nil
	}
	d.SampleCount = &n
	for i, b := range cur.GetBucket() {
		c := b.GetCumulativeCount()
		if prev != nil {
			c -= min(c, prev.GetBucket()[i].GetCumulativeCount())
		}
		d.Bucket = append(d.Bucket, &dto.Bucket{CumulativeCount: &c, UpperBound: b.UpperBound})
	}
	p := ModelPoint{Rate: float64(n) / dt.Seconds()}
	if n > 0 {
		p.P50Ms = bucketQuantile(0.5, d) * 1000
		p.P99Ms = bucketQuantile(0.99, d) * 1000
	}
	return p
}
