package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestClusterAndMembershipCommands drives the command-line contract: cluster up/kill/
// restart/down, members --json, leave and join.
func TestClusterAndMembershipCommands(t *testing.T) {
	bin := testBinary(t)
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "IDUNNO_CLUSTER=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("idunno %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t.Cleanup(func() { run("cluster", "down", "--dir", dir) })
	out := must("cluster", "up", "--nodes", "4", "--dir", dir)
	for _, n := range []string{"node0 ", "node1 ", "node2 ", "node3 "} {
		if !strings.Contains(out, n) {
			t.Fatalf("cluster up output lacks %s:\n%s", n, out)
		}
	}
	states := func() map[string]string {
		t.Helper()
		var ms []map[string]any
		if err := json.Unmarshal([]byte(must("members", "--json", "--cluster", dir)), &ms); err != nil {
			t.Fatal(err)
		}
		st := map[string]string{}
		for _, m := range ms {
			for _, k := range []string{"name", "addr", "incarnation", "state"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("members --json entry lacks %q: %v", k, m)
				}
			}
			st[m["name"].(string)] = m["state"].(string)
		}
		return st
	}
	waitState := func(node, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for states()[node] != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s never became %s: %v", node, want, states())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if st := states(); len(st) != 4 {
		t.Fatalf("members: %v", st)
	}
	must("cluster", "kill", "--dir", dir, "node3")
	waitState("node3", "failed")
	must("cluster", "restart", "--dir", dir, "node3")
	waitState("node3", "alive")
	must("leave", "--cluster", dir, "--node", "node2")
	waitState("node2", "left")
	must("join", "--cluster", dir, "--node", "node2")
	waitState("node2", "alive")
	if _, err := run("members", "--at", "127.0.0.1:1"); err == nil {
		t.Fatal("members --at without IDUNNO_SECRET should fail")
	}
	must("cluster", "down", "--dir", dir)
	if out, err := run("members", "--cluster", dir); err == nil {
		t.Fatalf("members after down answered:\n%s", out)
	}
}
