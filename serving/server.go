// Package serving is a node's HTTP endpoint: KServe v2 / Open Inference Protocol inference
// with dynamic batching and routing to the nodes serving a model, Prometheus metrics, and a
// live dashboard.
package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"idunno/kernel/onnx"
)

// Config is the HTTP server's configuration; zero fields take the defaults below.
type Config struct {
	Node         string        // this node's name, shown on the dashboard
	Limits       Limits        // request size limits (DefaultLimits)
	InferTimeout time.Duration // bound on one inference request, queueing included (30 s)
	ReadTimeout  time.Duration // bound on reading one request (10 s)
	WriteTimeout time.Duration // bound on writing one response (10 s)
	IdleTimeout  time.Duration // idle keep-alive connections are closed after it (60 s)
	Concurrency  int           // connections served at once (4096)
	StatsTimeout time.Duration // bound on one call to the stats source (2 s)
	Token        string        // bearer token required on all but health probes (empty: open; auth.go)
	Logf         func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	c.Limits = c.Limits.withDefaults()
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.InferTimeout, 30*time.Second)
	def(&c.ReadTimeout, 10*time.Second)
	def(&c.WriteTimeout, 10*time.Second)
	def(&c.IdleTimeout, 60*time.Second)
	def(&c.StatsTimeout, 2*time.Second)
	if c.Concurrency <= 0 {
		c.Concurrency = 4096
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Remote finds models this node does not serve on the nodes that do (Router).
type Remote interface {
	Metadata(ctx context.Context, model string) (ModelMetadata, bool, error)
	// Served is how some node serving the model serves it (its batching policy).
	Served(ctx context.Context, model string) (ServedModel, bool, error)
	Infer(ctx context.Context, model string, in []*onnx.Tensor, opt InferOptions) ([]*onnx.Tensor, error)
}

// ErrUnknownModel is returned when no node serves a model.
var ErrUnknownModel = errors.New("serving: unknown model")

// Server is a node's HTTP endpoint. Set Remote, Stats, Gauges and Repo (each optional)
// before Serve.
type Server struct {
	cfg     Config
	Local   *LocalModels
	Remote  Remote
	Stats   StatsSource
	Gauges  GaugeSource
	Repo    Repository // Triton's model repository extension (repository.go); nil: 501
	Metrics *Metrics
	// NotReady says why the node is not ready yet ("" when it is: its models are loaded);
	// nil: ready once serving.
	NotReady func() string
	Events   Events  // for the dashboard
	History  History // for the dashboard: filled by the NodeService's sampler

	liveMu sync.Mutex // guards nodes and trains
	nodes  []NodeRow
	trains []TrainStats

	srv   *fasthttp.Server
	auth  bearerAuth
	ready atomic.Bool
}

// NewServer returns a server for the models in local.
func NewServer(cfg Config, local *LocalModels) *Server {
	s := &Server{cfg: cfg.withDefaults(), Local: local, Metrics: NewMetrics(), auth: newBearerAuth(cfg.Token)}
	s.cfg.Token = "" // kept only as its digest, so it cannot leak from cfg
	s.Metrics.reg.MustRegister(sourceCollector{s})
	observe := s.Metrics.observeBatch
	local.onBatch.Store(&observe)
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		ErrorHandler:          s.handleError,
		Name:                  "idunno",
		MaxRequestBodySize:    s.cfg.Limits.MaxBodyBytes,
		ReadTimeout:           s.cfg.ReadTimeout,
		WriteTimeout:          s.cfg.WriteTimeout,
		IdleTimeout:           s.cfg.IdleTimeout,
		Concurrency:           s.cfg.Concurrency,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		Logger:                logger(s.cfg.Logf),
	}
	return s
}

// setLive replaces the dashboard's node table and training jobs.
func (s *Server) setLive(nodes []NodeRow, trains []TrainStats) {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	s.nodes, s.trains = nodes, trains
}

func (s *Server) live() ([]NodeRow, []TrainStats) {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	return s.nodes, s.trains
}

func (s *Server) notReady() string {
	if s.NotReady == nil {
		return ""
	}
	return s.NotReady()
}

// Serve answers requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.ready.Store(true)
	if err := s.srv.Serve(ln); err != nil {
		return fmt.Errorf("serving: serve: %w", err)
	}
	return nil
}

// Shutdown stops accepting requests and waits (up to ctx) for those in flight.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	return s.srv.ShutdownWithContext(ctx)
}

// handleError answers requests fasthttp could not read (oversize body, bad framing).
func (s *Server) handleError(ctx *fasthttp.RequestCtx, err error) {
	code := fasthttp.StatusBadRequest
	msg := "serving: bad request: " + err.Error()
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		code = fasthttp.StatusRequestEntityTooLarge
		msg = fmt.Sprintf("serving: body exceeds the limit of %d bytes", s.cfg.Limits.MaxBodyBytes)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		code = fasthttp.StatusRequestTimeout
		msg = "serving: timed out reading the request"
	}
	writeError(ctx, code, msg)
}

func writeError(ctx *fasthttp.RequestCtx, code int, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBody(errorBody(msg))
}

func writeJSON(ctx *fasthttp.RequestCtx, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "serving: encode response: "+err.Error())
		return
	}
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// handle routes one request.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if ok, presented := s.auth.allow(ctx, path); !ok {
		writeUnauthorized(ctx, presented)
		return
	}
	get, post := ctx.IsGet() || ctx.IsHead(), ctx.IsPost()
	switch {
	case path == "/v2/health/live" && get:
		writeJSON(ctx, 200, map[string]bool{"live": true})
	case path == "/v2/health/ready" && get:
		if !s.ready.Load() {
			writeJSON(ctx, 503, map[string]any{"ready": false, "error": "serving: shutting down"})
		} else if why := s.notReady(); why != "" {
			writeJSON(ctx, 503, map[string]any{"ready": false, "error": why})
		} else {
			writeJSON(ctx, 200, map[string]bool{"ready": true})
		}
	case path == "/v2" && get:
		writeJSON(ctx, 200, map[string]any{"name": "idunno", "version": "1", "extensions": serverExtensions})
	case path == "/v2/models/stats" && get:
		s.handleStats(ctx, "")
	case path == "/v2/repository/index" && post:
		s.handleRepositoryIndex(ctx)
	case strings.HasPrefix(path, "/v2/repository/models/") && post:
		s.handleRepositoryModel(ctx, path[len("/v2/repository/models/"):])
	case strings.HasPrefix(path, "/v2/models/"):
		s.handleModel(ctx, path[len("/v2/models/"):], get, post)
	case path == "/metrics" && get:
		s.handleMetrics(ctx)
	case (path == "/" || path == "/dashboard") && get:
		ctx.SetContentType("text/html; charset=utf-8")
		ctx.Response.Header.Set("Referrer-Policy", "no-referrer") // the URL may hold ?token=
		ctx.Response.Header.Set("Cache-Control", "no-store")
		ctx.SetBody(dashboardHTML)
	case path == "/api/dashboard" && get:
		s.handleDashboard(ctx)
	case path == "/v2/health/live" || path == "/v2/health/ready" || path == "/metrics" || path == "/api/dashboard" ||
		path == "/v2/repository/index" || strings.HasPrefix(path, "/v2/repository/models/"):
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "serving: method "+string(ctx.Method())+" not allowed on "+path)
	default:
		writeError(ctx, fasthttp.StatusNotFound, "serving: no such endpoint "+path)
	}
}

// serverExtensions are the protocol extensions this server implements (server metadata).
var serverExtensions = []string{"binary_tensor_data", "model_configuration", "statistics", "model_repository", "schedule_policy", "parameters"}

// handleModel serves /v2/models/{name}[/versions/{v}][/ready|/infer|/config|/stats].
func (s *Server) handleModel(ctx *fasthttp.RequestCtx, rest string, get, post bool) {
	name, action := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		name, action = rest[:i], rest[i+1:]
	}
	if v, ok := strings.CutPrefix(action, "versions/"); ok { // one version, "1", per model
		ver, act, _ := strings.Cut(v, "/")
		if ver != "1" {
			writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("serving: model %q has no version %q", name, ver))
			return
		}
		action = act
	}
	if name == "" {
		writeError(ctx, fasthttp.StatusNotFound, "serving: model name missing")
		return
	}
	switch {
	case action == "" && get:
		meta, err := s.metadata(name)
		if err != nil {
			writeError(ctx, statusOf(err), err.Error())
			return
		}
		writeJSON(ctx, 200, meta)
	case action == "ready" && get:
		if _, err := s.metadata(name); err != nil {
			writeError(ctx, statusOf(err), err.Error())
			return
		}
		writeJSON(ctx, 200, map[string]any{"name": name, "ready": true})
	case action == "infer" && post:
		s.handleInfer(ctx, name)
	case action == "config" && get:
		s.handleConfig(ctx, name)
	case action == "stats" && get:
		s.handleStats(ctx, name)
	case action == "" || action == "ready" || action == "infer" || action == "config" || action == "stats":
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "serving: method "+string(ctx.Method())+" not allowed here")
	default:
		writeError(ctx, fasthttp.StatusNotFound, "serving: no such endpoint "+string(ctx.Path()))
	}
}

func (s *Server) metadata(name string) (ModelMetadata, error) {
	if m, ok := s.Local.Metadata(name); ok {
		return m, nil
	}
	if s.Remote != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatsTimeout)
		defer cancel()
		m, ok, err := s.Remote.Metadata(ctx, name)
		if err != nil {
			return m, fmt.Errorf("serving: looking for model %q: %w", name, err)
		}
		if ok {
			return m, nil
		}
	}
	return ModelMetadata{}, fmt.Errorf("%w %q", ErrUnknownModel, name)
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var re *remoteError
	switch {
	case errors.As(err, &re) && re.code >= 400:
		return re.code
	case IsBadRequest(err):
		return fasthttp.StatusBadRequest
	case errors.Is(err, ErrUnknownModel):
		return fasthttp.StatusNotFound
	case errors.Is(err, ErrQueueFull):
		return fasthttp.StatusServiceUnavailable
	case errors.Is(err, errBodyTooLarge):
		return fasthttp.StatusRequestEntityTooLarge
	case errors.Is(err, errBadEncoding):
		return fasthttp.StatusUnsupportedMediaType
	case errors.Is(err, errNoRepository):
		return fasthttp.StatusNotImplemented
	case errors.Is(err, context.DeadlineExceeded):
		return fasthttp.StatusGatewayTimeout
	}
	return fasthttp.StatusInternalServerError
}

func (s *Server) handleInfer(ctx *fasthttp.RequestCtx, model string) {
	start := time.Now()
	code := s.infer(ctx, model)
	if code != 404 { // unknown names are not worth a series each
		s.Metrics.ObserveRequest(model, code, time.Since(start))
	}
}

// infer answers one infer request and returns its status code.
func (s *Server) infer(ctx *fasthttp.RequestCtx, model string) int {
	fail := func(err error) int {
		code := statusOf(err)
		writeError(ctx, code, err.Error())
		return code
	}
	hl, err := HeaderLength(ctx.Request.Header.Peek("Inference-Header-Content-Length"))
	if err != nil {
		return fail(err)
	}
	body, err := requestBody(ctx, s.cfg.Limits.MaxBodyBytes)
	if err != nil {
		return fail(err)
	}
	req, err := DecodeInferRequest(body, hl, s.cfg.Limits)
	if err != nil {
		return fail(err)
	}
	timeout := s.cfg.InferTimeout
	if req.Timeout > 0 {
		timeout = min(timeout, req.Timeout)
	}
	c, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := s.run(c, model, req.Inputs, InferOptions{Priority: req.Priority})
	if err != nil {
		return fail(err)
	}
	sel, binOut, err := selectOutputs(req, out)
	if err != nil {
		return fail(err)
	}
	js, bin := EncodeInferResponse(nil, model, req.ID, sel, func(i int) bool { return binOut[i] })
	ctx.SetStatusCode(200)
	if len(bin) > 0 {
		ctx.Response.Header.Set("Inference-Header-Content-Length", fmt.Sprint(len(js)))
		ctx.SetContentType("application/octet-stream")
		ctx.SetBody(append(js, bin...))
	} else {
		ctx.SetContentType("application/json")
		ctx.SetBody(js)
	}
	return 200
}

// run sends the inputs to this node's copy of the model or to a node that serves it.
func (s *Server) run(ctx context.Context, model string, in []*onnx.Tensor, opt InferOptions) ([]*onnx.Tensor, error) {
	out, ok, err := s.Local.Infer(ctx, model, in, opt)
	if ok {
		return out, err
	}
	if s.Remote == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, model)
	}
	meta, found, err := s.Remote.Metadata(ctx, model)
	if err != nil {
		return nil, fmt.Errorf("serving: looking for model %q: %w", model, err)
	}
	if !found {
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, model)
	}
	ordered, _, err := CheckInputs(meta, in) // bad input is refused here, not after a hop
	if err != nil {
		return nil, err
	}
	return s.Remote.Infer(ctx, model, ordered, opt)
}

// selectOutputs picks the requested outputs (all when none were named) and whether each
// goes into the binary section.
func selectOutputs(req *InferRequest, out []*onnx.Tensor) ([]*onnx.Tensor, []bool, error) {
	if len(req.Outputs) == 0 {
		bin := make([]bool, len(out))
		for i := range bin {
			bin[i] = req.BinaryOutput
		}
		return out, bin, nil
	}
	sel := make([]*onnx.Tensor, 0, len(req.Outputs))
	bin := make([]bool, 0, len(req.Outputs))
	for _, r := range req.Outputs {
		var t *onnx.Tensor
		for _, o := range out {
			if o.Name == r.Name {
				t = o
			}
		}
		if t == nil {
			return nil, nil, badf("model has no output %q", r.Name)
		}
		sel = append(sel, t)
		bin = append(bin, r.Binary || req.BinaryOutput)
	}
	return sel, bin, nil
}

// handleMetrics writes /metrics.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	ctx.SetBody(s.Metrics.exposition(s.cfg.Logf))
}

// logger adapts Logf to fasthttp's logger.
type logger func(format string, args ...any)

func (l logger) Printf(format string, args ...any) { l("serving: "+format, args...) }
