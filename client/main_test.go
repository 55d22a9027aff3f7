package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = dispatchTo(args, &o, &e)
	return code, o.String(), e.String()
}

func TestHelpOnStdoutWithExitZero(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // on stdout
	}{
		{[]string{"put", "--help"}, []string{"idunno put LOCAL NAME", "--cluster string", "--at string"}},
		{[]string{"put", "-h"}, []string{"idunno put LOCAL NAME"}},
		{[]string{"put", "a", "--help"}, []string{"idunno put LOCAL NAME"}},
		{[]string{"help", "get"}, []string{"idunno get NAME LOCAL", "--cluster"}},
		{[]string{"job", "add", "--help"}, []string{"idunno job add", "--batch int"}},
		{[]string{"job", "--help"}, []string{"inference jobs: add"}},
		{[]string{"cluster", "--help"}, []string{"--nodes int", "--dir string"}},
		{[]string{"node", "--help"}, []string{"--base-port int", "--data-dir string"}},
		{[]string{"--help"}, []string{"Available Commands:", "members", "completion"}},
		{[]string{"help"}, []string{"Available Commands:"}},
	} {
		code, out, errOut := run(c.args...)
		if code != exitOK {
			t.Errorf("%q: exit %d, want 0 (stderr %q)", c.args, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: stdout lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run("--version")
	if code != exitOK || !strings.HasPrefix(out, "idunno ") || len(strings.TrimSpace(out)) <= len("idunno") {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
	version = "v9.8.7"
	defer func() { version = "" }()
	if _, out, _ := run("--version"); out != "idunno v9.8.7\n" {
		t.Fatalf("--version with -X main.version: %q", out)
	}
}

func TestExitCodes(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, exitUsage},
		{[]string{"bogus-command"}, exitUsage},
		{[]string{"put", "onlyone"}, exitUsage},
		{[]string{"put", "--bogus", "a", "b"}, exitUsage},
		{[]string{"job", "frobnicate"}, exitUsage},
		{[]string{"job", "wait", "--timeout", "notaduration", "j"}, exitUsage},
		{[]string{"completion", "fish"}, exitUsage},
		{[]string{"members", "--cluster", missing}, exitFailure},
		{[]string{"get", "x", "y", "--cluster", missing}, exitFailure},
	} {
		if code, _, errOut := run(c.args...); code != c.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, c.want, errOut)
		}
	}
	// Exit statuses of the error kinds commands return.
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailure},
		{usageErrorf("usage: idunno x"), exitUsage},
		{timeoutErrorf("job j not complete after 1s"), exitTimeout},
	} {
		cmd := command{name: "x", usage: "x", run: func([]string) error { return c.err }}
		var o, e bytes.Buffer
		if got := runCommand(cmd, nil, &o, &e); got != c.want {
			t.Errorf("error %v: exit %d, want %d", c.err, got, c.want)
		}
	}
}

// The global flags work before or after the command's name (and its verb): each form must
// reach the command, which then fails to open the named cluster directory.
func TestGlobalFlagPositions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nocluster")
	for _, args := range [][]string{
		{"--cluster", dir, "members"},
		{"--cluster=" + dir, "members"},
		{"members", "--cluster", dir},
		{"--json", "--cluster", dir, "members"},
		{"--cluster", dir, "job", "list", "--json"},
		{"--json", "--cluster", dir, "job", "list"},
		{"job", "list", "--cluster", dir},
		{"--cluster", dir, "put", "a", "b"},
		{"put", "a", "--cluster", dir, "b"},
		{"--cluster", dir, "serve", "m", "--sdfs", "f"},
	} {
		code, _, errOut := run(args...)
		if code != exitFailure || !strings.Contains(errOut, dir) {
			t.Errorf("%q: exit %d, stderr %q; want exit 1 naming %s", args, code, errOut, dir)
		}
	}
}

func TestHoistFirstWord(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"list"}, []string{"list"}},
		{[]string{"--json", "list", "x"}, []string{"list", "--json", "x"}},
		{[]string{"--cluster", "d", "--at=h:1", "add", "--name", "j"}, []string{"add", "--cluster", "d", "--at=h:1", "--name", "j"}},
		{[]string{"--name", "j", "add"}, []string{"--name", "j", "add"}}, // not a global flag: untouched
		{[]string{"--cluster", "d"}, []string{"--cluster", "d"}},
	} {
		if got := hoistFirstWord(c.in); !cmp.Equal(got, c.want) {
			t.Errorf("hoistFirstWord(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCompletion(t *testing.T) {
	code, bash, _ := run("completion", "bash")
	if code != exitOK || !strings.Contains(bash, "__start_idunno") {
		t.Fatalf("completion bash: exit %d, %.200q", code, bash)
	}
	code, zsh, _ := run("completion", "zsh")
	if code != exitOK || !strings.HasPrefix(zsh, "#compdef idunno") {
		t.Fatalf("completion zsh: exit %d, %.200q", code, zsh)
	}
	// What the scripts ask the binary at each TAB.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "mem"}, []string{"members"}},
		{[]string{"__complete", "job", ""}, []string{"add", "wait", "stats"}},
		{[]string{"__complete", "job", "add", "--ba"}, []string{"--batch"}},
		{[]string{"__complete", "put", "--"}, []string{"--cluster", "--at"}},
		{[]string{"__complete", "cluster", "up", "--"}, []string{"--nodes", "--base-port"}},
	} {
		code, out, _ := run(c.args...)
		if code != exitOK {
			t.Errorf("%q: exit %d", c.args, code)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: no %q in %q", c.args, w, out)
			}
		}
	}
}

// top into a pipe prints one plain snapshot and exits, with no terminal escape codes.
func TestTopNotTerminal(t *testing.T) {
	bin := testBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "top", "--cluster", filepath.Join(t.TempDir(), "none"))
	out, err := cmd.Output() // stdout is a pipe
	if ctx.Err() != nil {
		t.Fatal("top kept running with its output in a pipe")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure {
		t.Fatalf("top without a cluster: %v, want exit 1", err)
	}
	if bytes.ContainsRune(out, '\x1b') {
		t.Fatalf("escape codes in a pipe: %q", out)
	}
	if !strings.Contains(string(out), "no coordinator") {
		t.Fatalf("no snapshot in %q", out)
	}
}
