package fd

import (
	"testing"
	"time"
)

func newSim(n int, seed uint64, loss float64, bootstrap bool) *Sim {
	return NewSim(SimConfig{N: n, Seed: seed, Loss: loss, Latency: time.Millisecond, Jitter: 2 * time.Millisecond, Bootstrap: bootstrap})
}

// requireView checks that every up node sees exactly want (index -> state) for the listed nodes.
func requireView(t *testing.T, s *Sim, want map[int]State) {
	t.Helper()
	for _, n := range s.Nodes {
		if !n.Up || n.Paused {
			continue
		}
		v := s.View(n.Index)
		for i, st := range want {
			if i != n.Index && v[i] != st {
				t.Fatalf("at %v node %d sees node %d %v, want %v", s.Now, n.Index, i, v[i], st)
			}
		}
	}
}

func allAlive(s *Sim, except ...int) map[int]State {
	w := map[int]State{}
	for i := range s.Nodes {
		w[i] = Alive
	}
	for _, i := range except {
		delete(w, i)
	}
	return w
}

// detectionTimes returns, for every live node, how long after crash it declared target failed.
func detectionWorst(t *testing.T, s *Sim, crashed []int, at time.Time) time.Duration {
	t.Helper()
	isCrashed := map[int]bool{}
	for _, c := range crashed {
		isCrashed[c] = true
	}
	var worst time.Duration
	for _, n := range s.Nodes {
		if isCrashed[n.Index] {
			continue
		}
		for _, c := range crashed {
			when, ok := s.FirstEvent(n.Index, c, FailedDetected, at)
			if !ok {
				t.Fatalf("node %d never declared node %d failed", n.Index, c)
			}
			worst = max(worst, when.Sub(at))
		}
	}
	return worst
}

func TestSimJoinFromScratch(t *testing.T) {
	s := newSim(10, 1, 0, false)
	s.Run(3 * time.Second)
	requireView(t, s, allAlive(s))
}

func TestSimOneCrashDetectedEverywhereWithinASecond(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		s := newSim(10, seed, 0, true)
		s.Run(2 * time.Second)
		at := s.Now
		s.Crash(int(seed % 10))
		s.Run(2 * time.Second)
		if w := detectionWorst(t, s, []int{int(seed % 10)}, at); w > time.Second {
			t.Fatalf("seed %d: detection took %v", seed, w)
		}
		want := allAlive(s, int(seed%10))
		want[int(seed%10)] = Failed
		requireView(t, s, want)
	}
}

func TestSimThreeSimultaneousCrashes(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		s := newSim(10, seed, 0.03, true)
		s.Run(2 * time.Second)
		// Adjacent crashes are the hard case: they remove monitors of each other.
		c := []int{int(seed % 10), int(seed+1) % 10, int(seed+2) % 10}
		at := s.Now
		for _, i := range c {
			s.Crash(i)
		}
		s.Run(3 * time.Second)
		if w := detectionWorst(t, s, c, at); w > time.Second {
			t.Fatalf("seed %d: detection took %v", seed, w)
		}
		want := allAlive(s, c...)
		for _, i := range c {
			want[i] = Failed
		}
		requireView(t, s, want)
	}
}

// TestSimNoFalseFailureUnderLossAndStarvation runs 10 simulated minutes with 3% loss while
// node 4 is frozen for bursts of 100-450 ms every second or two. (A freeze much longer than
// about SuspectTimeout+SuspicionTimeout-HeartbeatInterval is indistinguishable from a crash.)
func TestSimNoFalseFailureUnderLossAndStarvation(t *testing.T) {
	for _, seed := range []uint64{42, 7, 1234} {
		s := newSim(10, seed, 0.03, true)
		s.Run(time.Second)
		end := s.Now.Add(10 * time.Minute)
		for s.Now.Before(end) {
			s.Run(time.Duration(1000+s.rng.IntN(1000)) * time.Millisecond)
			s.Pause(4)
			s.Run(time.Duration(100+s.rng.IntN(350)) * time.Millisecond)
			s.Resume(4)
		}
		s.Run(2 * time.Second)
		suspicions := 0
		for _, e := range s.Events {
			switch e.Event.Kind {
			case FailedDetected, LeftVoluntarily:
				t.Fatalf("seed %d: false %v at %v", seed, e, e.At)
			case Suspected:
				suspicions++
			}
		}
		t.Logf("seed %d: suspicions raised and refuted: %d", seed, suspicions)
		requireView(t, s, allAlive(s))
	}
}

func TestSimSuspicionRefutedByIncarnation(t *testing.T) {
	s := newSim(5, 3, 0, true)
	s.Run(time.Second)
	inc := s.Nodes[2].M.Self().Incarnation
	s.Pause(2)
	s.Run(600 * time.Millisecond) // longer than SuspectTimeout, shorter than both timeouts
	s.Resume(2)
	s.Run(time.Second)
	if _, ok := s.FirstEvent(0, 2, Suspected, time.Time{}); !ok {
		t.Fatal("node 2 was never suspected; the test does not exercise refutation")
	}
	if got := s.Nodes[2].M.Self().Incarnation; got <= inc {
		t.Fatalf("incarnation %d not raised above %d", got, inc)
	}
	requireView(t, s, allAlive(s))
}

func TestSimRestartRejoinsWithHigherIncarnation(t *testing.T) {
	s := newSim(6, 4, 0, true)
	s.Run(time.Second)
	old := s.Nodes[5].M.Self().Incarnation
	s.Crash(5)
	s.Run(2 * time.Second)
	s.Restart(5)
	s.Run(2 * time.Second)
	requireView(t, s, allAlive(s))
	for _, m := range s.Nodes[0].M.Members() {
		if m.Addr == SimAddr(5) && m.Incarnation <= old {
			t.Fatalf("node 5 incarnation %d not above %d", m.Incarnation, old)
		}
	}
}

func TestSimVoluntaryLeave(t *testing.T) {
	s := newSim(6, 5, 0, true)
	s.Run(time.Second)
	at := s.Now
	s.Leave(3)
	s.Run(100 * time.Millisecond)
	want := allAlive(s, 3)
	want[3] = Left
	requireView(t, s, want)
	s.Run(3 * time.Second)
	for _, e := range s.Events {
		if e.Event.Kind == FailedDetected && e.At.After(at) {
			t.Fatalf("leave turned into failure: %v", e)
		}
	}
}

func TestSimDeterministic(t *testing.T) {
	run := func() int {
		s := newSim(10, 9, 0.05, false)
		s.Run(5 * time.Second)
		s.Crash(3)
		s.Run(2 * time.Second)
		return len(s.Events)*1000 + int(s.Nodes[0].PacketsSent%1000)
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two runs differ: %d vs %d", a, b)
	}
}

// TestSimPausedNodeLearnsFailureItMissed is the chaos-test bug: node 6 is frozen, its ring
// successor node 7 crashes meanwhile, and everyone else declares 7 failed and retires that
// news from its piggyback queue before 6 wakes. Nobody watches 7 on 6's behalf and nobody
// gossips to 6 any more, so only anti-entropy can tell it. Without it, 6 keeps 7 alive,
// heartbeats 7 instead of its real 4th successor (node 1), and node 1, which watches 6,
// suspects it every ~0.9 s forever.
func TestSimPausedNodeLearnsFailureItMissed(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		s := newSim(10, seed, 0, true)
		s.Run(2 * time.Second)
		s.Pause(6)
		s.Run(time.Second)
		s.Crash(7)
		// Failed everywhere within ~1 s; the broadcast then retires after
		// RetransmitMult*ceil(log2(n+1)) = 12 heartbeats (1.2 s). Wait far beyond both.
		s.Run(10 * time.Second)
		for i := range s.Nodes {
			if i != 6 && i != 7 && s.View(i)[7] != Failed {
				t.Fatalf("seed %d: node %d sees node 7 %v before the resume", seed, i, s.View(i)[7])
			}
		}
		resumed := s.Now
		s.Resume(6)
		s.Run(3 * time.Second)
		learned, ok := s.FirstEvent(6, 7, FailedDetected, resumed)
		if !ok {
			t.Fatalf("seed %d: node 6 still sees node 7 %v 3 s after waking", seed, s.View(6)[7])
		}
		// Once 6's ring is right, its real watchers hear it: no more suspicion of 6.
		s.Run(10 * time.Second)
		for _, e := range s.Events {
			if e.Event.Kind == Suspected && e.Event.Member.Addr == SimAddr(6) && e.At.After(learned.Add(500*time.Millisecond)) {
				t.Fatalf("seed %d: node %d suspected node 6 at +%v, after it learned of 7's failure at +%v",
					seed, e.Observer, e.At.Sub(resumed), learned.Sub(resumed))
			}
		}
		want := allAlive(s, 7)
		want[7] = Failed
		requireView(t, s, want)
		t.Logf("seed %d: node 6 learned of node 7's failure %v after waking", seed, learned.Sub(resumed))
	}
}

// TestSimStaleViewCatchesUpBySync: node 6 missed node 7's failure (as if every packet
// carrying it had been lost) and nothing tells it that it was out, so it is the periodic
// sync, not the one after a pause, that must bring it up to date.
func TestSimStaleViewCatchesUpBySync(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		s := newSim(10, seed, 0, true)
		s.Run(2 * time.Second)
		s.Crash(7)
		s.Run(5 * time.Second)
		m := s.Nodes[6].M
		e := m.members[SimAddr(7)]
		if e.State != Failed {
			t.Fatalf("seed %d: node 6 sees node 7 %v", seed, e.State)
		}
		e.State = Alive // forget the failure
		m.rebuildRing(s.Now)
		forgot := s.Now
		s.Run(5 * time.Second)
		learned, ok := s.FirstEvent(6, 7, FailedDetected, forgot)
		if !ok || learned.Sub(forgot) > 3*time.Second {
			t.Fatalf("seed %d: node 6 sees node 7 %v; learned at +%v", seed, s.View(6)[7], learned.Sub(forgot))
		}
		want := allAlive(s, 7)
		want[7] = Failed
		requireView(t, s, want)
		for _, e := range s.Events {
			if e.Event.Kind == FailedDetected && e.Event.Member.Addr != SimAddr(7) {
				t.Fatalf("seed %d: false failure %v", seed, e)
			}
		}
		t.Logf("seed %d: node 6 learned of node 7's failure again %v later", seed, learned.Sub(forgot))
	}
}

// TestSimLongPauseDoesNotReviveForgottenMember: node 6 is paused longer than the others
// keep dead members (RetainDead), and node 7 crashes meanwhile. When 6 wakes with its stale
// view (7 alive), its records must not bring 7 back to the members that forgot it; 6 itself,
// which is alive, comes back.
func TestSimLongPauseDoesNotReviveForgottenMember(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		cfg := DefaultConfig()
		cfg.RetainDead = 5 * time.Second
		s := NewSim(SimConfig{N: 10, Seed: seed, Latency: time.Millisecond, Jitter: 2 * time.Millisecond, Bootstrap: true, Config: cfg})
		s.Run(2 * time.Second)
		s.Pause(6)
		s.Run(time.Second)
		s.Crash(7)
		s.Run(20 * time.Second) // 6 and 7 failed everywhere, then forgotten
		for i := range s.Nodes {
			if _, ok := s.View(i)[7]; ok && i != 6 && i != 7 {
				t.Fatalf("seed %d: node %d still lists node 7 (%v) after RetainDead", seed, i, s.View(i)[7])
			}
		}
		resumed := s.Now
		s.Resume(6)
		s.Run(10 * time.Second)
		for _, e := range s.Events {
			if e.At.After(resumed) && e.Event.Member.Addr == SimAddr(7) && (e.Event.Kind == Joined || e.Event.Kind == Refuted) {
				t.Fatalf("seed %d: node %d took the forgotten node 7 back as alive at +%v", seed, e.Observer, e.At.Sub(resumed))
			}
		}
		for i := range s.Nodes {
			if i == 7 {
				continue
			}
			v := s.View(i)
			if st, ok := v[7]; ok && st != Failed && st != Left {
				t.Fatalf("seed %d: node %d sees the crashed node 7 %v", seed, i, st)
			}
			if i != 6 && v[6] != Alive {
				t.Fatalf("seed %d: node %d sees the resumed node 6 %v, want alive", seed, i, v[6])
			}
		}
	}
}
