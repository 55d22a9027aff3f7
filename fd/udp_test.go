package fd

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// udpCluster starts n detectors on real UDP sockets on 127.0.0.1.
func udpCluster(t *testing.T, n int, secret string, loss float64) []*Detector {
	t.Helper()
	var trs []*UDPTransport
	for i := 0; i < n; i++ {
		tr, err := ListenUDP("127.0.0.1:0", 1024)
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
	}
	var ds []*Detector
	for i, tr := range trs {
		cfg := DefaultConfig()
		cfg.Name, cfg.Addr, cfg.Secret, cfg.InjectLoss = fmt.Sprintf("node%d", i), tr.LocalAddr(), []byte(secret), loss
		cfg.Introducers = []string{trs[0].LocalAddr(), trs[1].LocalAddr()}
		d, err := StartOn(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		ds = append(ds, d)
	}
	return ds
}

func converged(ds []*Detector, want int) func() bool {
	return func() bool {
		for _, d := range ds {
			if aliveCount(d) != want {
				return false
			}
		}
		return true
	}
}

func TestUDPCrashDetectedAndRejoin(t *testing.T) {
	ds := udpCluster(t, 5, "s3cret", 0)
	waitFor(t, 5*time.Second, "convergence", converged(ds, 5))
	victim := ds[3].Self()
	ds[3].Stop()
	// A generous bound: this asserts detection happens, the benchmark measures how fast.
	waitFor(t, 3*time.Second, "failure detected", converged(append(ds[:3:3], ds[4]), 4))

	// Restart at the same address: it rejoins with a higher incarnation.
	tr, err := ListenUDP(victim.Addr, 1024)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name, cfg.Addr, cfg.Secret = victim.Name, victim.Addr, []byte("s3cret")
	cfg.Introducers = []string{"127.0.0.1:1", ds[0].Self().Addr} // first introducer is down
	d, err := StartOn(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	ds[3] = d
	waitFor(t, 5*time.Second, "rejoin", converged(ds, 5))
	if d.Self().Incarnation <= victim.Incarnation {
		t.Fatalf("incarnation %d not above %d", d.Self().Incarnation, victim.Incarnation)
	}
}

// TestUDPForeignAndGarbagePacketsDropped: a node of another cluster never gets in, and
// garbage is counted and ignored.
func TestUDPForeignAndGarbagePacketsDropped(t *testing.T) {
	ds := udpCluster(t, 3, "ours", 0)
	waitFor(t, 5*time.Second, "convergence", converged(ds, 3))
	tr, err := ListenUDP("127.0.0.1:0", 64)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name, cfg.Addr, cfg.Secret = "intruder", tr.LocalAddr(), []byte("theirs")
	cfg.Introducers = []string{ds[0].Self().Addr}
	intruder, err := StartOn(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Stop()
	conn, err := net.Dial("udp", ds[1].Self().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	good := NewCodec([]byte("ours")).Encode(sampleMessage())
	good[len(good)-1] ^= 0xff
	for _, p := range [][]byte{[]byte("hello"), make([]byte, 2000), good} {
		conn.Write(p)
	}
	waitFor(t, 3*time.Second, "drops counted", func() bool {
		s0, s1 := ds[0].Stats(), ds[1].Stats()
		return s0.DroppedOtherCluster > 0 && s1.DroppedMalformed >= 2 && s1.DroppedBadMAC >= 1
	})
	time.Sleep(300 * time.Millisecond)
	for _, d := range ds {
		if aliveCount(d) != 3 {
			t.Fatalf("%s sees %v", d.Self().Name, d.Members())
		}
	}
	if aliveCount(intruder) != 1 {
		t.Fatalf("intruder got in: %v", intruder.Members())
	}
}

// TestUDPLossInjectedNoFalseFailure runs 6 nodes with 3% injected loss for a few seconds.
// (The long run is the benchmark; the simulation covers ten minutes.)
func TestUDPLossInjectedNoFalseFailure(t *testing.T) {
	ds := udpCluster(t, 6, "lossy", 0.03)
	waitFor(t, 5*time.Second, "convergence", converged(ds, 6))
	ch, cancel := ds[0].Subscribe(64)
	defer cancel()
	time.Sleep(4 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Kind == FailedDetected {
				t.Fatalf("false failure %v", e)
			}
			continue
		default:
		}
		break
	}
	// summed over the cluster: one node sends some tens of packets in these seconds, and
	// at 3% none of them dropped is a few per cent likely (CI saw it once)
	var lost uint64
	for _, d := range ds {
		lost += d.Stats().InjectedLoss
	}
	if lost == 0 {
		t.Fatal("no loss was injected")
	}
}

func TestSubscriberThatNeverReadsDoesNotBlock(t *testing.T) {
	net := NewMemNetwork(3)
	ds := memCluster(t, net, 4)
	_, cancel := ds[0].Subscribe(1) // never read
	defer cancel()
	waitFor(t, 5*time.Second, "convergence", converged(ds, 4))
	ds[3].Stop()
	waitFor(t, 3*time.Second, "failure detected", converged(ds[:3], 3))
	if ds[0].Stats().EventsDropped == 0 {
		t.Fatal("expected dropped events for the full subscriber")
	}
}
