package fd

import (
	"fmt"
	"time"
)

// Config gathers every knob of the failure detector. Start from DefaultConfig and set the
// node's identity (Name, Addr, RPCAddr, HTTPAddr), Secret and Introducers.
//
// Timing with the defaults: each node heartbeats its Monitors ring successors every
// HeartbeatInterval. A monitor that hears nothing from a predecessor for SuspectTimeout
// marks it suspect and tells everyone; anyone still holding the suspicion SuspicionTimeout
// later marks it failed. A crash is therefore declared failed about
// SuspectTimeout + SuspicionTimeout (+ one heartbeat and a tick) after the node's last
// heartbeat: under 0.85 s. A live node refutes a suspicion by raising its incarnation, so a
// node that is silent for up to ~SuspectTimeout+SuspicionTimeout (a stop, a GC pause, a burst
// of lost packets) survives.
//
// Piggybacking reaches a node only while an update is being retransmitted; a node that
// was paused, cut off or unlucky with losses for that whole window would keep a stale view
// for good. So every SyncInterval each node also sends one random live member a digest of
// its view (200-250 bytes), and that member answers with its records wherever the digests
// differ: any missed update reaches a running node within a few SyncIntervals.
type Config struct {
	Name     string // node name (node0, ...)
	Addr     string // UDP address of this node's detector, host:port (the member's identity)
	RPCAddr  string // advertised to other members, not used by fd
	HTTPAddr string // advertised to other members, not used by fd

	Secret      []byte   // cluster secret: every packet carries an HMAC-SHA256 keyed by it
	Introducers []string // fd addresses to join through; any one that answers is enough

	// Incarnation is this run's starting incarnation. Zero means the start time in
	// microseconds, so a restarted node always comes back above its previous life.
	Incarnation uint64

	TickInterval      time.Duration // how often the detector drives the protocol (default 20ms)
	HeartbeatInterval time.Duration // heartbeat period to each monitor (default 100ms)
	Monitors          int           // ring successors each node heartbeats (default 4; >= failures tolerated + 1)
	SuspectTimeout    time.Duration // silence from a predecessor before suspecting it (default 450ms)
	SuspicionTimeout  time.Duration // suspicion left unrefuted before declaring failure (default 300ms)
	PauseThreshold    time.Duration // a gap between ticks longer than this means we were paused: restart silence timers (default 200ms)
	JoinRetry         time.Duration // while alone, how often to ask the introducers again (default 500ms)
	RetainDead        time.Duration // how long failed and left members stay listed (default 60s)
	ForgetTombstones  time.Duration // how long a dropped member's last record still refuses stale alive records of it (default 10m)
	DeadProbeInterval time.Duration // how often to heartbeat one failed member, to heal partitions (default 1s)
	SyncInterval      time.Duration // how often to compare views with one random live member (anti-entropy; default 1s)
	Fanout            int           // members each fresh update is pushed to at once (default 3)
	RetransmitMult    int           // piggyback each update RetransmitMult*ceil(log2(n+1)) times (default 3)
	MaxPiggyback      int           // updates carried per packet (default 12)
	RecvQueue         int           // packets buffered between socket and protocol (default 1024)

	// ThreadNice is the nice value of the detector's two threads (the protocol loop and the
	// socket reader), each locked to its goroutine: -10 lets heartbeats, timers and
	// refutations run ahead of the node's compute on a saturated machine without raising
	// the whole process. Lowering nice needs CAP_SYS_NICE; without it the detector logs why
	// and runs at the process's priority. Zero (the default) leaves the threads alone.
	ThreadNice int

	// InjectLoss drops this fraction of outgoing packets on purpose (fault injection for
	// tests and benchmarks; nodes read it from IDUNNO_FD_LOSS). Zero in production.
	InjectLoss float64

	// Logf receives joins, leaves, suspicions, failures and refutations. Nil discards.
	Logf func(format string, args ...any)
}

// DefaultConfig returns the documented defaults (see Config). They meet: a crash marked
// failed at every live member within 1 s (p99), and no false failure with 3% packet loss and
// a node stopped for bursts of up to ~0.45 s (measured: benchmarks/README.md, fd).
func DefaultConfig() Config {
	return Config{
		TickInterval:      20 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		Monitors:          4,
		SuspectTimeout:    450 * time.Millisecond,
		SuspicionTimeout:  300 * time.Millisecond,
		PauseThreshold:    200 * time.Millisecond,
		JoinRetry:         500 * time.Millisecond,
		RetainDead:        60 * time.Second,
		ForgetTombstones:  10 * time.Minute,
		DeadProbeInterval: time.Second,
		SyncInterval:      time.Second,
		Fanout:            3,
		RetransmitMult:    3,
		MaxPiggyback:      12,
		RecvQueue:         1024,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	durs := []struct{ v, def *time.Duration }{
		{&c.TickInterval, &d.TickInterval}, {&c.HeartbeatInterval, &d.HeartbeatInterval},
		{&c.SuspectTimeout, &d.SuspectTimeout}, {&c.SuspicionTimeout, &d.SuspicionTimeout},
		{&c.PauseThreshold, &d.PauseThreshold}, {&c.JoinRetry, &d.JoinRetry}, {&c.RetainDead, &d.RetainDead}, {&c.ForgetTombstones, &d.ForgetTombstones},
		{&c.DeadProbeInterval, &d.DeadProbeInterval}, {&c.SyncInterval, &d.SyncInterval},
	}
	for _, x := range durs {
		if *x.v <= 0 {
			*x.v = *x.def
		}
	}
	ints := []struct{ v, def *int }{
		{&c.Monitors, &d.Monitors}, {&c.Fanout, &d.Fanout}, {&c.RetransmitMult, &d.RetransmitMult},
		{&c.MaxPiggyback, &d.MaxPiggyback}, {&c.RecvQueue, &d.RecvQueue},
	}
	for _, x := range ints {
		if *x.v <= 0 {
			*x.v = *x.def
		}
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("fd: config: Addr is empty")
	case len(c.Name) > maxString || len(c.Addr) > maxString || len(c.RPCAddr) > maxString || len(c.HTTPAddr) > maxString:
		return fmt.Errorf("fd: config: name or address longer than %d bytes", maxString)
	case len(c.Secret) == 0:
		return fmt.Errorf("fd: config: no cluster secret")
	}
	return nil
}
