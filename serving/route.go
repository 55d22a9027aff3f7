package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"idunno/kernel/onnx"
	"idunno/rpc"
)

// RPC methods of the HTTP subsystem.
const (
	MethodInfer   = "http.infer"   // run a model this node serves (no further forwarding)
	MethodModels  = "http.models"  // the models this node serves, with metadata
	MethodServe   = "http.serve"   // load a model from SDFS and serve it
	MethodUnserve = "http.unserve" // stop serving a model
	MethodPlaced  = "http.placed"  // a node says which models it serves now (for the placers)
)

// Peer is another node that may serve models.
type Peer struct {
	Name    string
	RPCAddr string
}

// PeerSource lists the live nodes other than this one (the failure detector's view).
type PeerSource interface {
	Peers() []Peer
}

// StaticPeers is a fixed PeerSource, for tests and fixed deployments.
type StaticPeers []Peer

// Peers implements PeerSource.
func (p StaticPeers) Peers() []Peer { return p }

// RemoteModel is one entry of a node's http.models answer.
type RemoteModel struct {
	Served   ServedModel   `json:"served"`
	Meta     ModelMetadata `json:"meta"`
	SDFSName string        `json:"sdfs_name,omitempty"` // where it was loaded from, if known
}

// wireTensor describes one tensor of an rpc message; its bytes are in the message body,
// little-endian, in order.
type wireTensor struct {
	Name  string  `json:"name"`
	DType int32   `json:"dtype"`
	Dims  []int64 `json:"dims"`
}

type inferArgs struct {
	Model    string       `json:"model"`
	Inputs   []wireTensor `json:"inputs"`
	Priority uint64       `json:"priority,omitempty"`
	// TimeoutUS is what is left of the request's deadline, in µs, when it was forwarded
	// (the rpc server does not learn the caller's deadline).
	TimeoutUS int64 `json:"timeout_us,omitempty"`
}

// inferReply carries application errors with their HTTP status, so a 503 on the serving
// node is a 503 at the node the client asked.
type inferReply struct {
	Outputs []wireTensor `json:"outputs"`
	Code    int          `json:"code,omitempty"`
	Error   string       `json:"error,omitempty"`
}

// encodeTensors lays tensors out as rpc headers plus one body.
func encodeTensors(ts []*onnx.Tensor) ([]wireTensor, []byte) {
	hs := make([]wireTensor, len(ts))
	var body []byte
	for i, t := range ts {
		hs[i] = wireTensor{Name: t.Name, DType: int32(t.DType), Dims: t.Dims}
		body = appendBinary(body, t)
	}
	return hs, body
}

// decodeTensors is the inverse of encodeTensors; it checks every size against lim and the body.
func decodeTensors(hs []wireTensor, body []byte, lim Limits) ([]*onnx.Tensor, error) {
	lim = lim.withDefaults()
	if len(hs) > lim.MaxInputs {
		return nil, fmt.Errorf("serving: %d tensors, limit %d", len(hs), lim.MaxInputs)
	}
	ts := make([]*onnx.Tensor, len(hs))
	off := 0
	for i, h := range hs {
		dt := onnx.DataType(h.DType)
		es := elemSize(dt)
		if es == 0 {
			return nil, fmt.Errorf("serving: tensor %q: unsupported type %d", h.Name, h.DType)
		}
		if len(h.Dims) > lim.MaxRank {
			return nil, fmt.Errorf("serving: tensor %q: rank %d over %d", h.Name, len(h.Dims), lim.MaxRank)
		}
		n := 1
		for _, d := range h.Dims {
			if d < 0 || d > int64(lim.MaxElements) {
				return nil, fmt.Errorf("serving: tensor %q: bad dimension %d", h.Name, d)
			}
			if n *= int(d); n > lim.MaxElements {
				return nil, fmt.Errorf("serving: tensor %q: too many elements", h.Name)
			}
		}
		if n*es > len(body)-off {
			return nil, fmt.Errorf("serving: tensor %q: body too short", h.Name)
		}
		t := &onnx.Tensor{Name: h.Name, DType: dt, Dims: append([]int64(nil), h.Dims...)}
		fillBinary(t, body[off:off+n*es], n)
		off += n * es
		ts[i] = t
	}
	if off != len(body) {
		return nil, fmt.Errorf("serving: body has %d bytes, tensors use %d", len(body), off)
	}
	return ts, nil
}

// Loader loads a model from SDFS into the backend under the given name (node runtime).
type Loader func(ctx context.Context, req ServeRequest) error

// ServeRequest asks a node to load a model from SDFS and serve it.
type ServeRequest struct {
	ServedModel
	SDFSName string `json:"sdfs_name"`
}

// RegisterRPC registers this node's http.* methods without a loader (http.serve fails).
func RegisterRPC(srv *rpc.Server, local *LocalModels, lim Limits) {
	RegisterRPCWithLoader(srv, local, lim, nil, nil)
}

// RegisterRPCWithLoader is RegisterRPC with a loader for http.serve and an unloader for
// http.unserve (called after the model stopped serving; either may be nil).
func RegisterRPCWithLoader(srv *rpc.Server, local *LocalModels, lim Limits, load Loader, unload func(name string) error) {
	registerRPC(srv, local, lim, load, unload, nil)
}

// registerRPC is RegisterRPCWithLoader with sdfsName, which tells where a served model was
// loaded from (http.models says it, so another node can serve it again; nil: unknown).
func registerRPC(srv *rpc.Server, local *LocalModels, lim Limits, load Loader, unload func(name string) error, sdfsName func(model string) string) {
	rpc.HandleJSON(srv, MethodUnserve, func(ctx context.Context, a struct {
		Name string `json:"name"`
	}) (struct{}, error) {
		if _, ok := local.Metadata(a.Name); !ok {
			return struct{}{}, fmt.Errorf("serving: this node does not serve %q", a.Name)
		}
		local.Unserve(a.Name)
		if unload != nil {
			return struct{}{}, unload(a.Name)
		}
		return struct{}{}, nil
	})
	rpc.HandleJSON(srv, MethodModels, func(ctx context.Context, _ struct{}) ([]RemoteModel, error) {
		var r []RemoteModel
		for _, m := range local.Served() {
			if meta, ok := local.Metadata(m.Name); ok {
				rm := RemoteModel{Served: m, Meta: meta}
				if sdfsName != nil {
					rm.SDFSName = sdfsName(m.Name)
				}
				r = append(r, rm)
			}
		}
		return r, nil
	})
	rpc.HandleJSON(srv, MethodServe, func(ctx context.Context, req ServeRequest) (ServedModel, error) {
		if load == nil {
			return ServedModel{}, errors.New("serving: this node cannot load models")
		}
		if req.Name == "" || req.SDFSName == "" {
			return ServedModel{}, errors.New("serving: serve: model name and SDFS name are required")
		}
		if err := load(ctx, req); err != nil {
			return ServedModel{}, err
		}
		if err := local.Serve(req.ServedModel); err != nil {
			return ServedModel{}, err
		}
		for _, m := range local.Served() {
			if m.Name == req.Name {
				return m, nil
			}
		}
		return req.ServedModel, nil
	})
	srv.Handle(MethodInfer, func(ctx context.Context, m *rpc.Message) (*rpc.Message, error) {
		var a inferArgs
		if err := json.Unmarshal(m.Args, &a); err != nil {
			return nil, fmt.Errorf("serving: %s: bad arguments: %w", MethodInfer, err)
		}
		reply := inferReply{}
		var body []byte
		if a.TimeoutUS > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(min(a.TimeoutUS, math.MaxInt64/1000))*time.Microsecond)
			defer cancel()
		}
		in, err := decodeTensors(a.Inputs, m.Body, lim)
		if err == nil {
			var out []*onnx.Tensor
			var ok bool
			out, ok, err = local.Infer(ctx, a.Model, in, InferOptions{Priority: a.Priority})
			if !ok {
				err = fmt.Errorf("%w %q on this node", errNotServedHere, a.Model)
			}
			if err == nil {
				reply.Outputs, body = encodeTensors(out)
			}
		}
		if err != nil {
			reply.Code, reply.Error = statusOf(err), err.Error()
			if errors.Is(err, errNotServedHere) {
				reply.Code = 421 // misdirected: the caller's directory is stale
			}
		}
		raw, _ := json.Marshal(reply)
		return &rpc.Message{Args: raw, Body: body}, nil
	})
}

var errNotServedHere = errors.New("serving: not serving model")

// remoteError is an error the serving node answered with, with its HTTP status.
type remoteError struct {
	code int
	msg  string
}

func (e *remoteError) Error() string { return e.msg }

// Router sends requests for models this node does not serve to nodes that do. It keeps a
// directory (model → serving peers) built by asking every live peer for its models, at most
// once per TTL, and spreads requests over a model's peers in turn.
type Router struct {
	client      *rpc.Client
	peers       PeerSource
	lim         Limits
	TTL         time.Duration // directory refresh interval (2 s)
	MissGap     time.Duration // least time between refreshes (50 ms)
	CallTimeout time.Duration // bound on one http.models call (1 s)
	now         func() time.Time

	refreshMu sync.Mutex // one refresh at a time
	mu        sync.Mutex // guards dir and at
	dir       map[string]*dirEntry
	at        time.Time // when the refresh that built dir started
	rr        atomic.Uint64
}

type dirEntry struct {
	meta   ModelMetadata
	served ServedModel // as the first peer that answered serves it
	peers  []Peer
}

// NewRouter returns a router over the given peers.
func NewRouter(c *rpc.Client, peers PeerSource, lim Limits) *Router {
	return &Router{client: c, peers: peers, lim: lim, TTL: 2 * time.Second, MissGap: 50 * time.Millisecond, CallTimeout: time.Second, now: time.Now, dir: map[string]*dirEntry{}}
}

// lookup returns the model's directory entry. A fresh entry is used as it is; a stale one
// after any newer refresh; a miss only after a refresh that started once the request had
// arrived, so a model served a moment ago is found. Concurrent lookups share refreshes.
func (r *Router) lookup(ctx context.Context, model string) (*dirEntry, error) {
	now := r.now()
	r.mu.Lock()
	e, at := r.dir[model], r.at
	r.mu.Unlock()
	if e != nil && now.Sub(at) < r.TTL {
		return e, nil
	}
	after := at.Add(time.Nanosecond)
	if e == nil {
		after = now
	}
	if err := r.refresh(ctx, after); err != nil && e == nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dir[model], nil
}

// refresh rebuilds the directory unless a refresh that started at or after `after` has
// completed meanwhile. Refreshes start at least MissGap apart, so requests for unknown
// models cannot make this node flood its peers.
func (r *Router) refresh(ctx context.Context, after time.Time) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	r.mu.Lock()
	last := r.at
	r.mu.Unlock()
	if !last.Before(after) {
		return nil
	}
	if wait := last.Add(r.MissGap).Sub(r.now()); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	start := r.now()
	peers := r.peers.Peers()
	type answer struct {
		p      Peer
		models []RemoteModel
		err    error
	}
	ch := make(chan answer, len(peers))
	for _, p := range peers {
		go func() {
			c, cancel := context.WithTimeout(ctx, r.CallTimeout)
			defer cancel()
			var ms []RemoteModel
			err := r.client.CallJSON(c, p.RPCAddr, MethodModels, struct{}{}, &ms)
			ch <- answer{p, ms, err}
		}()
	}
	dir := map[string]*dirEntry{}
	var errs []string
	for range peers {
		a := <-ch
		if a.err != nil {
			errs = append(errs, a.p.Name+": "+a.err.Error())
			continue
		}
		for _, m := range a.models {
			e := dir[m.Meta.Name]
			if e == nil {
				e = &dirEntry{meta: m.Meta, served: m.Served}
				dir[m.Meta.Name] = e
			}
			e.peers = append(e.peers, a.p)
		}
	}
	r.mu.Lock()
	r.dir, r.at = dir, start
	r.mu.Unlock()
	if len(errs) == len(peers) && len(peers) > 0 {
		return fmt.Errorf("serving: no peer answered: %s", strings.Join(errs, "; "))
	}
	return nil
}

// forget drops p from model's entry after it failed or said it does not serve the model.
func (r *Router) forget(model string, p Peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.dir[model]
	if e == nil {
		return
	}
	kept := make([]Peer, 0, len(e.peers))
	for _, q := range e.peers {
		if q != p {
			kept = append(kept, q)
		}
	}
	if len(kept) == 0 {
		delete(r.dir, model)
		return
	}
	r.dir[model] = &dirEntry{meta: e.meta, served: e.served, peers: kept}
}

// Forget drops a model from the directory (it was unloaded everywhere).
func (r *Router) Forget(model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.dir, model)
}

// Metadata implements Remote.
func (r *Router) Metadata(ctx context.Context, model string) (ModelMetadata, bool, error) {
	e, err := r.lookup(ctx, model)
	if err != nil || e == nil {
		return ModelMetadata{}, false, err
	}
	return e.meta, true, nil
}

// Served implements Remote.
func (r *Router) Served(ctx context.Context, model string) (ServedModel, bool, error) {
	e, err := r.lookup(ctx, model)
	if err != nil || e == nil {
		return ServedModel{}, false, err
	}
	return e.served, true, nil
}

// Models lists every model some peer serves, with the peers serving it.
func (r *Router) Models(ctx context.Context) map[string][]string {
	r.mu.Lock()
	at := r.at
	r.mu.Unlock()
	if r.now().Sub(at) >= r.TTL {
		r.refresh(ctx, at.Add(time.Nanosecond))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string][]string{}
	for name, e := range r.dir {
		for _, p := range e.peers {
			m[name] = append(m[name], p.Name)
		}
	}
	return m
}

// Infer implements Remote: it forwards to a peer serving the model, trying the next one
// when a peer cannot be reached or no longer serves it.
func (r *Router) Infer(ctx context.Context, model string, in []*onnx.Tensor, opt InferOptions) ([]*onnx.Tensor, error) {
	hs, body := encodeTensors(in)
	a := inferArgs{Model: model, Inputs: hs, Priority: opt.Priority}
	if dl, ok := ctx.Deadline(); ok {
		a.TimeoutUS = max(time.Until(dl).Microseconds(), 1)
	}
	args, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("serving: encode forward: %w", err)
	}
	var unreachable error // the last transport failure, if a peer could not be reached
	for attempt := 0; attempt < 3; attempt++ {
		e, err := r.lookup(ctx, model)
		if err != nil {
			return nil, err
		}
		if e == nil || len(e.peers) == 0 {
			if unreachable != nil {
				return nil, unreachable
			}
			return nil, fmt.Errorf("%w %q", ErrUnknownModel, model)
		}
		p := e.peers[int(r.rr.Add(1)%uint64(len(e.peers)))]
		resp, err := r.client.Call(ctx, p.RPCAddr, &rpc.Message{Method: MethodInfer, Args: args, Body: body})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("serving: forward to %s: %w", p.Name, ctx.Err())
			}
			unreachable = &remoteError{code: 502, msg: fmt.Sprintf("serving: forward to %s: %v", p.Name, err)}
			r.forget(model, p)
			continue
		}
		var rep inferReply
		if err := json.Unmarshal(resp.Args, &rep); err != nil {
			return nil, fmt.Errorf("serving: bad reply from %s: %w", p.Name, err)
		}
		if rep.Code == 421 { // the peer stopped serving it: ask the others
			r.forget(model, p)
			continue
		}
		if rep.Error != "" {
			return nil, &remoteError{code: rep.Code, msg: rep.Error}
		}
		return decodeTensors(rep.Outputs, resp.Body, Limits{MaxElements: math.MaxInt32, MaxBodyBytes: rpc.MaxBody})
	}
	if unreachable != nil {
		return nil, unreachable
	}
	return nil, &remoteError{code: 503, msg: fmt.Sprintf("serving: no node could run %q after 3 tries", model)}
}

// Unserve asks the given node to stop serving a model.
func Unserve(ctx context.Context, c *rpc.Client, addr, name string) error {
	if err := c.CallJSON(ctx, addr, MethodUnserve, map[string]string{"name": name}, nil); err != nil {
		return fmt.Errorf("serving: unserve %s at %s: %w", name, addr, err)
	}
	return nil
}

// Serve asks the given node to load a model from SDFS and serve it.
func Serve(ctx context.Context, c *rpc.Client, addr string, req ServeRequest) (ServedModel, error) {
	var m ServedModel
	if err := c.CallJSON(ctx, addr, MethodServe, req, &m); err != nil {
		return m, fmt.Errorf("serving: serve %s at %s: %w", req.Name, addr, err)
	}
	return m, nil
}
