package fd

import (
	"fmt"
	"testing"
	"time"
)

func memCluster(t *testing.T, net *MemNetwork, n int) []*Detector {
	t.Helper()
	var ds []*Detector
	for i := 0; i < n; i++ {
		addr := fmt.Sprintf("n%02d:1", i)
		ep, err := net.Listen(addr, 1024)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Name, cfg.Addr, cfg.Secret = fmt.Sprintf("node%d", i), addr, []byte("s")
		cfg.Introducers = []string{"n00:1", "n01:1"}
		d, err := StartOn(cfg, ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		ds = append(ds, d)
	}
	return ds
}

func aliveCount(d *Detector) int { return len(d.Alive()) }

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDetectorMemNetworkCrashAndLeave(t *testing.T) {
	net := NewMemNetwork(1)
	ds := memCluster(t, net, 6)
	waitFor(t, 5*time.Second, "convergence", func() bool {
		for _, d := range ds {
			if aliveCount(d) != 6 {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // let every monitor hear its predecessors once
	ch, cancel := ds[0].Subscribe(16)
	defer cancel()
	ds[5].Stop()
	start := time.Now()
	waitFor(t, 2*time.Second, "failure detected", func() bool {
		for _, d := range ds[:5] {
			if aliveCount(d) != 5 {
				return false
			}
		}
		return true
	})
	t.Logf("crash detected everywhere after %v", time.Since(start))
	ev := <-ch
	if ev.Member.Name != "node5" {
		t.Fatalf("event %v", ev)
	}
	ds[4].Leave()
	waitFor(t, time.Second, "leave seen", func() bool {
		for _, m := range ds[0].Members() {
			if m.Name == "node4" {
				return m.State == Left
			}
		}
		return false
	})
}

func TestLeaveThenRejoin(t *testing.T) {
	net := NewMemNetwork(5)
	ds := memCluster(t, net, 4)
	waitFor(t, 5*time.Second, "convergence", converged(ds, 4))
	old := ds[2].Self().Incarnation
	if err := ds[2].Leave(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "leave seen", converged([]*Detector{ds[0], ds[1], ds[3]}, 3))
	time.Sleep(time.Second) // stays out: a quiet node is not refuting anything
	if aliveCount(ds[0]) != 3 {
		t.Fatalf("left node came back by itself: %v", ds[0].Members())
	}
	if err := ds[2].Rejoin(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "rejoin", converged(ds, 4))
	if ds[2].Self().Incarnation <= old {
		t.Fatal("rejoin did not raise the incarnation")
	}
}

// TestMemNetworkPartitionAndHeal runs detectors over the in-memory network with delay and
// loss, cuts it in two, and heals it.
func TestMemNetworkPartitionAndHeal(t *testing.T) {
	net := NewMemNetwork(11)
	net.SetDelay(2*time.Millisecond, 3*time.Millisecond)
	net.SetLoss(0.02)
	ds := memCluster(t, net, 6)
	waitFor(t, 5*time.Second, "convergence", converged(ds, 6))
	var a, b []string
	for i, d := range ds {
		if i < 3 {
			a = append(a, d.Self().Addr)
		} else {
			b = append(b, d.Self().Addr)
		}
	}
	net.Partition(a, b)
	waitFor(t, 5*time.Second, "each side alone", func() bool { return converged(ds[:3], 3)() && converged(ds[3:], 3)() })
	net.Heal()
	waitFor(t, 10*time.Second, "healed", converged(ds, 6))
}
