package fd

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"

	"idunno/netfault"
)

// Packet is one datagram received by a Transport.
type Packet struct {
	From string // source address as the network saw it (not trusted; the message names its sender)
	Data []byte
}

// Transport moves datagrams. Implementations: UDPTransport (real sockets) and MemNetwork
// endpoints (in memory, with loss, delay and partitions).
type Transport interface {
	LocalAddr() string
	// Send queues b for addr without blocking for long; delivery is best effort.
	Send(addr string, b []byte) error
	// Packets delivers received datagrams. It is closed by Close.
	Packets() <-chan Packet
	// Dropped counts datagrams discarded because the receive queue was full.
	Dropped() uint64
	Close() error
}

// UDPTransport is a Transport over one UDP socket.
type UDPTransport struct {
	conn    *net.UDPConn
	ch      chan Packet
	dropped atomic.Uint64
	wg      sync.WaitGroup

	mu    sync.Mutex
	addrs map[string]*net.UDPAddr // resolved destinations
}

// ListenUDP binds addr and starts reading. queue bounds the packets buffered for the reader.
func ListenUDP(addr string, queue int) (*UDPTransport, error) { return listenUDP(addr, queue, 0) }

// listenUDP is ListenUDP with the reader's thread at nice (see Config.ThreadNice; 0: as is).
func listenUDP(addr string, queue, nice int) (*UDPTransport, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("fd: resolve %s: %w", addr, err)
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("fd: listen %s: %w", addr, err)
	}
	c.SetReadBuffer(1 << 20)
	t := &UDPTransport{conn: c, ch: make(chan Packet, queue), addrs: map[string]*net.UDPAddr{}}
	t.wg.Add(1)
	go t.read(nice)
	return t, nil
}

func (t *UDPTransport) read(nice int) {
	defer t.wg.Done()
	defer close(t.ch)
	if nice != 0 {
		lockThreadNice(nice) // best effort: the detector's loop reports a failure
	}
	buf := make([]byte, 64<<10)
	for {
		n, from, err := t.conn.ReadFromUDP(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return // closed
		}
		if netfault.Cut() {
			continue
		}
		p := Packet{From: from.String(), Data: append([]byte(nil), buf[:n]...)}
		select {
		case t.ch <- p:
		default:
			t.dropped.Add(1)
		}
	}
}

// LocalAddr is the bound address.
func (t *UDPTransport) LocalAddr() string { return t.conn.LocalAddr().String() }

// Send writes one datagram to addr.
func (t *UDPTransport) Send(addr string, b []byte) error {
	if netfault.Cut() {
		return nil // lost on the way
	}
	t.mu.Lock()
	ua := t.addrs[addr]
	t.mu.Unlock()
	if ua == nil {
		var err error
		if ua, err = net.ResolveUDPAddr("udp", addr); err != nil {
			return fmt.Errorf("fd: resolve %s: %w", addr, err)
		}
		t.mu.Lock()
		if len(t.addrs) > 4096 {
			clear(t.addrs)
		}
		t.addrs[addr] = ua
		t.mu.Unlock()
	}
	_, err := t.conn.WriteToUDP(b, ua)
	return err
}

// Packets delivers received datagrams.
func (t *UDPTransport) Packets() <-chan Packet { return t.ch }

// Dropped counts datagrams lost to a full receive queue.
func (t *UDPTransport) Dropped() uint64 { return t.dropped.Load() }

// Close closes the socket and waits for the reader.
func (t *UDPTransport) Close() error {
	err := t.conn.Close()
	t.wg.Wait()
	return err
}

// LossyTransport drops a fraction of outgoing packets: fault injection for tests and
// benchmarks on real sockets (tc netem is not available everywhere).
type LossyTransport struct {
	Transport
	loss     float64
	mu       sync.Mutex
	rng      *rand.Rand
	injected atomic.Uint64
}

// NewLossy wraps tr so that each Send is dropped with probability loss.
func NewLossy(tr Transport, loss float64, seed uint64) *LossyTransport {
	return &LossyTransport{Transport: tr, loss: loss, rng: rand.New(rand.NewPCG(seed, 3))}
}

// Send drops b with the configured probability, else sends it.
func (t *LossyTransport) Send(addr string, b []byte) error {
	t.mu.Lock()
	drop := t.rng.Float64() < t.loss
	t.mu.Unlock()
	if drop {
		t.injected.Add(1)
		return nil
	}
	return t.Transport.Send(addr, b)
}

// Injected counts the packets dropped on purpose.
func (t *LossyTransport) Injected() uint64 { return t.injected.Load() }
