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
