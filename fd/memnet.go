package fd

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// MemNetwork is an in-memory datagram network for tests: endpoints exchange packets through
// it with configurable random loss, delay and partitions, on the real clock. (For a fake
// clock, drive Memberships directly, as Sim does.)
type MemNetwork struct {
	mu        sync.Mutex
	rng       *rand.Rand
	loss      float64
	delay     time.Duration
	jitter    time.Duration
	endpoints map[string]*MemEndpoint
	blocked   map[[2]string]bool // directed links that drop everything
}

// NewMemNetwork returns an empty network whose random choices follow seed.
func NewMemNetwork(seed uint64) *MemNetwork {
	return &MemNetwork{rng: rand.New(rand.NewPCG(seed, 1)), endpoints: map[string]*MemEndpoint{},
		blocked: map[[2]string]bool{}}
}

// SetLoss drops each packet with probability p.
func (n *MemNetwork) SetLoss(p float64) { n.mu.Lock(); n.loss = p; n.mu.Unlock() }

// SetDelay delays each packet by d plus a uniform random jitter in [0, jitter).
func (n *MemNetwork) SetDelay(d, jitter time.Duration) {
	n.mu.Lock()
	n.delay, n.jitter = d, jitter
	n.mu.Unlock()
}

// Partition cuts every link between group a and group b, both ways.
func (n *MemNetwork) Partition(a, b []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.blocked[[2]string{x, y}], n.blocked[[2]string{y, x}] = true, true
		}
	}
}

// Heal removes every partition.
func (n *MemNetwork) Heal() { n.mu.Lock(); clear(n.blocked); n.mu.Unlock() }

// Listen attaches an endpoint at addr; queue bounds its receive buffer.
func (n *MemNetwork) Listen(addr string, queue int) (*MemEndpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.endpoints[addr]; dup {
		return nil, fmt.Errorf("fd: memnet: %s in use", addr)
	}
	e := &MemEndpoint{net: n, addr: addr, ch: make(chan Packet, queue)}
	n.endpoints[addr] = e
	return e, nil
}

func (n *MemNetwork) deliver(from, to string, b []byte) {
	n.mu.Lock()
	dst := n.endpoints[to]
	if dst == nil || n.blocked[[2]string{from, to}] || n.rng.Float64() < n.loss {
		n.mu.Unlock()
		return
	}
	d := n.delay
	if n.jitter > 0 {
		d += time.Duration(n.rng.Int64N(int64(n.jitter)))
	}
	n.mu.Unlock()
	p := Packet{From: from, Data: append([]byte(nil), b...)}
	if d <= 0 {
		dst.put(p)
		return
	}
	time.AfterFunc(d, func() { dst.put(p) })
}

// MemEndpoint is one address on a MemNetwork; it implements Transport.
type MemEndpoint struct {
	net     *MemNetwork
	addr    string
	dropped atomic.Uint64
	mu      sync.Mutex
	closed  bool
	ch      chan Packet
}

// LocalAddr is the endpoint's address.
func (e *MemEndpoint) LocalAddr() string { return e.addr }

// Send hands b to the network.
func (e *MemEndpoint) Send(addr string, b []byte) error {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return fmt.Errorf("fd: memnet: %s closed", e.addr)
	}
	e.net.deliver(e.addr, addr, b)
	return nil
}

func (e *MemEndpoint) put(p Packet) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	select {
	case e.ch <- p:
	default:
		e.dropped.Add(1)
	}
}

// Packets delivers received datagrams.
func (e *MemEndpoint) Packets() <-chan Packet { return e.ch }

// Dropped counts datagrams lost to a full receive queue.
func (e *MemEndpoint) Dropped() uint64 { return e.dropped.Load() }

// Close detaches the endpoint; its address can be listened on again.
func (e *MemEndpoint) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
	e.mu.Unlock()
	e.net.mu.Lock()
	if e.net.endpoints[e.addr] == e {
		delete(e.net.endpoints, e.addr)
	}
	e.net.mu.Unlock()
	return nil
}
