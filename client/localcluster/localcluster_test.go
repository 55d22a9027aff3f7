package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idunno/fd"
)

var bin string

func TestMain(m *testing.M) {
	var err error
	if bin, err = Binary(); err != nil {
		panic(err)
	}
	code := m.Run()
	RemoveBinary()
	os.Exit(code)
}

// logTails prints, for a failed test, the end of each node's log and output (a node that
// died shows why there; the logs go with the test's temporary directory).
func logTails(t *testing.T, c *Cluster) {
	if !t.Failed() {
		return
	}
	for _, n := range c.Nodes() {
		for _, f := range []string{"node.log", "stdout.log"} {
			b, _ := os.ReadFile(filepath.Join(n.DataDir, f))
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			t.Logf("%s %s, last lines:\n%s", n.Name, f, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	}
}

func states(t *testing.T, c *Cluster, observer string) map[string]fd.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ms, err := c.Members(ctx, observer)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fd.State{}
	for _, m := range ms {
		out[m.Name] = m.State
	}
	return out
}

// incarnation returns the named member's incarnation in ms, or 0.
func incarnation(ms []fd.Member, name string) uint64 {
	for _, m := range ms {
		if m.Name == name {
			return m.Incarnation
		}
	}
	return 0
}

// TestUpKillRestartDown drives real processes with real signals: a 4-node cluster converges,
// a SIGKILLed node is seen failed, a restarted one rejoins with a higher incarnation, and
// Down leaves nothing running (a SIGSTOPped node included).
func TestUpKillRestartDown(t *testing.T) {
	dir := t.TempDir()
	c, err := Up(dir, 4, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down() })
	t.Cleanup(func() { logTails(t, c) })
	if o, err := Open(dir); err != nil || o.Secret() != c.Secret() || len(o.Nodes()) != 4 {
		t.Fatalf("Open: %v", err)
	}
	ctx := context.Background()
	before, _ := c.Members(ctx, "node0")
	if err := c.Kill("node2"); err != nil {
		t.Fatal(err)
	}
	if c.Running("node2") {
		t.Fatal("node2 still running after Kill")
	}
	deadline := time.Now().Add(5 * time.Second)
	for states(t, c, "node0")["node2"] != fd.Failed {
		if time.Now().After(deadline) {
			t.Fatalf("node2 not failed at node0: %v", states(t, c, "node0"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Restart("node2"); err != nil {
		t.Fatal(err)
	}
	after, _ := c.Members(ctx, "node0")
	if a, b := incarnation(after, "node2"), incarnation(before, "node2"); a <= b {
		t.Fatalf("restarted node2 incarnation %d not above %d\nbefore: %+v\nafter:  %+v", a, b, before, after)
	}
	if err := c.Stop("node3"); err != nil {
		t.Fatal(err)
	}
	nodes := c.Nodes()
	if err := c.Down(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if procState(n) != 0 {
			t.Fatalf("%s still running after Down", n.Name)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "node0", "node.log"))
	if len(log) == 0 {
		t.Fatal("node0 wrote no log")
	}
}

// TestLossAndStopBurstsNoFalseFailure: real processes with 3% injected loss, one of them
// frozen by SIGSTOP bursts of 100-350 ms; nobody may be declared failed. (The 10-minute run
// is the benchmark.)
func TestLossAndStopBurstsNoFalseFailure(t *testing.T) {
	t.Setenv("IDUNNO_FD_LOSS", "0.03")
	dir := t.TempDir()
	c, err := Up(dir, 5, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down() })
	time.Sleep(500 * time.Millisecond)
	end := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(700 * time.Millisecond)
		if err := c.Stop("node2"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+(i*83)%250) * time.Millisecond)
		if err := c.Cont("node2"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	for _, n := range c.Nodes() {
		log, _ := os.ReadFile(filepath.Join(n.DataDir, "node.log"))
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, ") failed (") {
				t.Errorf("false failure: %s", line)
			}
		}
		for name, st := range states(t, c, n.Name) {
			if st != fd.Alive {
				t.Errorf("%s sees %s %v", n.Name, name, st)
			}
		}
	}
}

// TestThreeSimultaneousKillsConverge: 3 of 7 real processes SIGKILLed at once; every live
// node declares all three failed and the live nodes agree on the view.
func TestThreeSimultaneousKillsConverge(t *testing.T) {
	c, err := Up(t.TempDir(), 7, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down() })
	time.Sleep(300 * time.Millisecond)
	victims := []string{"node2", "node3", "node4"} // ring neighbours: the hard case
	if err := c.Kill(victims...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitConverged(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node0", "node1", "node5", "node6"} {
		st := states(t, c, n)
		for _, v := range victims {
			if st[v] != fd.Failed {
				t.Fatalf("%s sees %s %v", n, v, st[v])
			}
		}
	}
}

// TestThreadsPerNodeShareTheCores: a local cluster's workers (every node but the
// coordinator) divide the machine's cores; a node never gets fewer than one thread.
func TestThreadsPerNodeShareTheCores(t *testing.T) {
	for _, tc := range []struct{ nodes, cpus, want int }{
		{10, 2, 1}, {10, 64, 7}, {3, 8, 4}, {2, 8, 8}, {1, 4, 4}, {5, 1, 1},
	} {
		if got := ThreadsPerNode(tc.nodes, tc.cpus); got != tc.want {
			t.Errorf("%d nodes on %d cores: %d threads each, want %d", tc.nodes, tc.cpus, got, tc.want)
		}
	}
}
