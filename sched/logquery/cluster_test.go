package logquery_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"idunno/client/localcluster"
	"idunno/fd"
)

func TestMain(m *testing.M) {
	code := m.Run()
	localcluster.RemoveBinary()
	os.Exit(code)
}

// idunnoBin returns $IDUNNO_BIN or an idunno binary built once for this test run.
func idunnoBin(t *testing.T) string {
	t.Helper()
	b, err := localcluster.Binary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type buildError struct{ out string }

func (e *buildError) Error() string { return "build idunno: " + e.out }

func grep(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	return grepEnv(t, bin, nil, args...)
}

func grepEnv(t *testing.T, bin string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"grep"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestGrepLocalCluster runs `idunno grep` against real node processes: every live node's
// matching lines come back prefixed with its name and counted; --node narrows the search;
// an unknown node is an error; a killed node is left out once it is declared failed.
func TestGrepLocalCluster(t *testing.T) {
	bin := idunnoBin(t)
	dir := t.TempDir()
	c, err := localcluster.Up(dir, 3, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Down() })

	out, err := grep(t, bin, `node: started`, "--cluster", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, n := range []string{"node0", "node1", "node2"} {
		// The node's own start line, prefixed with its name, then its count.
		if !regexp.MustCompile(`(?m)^`+n+`: \S+ `+n+` node: started`).MatchString(out) ||
			!strings.Contains(out, "\n"+n+": 1 matching lines\n") {
			t.Fatalf("no start line or count for %s in:\n%s", n, out)
		}
	}
	if !strings.Contains(out, "total: 3 matching lines on 3 nodes") {
		t.Fatalf("no total in:\n%s", out)
	}

	// --at: one node's address and the secret from the environment reach every node.
	out, err = grepEnv(t, bin, []string{"IDUNNO_SECRET=" + c.Secret()}, "node: started", "--at", c.RPCAddr("node2"))
	if err != nil || !strings.Contains(out, "total: 3 matching lines on 3 nodes") {
		t.Fatalf("--at: %v\n%s", err, out)
	}
	if out, err = grepEnv(t, bin, []string{"IDUNNO_SECRET=wrong"}, "started", "--at", c.RPCAddr("node2")); err == nil {
		t.Fatalf("--at with a wrong secret succeeded:\n%s", out)
	}

	out, err = grep(t, bin, "--node", "node1", "--cluster", dir, `started|joined`)
	if err != nil || strings.Contains(out, "node0:") || !strings.Contains(out, "node1: ") {
		t.Fatalf("--node node1: %v\n%s", err, out)
	}
	if out, err = grep(t, bin, "x", "--node", "node9", "--cluster", dir); err == nil || !strings.Contains(out, `no node "node9" in the cluster`) {
		t.Fatalf("unknown node: %v\n%s", err, out)
	}
	if out, err = grep(t, bin, "(", "--cluster", dir); err == nil || !strings.Contains(out, "logquery: bad pattern") {
		t.Fatalf("bad pattern: %v\n%s", err, out)
	}

	if err := c.Kill("node2"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms, err := c.Members(t.Context(), "node0")
		failed := false
		for _, m := range ms {
			failed = failed || m.Name == "node2" && m.State == fd.Failed
		}
		if err == nil && failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node2 not declared failed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err = grep(t, bin, "node: started", "--cluster", dir)
	if err != nil || strings.Contains(out, "node2") || !strings.Contains(out, "total: 2 matching lines on 2 nodes") {
		t.Fatalf("after kill: %v\n%s", err, out)
	}
}
