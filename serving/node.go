package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"idunno/kernel"
	"idunno/modelcache"
	"idunno/rpc"
)

// NodeOptions is what a node gives its HTTP service.
type NodeOptions struct {
	Config  Config
	Addr    string // HTTP listen address (the node's base port + 2)
	DataDir string // the node's data directory: served models are kept under http/
	Threads int    // kernel threads per model instance
	RPC     *rpc.Server
	Client  *rpc.Client
	SelfRPC string     // this node's RPC address (job statistics are asked there)
	Peers   PeerSource // the other live nodes
	Gauges  GaugeSource
	// Fetch writes the newest version of an SDFS file to w.
	Fetch func(ctx context.Context, sdfsName string, w io.Writer) error
	// List returns the SDFS names that start with prefix (the repository index); nil: the
	// index shows served models only.
	List func(ctx context.Context, prefix string) ([]string, error)
	// Models is the node's model cache, shared with the jobs' executor; nil: served models
	// are loaded for serving alone.
	Models *modelcache.Cache
	// Tasks returns the node's worker's task counts for the dashboard's node table; nil:
	// unknown.
	Tasks func() TaskCounts
}

// NodeService is the HTTP subsystem of a node (a sched.Component): the HTTP server, its
// http.* rpc methods, the kernel backend and the record of which models this node serves
// (DATA_DIR/http/served.json), reloaded from SDFS when the node restarts.
type NodeService struct {
	o       NodeOptions
	backend *KernelBackend
	local   *LocalModels
	srv     *Server
	logf    func(format string, args ...any)

	mu       sync.Mutex      // guards the served file and pending
	pending  map[string]bool // models of the served file not loaded again yet (restore)
	sampler  sampler         // the dashboard's history and node table (sampler.go)
	hints    chan servedHint // peers' http.placed messages, for the placer
	changed  chan struct{}   // this node's served models changed (capacity 1)
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	served   chan error
}

var modelNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// NewNodeService builds the service and registers its rpc methods; call before the rpc
// server runs.
func NewNodeService(o NodeOptions) *NodeService {
	s := &NodeService{o: o, backend: NewKernelBackendCached(o.Threads, o.Models), stop: make(chan struct{}),
		hints: make(chan servedHint, 64), changed: make(chan struct{}, 1)}
	s.logf = o.Config.withDefaults().Logf
	s.local = NewLocalModels(s.backend, 0)
	s.local.onChange = s.noteChanged
	s.srv = NewServer(o.Config, s.local)
	s.srv.Remote = NewRouter(o.Client, o.Peers, o.Config.Limits)
	s.srv.Stats = &RPCStats{Client: o.Client, Addr: o.SelfRPC}
	s.srv.Gauges = o.Gauges
	s.srv.Repo = s
	s.srv.NotReady = s.notReady
	registerRPC(o.RPC, s.local, o.Config.Limits, s.load, s.unload, s.sdfsName)
	rpc.HandleJSON(o.RPC, MethodNode, func(context.Context, struct{}) (NodeFigures, error) {
		return s.nodeFigures(), nil
	})
	rpc.HandleJSON(o.RPC, MethodPlaced, func(_ context.Context, h servedHint) (struct{}, error) {
		s.hint(h)
		return struct{}{}, nil
	})
	return s
}

// Server returns the HTTP server (for tests).
func (s *NodeService) Server() *Server { return s.srv }

// Name implements sched.Component.
func (s *NodeService) Name() string { return "http" }

// Start listens on the HTTP address and reloads the models this node served before.
func (s *NodeService) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.o.Addr)
	if err != nil {
		return fmt.Errorf("serving: listen %s: %w", s.o.Addr, err)
	}
	s.served = make(chan error, 1)
	go func() { s.served <- s.srv.Serve(ln) }()
	s.logf("http: serving on %s", s.o.Addr)
	// The served file is read here, not in restore's goroutine: a model served through
	// this new instance before that goroutine ran would otherwise be loaded twice.
	s.mu.Lock()
	todo := s.readServed()
	s.pending = map[string]bool{}
	for _, r := range todo {
		s.pending[r.Name] = true
	}
	s.mu.Unlock()
	s.wg.Add(3)
	go s.restore(todo)
	go s.place()
	go s.sample()
	return nil
}

// Stop shuts the server down and unloads the models. Later calls do nothing.
func (s *NodeService) Stop() error {
	var err error
	s.stopOnce.Do(func() { err = s.stopNow() })
	return err
}

func (s *NodeService) stopNow() error {
	close(s.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if s.served != nil {
		<-s.served
	}
	s.wg.Wait()
	s.local.Close()
	s.backend.Close()
	return err
}

func (s *NodeService) dir() string { return filepath.Join(s.o.DataDir, "http") }

// load fetches a model from SDFS into DATA_DIR/http/models and loads it into the kernel.
func (s *NodeService) load(ctx context.Context, req ServeRequest) error {
	if !modelNameRE.MatchString(req.Name) {
		return fmt.Errorf("serving: bad model name %q (letters, digits, . _ -; up to 128)", req.Name)
	}
	prec, err := kernel.ParsePrecision(req.Precision)
	if err != nil {
		return fmt.Errorf("serving: serve %s: %w", req.Name, err)
	}
	if s.o.Fetch == nil {
		return errors.New("serving: this node has no SDFS client")
	}
	dir := filepath.Join(s.dir(), "models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	path := filepath.Join(dir, req.Name+".onnx")
	tmp, err := os.CreateTemp(dir, req.Name+".*.tmp")
	if err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := s.o.Fetch(ctx, req.SDFSName, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("serving: fetch %s from SDFS: %w", req.SDFSName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	if err := s.backend.LoadFileAt(req.Name, path, prec); err != nil {
		return err
	}
	s.logf("http: loaded model %s from SDFS %s (max batch %d, max delay %v)", req.Name, req.SDFSName, req.Batch.MaxBatch, req.Batch.MaxDelay)
	return s.record(req)
}

// unload forgets a model this node stopped serving: its record and its kernel instance.
func (s *NodeService) unload(name string) error {
	s.backend.Unload(name)
	s.logf("http: stopped serving %s", name)
	return s.rewrite(name, nil)
}

// record adds req to the served file, replacing an entry of the same name.
func (s *NodeService) record(req ServeRequest) error { return s.rewrite(req.Name, &req) }

// rewrite replaces the served file's entry for name with req (nil: removes it).
func (s *NodeService) rewrite(name string, req *ServeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.readServed()
	kept := all[:0]
	for _, r := range all {
		if r.Name != name {
			kept = append(kept, r)
		}
	}
	if req != nil {
		kept = append(kept, *req)
	}
	if err := os.MkdirAll(s.dir(), 0o755); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	b, _ := json.MarshalIndent(kept, "", "  ")
	p := filepath.Join(s.dir(), "served.json")
	if err := os.WriteFile(p+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	return os.Rename(p+".tmp", p)
}

func (s *NodeService) readServed() []ServeRequest {
	var r []ServeRequest
	b, err := os.ReadFile(filepath.Join(s.dir(), "served.json"))
	if err == nil {
		json.Unmarshal(b, &r)
	}
	return r
}

// restore reloads todo, the models served before a restart, retrying while SDFS is not ready.
func (s *NodeService) restore(todo []ServeRequest) {
	defer s.wg.Done()
	for wait := 200 * time.Millisecond; len(todo) > 0; wait = min(2*wait, 5*time.Second) {
		var left []ServeRequest
		s.mu.Lock()
		still := map[string]bool{} // unserved meanwhile: not reloaded
		for _, r := range s.readServed() {
			still[r.Name] = true
		}
		s.mu.Unlock()
		for _, r := range todo {
			if !still[r.Name] {
				s.loaded(r.Name)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := s.load(ctx, r)
			cancel()
			if err == nil {
				err = s.local.Serve(r.ServedModel)
			}
			if err != nil {
				s.logf("http: reload %s: %v (will retry)", r.Name, err)
				left = append(left, r)
			} else {
				s.loaded(r.Name)
			}
		}
		todo = left
		select {
		case <-s.stop:
			return
		case <-time.After(wait):
		}
	}
}

// loaded notes that a model of the served file is loaded again (or no longer served).
func (s *NodeService) loaded(name string) {
	s.mu.Lock()
	delete(s.pending, name)
	s.mu.Unlock()
}

// notReady says why /v2/health/ready is false: models this node serves not loaded yet.
func (s *NodeService) notReady() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return ""
	}
	names := make([]string, 0, len(s.pending))
	for n := range s.pending {
		names = append(names, n)
	}
	slices.Sort(names)
	return "serving: loading " + strings.Join(names, ", ")
}

// sdfsName returns the SDFS file a served model was loaded from ("" if unknown).
func (s *NodeService) sdfsName(model string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.readServed() {
		if r.Name == model {
			return r.SDFSName
		}
	}
	return ""
}

// RPCStats is the StatsSource of a node: it asks the scheduler's client API, at the given
// node's RPC address (which forwards to the coordinator), for every job's statistics in
// one call ("sched.job.stats.all"), and for each job's histogram when asked for them.
type RPCStats struct {
	Client *rpc.Client
	Addr   string
}

// JobStats implements StatsSource.
func (r *RPCStats) JobStats(ctx context.Context) ([]JobStats, error) { return r.jobStats(ctx, true) }

// JobRates implements RateSource.
func (r *RPCStats) JobRates(ctx context.Context) ([]JobStats, error) { return r.jobStats(ctx, false) }

func (r *RPCStats) jobStats(ctx context.Context, histograms bool) ([]JobStats, error) {
	out := []JobStats{}
	if err := r.Client.CallJSON(ctx, r.Addr, "sched.job.stats.all", struct{}{}, &out); err != nil {
		return nil, fmt.Errorf("serving: job stats: %w", err)
	}
	for i := 0; histograms && i < len(out); i++ {
		var h LatencyHistogram
		if err := r.Client.CallJSON(ctx, r.Addr, "sched.job.histogram", map[string]string{"name": out[i].Job}, &h); err == nil && len(h.Counts) == len(h.BoundsMS) {
			out[i].Histogram = &h
		}
	}
	return out, nil
}

// Index implements Repository: the models stored as idunno/models/NAME.onnx, READY where
// some live node serves them, and every served model wherever its file lives.
func (s *NodeService) Index(ctx context.Context) ([]RepositoryModel, error) {
	state := map[string]string{}
	if s.o.List != nil {
		names, err := s.o.List(ctx, ModelsPrefix)
		if err != nil {
			return nil, fmt.Errorf("serving: repository index: %w", err)
		}
		for _, n := range names {
			if m, ok := strings.CutSuffix(strings.TrimPrefix(n, ModelsPrefix), ".onnx"); ok && modelNameRE.MatchString(m) {
				state[m] = StateUnavailable
			}
		}
	}
	for _, m := range s.local.Served() {
		state[m.Name] = StateReady
	}
	if r, ok := s.srv.Remote.(*Router); ok {
		for m := range r.Models(ctx) {
			state[m] = StateReady
		}
	}
	out := make([]RepositoryModel, 0, len(state))
	for n, st := range state {
		m := RepositoryModel{Name: n, Version: "1", State: st}
		if st == StateUnavailable {
			m.Reason = "not served by any node (load it to serve it here)"
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b RepositoryModel) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Load implements Repository: this node serves the model (as `idunno serve NAME --nodes
// THIS`), from the SDFS file it already serves it from, else idunno/models/NAME.onnx.
func (s *NodeService) Load(ctx context.Context, name string, policy *PolicyOverride) error {
	if !modelNameRE.MatchString(name) {
		return badf("bad model name %q (letters, digits, . _ -; up to 128)", name)
	}
	req := ServeRequest{ServedModel: ServedModel{Name: name}, SDFSName: ModelsPrefix + name + ".onnx"}
	s.mu.Lock()
	for _, r := range s.readServed() {
		if r.Name == name {
			req = r
		}
	}
	s.mu.Unlock()
	req.ServedModel = policy.Apply(req.ServedModel)
	if req.Batch.MaxBatch < 0 || req.Batch.MaxQueue < 0 || req.Instances < 0 || req.Batch.MaxDelay < 0 {
		return badf("bad batching policy %+v", req.Batch)
	}
	if err := s.load(ctx, req); err != nil {
		return err
	}
	return s.local.Serve(req.ServedModel)
}

// Unload implements Repository: every live node serving the model stops (as `idunno
// unserve NAME`). Unloading a model nobody serves succeeds, as in Triton.
func (s *NodeService) Unload(ctx context.Context, name string) error {
	var errs []error
	if _, ok := s.local.ServedAs(name); ok {
		s.local.Unserve(name)
		if err := s.unload(name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range s.o.Peers.Peers() {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		var ms []RemoteModel
		err := s.o.Client.CallJSON(c, p.RPCAddr, MethodModels, struct{}{}, &ms)
		if err == nil && slices.ContainsFunc(ms, func(m RemoteModel) bool { return m.Served.Name == name }) {
			err = Unserve(c, s.o.Client, p.RPCAddr, name)
		}
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
		}
	}
	if r, ok := s.srv.Remote.(*Router); ok {
		r.Forget(name)
	}
	if len(errs) > 0 {
		return fmt.Errorf("serving: unload %s: %w", name, errors.Join(errs...))
	}
	return nil
}
