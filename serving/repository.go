package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
)

// Triton's model repository extension, mapped onto IDunno's serving:
//
//	POST /v2/repository/index                 models in SDFS as idunno/models/NAME.onnx, and every served model
//	POST /v2/repository/models/{m}/load       this node loads idunno/models/m.onnx (or, if it already serves m,
//	                                          the SDFS file it serves it from) and serves it: `idunno serve m --nodes THIS`
//	POST /v2/repository/models/{m}/unload     every node serving m stops: `idunno unserve m`
//
// A load takes Triton's "config" parameter (a JSON ModelConfig): max_batch_size,
// dynamic_batching.max_queue_delay_microseconds, dynamic_batching.default_queue_policy.
// max_queue_size and instance_group[0].count set the batching policy; absent fields keep
// the current policy (or the defaults).

// RepositoryModel is one entry of the repository index.
type RepositoryModel struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

// Model states in the index.
const (
	StateReady       = "READY"
	StateUnavailable = "UNAVAILABLE"
)

// ModelsPrefix is where the repository looks for models in SDFS: idunno/models/NAME.onnx.
const ModelsPrefix = "idunno/models/"

// Repository is the model repository behind the extension (NodeService is the real one).
type Repository interface {
	Index(ctx context.Context) ([]RepositoryModel, error)
	// Load serves name on this node; a non-nil policy replaces the batching policy.
	Load(ctx context.Context, name string, policy *PolicyOverride) error
	Unload(ctx context.Context, name string) error
}

// PolicyOverride is what a load's "config" parameter may change (nil fields: unchanged).
type PolicyOverride struct {
	MaxBatch  *int
	MaxDelay  *time.Duration
	MaxQueue  *int
	Instances *int
}

// Apply returns m with the override's fields set.
func (p *PolicyOverride) Apply(m ServedModel) ServedModel {
	if p == nil {
		return m
	}
	if p.MaxBatch != nil {
		m.Batch.MaxBatch = *p.MaxBatch
	}
	if p.MaxDelay != nil {
		m.Batch.MaxDelay = *p.MaxDelay
	}
	if p.MaxQueue != nil {
		m.Batch.MaxQueue = *p.MaxQueue
	}
	if p.Instances != nil {
		m.Instances = *p.Instances
	}
	return m
}

var errNoRepository = errors.New("serving: this server has no model repository")

// maxRepositoryBody bounds an index, load or unload body (they are small JSON objects).
const maxRepositoryBody = 1 << 20

// DecodeIndexRequest reads an index body ({"ready": bool}, or empty).
func DecodeIndexRequest(body []byte) (readyOnly bool, err error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return false, nil
	}
	var r struct {
		Ready *bool `json:"ready"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return false, badf("index request: %v", err)
	}
	return r.Ready != nil && *r.Ready, nil
}

// DecodeLoadRequest reads a load or unload body ({"parameters": {...}}, or empty) and the
// batching policy of its "config" parameter, if any.
func DecodeLoadRequest(body []byte) (*PolicyOverride, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	var r struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, badf("repository request: %v", err)
	}
	raw, ok := r.Parameters["config"]
	if !ok {
		return nil, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, badf(`parameter "config" must be a string holding a JSON model configuration`)
	}
	var c struct {
		MaxBatchSize    *int `json:"max_batch_size"`
		DynamicBatching *struct {
			MaxQueueDelayMicroseconds *int64 `json:"max_queue_delay_microseconds"`
			DefaultQueuePolicy        *struct {
				MaxQueueSize *int `json:"max_queue_size"`
			} `json:"default_queue_policy"`
		} `json:"dynamic_batching"`
		InstanceGroup []struct {
			Count *int `json:"count"`
		} `json:"instance_group"`
	}
	if err := json.Unmarshal([]byte(text), &c); err != nil {
		return nil, badf(`parameter "config": %v`, err)
	}
	p := &PolicyOverride{}
	inRange := func(what string, v, lo, hi int) (*int, error) {
		if v < lo || v > hi {
			return nil, badf("config: %s %d is out of range [%d, %d]", what, v, lo, hi)
		}
		return &v, nil
	}
	var err error
	if c.MaxBatchSize != nil {
		// Triton's 0 means "no batching": one request per kernel call.
		if p.MaxBatch, err = inRange("max_batch_size", max(*c.MaxBatchSize, 1), 1, 1024); err != nil {
			return nil, err
		}
	}
	if d := c.DynamicBatching; d != nil {
		if us := d.MaxQueueDelayMicroseconds; us != nil {
			if *us < 0 || *us > 10_000_000 {
				return nil, badf("config: max_queue_delay_microseconds %d is out of range [0, 10000000]", *us)
			}
			delay := time.Duration(*us) * time.Microsecond
			p.MaxDelay = &delay
		}
		if q := d.DefaultQueuePolicy; q != nil && q.MaxQueueSize != nil && *q.MaxQueueSize > 0 {
			if p.MaxQueue, err = inRange("max_queue_size", *q.MaxQueueSize, 1, 65536); err != nil {
				return nil, err
			}
		}
	}
	if len(c.InstanceGroup) > 0 && c.InstanceGroup[0].Count != nil {
		if p.Instances, err = inRange("instance_group count", *c.InstanceGroup[0].Count, 1, 64); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (s *Server) repositoryBody(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	body, err := requestBody(ctx, maxRepositoryBody)
	if err == nil && len(body) > maxRepositoryBody {
		err = fmt.Errorf("%w: over %d bytes", errBodyTooLarge, maxRepositoryBody)
	}
	if err == nil && s.Repo == nil {
		err = errNoRepository
	}
	if err != nil {
		writeError(ctx, statusOf(err), err.Error())
		return nil, false
	}
	return body, true
}

func (s *Server) handleRepositoryIndex(ctx *fasthttp.RequestCtx) {
	body, ok := s.repositoryBody(ctx)
	if !ok {
		return
	}
	readyOnly, err := DecodeIndexRequest(body)
	if err != nil {
		writeError(ctx, statusOf(err), err.Error())
		return
	}
	c, cancel := context.WithTimeout(context.Background(), s.cfg.StatsTimeout)
	defer cancel()
	all, err := s.Repo.Index(c)
	if err != nil {
		writeError(ctx, statusOf(err), err.Error())
		return
	}
	out := make([]RepositoryModel, 0, len(all))
	for _, m := range all {
		if !readyOnly || m.State == StateReady {
			out = append(out, m)
		}
	}
	writeJSON(ctx, 200, out)
}

// handleRepositoryModel serves {m}/load and {m}/unload.
func (s *Server) handleRepositoryModel(ctx *fasthttp.RequestCtx, rest string) {
	name, action, _ := cutLast(rest, '/')
	if name == "" || (action != "load" && action != "unload") {
		writeError(ctx, fasthttp.StatusNotFound, "serving: no such endpoint "+string(ctx.Path()))
		return
	}
	body, ok := s.repositoryBody(ctx)
	if !ok {
		return
	}
	policy, err := DecodeLoadRequest(body)
	if err != nil {
		writeError(ctx, statusOf(err), err.Error())
		return
	}
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a load fetches the model from SDFS
	defer cancel()
	if action == "load" {
		err = s.Repo.Load(c, name, policy)
	} else {
		err = s.Repo.Unload(c, name)
	}
	if err != nil {
		code := statusOf(err)
		if code == fasthttp.StatusInternalServerError {
			code = fasthttp.StatusBadRequest // as Triton: a failed load or unload is a 400
		}
		writeError(ctx, code, err.Error())
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/json")
}

func cutLast(s string, sep byte) (before, after string, found bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
