package fd

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"
)

// Sim runs n Memberships on a fake clock over a simulated network with latency, jitter,
// random loss and partitions. It is deterministic for a given seed: scenario tests and the
// large-cluster benchmark use it.
type Sim struct {
	Now    time.Time
	Nodes  []*SimNode
	Events []SimEvent // every event every node reported, in time order

	cfg     SimConfig
	rng     *rand.Rand
	q       simQueue
	seq     uint64
	byAddr  map[string]*SimNode
	blocked map[[2]string]bool
}

// SimConfig shapes a simulation.
type SimConfig struct {
	N         int
	Seed      uint64
	Loss      float64       // probability that a packet is lost
	Latency   time.Duration // one-way delay
	Jitter    time.Duration // extra uniform random delay in [0, Jitter)
	Config    Config        // protocol config (timing); identity fields are set per node
	Bootstrap bool          // start with every node knowing every other (skip the joins)
	// Trace, if set, receives every node's log lines.
	Trace func(at time.Time, node int, line string)
}

// SimNode is one simulated node.
type SimNode struct {
	Index                  int
	Addr                   string
	M                      *Membership
	Up, Paused             bool
	PacketsSent, BytesSent uint64
	PacketsByKind          [maxKind + 1]uint64 // PacketsSent by MsgKind
	pending                []*Message          // delivered while paused
	incarnation            uint64
}

// SimEvent is one event as one node saw it.
type SimEvent struct {
	At       time.Time
	Observer int
	Event    Event
}

type simItem struct {
	at   time.Time
	seq  uint64
	node int
	msg  *Message // nil: a tick
}

type simQueue []simItem

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simItem)) }
func (q *simQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// NewSim creates the nodes ("sim000", addresses "10.0.0.i:7000") and starts them. Nodes 0-2
// are the introducers.
func NewSim(cfg SimConfig) *Sim {
	cfg.Config = cfg.Config.withDefaults()
	s := &Sim{Now: time.Unix(1_700_000_000, 0), cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 7)),
		byAddr: map[string]*SimNode{}, blocked: map[[2]string]bool{}}
	for i := 0; i < cfg.N; i++ {
		n := &SimNode{Index: i, Addr: SimAddr(i)}
		s.Nodes = append(s.Nodes, n)
		s.byAddr[n.Addr] = n
	}
	for _, n := range s.Nodes {
		s.boot(n)
	}
	if cfg.Bootstrap {
		all := make([]Member, cfg.N)
		for i, n := range s.Nodes {
			all[i] = n.M.Self()
		}
		for _, n := range s.Nodes {
			n.M.seed(s.Now, all)
		}
	}
	return s
}

// SimAddr is node i's address in a Sim.
func SimAddr(i int) string { return fmt.Sprintf("10.0.%d.%d:7000", i/256, i%256) }

func (s *Sim) boot(n *SimNode) {
	c := s.cfg.Config
	c.Name, c.Addr, c.Secret = fmt.Sprintf("sim%03d", n.Index), n.Addr, []byte("sim")
	c.Introducers = []string{SimAddr(0), SimAddr(1), SimAddr(2)}
	n.incarnation += 1000
	c.Incarnation = n.incarnation
	c.Logf = nil
	if s.cfg.Trace != nil {
		idx := n.Index
		c.Logf = func(format string, args ...any) { s.cfg.Trace(s.Now, idx, fmt.Sprintf(format, args...)) }
	}
	n.M = NewMembership(c, s.Now, s.cfg.Seed*1000003+uint64(n.Index)+n.incarnation)
	n.Up, n.Paused, n.pending = true, false, nil
	// Ticks start at a random phase so nodes do not act in lockstep.
	s.push(simItem{at: s.Now.Add(time.Duration(s.rng.Int64N(int64(c.TickInterval)))), node: n.Index})
}

func (s *Sim) push(it simItem) {
	s.seq++
	it.seq = s.seq
	heap.Push(&s.q, it)
}

// Run advances the simulation by d.
func (s *Sim) Run(d time.Duration) {
	end := s.Now.Add(d)
	for s.q.Len() > 0 && !s.q[0].at.After(end) {
		it := heap.Pop(&s.q).(simItem)
		s.Now = it.at
		n := s.Nodes[it.node]
		if it.msg == nil {
			if !n.Up {
				continue
			}
			s.push(simItem{at: s.Now.Add(s.cfg.Config.TickInterval), node: n.Index})
			if n.Paused {
				continue
			}
			n.M.Tick(s.Now)
		} else {
			if !n.Up {
				continue
			}
			if n.Paused {
				if len(n.pending) < s.cfg.Config.RecvQueue {
					n.pending = append(n.pending, it.msg)
				}
				continue
			}
			n.M.Receive(s.Now, it.msg)
		}
		s.flush(n)
	}
	s.Now = end
}

func (s *Sim) flush(n *SimNode) {
	out, events := n.M.Ready()
	for _, e := range events {
		s.Events = append(s.Events, SimEvent{At: s.Now, Observer: n.Index, Event: e})
	}
	for i := range out {
		msg := &out[i].Msg
		n.PacketsSent++
		n.PacketsByKind[msg.Kind]++
		n.BytesSent += uint64(EncodedSize(msg))
		dst := s.byAddr[out[i].To]
		if dst == nil || s.blocked[[2]string{n.Addr, dst.Addr}] || s.rng.Float64() < s.cfg.Loss {
			continue
		}
		d := s.cfg.Latency
		if s.cfg.Jitter > 0 {
			d += time.Duration(s.rng.Int64N(int64(s.cfg.Jitter)))
		}
		s.push(simItem{at: s.Now.Add(d), node: dst.Index, msg: msg})
	}
}

// Crash stops node i silently.
func (s *Sim) Crash(i int) { s.Nodes[i].Up = false }

// Restart boots a crashed node again at the same address with a higher incarnation.
func (s *Sim) Restart(i int) { s.boot(s.Nodes[i]) }

// Pause freezes node i (like SIGSTOP): it neither ticks nor reads; packets queue for it.
func (s *Sim) Pause(i int) { s.Nodes[i].Paused = true }

// Resume unfreezes node i: it reads what queued, then ticks as usual.
func (s *Sim) Resume(i int) {
	n := s.Nodes[i]
	n.Paused = false
	n.M.Tick(s.Now)
	for _, m := range n.pending {
		n.M.Receive(s.Now, m)
	}
	n.pending = nil
	s.flush(n)
}

// Leave makes node i leave voluntarily; it is down afterwards.
func (s *Sim) Leave(i int) {
	n := s.Nodes[i]
	n.M.Leave(s.Now)
	s.flush(n)
	n.Up = false
}

// Partition cuts every link between the nodes of a and those of b.
func (s *Sim) Partition(a, b []int) {
	for _, x := range a {
		for _, y := range b {
			s.blocked[[2]string{SimAddr(x), SimAddr(y)}] = true
			s.blocked[[2]string{SimAddr(y), SimAddr(x)}] = true
		}
	}
}

// Heal removes every partition.
func (s *Sim) Heal() { clear(s.blocked) }

// SetLoss changes the loss probability.
func (s *Sim) SetLoss(p float64) { s.cfg.Loss = p }

// View is node i's opinion of every member, by node index.
func (s *Sim) View(i int) map[int]State {
	out := map[int]State{}
	for _, m := range s.Nodes[i].M.Members() {
		if n := s.byAddr[m.Addr]; n != nil {
			out[n.Index] = m.State
		}
	}
	return out
}

// FirstEvent returns when observer first reported kind about node target at or after
// since, and whether it did.
func (s *Sim) FirstEvent(observer, target int, kind EventKind, since time.Time) (time.Time, bool) {
	addr := SimAddr(target)
	for _, e := range s.Events {
		if e.Observer == observer && e.Event.Kind == kind && e.Event.Member.Addr == addr && !e.At.Before(since) {
			return e.At, true
		}
	}
	return time.Time{}, false
}
