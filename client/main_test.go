package main

import (
	"bytes"
	"context"
	"errors"
	"os"
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

// Every command answers --help on stdout with exit status 0, before doing anything.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		code, out, errOut := run(c.name, "--help")
		if code != exitOK || !strings.Contains(out, "idunno "+c.usage) {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q", c.name, code, out, errOut)
		}
	}
}

// Asking a command for its flags prints nothing: `idunno job` prints its verbs once.
func TestJobUsageOnce(t *testing.T) {
	bin := testBinary(t)
	for _, args := range [][]string{{"job"}, {"job", "--help"}, {"job", "bogus"}} {
		out, _ := exec.Command(bin, args...).CombinedOutput()
		if n := strings.Count(string(out), "idunno job wait J"); n != 1 {
			t.Errorf("%q printed the job usage %d times:\n%s", args, n, out)
		}
	}
	out, err := exec.Command(bin, "__complete", "job", "--").Output()
	if err != nil || strings.Contains(string(out), "idunno job") {
		t.Errorf("completion of job's flags printed its usage: %q %v", out, err)
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
		{[]string{"job", "add", "--name", "x"}, exitUsage}, // no model: refused before any call
		{[]string{"grep", "--cluster", missing}, exitUsage},
		{[]string{"cluster", "down", "--dir", ""}, exitUsage},
		{[]string{"node", "--log-level", "loud"}, exitUsage},
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

func TestDropUnusedGlobals(t *testing.T) {
	zoo := command{name: "zoo", run: runZoo}
	members := command{name: "members", run: runMembers}
	for _, c := range []struct {
		cmd      command
		in, want []string
	}{
		{zoo, []string{"lenet5", "--cluster", "d", "--out", "x", "--at=h:1", "--json"}, []string{"lenet5", "--out", "x"}},
		{zoo, []string{"lenet5", "--out", "x", "--", "--cluster"}, []string{"lenet5", "--out", "x", "--", "--cluster"}},
		{members, []string{"--cluster", "d", "--json"}, []string{"--cluster", "d", "--json"}},
	} {
		if got := dropUnusedGlobals(c.cmd, c.in); !cmp.Equal(got, c.want) {
			t.Errorf("%s: dropUnusedGlobals(%q) = %q, want %q", c.cmd.name, c.in, got, c.want)
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
		{[]string{"__complete", "members", "--"}, []string{"--json"}},
		{[]string{"__complete", "cluster", "up", "--"}, []string{"--nodes", "--base-port"}},
	} {
		code, out, _ := run(c.args...)
		if code != exitOK {
			t.Errorf("%q: exit %d", c.args, code)
		}
		seen := map[string]bool{}
		for _, l := range strings.Split(out, "\n") {
			word, _, _ := strings.Cut(l, "\t")
			if seen[word] {
				t.Errorf("%q: %q offered twice", c.args, word)
			}
			seen[word] = true
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

// The bash script, sourced in a real bash, completes through the binary.
func TestBashCompletionScript(t *testing.T) {
	const lib = "/usr/share/bash-completion/bash_completion"
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skip("bash-completion is not installed (apt-get install bash-completion; make test-deps installs it)")
	}
	dir := t.TempDir()
	bin := testBinary(t)
	if err := os.Symlink(bin, filepath.Join(dir, "idunno")); err != nil {
		t.Fatal(err)
	}
	script := `source ` + lib + `; source <(idunno completion bash)
t() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
  __start_idunno 2>/dev/null; echo "${COMPREPLY[*]}"; }
t idunno job ad; t idunno job add --ba; t idunno --cluster /tmp mem`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	want := "add\n--batch\nmembers\n"
	if string(out) != want {
		t.Fatalf("completions %q, want %q", out, want)
	}
}

// zshCompletion drives a real interactive zsh on a pseudo-terminal (its zpty module): it
// loads `idunno completion zsh` after compinit, types each line of the test followed by a
// tab, lets the completion settle, and runs the completed line as printf's arguments, so
// that the words come back as <word> lines.
const zshCompletion = `zmodload zsh/zpty || exit 2
zpty z zsh -f -i
zpty -w z 'PS1="%% "; autoload -U compinit; compinit -u -D; source <(idunno completion zsh); echo RE''ADY'
zpty -r z out '*READY*% *' || exit 3
complete() {
  local all chunk i quiet=0
  zpty -n -w z "$1"$'\t'
  for i in {1..200}; do
    sleep 0.05
    if zpty -r -t z chunk; then quiet=0; while zpty -r -t z chunk; do :; done; else (( quiet++ )); fi
    (( quiet >= 6 )) && break
  done
  zpty -n -w z $'\C-a'"printf '<%s>\\n' "$'\r'
  zpty -r z all "*>"$'\r'"*% *" || exit 4
  print -r -- "=== $1"
  print -r -- "$all"
}
complete 'idunno job ad'
complete 'idunno job add --ba'
complete 'idunno --cluster /tmp mem'
zpty -d z
`

// The zsh script, loaded in a real interactive zsh, completes verbs, flags, and commands
// after a global flag through the binary.
func TestZshCompletionScript(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("zsh is not installed (apt-get install zsh; make test-deps installs it)")
	}
	dir := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(dir, "idunno")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "complete.zsh")
	if err := os.WriteFile(script, []byte(zshCompletion), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, zsh, "-f", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "HOME="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zsh: %v\n%q", err, out)
	}
	cases := strings.Split(string(out), "=== ")[1:]
	want := [][]string{{"<idunno>", "<job>", "<add>"}, {"<job>", "<add>", "<--batch>"}, {"<--cluster>", "</tmp>", "<members>"}}
	if len(cases) != len(want) {
		t.Fatalf("zsh ran %d of %d completions:\n%q", len(cases), len(want), out)
	}
	for i, c := range cases {
		for _, w := range want[i] {
			if !strings.Contains(c, w+"\r\n") {
				t.Errorf("zsh completion %q: no %s in the completed line:\n%q", strings.SplitN(c, "\n", 2)[0], w, c)
			}
		}
	}
}
