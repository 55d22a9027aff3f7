package chaos

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/client/localcluster"
	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/sched"
	"idunno/sched/dataset"
)

const fmnistTest = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

// needCluster skips when namespaces cannot be made here and fails when what the nodes need
// (binary, kernel, data) is missing: a broken environment, not a skipped feature.
func needCluster(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process network-namespace test (not with -short)")
	}
	if err := Available(); err != nil {
		t.Skipf("cannot create network namespaces here: %v", err)
	}
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed (make; IDUNNO_KERNEL_LIB=bin/libidunno_kernel.so): %v", err)
	}
	if os.Getenv("IDUNNO_KERNEL_LIB") == "" {
		t.Fatal("set IDUNNO_KERNEL_LIB so node processes find the kernel library")
	}
	if _, err := os.Stat(fmnistTest); err != nil {
		t.Fatalf("Fashion-MNIST is needed (Debian package dataset-fashion-mnist): %v", err)
	}
	bin, err := localcluster.Binary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	localcluster.RemoveBinary()
	os.Exit(code)
}

// smallIDX returns the first n Fashion-MNIST test images as a plain IDX file.
func smallIDX(t *testing.T, n int) []byte {
	f, err := os.Open(fmnistTest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(z, hdr); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(hdr[4:], uint32(n))
	px := make([]byte, n*28*28)
	if _, err := io.ReadFull(z, px); err != nil {
		t.Fatal(err)
	}
	return append(hdr, px...)
}

// reference computes a job's result CSV in this process (no cluster, no failures).
func reference(t *testing.T, model string, data []byte, batch int, pre dataset.Preprocess) []byte {
	m, err := kernel.Load(model, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ds, err := dataset.Open(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out := []byte(sched.ResultHeader)
	for b := 0; b < ds.Len(); b += batch {
		e := min(b+batch, ds.Len())
		in, err := dataset.Batch(ds, b, e, pre, m.Inputs()[0].Dims)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Run([]*onnx.Tensor{in})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sched.FormatResultLines(b, sched.Argmax(res[0].F32, e-b, len(res[0].F32)/(e-b)))...)
	}
	return out
}

// world is one cluster with its client, data and the job every add submits.
type world struct {
	t    *testing.T
	c    *Cluster
	cl   *Client
	spec sched.JobSpec
	ref  []byte
	t0   time.Time
	logf func(string, ...any)

	mu       sync.Mutex
	failover []string // scenario figures for the log
}

func newWorld(t *testing.T, n int) *world {
	bin := needCluster(t)
	dir := t.TempDir()
	c, err := StartCluster(dir, n, bin)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("cannot create network namespaces here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, c: c, cl: NewClient(c), t0: time.Now()}
	w.logf = func(f string, a ...any) {
		t.Logf("%6.1fs "+f, append([]any{time.Since(w.t0).Seconds()}, a...)...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if keep := os.Getenv("IDUNNO_KEEP_LOGS"); keep != "" {
				for i := 0; i < c.Len(); i++ {
					b, _ := os.ReadFile(c.LogPath(i))
					dst := filepath.Join(keep, t.Name(), c.Name(i)+".log")
					os.MkdirAll(filepath.Dir(dst), 0o755)
					os.WriteFile(dst, b, 0o644)
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	model := filepath.Join(dir, "lenet.onnx")
	if out, err := exec.Command(bin, "zoo", "lenet5", "--out", model, "--seed", "3").CombinedOutput(); err != nil {
		t.Fatalf("zoo: %v\n%s", err, out)
	}
	data := smallIDX(t, 240)
	mb, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"chaos/lenet.onnx": mb, "chaos/data.idx": data} {
		if err := w.cl.PutReader(name, bytes.NewReader(b)); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	var info sched.ClusterInfo
	if err := w.cl.Call("sched.phase", sched.PhaseArgs{Phase: sched.PhaseInference}, &info, 30*time.Second); err != nil {
		t.Fatalf("inference start: %v", err)
	}
	w.spec = sched.JobSpec{Model: "chaos/lenet.onnx", Data: "chaos/data.idx", Batch: 20, TaskSize: 40,
		Pre: dataset.Preprocess{Scale: 1.0 / 255}}
	w.ref = reference(t, model, data, w.spec.Batch, w.spec.Pre)
	w.logf("cluster of %d nodes up on %s.0/24; coordinator %s (epoch %d), standby %s", n,
		strings.TrimSuffix(c.Net.prefix, "."), info.Coordinator, info.Epoch, info.Standby)
	return w
}

// roles returns the coordinator and its standby (by index), as the cluster reports them.
func (w *world) roles() (coord, standby int) {
	w.t.Helper()
	var info sched.ClusterInfo
	ok := waitFor(30*time.Second, func() bool {
		info = sched.ClusterInfo{}
		err := w.cl.Call("sched.info", struct{}{}, &info, 3*time.Second)
		return err == nil && info.Coordinator != "" && info.Standby != ""
	})
	if !ok {
		w.t.Fatalf("no coordinator with a standby: %+v", info)
	}
	return w.c.Index(info.Coordinator), w.c.Index(info.Standby)
}

// workload adds a file every putEvery and a job every addEvery (each op in its own
// goroutine, so a stalled call does not delay the next one; at most 8 of each kind in
// flight) until stop is closed; it returns when every op has finished.
func (w *world) workload(scenario string, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	loop := func(every time.Duration, op func(k int)) {
		defer wg.Done()
		sem := make(chan struct{}, 8)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // 8 in flight: skip this beat
			}
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				defer func() { <-sem }()
				op(k)
			}(k)
		}
	}
	wg.Add(2)
	go loop(150*time.Millisecond, func(k int) {
		data := []byte(strings.Repeat(fmt.Sprintf("%s file %d written at %s\n", scenario, k, time.Now().Format(time.RFC3339Nano)), 1+k%40))
		w.cl.Put(fmt.Sprintf("chaos/%s/f%03d", scenario, k), data)
	})
	go loop(600*time.Millisecond, func(k int) {
		spec := w.spec
		spec.Name = fmt.Sprintf("%s-j%02d", scenario, k)
		w.cl.AddJob(spec)
	})
	return wg.Wait
}

// scenario runs the workload for a second, applies fault at T, lets it last hold, undoes
// it, runs the workload 2 s more, and waits for the cluster to settle. It logs the time
// from T to the first acknowledged put and job add that started at or after T.
func (w *world) scenario(name string, hold time.Duration, fault func() error, undo func() error) {
	w.t.Helper()
	stop := make(chan struct{})
	wait := w.workload(name, stop)
	time.Sleep(time.Second)
	cut := time.Now()
	w.logf("%s: fault", name)
	if err := fault(); err != nil {
		close(stop)
		wait()
		w.t.Fatalf("%s: %v", name, err)
	}
	time.Sleep(hold)
	if err := undo(); err != nil {
		w.t.Errorf("%s: undo: %v", name, err)
	}
	w.logf("%s: healed", name)
	time.Sleep(2 * time.Second)
	close(stop)
	wait()
	ops := w.cl.Hist.Ops()
	put, okp := FirstAfter(ops, OpPut, cut)
	add, oka := FirstAfter(ops, OpJobAdd, cut)
	fig := fmt.Sprintf("%s: first acked put %s, first acked job add %s after the fault%s", name, showDur(put, okp), showDur(add, oka), w.takeovers(cut))
	w.logf("%s", fig)
	w.mu.Lock()
	w.failover = append(w.failover, fig)
	w.mu.Unlock()
	if err := w.c.WaitConverged(60 * time.Second); err != nil {
		w.t.Fatalf("%s: after healing: %v", name, err)
	}
	if !waitFor(30*time.Second, func() bool { return len(w.c.Coordinators(2*time.Second)) == 1 }) {
		w.t.Fatalf("%s: not one coordinator after healing: %v", name, w.c.Coordinators(2*time.Second))
	}
}

// takeovers lists the coordinators that took over after t, from the nodes' logs (whose
// timestamps have millisecond resolution).
func (w *world) takeovers(t time.Time) string {
	var out []string
	for i := 0; i < w.c.Len(); i++ {
		b, _ := os.ReadFile(w.c.LogPath(i))
		for _, c := range ParseClaims(w.c.Name(i), b) {
			if c.At.After(t) {
				out = append(out, fmt.Sprintf("%s epoch %d at +%.2fs", c.Node, c.Epoch, c.At.Sub(t).Seconds()))
			}
		}
	}
	if len(out) == 0 {
		return "; no takeover"
	}
	sort.Strings(out)
	return "; took over: " + strings.Join(out, ", ")
}

func showDur(d time.Duration, ok bool) string {
	if !ok {
		return "never"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// check waits for every job the history mentions, reads back everything, and runs Check.
func (w *world) check() Summary {
	w.t.Helper()
	ops := w.cl.Hist.Ops()
	obs := Observed{Files: map[string]FileState{}, Jobs: map[string]JobState{}, Reference: map[string][]byte{}}
	var list []sched.JobSummary
	done := waitFor(3*time.Minute, func() bool {
		list = nil
		if err := w.cl.Call("sched.job.list", struct{}{}, &list, 5*time.Second); err != nil {
			return false
		}
		for _, j := range list {
			if !j.Complete {
				return false
			}
		}
		return true
	})
	if !done {
		var left []string
		for _, j := range list {
			if !j.Complete {
				left = append(left, fmt.Sprintf("%s %d/%d", j.Name, j.Done, j.Queries))
			}
		}
		w.t.Errorf("jobs still running after 3 minutes: %v", left)
	}
	jobs := map[string][]sched.JobSummary{}
	for _, j := range list {
		jobs[j.Name] = append(jobs[j.Name], j)
	}
	for _, op := range ops {
		switch op.Kind {
		case OpPut:
			fs, _ := w.cl.ReadFile(op.Key)
			obs.Files[op.Key] = fs
		case OpJobAdd:
			obs.Reference[op.Key] = w.ref
			js := JobState{Copies: len(jobs[op.Key])}
			if js.Copies > 0 {
				j := jobs[op.Key][0]
				js.Present, js.Complete, js.Queries = true, j.Complete, j.Queries
				if j.Complete {
					st, b := w.cl.ReadFile(j.Result)
					if !st.Present {
						js.Err = "result " + j.Result + " unreadable: " + st.Err
					}
					js.Result = b
				}
			}
			obs.Jobs[op.Key] = js
		}
	}
	for i := 0; i < w.c.Len(); i++ {
		b, err := os.ReadFile(w.c.LogPath(i))
		if err != nil {
			w.t.Errorf("log of %s: %v", w.c.Name(i), err)
			continue
		}
		obs.Claims = append(obs.Claims, ParseClaims(w.c.Name(i), b)...)
	}
	s := Check(ops, obs)
	w.logf("checker: %s", s)
	for _, a := range s.Anomalies {
		w.t.Errorf("anomaly: %s", a)
	}
	for _, op := range ops {
		if op.Outcome != Acked || op.Err != "" {
			w.logf("  %s %s %s after %.2fs: %s", op.Kind, op.Key, op.Outcome, op.End.Sub(op.Start).Seconds(), op.Err)
		}
	}
	if s.AddsAcked == 0 || s.PutsAcked == 0 {
		w.t.Errorf("the workload was never acknowledged: %s", s)
	}
	return s
}

// The five partition scenarios, each on a fresh 5-node cluster (node i on host
// 10.77.X.(i+1), each in its own network namespace), with a client writing SDFS files and
// adding jobs throughout. Afterwards the checker compares the history with what the cluster
// holds: no acked write or job lost, every job's result byte-identical to the failure-free
// reference, no job or query applied twice, no two coordinators in one epoch. Each logs
// its failover time (fault to the first acked put and job add that started after it).

// TestPartitionCoordinatorStandby cuts the coordinator from its standby (both ways);
// everyone else still sees both.
func TestPartitionCoordinatorStandby(t *testing.T) {
	w := newWorld(t, 5)
	co, sb := w.roles()
	w.logf("coordinator %s, standby %s", w.c.Name(co), w.c.Name(sb))
	w.scenario("coord-standby", 5*time.Second, func() error { return w.c.Net.Cut(co, sb) }, w.c.Net.Heal)
	w.check()
}

// TestPartitionCoordinatorMinority cuts the coordinator and one worker from the standby
// and the other two workers.
func TestPartitionCoordinatorMinority(t *testing.T) {
	w := newWorld(t, 5)
	co, sb := w.roles()
	minority, majority := []int{co}, []int{}
	for i := 0; i < w.c.Len(); i++ {
		switch {
		case i == co:
		case i != sb && len(minority) < 2:
			minority = append(minority, i)
		default:
			majority = append(majority, i)
		}
	}
	w.logf("coordinator %s, standby %s; minority %v", w.c.Name(co), w.c.Name(sb), minority)
	w.scenario("coord-majority", 6*time.Second, func() error { return w.c.Net.Partition(minority, majority) }, w.c.Net.Heal)
	w.check()
}

// TestPartitionWorkersMinority cuts two workers (neither coordinator nor standby) off from
// the other three nodes.
func TestPartitionWorkersMinority(t *testing.T) {
	w := newWorld(t, 5)
	co, sb := w.roles()
	var cutoff, rest []int
	for i := 0; i < w.c.Len(); i++ {
		if i != co && i != sb && len(cutoff) < 2 {
			cutoff = append(cutoff, i)
		} else {
			rest = append(rest, i)
		}
	}
	w.logf("coordinator %s, standby %s; workers cut off %v", w.c.Name(co), w.c.Name(sb), cutoff)
	w.scenario("workers-minority", 6*time.Second, func() error { return w.c.Net.Partition(cutoff, rest) }, w.c.Net.Heal)
	w.check()
}

// TestPartitionFlappingLink takes the coordinator's link down and up: down for 0.3 s
// (less than detection) and 1.2 s (more) in turn, up for 0.7 s, three times each.
func TestPartitionFlappingLink(t *testing.T) {
	w := newWorld(t, 5)
	co, sb := w.roles()
	w.logf("coordinator %s, standby %s; flapping the coordinator's link", w.c.Name(co), w.c.Name(sb))
	nt := w.c.Net
	w.scenario("flapping", 0, func() error {
		for k := 0; k < 6; k++ {
			if err := nt.LinkDown(co); err != nil {
				return err
			}
			time.Sleep([]time.Duration{300 * time.Millisecond, 1200 * time.Millisecond}[k%2])
			if err := nt.LinkUp(co); err != nil {
				return err
			}
			time.Sleep(700 * time.Millisecond)
		}
		return nil
	}, nt.Heal)
	w.check()
}

// TestPartitionFrozenStandby freezes the standby (SIGSTOP) and kills the coordinator; 4 s
// later the standby resumes and the old coordinator restarts.
func TestPartitionFrozenStandby(t *testing.T) {
	w := newWorld(t, 5)
	co, sb := w.roles()
	w.logf("coordinator %s, standby %s; freezing the standby, killing the coordinator", w.c.Name(co), w.c.Name(sb))
	w.scenario("frozen-standby", 4*time.Second, func() error {
		if err := w.c.Freeze(sb); err != nil {
			return err
		}
		return w.c.Kill(co)
	}, func() error {
		return errors.Join(w.c.Thaw(sb), w.c.Start(co))
	})
	w.check()
}
