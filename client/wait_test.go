package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"idunno/client/localcluster"
	"idunno/sched/dataset"
)

// TestJobWait: against a live cluster, `job add --wait` returns when its job is complete,
// `job wait --timeout` on a job that cannot finish gives up with exit status 3, and the
// global flags work before the command.
func TestJobWait(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := testBinary(t)
	dir := t.TempDir()
	lc, run := cliCluster(t, bin, dir)
	// A small job (lenet5, 8 queries) and a slower one (resnet18 on 1x32x32, 256 queries).
	small, big := filepath.Join(dir, "small.npy"), filepath.Join(dir, "big.npy")
	for _, c := range [][]string{
		{"zoo", "lenet5", "--out", filepath.Join(dir, "lenet.onnx")},
		{"zoo", "resnet18", "--input-shape", "1,32,32", "--classes", "10", "--out", filepath.Join(dir, "r18.onnx")},
	} {
		if code, out := run(c...); code != 0 {
			t.Fatalf("%v: %d %s", c, code, out)
		}
	}
	for _, d := range []struct {
		path  string
		shape []int
	}{{small, []int{8, 1, 28, 28}}, {big, []int{256, 1, 32, 32}}} {
		var buf bytes.Buffer
		n := d.shape[0] * d.shape[2] * d.shape[3]
		if err := dataset.WriteNPY(&buf, d.shape, make([]float32, n)); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(d.path, buf.Bytes(), 0o644)
	}
	for _, c := range [][]string{
		{"put", filepath.Join(dir, "lenet.onnx"), "lenet.onnx"}, {"put", filepath.Join(dir, "r18.onnx"), "r18.onnx"},
		{"put", small, "small.npy"}, {"put", big, "big.npy"}, {"inference", "start"},
	} {
		if code, out := run(c...); code != 0 {
			t.Fatalf("%v: %d %s", c, code, out)
		}
	}
	// job add --wait returns when the job is complete.
	code, out := run("job", "add", "--name", "quick", "--model", "lenet.onnx", "--data", "small.npy", "--batch", "2", "--wait", "--timeout", "2m")
	if code != 0 || !strings.Contains(out, "job quick added") || !strings.Contains(out, "job quick complete: 8 queries") {
		t.Fatalf("job add --wait: exit %d, %s", code, out)
	}
	// A job paused by the end of the inference phase cannot complete: wait gives up, exit 3.
	if code, out := run("job", "add", "--name", "slow", "--model", "r18.onnx", "--data", "big.npy", "--batch", "2"); code != 0 {
		t.Fatalf("job add: %d %s", code, out)
	}
	if code, out := run("inference", "stop"); code != 0 {
		t.Fatalf("inference stop: %d %s", code, out)
	}
	code, out = run("job", "wait", "slow", "--timeout", "1s")
	if strings.Contains(out, "job slow complete") {
		t.Fatalf("the slow job completed before the phase stopped (a faster machine than expected): %s", out)
	}
	if code != exitTimeout || !strings.Contains(out, "not complete after 1s") {
		t.Fatalf("job wait: exit %d, %s", code, out)
	}
	if strings.ContainsAny(out, "\x1b\r") {
		t.Fatalf("job wait in a pipe wrote terminal control characters: %q", out)
	}
	// On a terminal (a pseudo-terminal from util-linux's script), the same wait draws a
	// progress bar of the job's queries, and still exits 3.
	if script, err := exec.LookPath("script"); err == nil {
		cmd := exec.Command(script, "-q", "-e", "-c", "'"+bin+"' --cluster '"+lc.Dir()+"' job wait slow --timeout 1s", "/dev/null")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitTimeout {
			t.Fatalf("job wait on a terminal: %v, want exit %d\n%q", err, exitTimeout, out)
		}
		if !bytes.Contains(out, []byte("\r\033[Kjob slow [")) || !bytes.Contains(out, []byte("/256 queries")) {
			t.Fatalf("job wait on a terminal drew no progress bar: %q", out)
		}
	} else {
		t.Log("no script (util-linux): job wait on a terminal not checked")
	}
	if code, out := run("job", "wait", "nosuch", "--timeout", "1s"); code != exitFailure {
		t.Fatalf("job wait on no job: exit %d, %s", code, out)
	}
	if code, out := run("--json", "job", "list"); code != 0 || !strings.Contains(out, `"name":"slow"`) {
		t.Fatalf("--json job list: exit %d, %s", code, out)
	}
}

// cliCluster starts a 2-node local cluster under dir (stopped when the test ends) and
// returns it with a runner of `idunno --cluster DIR args...` that gives the exit status and
// the combined output.
func cliCluster(t *testing.T, bin, dir string) (*localcluster.Cluster, func(args ...string) (int, string)) {
	t.Helper()
	lc, err := localcluster.Up(filepath.Join(dir, "cluster"), 2, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Down() })
	return lc, func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--cluster", lc.Dir()}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, out.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), out.String()
		}
		t.Fatalf("idunno %v: %v", args, err)
		return 0, ""
	}
}
