package logquery

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idunno/rpc"
)

var secret = []byte("test-secret")

// serve starts a log.grep server on loopback for a log file with the given content.
func serve(t *testing.T, name, content string) Node {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.log")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(secret)
	s.Logf = func(string, ...any) {}
	Register(s, path, name)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return Node{Name: name, RPCAddr: ln.Addr().String()}
}

func TestGrepAcrossNodes(t *testing.T) {
	nodes := []Node{
		serve(t, "node1", "a task 1 started\nb nothing\nc task 2 started\r\n"),
		serve(t, "node0", "x task 7 started\n"),
		serve(t, "node2", "no newline at the end: task 9 started"),
		serve(t, "node3", ""),
	}
	// A node in the list that is down answers with an error, not a failure of the whole call.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	nodes = append(nodes, Node{Name: "node4", RPCAddr: dead})

	c := rpc.NewClient(secret)
	defer c.Close()
	res, err := Grep(context.Background(), c, nodes, Request{Pattern: `task \d+ started`, TimeoutMS: 2000})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"node0": {"x task 7 started"},
		"node1": {"a task 1 started", "c task 2 started"},
		"node2": {"no newline at the end: task 9 started"},
		"node3": nil,
	}
	if len(res) != 5 {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if r.Node != fmt.Sprintf("node%d", i) {
			t.Fatalf("result %d is %s: not sorted by name", i, r.Node)
		}
		if r.Node == "node4" {
			if r.Err == nil || !strings.HasPrefix(r.Err.Error(), "logquery: node4") {
				t.Fatalf("dead node: %v", r.Err)
			}
			continue
		}
		if r.Err != nil || r.Count != len(want[r.Node]) || strings.Join(r.Lines, "|") != strings.Join(want[r.Node], "|") {
			t.Errorf("%s: %q count %d err %v, want %q", r.Node, r.Lines, r.Count, r.Err, want[r.Node])
		}
	}
}

func TestGrepBounds(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 25000; i++ {
		fmt.Fprintf(&b, "line %d match\n", i)
	}
	b.WriteString(strings.Repeat("y", 200<<10) + " match\n") // one very long line, cut before "match"
	n := serve(t, "node0", b.String())
	c := rpc.NewClient(secret)
	defer c.Close()
	ctx := context.Background()

	res, err := Grep(ctx, c, []Node{n}, Request{Pattern: "match"})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res[0].Err)
	}
	if r := res[0]; r.Count != 25000 || len(r.Lines) != MaxMatches || !r.Truncated || r.Lines[9999] != "line 9999 match" {
		t.Fatalf("count %d, %d lines, truncated %v", r.Count, len(r.Lines), r.Truncated)
	}
	res, _ = Grep(ctx, c, []Node{n}, Request{Pattern: "^y+ match$|line 3 ", Max: 5})
	if r := res[0]; r.Count != 1 || len(r.Lines) != 1 || r.Lines[0] != "line 3 match" {
		// The long line is cut to MaxLineBytes, so " match$" no longer matches it.
		t.Fatalf("long line: count %d lines %d", r.Count, len(r.Lines))
	}
	res, _ = Grep(ctx, c, []Node{n}, Request{Pattern: "^y+", Max: 5})
	if r := res[0]; r.Count != 1 || len(r.Lines[0]) != MaxLineBytes {
		t.Fatalf("long line not cut: count %d", r.Count)
	}

	for _, bad := range []string{"", "(", strings.Repeat("a", MaxPattern+1)} {
		if _, err := Grep(ctx, c, []Node{n}, Request{Pattern: bad}); err == nil || !strings.HasPrefix(err.Error(), "logquery: ") {
			t.Errorf("pattern %.10q: %v", bad, err)
		}
	}
	// The server checks too: a client that skips the check gets a remote error.
	resp, err := c.Call(ctx, n.RPCAddr, &rpc.Message{Method: Method, Args: []byte(`{"pattern":"("}`)})
	if err == nil || !strings.Contains(err.Error(), "logquery: bad pattern") {
		t.Fatalf("server accepted a bad pattern: %v %v", resp, err)
	}
}

func TestSearchDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.log")
	os.WriteFile(path, []byte(strings.Repeat("some log line\n", 100000)), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Search(ctx, path, Request{Pattern: "line"})
	if err == nil || !strings.Contains(err.Error(), "search stopped") {
		t.Fatalf("cancelled search: %v", err)
	}
	start := time.Now()
	res, err := Search(context.Background(), path, Request{Pattern: "line", TimeoutMS: 5000})
	if err != nil || res.Count != 100000 {
		t.Fatalf("search: %v %d", err, res.Count)
	}
	if _, err := Search(context.Background(), filepath.Join(t.TempDir(), "missing.log"), Request{Pattern: "x"}); err == nil {
		t.Fatal("missing log file searched")
	}
	t.Logf("100000 lines in %v", time.Since(start))
}
