package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/client/localcluster"
)

// TestSDFSCommands runs the SDFS commands as a user would, against a 5-node local cluster.
func TestSDFSCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := testBinary(t)
	dir := t.TempDir()
	lc, err := localcluster.Up(filepath.Join(dir, "cluster"), 5, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Down() })
	run := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--cluster", lc.Dir())...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if (err == nil) != wantOK {
			t.Fatalf("idunno %v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	local := filepath.Join(dir, "a.txt")
	os.WriteFile(local, []byte("first\n"), 0o644)
	run(true, "put", local, "docs/a.txt")
	os.WriteFile(local, []byte("second\n"), 0o644)
	run(true, "put", local, "docs/a.txt")

	stdin := exec.Command(bin, "put", "-", "docs/stdin.txt", "--cluster", lc.Dir())
	stdin.Stdin = strings.NewReader("from stdin")
	if out, err := stdin.CombinedOutput(); err != nil {
		t.Fatalf("put -: %v %s", err, out)
	}
	stdout := exec.Command(bin, "get", "docs/stdin.txt", "-", "--cluster", lc.Dir())
	if out, err := stdout.Output(); err != nil || string(out) != "from stdin" {
		t.Fatalf("get -: %q %v", out, err)
	}
	got := filepath.Join(dir, "got.txt")
	run(true, "get", "docs/a.txt", got)
	if b, _ := os.ReadFile(got); string(b) != "second\n" {
		t.Fatalf("get wrote %q", b)
	}
	if out := run(true, "ls", "docs/a.txt"); strings.Count(out, "node") != 8 { // 4 nodes x 2 versions
		t.Fatalf("ls NAME:\n%s", out)
	}
	if out := run(true, "ls", "--prefix", "docs/"); !strings.Contains(out, "docs/a.txt") {
		t.Fatalf("ls --prefix:\n%s", out)
	}
	if out := run(true, "store", "--node", "node0"); !strings.Contains(out, "node0 holds") {
		t.Fatalf("store:\n%s", out)
	}
	vers := filepath.Join(dir, "versions.txt")
	run(true, "get-versions", "docs/a.txt", "2", vers)
	b, _ := os.ReadFile(vers)
	if s := string(b); strings.Index(s, "second") > strings.Index(s, "first") || strings.Count(s, "==== sdfs docs/a.txt version") != 2 {
		t.Fatalf("get-versions:\n%s", s)
	}

	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "x.png"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(tree, "sub", "y.png"), []byte("yy"), 0o644)
	run(true, "putdir", tree, "imgs")
	back := filepath.Join(dir, "back")
	run(true, "getdir", "imgs", back)
	if b, _ := os.ReadFile(filepath.Join(back, "sub", "y.png")); string(b) != "yy" {
		t.Fatalf("getdir: %q", b)
	}

	progressOnTerminalAndInPipe(t, bin, lc.Dir(), dir)

	run(true, "delete", "docs/a.txt")
	if out := run(false, "get", "docs/a.txt", got); !strings.Contains(out, "sdfs: no such file") {
		t.Fatalf("get after delete: %s", out)
	}
	if out := run(false, "put", local, "../escape"); !strings.Contains(out, "sdfs: bad file name") {
		t.Fatalf("bad name: %s", out)
	}
	if out := run(false, "get-versions", "docs/a.txt", "zero", vers); !strings.Contains(out, "positive integer") {
		t.Fatalf("bad N: %s", out)
	}
}

// progressOnTerminalAndInPipe puts and gets a 32 MiB file (and a folder holding it) on a
// real terminal, then the file in a pipe: on the terminal (a pseudo-terminal from
// util-linux's script) the commands draw a bar, redrawn in place and cleared for the
// summary line; with stderr in a pipe they write no escape code, only their summary line.
func progressOnTerminalAndInPipe(t *testing.T, bin, cluster, dir string) {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script (util-linux) to give the command a terminal: progress on a terminal not checked")
	}
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	onTerminal := func(args ...string) string {
		t.Helper()
		line := bin
		for _, a := range append(args, "--cluster", cluster) {
			line += " '" + a + "'"
		}
		cmd := exec.Command(script, "-q", "-e", "-c", line, "/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("on a terminal, idunno %v: %v\n%q", args, err, out)
		}
		return string(out)
	}
	back := filepath.Join(dir, "big.back")
	bigDir := filepath.Join(dir, "bigdir")
	if err := os.MkdirAll(filepath.Join(bigDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(big, filepath.Join(bigDir, "sub", "big.bin")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		summary string // the line that follows the cleared bar
	}{
		{[]string{"put", big, "big/on-tty.bin"}, "put " + big + " as big/on-tty.bin version "},
		{[]string{"get", "big/on-tty.bin", back}, "got big/on-tty.bin version "},
		{[]string{"putdir", bigDir, "bigdir"}, "put 1 files (33554432 bytes) under bigdir/"},
		{[]string{"getdir", "bigdir", filepath.Join(dir, "bigdir.back")}, "got 1 files (33554432 bytes) from bigdir/"},
	} {
		out := onTerminal(c.args...)
		label := c.args[0] + " " + c.args[1]
		if !strings.Contains(out, "\r\033[K"+label+" [") || !strings.Contains(out, "MB/s") {
			t.Errorf("idunno %v on a terminal drew no progress bar:\n%q", c.args, out)
		}
		if !strings.Contains(out, "\r\033[K"+c.summary) {
			t.Errorf("idunno %v on a terminal did not clear the bar for its summary:\n%q", c.args, out)
		}
	}
	if st, err := os.Stat(back); err != nil || st.Size() != 32<<20 {
		t.Fatalf("get on a terminal wrote %v %v", st, err)
	}
	summary := map[string]string{"put": "put " + big + " as big/in-pipe.bin version ", "get": "got big/in-pipe.bin version "}
	for _, args := range [][]string{{"put", big, "big/in-pipe.bin"}, {"get", "big/in-pipe.bin", back}} {
		cmd := exec.Command(bin, append(args, "--cluster", cluster)...)
		out, err := cmd.CombinedOutput() // stdout and stderr are pipes
		if err != nil {
			t.Fatalf("idunno %v: %v\n%s", args, err, out)
		}
		if bytes.ContainsRune(out, '\x1b') || bytes.ContainsRune(out, '\r') {
			t.Errorf("idunno %v in a pipe wrote terminal control characters:\n%q", args, out)
		}
		if !bytes.Contains(out, []byte(summary[args[0]])) {
			t.Errorf("idunno %v in a pipe printed no summary:\n%q", args, out)
		}
	}
}
