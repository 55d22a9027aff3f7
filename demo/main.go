// Command demo is `make demo`: it starts a 10-node local cluster, stores Fashion-MNIST and two
// models in SDFS, runs two inference jobs of very different cost side by side, kills a worker
// and then the coordinator mid-run, and ends with a checked summary.
//
// Every user-visible step runs the real `idunno` command and prints it; the demo itself only
// watches (through the same RPC API the commands use) to time recoveries and check results.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"idunno/client/localcluster"
	"idunno/rpc"
	"idunno/sched"
)

type config struct {
	bin, dir           string
	nodes, basePort    int
	queries            int
	bigModel, bigShape string
	fmnist             string
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "bin/idunno", "the idunno binary")
	flag.StringVar(&c.dir, "dir", "", "working directory (default: a new temporary one)")
	flag.IntVar(&c.nodes, "nodes", 10, "cluster size")
	flag.IntVar(&c.basePort, "base-port", 0, "first port (0: a free one)")
	flag.IntVar(&c.queries, "queries", 600, "queries per job (a prefix of Fashion-MNIST's test set)")
	flag.StringVar(&c.bigModel, "big", "resnet50", "the expensive model (from idunno zoo)")
	flag.StringVar(&c.bigShape, "big-shape", "224x224", "input size of the expensive model")
	flag.StringVar(&c.fmnist, "fmnist", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "Fashion-MNIST images (IDX)")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demo holds the running cluster and what the demo measured.
type demo struct {
	config
	cl       *localcluster.Cluster
	rpc      *rpc.Client
	env      []string
	summary  []string
	rateGaps []float64 // |r1-r2|/max(r1,r2) samples in steady state
	started  time.Time
}

func run(c config) error {
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return err
	}
	c.bin = bin
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "idunno-demo-"); err != nil {
			return err
		}
	}
	d := &demo{config: c, started: time.Now()}
	clusterDir := filepath.Join(c.dir, "cluster")
	d.env = append(os.Environ(), "IDUNNO_CLUSTER="+clusterDir)

	say("1. Start a %d-node cluster on 127.0.0.1 (failure detector, SDFS, coordinator + hot standby, workers)", c.nodes)
	args := []string{"cluster", "up", "--nodes", strconv.Itoa(c.nodes), "--dir", clusterDir}
	if c.basePort != 0 {
		args = append(args, "--base-port", strconv.Itoa(c.basePort))
	}
	if err := d.idunno(args...); err != nil {
		return err
	}
	if d.cl, err = localcluster.Open(clusterDir); err != nil {
		return err
	}
	d.rpc = rpc.NewClient([]byte(d.cl.Secret()))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.script() }()
	select {
	case err = <-done:
	case s := <-stop:
		err = fmt.Errorf("stopped by %v", s)
	}
	say("Stopping the cluster")
	d.idunno("cluster", "down", "--dir", clusterDir)
	if err == nil {
		say("Summary")
		for _, l := range d.summary {
			fmt.Println("  " + l)
		}
		fmt.Printf("  demo took %.0f s; working directory %s\n", time.Since(d.started).Seconds(), c.dir)
	}
	return err
}

func (d *demo) script() error {
	small := "lenet"
	big := d.bigModel
	say("2. Store the dataset (first %d images of Fashion-MNIST's test set) and two models in SDFS", d.queries)
	data := filepath.Join(d.dir, "fmnist.idx")
	if err := idxPrefix(d.fmnist, data, d.queries); err != nil {
		return err
	}
	if err := d.idunno("put", data, "fmnist-test.idx"); err != nil {
		return err
	}
	smallFile, bigFile := filepath.Join(d.dir, "lenet5.onnx"), filepath.Join(d.dir, big+".onnx")
	h, w, _ := strings.Cut(d.bigShape, "x")
	if err := d.idunno("zoo", "lenet5", "--out", smallFile, "--classes", "10"); err != nil {
		return err
	}
	if err := d.idunno("zoo", big, "--out", bigFile, "--input-shape", "3,"+h+","+w, "--classes", "10"); err != nil {
		return err
	}
	say("3. Training phase: validate both models with the kernel and store them for inference")
	for _, a := range [][]string{{"train", "start"}, {"train", "add", "--name", small, "--model", smallFile},
		{"train", "add", "--name", big, "--model", bigFile}, {"train", "stop"}, {"inference", "start"}} {
		if err := d.idunno(a...); err != nil {
			return err
		}
	}
	say("4. Two inference jobs side by side: %s at 28x28 and %s at %s", small, big, d.bigShape)
	if err := d.idunno("job", "add", "--name", "fashion-lenet", "--model", small, "--data", "fmnist-test.idx",
		"--batch", "8", "--scale", "0.003921569"); err != nil {
		return err
	}
	if err := d.idunno("job", "add", "--name", "fashion-"+big, "--model", big, "--data", "fmnist-test.idx",
		"--batch", "4", "--scale", "0.003921569", "--grey-to-rgb", "--resize", d.bigShape); err != nil {
		return err
	}
	jobs := []string{"fashion-lenet", "fashion-" + big}
	say("5. Live statistics (idunno job stats), then faults")
	if err := d.watchUntil(jobs, 0.25); err != nil {
		return err
	}
	if err := d.killWorker(jobs); err != nil {
		return err
	}
	if err := d.watchUntil(jobs, 0.55); err != nil {
		return err
	}
	if err := d.killCoordinator(jobs); err != nil {
		return err
	}
	if err := d.watchUntil(jobs, 1); err != nil {
		return err
	}
	say("6. Results: fetch each job's CSV from SDFS and check every query is answered exactly once")
	for _, j := range jobs {
		if err := d.idunno("job", "stats", j); err != nil {
			return err
		}
		local := filepath.Join(d.dir, j+".csv")
		if err := d.idunno("job", "result", j, local); err != nil {
			return err
		}
		n, lost, dup, err := checkResult(local, d.queries)
		if err != nil {
			return err
		}
		var s sched.JobSummary
		d.call("sched.job.get", sched.NameArgs{Name: j}, &s)
		d.note("%s: %d queries answered, %d lost, %d duplicated; result in SDFS as %s, copy at %s",
			j, n, lost, dup, s.Result, local)
		if lost+dup > 0 {
			return fmt.Errorf("%s: %d lost and %d duplicated queries", j, lost, dup)
		}
	}
	if len(d.rateGaps) > 0 {
		slices.Sort(d.rateGaps)
		d.note("fair time: while both jobs ran, their 10 s query rates differed by %.1f%% (median) and %.1f%% (worst) over %d samples",
			100*d.rateGaps[len(d.rateGaps)/2], 100*d.rateGaps[len(d.rateGaps)-1], len(d.rateGaps))
	}
	return nil
}

// watchUntil prints both jobs' stats every second until the slowest has done frac of its queries.
func (d *demo) watchUntil(jobs []string, frac float64) error {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		var line []string
		slowest := 1.0
		var rates []float64
		running := 0
		for _, j := range jobs {
			var st sched.JobStatsReport
			if err := d.call("sched.job.stats", sched.NameArgs{Name: j}, &st); err != nil {
				line = append(line, fmt.Sprintf("%s: (%v)", j, err))
				slowest = 0
				continue
			}
			f := float64(st.Done) / math.Max(1, float64(st.Total))
			slowest = math.Min(slowest, f)
			if st.Done < st.Total {
				running++
				rates = append(rates, st.Rate10s)
			}
			line = append(line, fmt.Sprintf("%-16s %4d/%-4d %6.1f q/s p50 %6.1f ms p99 %6.1f ms on %d workers",
				j, st.Done, st.Total, st.Rate10s, st.LatencyMS.P50, st.LatencyMS.P99, len(st.Workers)))
		}
		// Fair-time samples: both jobs running, past the first 10 s window.
		if running == 2 && rates[0] > 0 && rates[1] > 0 {
			gap := math.Abs(rates[0]-rates[1]) / math.Max(rates[0], rates[1])
			if slowest > 0.15 {
				d.rateGaps = append(d.rateGaps, gap)
			}
		}
		fmt.Printf("  [%5.1fs] %s\n", time.Since(d.started).Seconds(), strings.Join(line, " | "))
		if slowest >= frac {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("jobs did not reach %.0f%% within 10 minutes", 100*frac)
}

// killWorker kills (SIGKILL) a node that is neither coordinator nor standby and times how long
// until the coordinator has taken it off the jobs.
func (d *demo) killWorker(jobs []string) error {
	var info sched.ClusterInfo
	if err := d.call("sched.info", struct{}{}, &info); err != nil {
		return err
	}
	victim := ""
	for _, n := range d.cl.Nodes() {
		if n.Name != info.Coordinator && n.Name != info.Standby && d.cl.Running(n.Name) && d.servesAJob(n.Name, jobs) {
			victim = n.Name
		}
	}
	if victim == "" {
		return fmt.Errorf("no worker to kill")
	}
	say("Killing worker %s (kill -9) mid-run", victim)
	t0 := time.Now()
	if err := d.idunno("cluster", "kill", "--dir", d.cl.Dir(), victim); err != nil {
		return err
	}
	for time.Since(t0) < 30*time.Second {
		if !d.servesAJob(victim, jobs) {
			el := time.Since(t0)
			d.note("worker crash: %s was taken off every job and its tasks handed to others %.2f s after kill -9", victim, el.Seconds())
			fmt.Printf("  %s off the jobs after %.2f s\n", victim, el.Seconds())
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("worker %s still assigned 30 s after it was killed", victim)
}

func (d *demo) servesAJob(node string, jobs []string) bool {
	for _, j := range jobs {
		var st sched.JobStatsReport
		if d.call("sched.job.stats", sched.NameArgs{Name: j}, &st) != nil {
			continue
		}
		for _, w := range st.Workers {
			if w.Name == node && w.Share > 0 {
				return true
			}
		}
	}
	return false
}

// killCoordinator kills the coordinator and times how long until its hot standby answers as
// coordinator with a higher epoch.
func (d *demo) killCoordinator(jobs []string) error {
	var before sched.ClusterInfo
	if err := d.call("sched.info", struct{}{}, &before); err != nil {
		return err
	}
	say("Killing the coordinator %s (kill -9) mid-run; %s is its hot standby", before.Coordinator, before.Standby)
	t0 := time.Now()
	if err := d.cl.Kill(before.Coordinator); err != nil {
		return err
	}
	fmt.Printf("$ idunno cluster kill --dir %s %s\n", d.cl.Dir(), before.Coordinator)
	for time.Since(t0) < 30*time.Second {
		var now sched.ClusterInfo
		if d.call("sched.info", struct{}{}, &now) == nil && now.Epoch > before.Epoch && now.Coordinator != before.Coordinator {
			el := time.Since(t0)
			d.note("coordinator crash: %s took over from %s (epoch %d -> %d) %.2f s after kill -9; workers kept processing",
				now.Coordinator, before.Coordinator, before.Epoch, now.Epoch, el.Seconds())
			fmt.Printf("  %s is coordinator (epoch %d) after %.2f s\n", now.Coordinator, now.Epoch, el.Seconds())
			say("Restarting %s: it rejoins as standby", before.Coordinator)
			return d.idunno("cluster", "restart", "--dir", d.cl.Dir(), before.Coordinator)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no new coordinator 30 s after %s was killed", before.Coordinator)
}

// call runs a scheduler client method on the first live node that answers.
func (d *demo) call(method string, args, reply any) error {
	var last error
	for _, n := range d.cl.Nodes() {
		if !d.cl.Running(n.Name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		last = d.rpc.CallJSON(ctx, n.RPCAddr, method, args, reply)
		cancel()
		if last == nil {
			return nil
		}
	}
	return last
}

func (d *demo) note(format string, args ...any) {
	d.summary = append(d.summary, fmt.Sprintf(format, args...))
}

// idunno runs one idunno command, echoing it and its output.
func (d *demo) idunno(args ...string) error {
	fmt.Printf("$ idunno %s\n", strings.Join(args, " "))
	cmd := exec.Command(d.bin, args...)
	cmd.Env = d.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		if l != "" {
			fmt.Println("  " + l)
		}
	}
	if err != nil {
		return fmt.Errorf("idunno %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func say(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

// idxPrefix writes the first n images of a (gzipped) IDX image file as a plain IDX file.
func idxPrefix(src, dst string, n int) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%w (is Debian's dataset-fashion-mnist installed? make demo installs it)", err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	if strings.HasSuffix(src, ".gz") {
		if r, err = gzip.NewReader(r); err != nil {
			return err
		}
	}
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(hdr) != 0x803 || int(binary.BigEndian.Uint32(hdr[4:])) < n {
		return fmt.Errorf("%s: not an IDX image file with %d images", src, n)
	}
	binary.BigEndian.PutUint32(hdr[4:], uint32(n))
	size := int64(binary.BigEndian.Uint32(hdr[8:]) * binary.BigEndian.Uint32(hdr[12:]))
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	if _, err := out.Write(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(out, r, size*int64(n)); err != nil {
		return err
	}
	return out.Close()
}

// checkResult reads a result CSV and counts answered, missing and repeated query ids.
func checkResult(path string, want int) (n, lost, dup int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 0 || lines[0] != "query,top1,score" {
		return 0, 0, 0, fmt.Errorf("%s: missing header query,top1,score", path)
	}
	seen := make([]int, want)
	for _, l := range lines[1:] {
		q, _, _ := strings.Cut(l, ",")
		id, err := strconv.Atoi(q)
		if err != nil || id < 0 || id >= want {
			return 0, 0, 0, fmt.Errorf("%s: bad line %q", path, l)
		}
		seen[id]++
	}
	for _, c := range seen {
		switch {
		case c == 0:
			lost++
		case c > 1:
			dup += c - 1
		}
		if c > 0 {
			n++
		}
	}
	return n, lost, dup, nil
}
