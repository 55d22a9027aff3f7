package serving

import (
	"slices"
	"time"
)

// Triton's statistics extension (GET /v2/models[/{m}[/versions/{v}]]/stats): per model,
// cumulative counts and nanoseconds. A node reports what it saw itself: success and fail
// for the requests clients sent to it (wherever they ran), queue and compute for the
// requests that ran in its own batches (wherever they entered the cluster).

// DurationStat is Triton's $duration_stat.
type DurationStat struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

func (d *DurationStat) add(n int, t time.Duration) {
	d.Count += uint64(n)
	d.Ns += uint64(max(t, 0)) * uint64(n)
}

// InferenceStats is Triton's $inference_stats.
type InferenceStats struct {
	Success       DurationStat `json:"success"`
	Fail          DurationStat `json:"fail"`
	Queue         DurationStat `json:"queue"`
	ComputeInput  DurationStat `json:"compute_input"`
	ComputeInfer  DurationStat `json:"compute_infer"`
	ComputeOutput DurationStat `json:"compute_output"`
	CacheHit      DurationStat `json:"cache_hit"`
	CacheMiss     DurationStat `json:"cache_miss"`
}

// BatchStat is Triton's $batch_stats entry for one batch size.
type BatchStat struct {
	BatchSize     int          `json:"batch_size"`
	ComputeInput  DurationStat `json:"compute_input"`
	ComputeInfer  DurationStat `json:"compute_infer"`
	ComputeOutput DurationStat `json:"compute_output"`
}

type batchStat = BatchStat

// ModelStat is Triton's $model_stat.
type ModelStat struct {
	Name           string         `json:"name"`
	Version        string         `json:"version"`
	LastInference  int64          `json:"last_inference"` // ms since the epoch
	InferenceCount uint64         `json:"inference_count"`
	ExecutionCount uint64         `json:"execution_count"`
	InferenceStats InferenceStats `json:"inference_stats"`
	BatchStats     []BatchStat    `json:"batch_stats"`
	MemoryUsage    []struct{}     `json:"memory_usage"`
}

// StatsResponse is Triton's $stats_model_response.
type StatsResponse struct {
	ModelStats []ModelStat `json:"model_stats"`
}

// modelStats accumulates one model's Triton statistics; Metrics.mu guards it.
type modelStats struct {
	InferenceStats
	inferenceCount uint64
	executionCount uint64
	last           time.Time
	batches        map[int]*batchStat
}

func (s *modelStats) request(code int, d time.Duration, now time.Time) {
	if code == 200 {
		s.Success.add(1, d)
	} else {
		s.Fail.add(1, d)
	}
	s.last = now
}

func (s *modelStats) batch(b batchRecord) {
	n := len(b.queued)
	for _, q := range b.queued {
		s.Queue.add(1, q)
	}
	if b.failed {
		return
	}
	s.ComputeInput.add(n, b.input)
	s.ComputeInfer.add(n, b.infer)
	s.ComputeOutput.add(n, b.output)
	s.inferenceCount += uint64(b.rows)
	s.executionCount++
	bs := s.batches[b.rows]
	if bs == nil {
		if len(s.batches) >= maxBatchSizes {
			return
		}
		bs = &batchStat{BatchSize: b.rows}
		s.batches[b.rows] = bs
	}
	bs.ComputeInput.add(1, b.input)
	bs.ComputeInfer.add(1, b.infer)
	bs.ComputeOutput.add(1, b.output)
}

// modelStat renders a model's statistics (zeros for a model not seen yet).
func (m *Metrics) modelStat(name string) ModelStat {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := ModelStat{Name: name, Version: "1", BatchStats: []BatchStat{}, MemoryUsage: []struct{}{}}
	s := m.models[name]
	if s == nil {
		return st
	}
	st.InferenceStats = s.InferenceStats
	st.InferenceCount, st.ExecutionCount = s.inferenceCount, s.executionCount
	if !s.last.IsZero() {
		st.LastInference = s.last.UnixMilli()
	}
	for _, b := range s.batches {
		st.BatchStats = append(st.BatchStats, *b)
	}
	slices.SortFunc(st.BatchStats, func(a, b BatchStat) int { return a.BatchSize - b.BatchSize })
	return st
}

// seen lists the models that have statistics here.
func (m *Metrics) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := make([]string, 0, len(m.models))
	for n := range m.models {
		r = append(r, n)
	}
	return r
}

// has reports whether model has statistics here.
func (m *Metrics) has(model string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.models[model] != nil
}
