package serving

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/valyala/fasthttp"
)

// Triton's model configuration extension (GET /v2/models/{m}[/versions/{v}]/config): the
// model's configuration in the JSON form of Triton's ModelConfig, which tritonclient's
// get_model_config and perf_analyzer read before they send anything.

// ModelConfig is the part of Triton's ModelConfig that describes an IDunno served model.
type ModelConfig struct {
	Name            string           `json:"name"`
	Platform        string           `json:"platform"`
	Backend         string           `json:"backend"`
	MaxBatchSize    int              `json:"max_batch_size"`
	Input           []ConfigTensor   `json:"input"`
	Output          []ConfigTensor   `json:"output"`
	DynamicBatching *DynamicBatching `json:"dynamic_batching,omitempty"`
	InstanceGroup   []InstanceGroup  `json:"instance_group"`
	VersionPolicy   VersionPolicy    `json:"version_policy"`
}

// ConfigTensor is one input or output: dims leave out the batch dimension when
// max_batch_size > 0, as in Triton.
type ConfigTensor struct {
	Name     string  `json:"name"`
	DataType string  `json:"data_type"`
	Format   string  `json:"format,omitempty"`
	Dims     []int64 `json:"dims"`
}

// DynamicBatching is Triton's dynamic batcher configuration.
type DynamicBatching struct {
	PreferredBatchSize        []int       `json:"preferred_batch_size"`
	MaxQueueDelayMicroseconds int64       `json:"max_queue_delay_microseconds"`
	PriorityLevels            int         `json:"priority_levels"`
	DefaultPriorityLevel      int         `json:"default_priority_level"`
	DefaultQueuePolicy        QueuePolicy `json:"default_queue_policy"`
}

// QueuePolicy is Triton's ModelQueuePolicy.
type QueuePolicy struct {
	TimeoutAction              string `json:"timeout_action"`
	DefaultTimeoutMicroseconds int64  `json:"default_timeout_microseconds"`
	AllowTimeoutOverride       bool   `json:"allow_timeout_override"`
	MaxQueueSize               int    `json:"max_queue_size"`
}

// InstanceGroup is Triton's ModelInstanceGroup.
type InstanceGroup struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Count int    `json:"count"`
}

// VersionPolicy is Triton's ModelVersionPolicy: IDunno serves one version, "1".
type VersionPolicy struct {
	Latest struct {
		NumVersions int `json:"num_versions"`
	} `json:"latest"`
}

// tritonType is Triton's config name of a protocol datatype (FP32 → TYPE_FP32, BYTES → TYPE_STRING).
func tritonType(datatype string) string {
	if datatype == "BYTES" {
		return "TYPE_STRING"
	}
	return "TYPE_" + datatype
}

// BuildModelConfig describes a model served with policy m, whose metadata is meta. A model
// whose inputs all have a batch dimension reports max_batch_size = the batcher's MaxBatch
// (requests with more rows are accepted too: they run as one kernel call).
func BuildModelConfig(meta ModelMetadata, m ServedModel, timeout time.Duration) ModelConfig {
	m.Batch = m.Batch.withDefaults()
	batched := len(meta.Inputs) > 0
	for _, in := range meta.Inputs {
		batched = batched && len(in.Shape) > 0
	}
	conv := func(ts []TensorMeta) []ConfigTensor {
		r := make([]ConfigTensor, 0, len(ts))
		for _, t := range ts {
			dims := t.Shape
			if batched && len(dims) > 0 {
				dims = dims[1:]
			}
			r = append(r, ConfigTensor{Name: t.Name, DataType: tritonType(t.Datatype), Dims: append([]int64{}, dims...)})
		}
		return r
	}
	c := ModelConfig{Name: meta.Name, Platform: meta.Platform, Backend: "idunno", Input: conv(meta.Inputs), Output: conv(meta.Outputs),
		InstanceGroup: []InstanceGroup{{Name: meta.Name, Kind: "KIND_CPU", Count: max(m.Instances, 1)}}}
	c.VersionPolicy.Latest.NumVersions = 1
	if batched {
		c.MaxBatchSize = m.Batch.MaxBatch
		c.DynamicBatching = &DynamicBatching{
			PreferredBatchSize:        []int{m.Batch.MaxBatch},
			MaxQueueDelayMicroseconds: m.Batch.MaxDelay.Microseconds(),
			PriorityLevels:            PriorityLevels,
			DefaultPriorityLevel:      DefaultPriorityLevel,
			DefaultQueuePolicy: QueuePolicy{TimeoutAction: "REJECT", DefaultTimeoutMicroseconds: timeout.Microseconds(),
				AllowTimeoutOverride: true, MaxQueueSize: m.Batch.MaxQueue},
		}
	}
	return c
}

func (s *Server) handleConfig(ctx *fasthttp.RequestCtx, name string) {
	meta, err := s.metadata(name)
	if err != nil {
		writeError(ctx, statusOf(err), err.Error())
		return
	}
	served, ok := s.Local.ServedAs(name)
	if !ok && s.Remote != nil {
		c, cancel := context.WithTimeout(context.Background(), s.cfg.StatsTimeout)
		var err error
		served, ok, err = s.Remote.Served(c, name)
		cancel()
		if err != nil {
			writeError(ctx, statusOf(err), fmt.Sprintf("serving: looking for model %q: %v", name, err))
			return
		}
	}
	if !ok {
		served = ServedModel{Name: name}
	}
	writeJSON(ctx, 200, BuildModelConfig(meta, served, s.cfg.InferTimeout))
}

// handleStats answers Triton's statistics request for one model, or every model this node
// serves or has figures for (name "").
func (s *Server) handleStats(ctx *fasthttp.RequestCtx, name string) {
	var names []string
	if name != "" {
		if _, err := s.metadata(name); err != nil && !s.Metrics.has(name) {
			writeError(ctx, statusOf(err), err.Error())
			return
		}
		names = []string{name}
	} else {
		seen := map[string]bool{}
		for _, m := range s.Local.Served() {
			seen[m.Name] = true
		}
		for _, n := range s.Metrics.seen() {
			seen[n] = true
		}
		for n := range seen {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	r := StatsResponse{ModelStats: make([]ModelStat, 0, len(names))}
	for _, n := range names {
		r.ModelStats = append(r.ModelStats, s.Metrics.modelStat(n))
	}
	writeJSON(ctx, 200, r)
}
