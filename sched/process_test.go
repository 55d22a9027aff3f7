package sched_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"idunno/client/localcluster"
	"idunno/kernel"
	"idunno/kernel/onnx"
	"idunno/rpc"
	"idunno/sched"
	"idunno/sched/dataset"
)

var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		var err error
		if bin, err = localcluster.Binary(); err != nil {
			fmt.Fprintln(os.Stderr, "FATAL:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	localcluster.RemoveBinary()
	os.Exit(code)
}

const fmnistTest = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
const fmnistTrain = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

// procCluster is a local cluster of real node processes driven through the idunno command.
type procCluster struct {
	t  *testing.T
	lc *localcluster.Cluster
	rc *rpc.Client
}

func needKernel(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test")
	}
	if err := kernel.Available(); err != nil {
		t.Fatalf("the kernel library is needed (make; IDUNNO_KERNEL_LIB=bin/libidunno_kernel.so): %v", err)
	}
	if os.Getenv("IDUNNO_KERNEL_LIB") == "" {
		t.Fatal("set IDUNNO_KERNEL_LIB so node processes find the kernel library")
	}
	for _, f := range []string{fmnistTest, fmnistTrain} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("Fashion-MNIST is needed (Debian package dataset-fashion-mnist): %v", err)
		}
	}
}

func upProcCluster(t *testing.T, n int) *procCluster {
	lc, err := localcluster.Up(t.TempDir(), n, 0, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Down() })
	rc := rpc.NewClient([]byte(lc.Secret()))
	t.Cleanup(rc.Close)
	c := &procCluster{t: t, lc: lc, rc: rc}
	t.Cleanup(func() {
		if t.Failed() {
			c.explainUnfinished()
		} else if os.Getenv("IDUNNO_KEEP_LOGS") != "" {
			c.keepLogs()
		}
	})
	return c
}

// keepLogs copies every node's log to IDUNNO_KEEP_LOGS/<test>/<node>.log (a failed test's
// explainUnfinished does it too), so a passing run's logs can be compared with a failing one's.
func (c *procCluster) keepLogs() {
	keep := os.Getenv("IDUNNO_KEEP_LOGS")
	for _, n := range c.lc.Nodes() {
		b, err := os.ReadFile(filepath.Join(n.DataDir, "node.log"))
		if err != nil {
			continue
		}
		dst := filepath.Join(keep, c.t.Name(), n.Name+".log")
		os.MkdirAll(filepath.Dir(dst), 0o755)
		os.WriteFile(dst, b, 0o644)
	}
}

// explainUnfinished prints, for a failed test, every node's log lines about each task that
// was scheduled but never completed, and keeps the logs when IDUNNO_KEEP_LOGS names a folder.
func (c *procCluster) explainUnfinished() {
	logs := map[string][]string{}
	scheduled, completed := map[string]bool{}, map[string]bool{}
	for _, n := range c.lc.Nodes() {
		b, err := os.ReadFile(filepath.Join(n.DataDir, "node.log"))
		if err != nil {
			continue
		}
		if keep := os.Getenv("IDUNNO_KEEP_LOGS"); keep != "" {
			dst := filepath.Join(keep, c.t.Name(), n.Name+".log")
			os.MkdirAll(filepath.Dir(dst), 0o755)
			os.WriteFile(dst, b, 0o644)
		}
		lines := strings.Split(string(b), "\n")
		logs[n.Name] = lines
		for _, l := range lines {
			for _, m := range []struct {
				key string
				set map[string]bool
			}{{"scheduled task ", scheduled}, {"completed task ", completed}} {
				if i := strings.Index(l, m.key); i >= 0 {
					if f := strings.Fields(l[i+len(m.key):]); len(f) > 0 {
						m.set[f[0]] = true
					}
				}
			}
		}
	}
	for task := range scheduled {
		if completed[task] {
			continue
		}
		c.t.Logf("task %s was scheduled and never completed:", task)
		shown := 0
		for _, n := range c.lc.Nodes() {
			for _, l := range logs[n.Name] {
				if strings.Contains(l, task+" ") && shown < 60 {
					c.t.Logf("  %s: %s", n.Name, l)
					shown++
				}
			}
		}
	}
}

// run runs an idunno command against the cluster and returns its output.
func (c *procCluster) run(args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "IDUNNO_CLUSTER="+c.lc.Dir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *procCluster) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("idunno %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// setup stores LeNet-5 and the Fashion-MNIST sets and starts the inference phase.
func (c *procCluster) setup(model string) {
	c.must("put", fmnistTest, "fmnist-test.gz")
	c.must("put", fmnistTrain, "fmnist-train.gz")
	if _, err := os.Stat(model); err != nil {
		c.must("zoo", "lenet5", "--out", model)
	}
	c.must("train", "start")
	c.must("train", "add", "--name", "lenet", "--model", model)
	c.must("train", "stop")
	c.must("inference", "start")
	if out, err := c.run("job", "add", "--name", "early", "--model", "lenet", "--data", "x", "--batch", "1"); err == nil ||
		!strings.Contains(out, `dataset "x"`) {
		c.t.Fatalf("job on a missing dataset: %v %s", err, out)
	}
}

// direct computes a job's result CSV in this process: same model, data, batches.
func direct(t *testing.T, model, data string, batch int, pre dataset.Preprocess, limit int) []byte {
	m, err := kernel.Load(model, kernel.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f, err := os.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := dataset.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	n := ds.Len()
	if limit > 0 {
		n = min(n, limit)
	}
	out := []byte(sched.ResultHeader)
	for b := 0; b < n; b += batch {
		e := min(b+batch, n)
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

func (c *procCluster) result(job string) []byte {
	c.t.Helper()
	local := filepath.Join(c.t.TempDir(), job+".csv")
	c.must("job", "result", job, local)
	b, err := os.ReadFile(local)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// sameLines compares two result CSVs line by line and reports the first difference.
func sameLines(t *testing.T, job string, got, want []byte) {
	t.Helper()
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < min(len(g), len(w)); i++ {
		if g[i] != w[i] {
			t.Fatalf("job %s: line %d is %q, the direct computation gives %q", job, i+1, g[i], w[i])
		}
	}
	if len(g) != len(w) {
		t.Fatalf("job %s: %d lines, want %d", job, len(g), len(w))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("job %s: bytes differ", job)
	}
}

// statuses asks every live node for its scheduling role.
func (c *procCluster) statuses() map[string]sched.StatusReply {
	out := map[string]sched.StatusReply{}
	for _, n := range c.lc.Nodes() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var r sched.StatusReply
		if err := c.rc.CallJSON(ctx, n.RPCAddr, "sched.status", struct{}{}, &r); err == nil {
			out[n.Name] = r
		}
		cancel()
	}
	return out
}

func (c *procCluster) coordinator() string {
	for name, st := range c.statuses() {
		if st.Role == "coordinator" {
			return name
		}
	}
	return ""
}

func (c *procCluster) progress(job string) sched.JobSummary {
	var js sched.JobSummary
	for _, n := range c.lc.Nodes() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.rc.CallJSON(ctx, n.RPCAddr, "sched.job.get", sched.NameArgs{Name: job}, &js)
		cancel()
		if err == nil {
			return js
		}
	}
	return js
}

// TestProcessTwoJobsMatchDirect runs two LeNet-5 jobs with different batch sizes and
// preprocessing on a 4-node cluster and checks both result files line by line against
// the same computation done directly in this process.
func TestProcessTwoJobsMatchDirect(t *testing.T) {
	needKernel(t)
	c := upProcCluster(t, 4)
	model := filepath.Join(t.TempDir(), "lenet.onnx")
	c.setup(model)
	c.must("job", "add", "--name", "a", "--model", "lenet", "--data", "fmnist-test.gz", "--batch", "32", "--scale", "1/255")
	c.must("job", "add", "--name", "b", "--model", "lenet", "--data", "fmnist-test.gz", "--batch", "10",
		"--scale", "1/255", "--mean", "0.5", "--std", "0.25")
	if out, err := c.run("job", "add", "--name", "a", "--model", "lenet", "--data", "fmnist-test.gz", "--batch", "8"); err == nil ||
		!strings.Contains(out, "already in use") {
		t.Fatalf("duplicate job name: %v %s", err, out)
	}
	if out, err := c.run("job", "add", "--name", "c", "--model", "lenet", "--data", "fmnist-test.gz", "--batch", "8", "--resize", "32x32"); err == nil ||
		!strings.Contains(out, "does not fit") {
		t.Fatalf("model not fitting the data: %v %s", err, out)
	}
	c.must("job", "wait", "a", "--timeout", "90s")
	c.must("job", "wait", "b", "--timeout", "90s")
	sameLines(t, "a", c.result("a"), direct(t, model, fmnistTest, 32, dataset.Preprocess{Scale: 1.0 / 255}, 0))
	sameLines(t, "b", c.result("b"), direct(t, model, fmnistTest, 10,
		dataset.Preprocess{Scale: 1.0 / 255, Mean: []float32{0.5}, Std: []float32{0.25}}, 0))
	stats := c.must("job", "stats", "b", "--json")
	for _, k := range []string{`"job":"b"`, `"done":10000`, `"total":10000`, `"rate_10s":`, `"p99":`, `"workers":`} {
		if !strings.Contains(stats, k) {
			t.Errorf("stats lack %s: %s", k, stats)
		}
	}
	logs := c.must("grep", "starting task b/0 |scheduled task b/0 |completed task b/0 |job received: b |job b completed")
	for _, k := range []string{"starting task", "scheduled task", "completed task", "job received", "completed:"} {
		if !strings.Contains(logs, k) {
			t.Errorf("logs lack %q:\n%s", k, logs)
		}
	}
}

// TestProcessChaos runs two jobs on a 10-node cluster while the coordinator and then three
// workers are killed with SIGKILL or frozen with SIGSTOP at random moments, some brought
// back, and checks that both result files are byte-identical to the failure-free
// computation (done directly here, and equal to a failure-free cluster run by
// TestProcessTwoJobsMatchDirect).
func TestProcessChaos(t *testing.T) {
	needKernel(t)
	localcluster.ConvergeTimeout = 15 * time.Second
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("IDUNNO_CHAOS_SEED"); v != "" { // to replay a run's choices
		fmt.Sscan(v, &seed)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("chaos seed %d", seed)
	c := upProcCluster(t, 10)
	model := filepath.Join(t.TempDir(), "lenet.onnx")
	c.setup(model)
	c.must("job", "add", "--name", "big", "--model", "lenet", "--data", "fmnist-train.gz", "--batch", "4", "--scale", "1/255")
	c.must("job", "add", "--name", "small", "--model", "lenet", "--data", "fmnist-train.gz", "--batch", "2", "--scale", "1/255")
	var want [2][]byte
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(wg.Wait) // a Fatal below must not end the test under this goroutine's feet
	go func() {        // computed meanwhile, on this process's share of the CPU
		defer wg.Done()
		want[0] = direct(t, model, fmnistTrain, 4, dataset.Preprocess{Scale: 1.0 / 255}, 0)
		want[1] = direct(t, model, fmnistTrain, 2, dataset.Preprocess{Scale: 1.0 / 255}, 0)
	}()
	waitDone := func(job string, n int) {
		deadline := time.Now().Add(60 * time.Second)
		for c.progress(job).Done < n {
			if time.Now().After(deadline) {
				t.Fatalf("job %s stuck below %d queries", job, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	start := time.Now()
	logf := func(f string, a ...any) { t.Logf("%6.1fs "+f, append([]any{time.Since(start).Seconds()}, a...)...) }
	// Failures strike at points of the run (fractions of all queries), not at fixed times,
	// so they land while both jobs are running whatever the machine's speed.
	at := func(frac float64) {
		waitDone("big", int(frac*60000))
		if c.progress("small").Done > int(frac*60000)+6000 {
			logf("note: already past %.0f%% when the failure was due", frac*100)
		}
	}
	at(0.05)

	hurt := func(name string) (how string) {
		if rng.IntN(2) == 0 {
			if err := c.lc.Kill(name); err != nil {
				t.Fatal(err)
			}
			return "kill"
		}
		if err := c.lc.Stop(name); err != nil {
			t.Fatal(err)
		}
		return "stop"
	}
	heal := func(name, how string) {
		var err error
		if how == "kill" {
			err = c.lc.Restart(name)
		} else {
			err = c.lc.Cont(name)
		}
		if err != nil && strings.Contains(err.Error(), "did not converge") {
			// The process is back; the failure detector's view lagging is fd's to fix, and
			// the scheduler must finish correctly regardless.
			logf("%s restarted, but membership did not converge: %v", name, err)
		} else if err != nil {
			t.Fatal(err)
		}
		logf("%s back (after %s)", name, how)
	}

	// The coordinator fails; the standby must take over and work must go on.
	old := c.coordinator()
	before := c.progress("small").Done + c.progress("big").Done
	how := hurt(old)
	t0 := time.Now()
	logf("coordinator %s: %s", old, how)
	var now string
	for now == "" || now == old {
		if time.Since(t0) > 15*time.Second {
			t.Fatal("no new coordinator")
		}
		time.Sleep(20 * time.Millisecond)
		now = c.coordinator()
	}
	logf("%s took over %v after the failure (includes failure detection)", now, time.Since(t0).Round(time.Millisecond))
	if d, ok := c.takeoverAfterDetection(now, old); ok {
		logf("%s became coordinator %v after its failure detector reported %s failed", now, d.Round(time.Millisecond), old)
		if d > time.Second {
			t.Errorf("takeover took %v after the failure was reported (target < 1 s)", d)
		}
	} else {
		t.Errorf("no failure and takeover lines for %s in %s's log", old, now)
	}
	// Work goes on under the new coordinator: a task committed after the takeover. Tasks
	// take seconds here, and one that finished while no coordinator answered is sent again
	// once one does, so wait for the first commit instead of reading the count at once.
	for after := c.progress("small").Done + c.progress("big").Done; after <= before; after = c.progress("small").Done + c.progress("big").Done {
		if time.Since(t0) > 20*time.Second {
			t.Errorf("no query committed across the coordinator change (%d then %d after %v)", before, after, time.Since(t0).Round(time.Millisecond))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	logf("queries committed under %s", now)
	at(0.15 + 0.1*rng.Float64())
	heal(old, how)

	// Three workers fail at random moments; two come back.
	var workers []string
	for _, n := range c.lc.Nodes() {
		if n.Name != now {
			workers = append(workers, n.Name)
		}
	}
	rng.Shuffle(len(workers), func(i, j int) { workers[i], workers[j] = workers[j], workers[i] })
	victims := workers[:3]
	hows := make([]string, 3)
	for i, v := range victims {
		at(0.3 + 0.1*float64(i) + 0.05*rng.Float64())
		hows[i] = hurt(v)
		logf("worker %s: %s (jobs at %d and %d queries)", v, hows[i], c.progress("big").Done, c.progress("small").Done)
	}
	at(0.7 + 0.1*rng.Float64())
	if c.progress("big").Complete && c.progress("small").Complete {
		t.Log("both jobs finished before the workers came back")
	}
	heal(victims[0], hows[0])
	heal(victims[1], hows[1])

	c.must("job", "wait", "big", "--timeout", "150s")
	c.must("job", "wait", "small", "--timeout", "150s")
	logf("jobs complete")
	wg.Wait()
	logf("direct computation done")
	sameLines(t, "big", c.result("big"), want[0])
	sameLines(t, "small", c.result("small"), want[1])
	coords := 0
	for name, st := range c.statuses() {
		if st.Role == "coordinator" {
			coords++
			if name == old {
				t.Errorf("the old coordinator %s took the role back", name)
			}
		}
	}
	if coords != 1 {
		t.Errorf("%d coordinators at the end", coords)
	}
}

// lenetInBlobs writes the zoo's LeNet-5 to a temporary file (returned) and stores it in
// memory blobs as "m.onnx", beside the Fashion-MNIST test set (also returned) as data.
func lenetInBlobs(tb testing.TB, data string) (model string, idx []byte, blobs *sched.MemBlobs) {
	tb.Helper()
	model = filepath.Join(tb.TempDir(), "lenet.onnx")
	if out, err := exec.Command(bin, "zoo", "lenet5", "--out", model).CombinedOutput(); err != nil {
		tb.Fatalf("%v %s", err, out)
	}
	mb, err := os.ReadFile(model)
	if err != nil {
		tb.Fatal(err)
	}
	if idx, err = os.ReadFile(fmnistTest); err != nil {
		tb.Fatal(err)
	}
	blobs = sched.NewMemBlobs()
	blobs.Put(context.Background(), "m.onnx", mb)
	blobs.Put(context.Background(), data, idx)
	return model, idx, blobs
}

// TestKernelExecutorFormats runs the real executor (kernel, dataset readers) over the same
// images stored as an IDX file and as a folder of PNG files, and checks both give the
// direct computation's answers; a model that does not fit the data is refused.
func TestKernelExecutorFormats(t *testing.T) {
	needKernel(t)
	model, idx, blobs := lenetInBlobs(t, "t10k.gz")
	ctx := context.Background()
	ds, err := dataset.OpenBytes(idx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := 0; i < n; i++ {
		im, err := ds.Sample(i)
		if err != nil {
			t.Fatal(err)
		}
		g := image.NewGray(image.Rect(0, 0, im.W, im.H))
		copy(g.Pix, im.U8)
		var buf bytes.Buffer
		png.Encode(&buf, g)
		blobs.Put(ctx, fmt.Sprintf("imgs/%03d.png", i), buf.Bytes())
	}
	x := &sched.KernelExecutor{Blobs: blobs, Threads: 1}
	pre := dataset.Preprocess{Scale: 1.0 / 255}
	want := direct(t, model, fmnistTest, 8, pre, n)
	for _, spec := range []sched.JobSpec{
		{Name: "idx", Model: "m.onnx", Data: "t10k.gz", Batch: 8, Pre: pre},
		{Name: "png", Model: "m.onnx", Data: "imgs/", Format: "images", Batch: 8, Pre: pre},
	} {
		q, err := x.Probe(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Format == "images" && q != n {
			t.Fatalf("folder has %d queries, want %d", q, n)
		}
		preds, lat, err := x.Run(ctx, spec, 0, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(lat) != n/8 {
			t.Fatalf("%d batch latencies", len(lat))
		}
		got := append([]byte(sched.ResultHeader), sched.FormatResultLines(0, preds)...)
		sameLines(t, spec.Name, got, want)
	}
	bad := sched.JobSpec{Name: "bad", Model: "m.onnx", Data: "t10k.gz", Batch: 8, Pre: dataset.Preprocess{Resize: [2]int{32, 32}}}
	if _, err := x.Probe(ctx, bad); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("misfit model accepted: %v", err)
	}
	if _, err := x.Probe(ctx, sched.JobSpec{Name: "x", Model: "nope", Data: "t10k.gz", Batch: 1}); err == nil {
		t.Fatal("missing model accepted")
	}
}

// takeoverAfterDetection reads the new coordinator's log: the time from its failure
// detector's "OLD (...) failed" line to its "became coordinator" line.
func (c *procCluster) takeoverAfterDetection(node, old string) (time.Duration, bool) {
	nd, err := c.lc.Node(node)
	if err != nil {
		return 0, false
	}
	var failed, became time.Time
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(nd.DataDir, "node.log"))
		if err != nil {
			return 0, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", f[0])
			if err != nil {
				continue
			}
			switch {
			case f[2] == "fd:" && strings.Contains(line, " "+old+" (") && strings.Contains(line, ") failed"):
				failed = at
			case strings.Contains(line, "became coordinator") && !failed.IsZero():
				became = at
			}
		}
		if !became.IsZero() {
			return became.Sub(failed), true
		}
	}
	return 0, false
}
