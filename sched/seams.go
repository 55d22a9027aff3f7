package sched

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Peer is a live member as the scheduler needs it.
type Peer struct {
	Name    string
	RPCAddr string
}

// Membership is the live view the scheduler acts on: in a node, the failure detector.
// Alive includes the local node.
type Membership interface {
	Alive() []Peer
	// Known is how many members the view knows: alive, suspected, or failed and not yet
	// forgotten (members that left are not counted). A node that sees at most half of
	// them alive is in a minority (see Scheduler.majority).
	Known() int
	// Failed names the members the view holds failed (and has not forgotten yet).
	Failed() []string
}

// Blobs is the replicated file store (SDFS in a node).
type Blobs interface {
	Get(ctx context.Context, name string) ([]byte, error)
	Put(ctx context.Context, name string, data []byte) error
	// PutResult stores a task's result: bytes that every run of the task computes the
	// same, so a repeated or half-done write leaves the right bytes (in SDFS a one-round,
	// replicated write: sdfs.Client.PutImmutable).
	PutResult(ctx context.Context, name string, data []byte) error
	// GetResult reads what PutResult stored (in SDFS one call to one replica:
	// sdfs.Client.GetImmutable).
	GetResult(ctx context.Context, name string) ([]byte, error)
}

// Executor runs the model over a dataset: in a node, the kernel and the dataset readers.
type Executor interface {
	// Probe checks that the job's model and data exist and fit each other, and returns
	// the number of queries in the dataset.
	Probe(ctx context.Context, spec JobSpec) (queries int, err error)
	// ProbeModel checks that an SDFS file is a model the kernel can run.
	ProbeModel(ctx context.Context, name string) error
	// FLOPsPerQuery returns the job's model's compute per query at the job's batch size,
	// or 0 when it can't tell (the fair-time controller then falls back to other priors).
	FLOPsPerQuery(ctx context.Context, spec JobSpec) float64
	// Run computes the predictions for queries [from, to) in batches of spec.Batch and
	// returns each batch's latency in microseconds.
	Run(ctx context.Context, spec JobSpec, from, to int) ([]Prediction, []int64, error)
}

// Preparer is an Executor that can get a job ready to run (its model loaded, its plan
// built, its data read) apart from running a task of it. A worker then loads a job new to
// it in the background while it runs the tasks of the jobs it has ready, instead of
// holding them behind a load of seconds.
type Preparer interface {
	// Ready reports whether a task of the job would start computing at once.
	Ready(spec JobSpec) bool
	// Prepare gets the job ready; an error is left for the task's Run to report.
	Prepare(ctx context.Context, spec JobSpec) error
	// Loaded lists the models loaded (ModelKey of their jobs), never nil.
	Loaded() []string
}

// StaticMembership is a fake Membership whose view tests set directly.
type StaticMembership struct {
	mu    sync.Mutex
	peers map[string]Peer
	known map[string]bool // every name ever set
}

// NewStaticMembership returns a view holding peers.
func NewStaticMembership(peers ...Peer) *StaticMembership {
	m := &StaticMembership{peers: map[string]Peer{}, known: map[string]bool{}}
	for _, p := range peers {
		m.peers[p.Name], m.known[p.Name] = p, true
	}
	return m
}

// Alive returns the peers in name order.
func (m *StaticMembership) Alive() []Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Peer, 0, len(m.peers))
	for _, p := range m.peers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return NameLess(out[i].Name, out[j].Name) })
	return out
}

// Known counts every peer ever set, alive or not (as a detector remembers failed members).
func (m *StaticMembership) Known() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.known)
}

// Failed names the peers set once and not alive now, in name order.
func (m *StaticMembership) Failed() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for n := range m.known {
		if _, ok := m.peers[n]; !ok {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return NameLess(out[i], out[j]) })
	return out
}

// Set adds or removes a peer.
func (m *StaticMembership) Set(p Peer, alive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.known[p.Name] = true
	if alive {
		m.peers[p.Name] = p
	} else {
		delete(m.peers, p.Name)
	}
}

// MemBlobs is a fake Blobs in memory, shared by every node of an in-process cluster.
type MemBlobs struct {
	mu    sync.Mutex
	files map[string][]byte
	Puts  int
}

// NewMemBlobs returns an empty store.
func NewMemBlobs() *MemBlobs { return &MemBlobs{files: map[string][]byte{}} }

// Get returns a copy of the named file.
func (b *MemBlobs) Get(_ context.Context, name string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.files[name]
	if !ok {
		return nil, fmt.Errorf("memblobs: %s: no such file", name)
	}
	return append([]byte(nil), d...), nil
}

// Put stores a copy of data under name.
func (b *MemBlobs) Put(_ context.Context, name string, data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[name] = append([]byte(nil), data...)
	b.Puts++
	return nil
}

// PutResult is Put (MemBlobs has no replicas to save rounds on).
func (b *MemBlobs) PutResult(ctx context.Context, name string, data []byte) error {
	return b.Put(ctx, name, data)
}

// GetResult is Get.
func (b *MemBlobs) GetResult(ctx context.Context, name string) ([]byte, error) {
	return b.Get(ctx, name)
}

// List returns the names starting with prefix, sorted.
func (b *MemBlobs) List(_ context.Context, prefix string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for n := range b.files {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// FakeExecutor answers query q of a job with a deterministic function of (data, q), taking
// PerQuery of wall time per query, so scheduling can be tested without a kernel.
type FakeExecutor struct {
	Datasets map[string]int           // dataset name -> queries
	Models   map[string]time.Duration // model name -> time per query
	FLOPs    map[string]float64       // model name -> FLOPs per query (missing: unknown)
	Fail     func(spec JobSpec, from int) error
	// ProbeDelay makes Probe take this long (a slow SDFS read), for tests of requests that
	// overlap.
	ProbeDelay time.Duration
}

// Probe checks names against the fake's tables.
func (f *FakeExecutor) Probe(_ context.Context, spec JobSpec) (int, error) {
	time.Sleep(f.ProbeDelay)
	if _, ok := f.Models[spec.Model]; !ok {
		return 0, fmt.Errorf("sched: model %q not found in SDFS", spec.Model)
	}
	n, ok := f.Datasets[spec.Data]
	if !ok {
		return 0, fmt.Errorf("sched: dataset %q not found in SDFS", spec.Data)
	}
	return n, nil
}

// ProbeModel checks the model name.
func (f *FakeExecutor) ProbeModel(_ context.Context, name string) error {
	if _, ok := f.Models[name]; !ok {
		return fmt.Errorf("sched: model %q not found in SDFS", name)
	}
	return nil
}

// FLOPsPerQuery returns the model's entry in FLOPs (0 if none).
func (f *FakeExecutor) FLOPsPerQuery(_ context.Context, spec JobSpec) float64 {
	return f.FLOPs[spec.Model]
}

// Run sleeps PerQuery per query and returns FakePrediction for each.
func (f *FakeExecutor) Run(ctx context.Context, spec JobSpec, from, to int) ([]Prediction, []int64, error) {
	if f.Fail != nil {
		if err := f.Fail(spec, from); err != nil {
			return nil, nil, err
		}
	}
	var preds []Prediction
	var lat []int64
	t0 := time.Now()
	for b := from; b < to; b += spec.Batch {
		e := min(b+spec.Batch, to)
		start := time.Now()
		// Sleep to an absolute schedule, so timer slack on a loaded machine does not add up
		// batch after batch and a query costs what the fake says.
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(time.Until(t0.Add(time.Duration(e-from) * f.Models[spec.Model]))):
		}
		for q := b; q < e; q++ {
			preds = append(preds, FakePrediction(spec.Data, q))
		}
		lat = append(lat, time.Since(start).Microseconds())
	}
	return preds, lat, nil
}

// FakePrediction is FakeExecutor's answer for query q of a dataset.
func FakePrediction(data string, q int) Prediction {
	h := uint32(2166136261)
	for _, c := range []byte(data) {
		h = (h ^ uint32(c)) * 16777619
	}
	h = (h ^ uint32(q)) * 16777619
	return Prediction{Top1: int(h % 10), Score: float32(h%1000) / 997}
}
