package fd

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Detector runs a Membership over a Transport on the real clock. Its run goroutine drives
// the protocol; mu guards the Membership so readers can take snapshots.
type Detector struct {
	cfg   Config
	tr    Transport
	codec *Codec

	mu sync.Mutex
	m  *Membership

	subMu  sync.Mutex
	subs   map[int]chan Event
	nextID int

	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	packetsSent, packetsRecv, bytesSent, bytesRecv, sendErrors atomic.Uint64
	malformed, badMAC, otherCluster, eventsDropped, replayed   atomic.Uint64
}

// Stats are the detector's counters since Start.
type Stats struct {
	PacketsSent, PacketsRecv uint64
	BytesSent, BytesRecv     uint64
	SendErrors               uint64
	DroppedMalformed         uint64 // undecodable packets
	DroppedBadMAC            uint64 // right cluster tag, wrong HMAC
	DroppedOtherCluster      uint64 // another cluster's tag
	DroppedReplay            uint64 // authentic, but seen before or from an earlier life of its sender
	DroppedQueue             uint64 // receive queue full
	EventsDropped            uint64 // events not delivered to a full subscriber
	InjectedLoss             uint64 // outgoing packets dropped by Config.InjectLoss
}

// Start binds the transport (UDP on cfg.Addr unless transport is given through StartOn)
// and starts the protocol.
func Start(cfg Config) (*Detector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr, err := listenUDP(cfg.Addr, cfg.RecvQueue, cfg.ThreadNice)
	if err != nil {
		return nil, err
	}
	return StartOn(cfg, tr)
}

// Injected counts packets dropped by Config.InjectLoss.
func (d *Detector) injected() uint64 {
	if l, ok := d.tr.(*LossyTransport); ok {
		return l.Injected()
	}
	return 0
}

// StartOn starts the protocol over an existing transport (for example a MemNetwork endpoint).
// The detector owns tr and closes it on Stop.
func StartOn(cfg Config, tr Transport) (*Detector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		tr.Close()
		return nil, err
	}
	if cfg.InjectLoss > 0 {
		tr = NewLossy(tr, cfg.InjectLoss, uint64(time.Now().UnixNano()))
	}
	session := cfg.Incarnation
	if session == 0 {
		session = uint64(time.Now().UnixMicro())
	}
	d := &Detector{cfg: cfg, tr: tr, codec: NewCodecSession(cfg.Secret, session), subs: map[int]chan Event{},
		quit: make(chan struct{}), done: make(chan struct{})}
	now := time.Now()
	d.m = NewMembership(cfg, now, uint64(now.UnixNano()))
	go d.run()
	return d, nil
}

func (d *Detector) run() {
	defer close(d.done)
	if d.cfg.ThreadNice != 0 {
		if err := lockThreadNice(d.cfg.ThreadNice); err != nil {
			d.cfg.Logf("cannot run the detector at nice %d: %v (running at the process's priority)", d.cfg.ThreadNice, err)
		} else {
			d.cfg.Logf("detector threads at nice %d", d.cfg.ThreadNice)
		}
	}
	tick := time.NewTicker(d.cfg.TickInterval)
	defer tick.Stop()
	d.step(func(m *Membership, now time.Time) { m.Tick(now) })
	for {
		select {
		case <-d.quit:
			return
		case <-tick.C:
			d.step(func(m *Membership, now time.Time) { m.Tick(now) })
		case p, ok := <-d.tr.Packets():
			if !ok {
				return
			}
			d.receive(p)
		}
	}
}

func (d *Detector) receive(p Packet) {
	d.packetsRecv.Add(1)
	d.bytesRecv.Add(uint64(len(p.Data)))
	msg, err := d.codec.Decode(p.Data)
	switch {
	case err == nil:
		d.step(func(m *Membership, now time.Time) { m.Receive(now, msg) })
	case errors.Is(err, ErrOtherCluster):
		d.otherCluster.Add(1)
	case errors.Is(err, ErrBadMAC):
		d.badMAC.Add(1)
	case errors.Is(err, ErrReplay):
		d.replayed.Add(1)
	default:
		d.malformed.Add(1)
	}
}

// step runs f on the membership, then sends its messages and publishes its events.
func (d *Detector) step(f func(*Membership, time.Time)) {
	d.mu.Lock()
	f(d.m, time.Now())
	out, events := d.m.Ready()
	d.mu.Unlock()
	d.sendAll(out)
	d.publish(events)
}

func (d *Detector) sendAll(out []Envelope) {
	for i := range out {
		b := d.codec.Encode(&out[i].Msg)
		if err := d.tr.Send(out[i].To, b); err != nil {
			d.sendErrors.Add(1)
			continue
		}
		d.packetsSent.Add(1)
		d.bytesSent.Add(uint64(len(b)))
	}
}

func (d *Detector) publish(events []Event) {
	if len(events) == 0 {
		return
	}
	d.subMu.Lock()
	defer d.subMu.Unlock()
	for _, e := range events {
		for _, ch := range d.subs {
			select {
			case ch <- e:
			default:
				d.eventsDropped.Add(1)
			}
		}
	}
}

// Members returns every known member, self included, sorted by address. Failed and left
// members stay listed for Config.RetainDead.
func (d *Detector) Members() []Member {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Members()
}

// Alive returns the members currently alive or suspect (suspects may still be fine), self included.
func (d *Detector) Alive() []Member {
	var out []Member
	for _, m := range d.Members() {
		if m.State == Alive || m.State == Suspect {
			out = append(out, m)
		}
	}
	return out
}

// Self returns this node's own record.
func (d *Detector) Self() Member {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.Self()
}

// Subscribe returns a channel of membership events with room for buffer events, and a
// function that cancels the subscription. The detector never waits for a subscriber: when
// the channel is full, new events are dropped (and counted in Stats.EventsDropped), so a
// subscriber that may fall behind should treat Members as the truth and events as hints.
func (d *Detector) Subscribe(buffer int) (<-chan Event, func()) {
	if buffer < 1 {
		buffer = 1
	}
	ch := make(chan Event, buffer)
	d.subMu.Lock()
	id := d.nextID
	d.nextID++
	d.subs[id] = ch
	d.subMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			d.subMu.Lock()
			delete(d.subs, id)
			d.subMu.Unlock()
		})
	}
}

// Stats returns the counters.
func (d *Detector) Stats() Stats {
	return Stats{
		PacketsSent: d.packetsSent.Load(), PacketsRecv: d.packetsRecv.Load(),
		BytesSent: d.bytesSent.Load(), BytesRecv: d.bytesRecv.Load(), SendErrors: d.sendErrors.Load(),
		DroppedMalformed: d.malformed.Load(), DroppedBadMAC: d.badMAC.Load(),
		DroppedOtherCluster: d.otherCluster.Load(), DroppedReplay: d.replayed.Load(), DroppedQueue: d.tr.Dropped(),
		EventsDropped: d.eventsDropped.Load(), InjectedLoss: d.injected(),
	}
}

// Leave tells every member this node is leaving; the detector then stays quiet (it sends
// nothing and ignores what arrives) until Rejoin or Stop.
func (d *Detector) Leave() error {
	select {
	case <-d.done:
		return fmt.Errorf("fd: detector stopped")
	default:
	}
	d.mu.Lock()
	d.m.Leave(time.Now())
	out, events := d.m.Ready()
	d.mu.Unlock()
	d.sendAll(out)
	time.Sleep(5 * time.Millisecond)
	d.sendAll(out) // once more: a lost leave would cost a failure detection instead
	d.publish(events)
	return nil
}

// Rejoin brings a node that left back into the cluster through its introducers, with a new
// incarnation.
func (d *Detector) Rejoin() error {
	select {
	case <-d.done:
		return fmt.Errorf("fd: detector stopped")
	default:
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.m.leaving {
		return fmt.Errorf("fd: already a member")
	}
	cfg := d.cfg
	now := time.Now()
	cfg.Incarnation = max(uint64(now.UnixMicro()), d.m.Self().Incarnation+1)
	d.m = NewMembership(cfg, now, uint64(now.UnixNano()))
	d.cfg.Logf("rejoining with incarnation %d", cfg.Incarnation)
	return nil
}

// Stop stops the protocol and closes the transport without telling anyone (like a crash,
// as far as other members can tell). It is safe to call more than once.
func (d *Detector) Stop() {
	d.stopOnce.Do(func() {
		close(d.quit)
		d.tr.Close()
		<-d.done
		d.subMu.Lock()
		for id, ch := range d.subs {
			close(ch)
			delete(d.subs, id)
		}
		d.subMu.Unlock()
	})
}
