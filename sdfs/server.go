package sdfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"idunno/fd"
	"idunno/rpc"
)

// Membership is what the store needs from the failure detector.
type Membership interface {
	Members() []fd.Member
	Subscribe(buf int) (<-chan fd.Event, func())
}

// Store is one node's part of SDFS: its replica store on disk, the "sdfs.*" RPC methods,
// and the background loops that re-replicate, rebalance and scrub. The index on disk is
// guarded by the disk's mutex; the repair loop runs on the goroutine that calls Run.
type Store struct {
	cfg    Config
	self   Peer
	disk   *disk
	mem    Membership
	rc     *rpc.Client
	client *Client
	Logf   func(format string, args ...any)
	now    func() time.Time

	mu        sync.Mutex
	repairing map[string]chan struct{} // blocks being repaired, by "name\x00version\x00index"
	kick      chan struct{}
	backlog   atomic.Int64 // replicas the last repair scan found missing (for metrics)

	scanMu      sync.Mutex // one repair scan at a time; guards the fields below
	scans       int
	clean       map[string]cleanMark // names the last checks found fully replicated (see Scan)
	lastChecked int                  // names the last scan checked
	lastPeers   map[string]bool      // the live peers at the last scan
	lastPrint   uint64               // and their peersPrint
	moving      map[string]bool      // names whose copies are moves, paced by RebalanceMoves
}

// New opens the store under dataDir/sdfs (rebuilding its index from disk). self is this
// node's name and RPC address; rc is the node's RPC client.
func New(cfg Config, dataDir string, self Peer, mem Membership, rc *rpc.Client) (*Store, error) {
	d, err := openDisk(filepath.Join(dataDir, "sdfs"), cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, self: self, disk: d, mem: mem, rc: rc, Logf: log.Printf, now: time.Now,
		repairing: map[string]chan struct{}{}, kick: make(chan struct{}, 1)}
	s.client = NewClient(cfg, rc, func(context.Context) ([]Peer, error) { return s.Peers(), nil })
	return s, nil
}

// Client returns a client that uses this node's membership view.
func (s *Store) Client() *Client { return s.client }

// Usage reports how many names and bytes of data versions this node holds.
func (s *Store) Usage() (files int, bytes int64) { return s.disk.usage() }

// Backlog returns how many replicas of versions this node is responsible for pushing
// were missing at its last repair scan.
func (s *Store) Backlog() int64 { return s.backlog.Load() }

// Peers returns the live members (alive or suspect) with this node among them.
func (s *Store) Peers() []Peer {
	out := []Peer{s.self}
	for _, m := range s.mem.Members() {
		if m.Name == s.self.Name || m.RPCAddr == "" || (m.State != fd.Alive && m.State != fd.Suspect) {
			continue
		}
		out = append(out, Peer{Name: m.Name, Addr: m.RPCAddr})
	}
	return out
}

// RPC argument and result types.
type (
	statArgs struct {
		Names []string `json:"names"`
	}
	statReply struct {
		Versions map[string][]VersionInfo `json:"versions"`
	}
	beginArgs struct {
		Txn     string  `json:"txn"`
		Name    string  `json:"name"`
		Version Version `json:"version"`
	}
	blockArgs struct {
		Txn   string `json:"txn"`
		Index int    `json:"index"`
		Sum   string `json:"sum"`
	}
	commitArgs struct {
		Txn      string   `json:"txn"`
		Manifest Manifest `json:"manifest"`
		Pending  bool     `json:"pending,omitempty"` // a put's new version: invisible until sdfs.confirm
		// NoSync (sdfs.write only): do not fsync this version (Client.PutImmutable).
		NoSync bool `json:"nosync,omitempty"`
	}
	versionArgs struct {
		Name    string  `json:"name"`
		Version Version `json:"version"`
		Index   int     `json:"index,omitempty"`
	}
	listArgs struct {
		Prefix string `json:"prefix"`
	}
	// StoredFile is one name a node holds, with its versions oldest first.
	StoredFile struct {
		Name     string        `json:"name"`
		Versions []VersionInfo `json:"versions"`
	}
	// VerifyReport is the result of checking every block a node holds.
	VerifyReport struct {
		Blocks   int `json:"blocks"`
		Corrupt  int `json:"corrupt"`
		Repaired int `json:"repaired"`
	}
	empty struct{}
)

const maxStatNames = 4096

// Register adds the "sdfs.*" methods to srv.
func (s *Store) Register(srv *rpc.Server) {
	for method, h := range s.handlers() {
		srv.Handle(method, h)
	}
}

// handlers returns the store's RPC methods by name.
func (s *Store) handlers() map[string]rpc.Handler {
	hs := map[string]rpc.Handler{}
	hs["sdfs.members"] = jsonHandler("sdfs.members", func(ctx context.Context, _ empty) ([]Peer, error) {
		return s.Peers(), nil
	})
	hs["sdfs.stat"] = bodyHandler("sdfs.stat", func(ctx context.Context, a statArgs) (statReply, error) {
		if len(a.Names) > maxStatNames {
			return statReply{}, fmt.Errorf("sdfs: stat of %d names (limit %d)", len(a.Names), maxStatNames)
		}
		r := statReply{Versions: map[string][]VersionInfo{}}
		for _, n := range a.Names {
			if vs := s.disk.versions(n); len(vs) > 0 {
				r.Versions[n] = vs
			}
		}
		return r, nil
	})
	hs["sdfs.begin"] = jsonHandler("sdfs.begin", func(ctx context.Context, a beginArgs) (empty, error) {
		return empty{}, s.disk.begin(a.Txn, a.Name, a.Version, s.now())
	})
	hs["sdfs.putblock"] = rpc.Handler(func(ctx context.Context, m *rpc.Message) (*rpc.Message, error) {
		var a blockArgs
		if err := json.Unmarshal(m.Args, &a); err != nil {
			return nil, fmt.Errorf("sdfs: putblock: bad arguments: %w", err)
		}
		return &rpc.Message{}, s.disk.putBlock(a.Txn, a.Index, a.Sum, m.Body, s.now())
	})
	hs["sdfs.write"] = rpc.Handler(func(ctx context.Context, m *rpc.Message) (*rpc.Message, error) {
		var a commitArgs
		if err := json.Unmarshal(m.Args, &a); err != nil {
			return nil, fmt.Errorf("sdfs: write: bad arguments: %w", err)
		}
		return &rpc.Message{}, s.writeSmall(a.Txn, &a.Manifest, m.Body, a.Pending, !a.NoSync)
	})
	hs["sdfs.commit"] = jsonHandler("sdfs.commit", func(ctx context.Context, a commitArgs) (empty, error) {
		if a.Pending {
			return empty{}, s.disk.commitPending(a.Txn, &a.Manifest, s.now())
		}
		return empty{}, s.disk.commit(a.Txn, &a.Manifest, s.now())
	})
	hs["sdfs.confirm"] = jsonHandler("sdfs.confirm", func(ctx context.Context, a versionArgs) (empty, error) {
		return empty{}, s.disk.confirm(a.Name, a.Version)
	})
	hs["sdfs.abort"] = jsonHandler("sdfs.abort", func(ctx context.Context, a beginArgs) (empty, error) {
		s.disk.abort(a.Txn)
		return empty{}, nil
	})
	hs["sdfs.manifest"] = jsonHandler("sdfs.manifest", func(ctx context.Context, a versionArgs) (*Manifest, error) {
		m := s.disk.manifest(a.Name, a.Version)
		if m == nil {
			return nil, fmt.Errorf("sdfs: %s version %s not held by %s", a.Name, a.Version, s.self.Name)
		}
		return m, nil
	})
	hs["sdfs.getblock"] = rpc.Handler(func(ctx context.Context, m *rpc.Message) (*rpc.Message, error) {
		var a versionArgs
		if err := json.Unmarshal(m.Args, &a); err != nil {
			return nil, fmt.Errorf("sdfs: getblock: bad arguments: %w", err)
		}
		b, err := s.disk.readBlock(a.Name, a.Version, a.Index)
		if errors.Is(err, errCorrupt) {
			s.Logf("%v; repairing from a replica", err)
			go s.repairBlock(a.Name, a.Version, a.Index)
		}
		if err != nil {
			return nil, err
		}
		return &rpc.Message{Body: b}, nil
	})
	// sdfs.getsmall: the newest version held of a name, if it is one block, as its version
	// (Args) and its bytes (Body): Client.GetImmutable's one call.
	hs["sdfs.getsmall"] = rpc.Handler(func(ctx context.Context, m *rpc.Message) (*rpc.Message, error) {
		var a versionArgs
		if err := json.Unmarshal(m.Args, &a); err != nil {
			return nil, fmt.Errorf("sdfs: getsmall: bad arguments: %w", err)
		}
		vs := s.disk.versions(a.Name)
		if len(vs) == 0 || vs[len(vs)-1].Deleted {
			return nil, fmt.Errorf("sdfs: %s not held by %s", a.Name, s.self.Name)
		}
		v := vs[len(vs)-1].Version
		if mf := s.disk.manifest(a.Name, v); mf == nil || len(mf.Sums) != 1 {
			return nil, fmt.Errorf("sdfs: %s version %s is not one block here", a.Name, v)
		}
		b, err := s.disk.readBlock(a.Name, v, 0)
		if errors.Is(err, errCorrupt) {
			s.Logf("%v; repairing from a replica", err)
			go s.repairBlock(a.Name, v, 0)
		}
		if err != nil {
			return nil, err
		}
		args, _ := json.Marshal(v)
		return &rpc.Message{Args: args, Body: b}, nil
	})
	hs["sdfs.drop"] = jsonHandler("sdfs.drop", func(ctx context.Context, a versionArgs) (empty, error) {
		s.disk.drop(a.Name, a.Version)
		return empty{}, nil
	})
	hs["sdfs.store"] = bodyHandler("sdfs.store", func(ctx context.Context, a listArgs) ([]StoredFile, error) {
		return s.stored(a.Prefix), nil
	})
	hs["sdfs.verify"] = jsonHandler("sdfs.verify", func(ctx context.Context, _ empty) (VerifyReport, error) {
		return s.Verify(ctx, 0), nil
	})
	return hs
}

// bodyHandler is jsonHandler with the result in the message body, for results that may
// outgrow rpc.MaxHeader (listings of many names).
func bodyHandler[A, R any](method string, f func(ctx context.Context, args A) (R, error)) rpc.Handler {
	h := jsonHandler(method, f)
	return func(ctx context.Context, req *rpc.Message) (*rpc.Message, error) {
		m, err := h(ctx, req)
		if err != nil {
			return nil, err
		}
		return &rpc.Message{Body: m.Args}, nil
	}
}

// jsonHandler adapts a function of JSON arguments and result to an rpc.Handler.
func jsonHandler[A, R any](method string, f func(ctx context.Context, args A) (R, error)) rpc.Handler {
	return func(ctx context.Context, req *rpc.Message) (*rpc.Message, error) {
		var a A
		if len(req.Args) > 0 {
			if err := json.Unmarshal(req.Args, &a); err != nil {
				return nil, fmt.Errorf("sdfs: %s: bad arguments: %w", method, err)
			}
		}
		r, err := f(ctx, a)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		return &rpc.Message{Args: raw}, nil
	}
}

// writeSmall stages and commits (pending: see disk.commitPending) a version of at most one
// block in one step, fsynced when sync is set.
func (s *Store) writeSmall(txn string, m *Manifest, body []byte, pending, sync bool) error {
	if err := m.Validate(s.cfg); err != nil {
		return err
	}
	if len(m.Sums) > 1 || int64(len(body)) != m.Size {
		return fmt.Errorf("sdfs: write of %s: %d blocks and %d bytes for a one-step write", m.Name, len(m.Sums), len(body))
	}
	now := s.now()
	if !sync && !pending && len(m.Sums) == 1 {
		return s.disk.writePacked(m, body)
	}
	if err := s.disk.beginSync(txn, m.Name, m.Version, now, sync); err != nil {
		return err
	}
	var err error
	if len(m.Sums) == 1 {
		err = s.disk.putBlock(txn, 0, m.Sums[0], body, now)
	}
	if err == nil {
		err = s.disk.commitAs(txn, m, now, pending)
	}
	if err != nil {
		s.disk.abort(txn)
	}
	return err
}

func (s *Store) stored(prefix string) []StoredFile {
	var out []StoredFile
	for _, n := range s.disk.names(prefix) {
		if vs := s.disk.versions(n); len(vs) > 0 {
			out = append(out, StoredFile{Name: n, Versions: vs})
		}
	}
	return out
}

// repairBlock fetches a good copy of a corrupt block from another replica.
func (s *Store) repairBlock(name string, v Version, idx int) bool {
	key := fmt.Sprintf("%s\x00%s\x00%d", name, v, idx)
	s.mu.Lock()
	if done, busy := s.repairing[key]; busy {
		s.mu.Unlock()
		<-done // someone else is repairing it: wait, then see whether it worked
		_, err := s.disk.readBlock(name, v, idx)
		return err == nil
	}
	done := make(chan struct{})
	s.repairing[key] = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.repairing, key)
		s.mu.Unlock()
		close(done)
	}()
	for _, p := range Rank(name, s.Peers()) {
		if p.Name == s.self.Name {
			continue
		}
		b, err := s.client.getBlock(context.Background(), p, name, v, idx, "")
		if err != nil {
			continue
		}
		if err := s.disk.repairBlock(name, v, idx, b); err == nil {
			s.Logf("repaired block %d of %s version %s from %s", idx, name, v, p.Name)
			return true
		}
	}
	s.Logf("no good replica of block %d of %s version %s to repair from", idx, name, v)
	return false
}

// Verify reads every block this node holds and repairs the corrupt ones. pause is slept
// between blocks to keep a background scrub gentle.
func (s *Store) Verify(ctx context.Context, pause time.Duration) VerifyReport {
	var r VerifyReport
	for _, vs := range s.disk.manifests() {
		for _, m := range vs {
			for i := range m.Sums {
				if ctx.Err() != nil {
					return r
				}
				r.Blocks++
				_, err := s.disk.readBlock(m.Name, m.Version, i)
				if errors.Is(err, errCorrupt) {
					r.Corrupt++
					s.Logf("scrub: %v", err)
					if s.repairBlock(m.Name, m.Version, i) {
						r.Repaired++
					}
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}
	}
	return r
}
