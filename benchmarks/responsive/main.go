// Command responsive measures whether a machine stays usable while a local cluster computes
// at full speed: a 10-node local cluster runs two inference jobs (LeNet-5 and ResNet-18 on
// Fashion-MNIST), and meanwhile
//
//   - a short unrelated process (`python3 -c pass`) and a client call (`idunno job stats`)
//     are timed, against the same on the idle machine;
//   - a worker is killed (SIGKILL) and the time until every live node declares it failed is
//     taken from the nodes' logs (detection);
//   - the jobs' aggregate query rate is compared between windows with and without the probes.
//
// With --old-bin it runs the same scenario with a second binary (for example one built from
// an older commit) and prints both, so a priority change can be compared on the same machine.
//
//	go run ./benchmarks/responsive --bin bin/idunno --out benchmarks/out/responsive.csv
package main

import (
	"bufio"
	"encoding/csv"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"idunno/demo/scenario"
)

// keep leaves the cluster's directory (node logs) in place.
var keep bool

type options struct {
	fmnist, train, python string
	nodes, probes, kills  int
	rounds                int
	window, warmup        time.Duration
	resnetSize            string
}

// result is one arm's figures.
type result struct {
	label                        string
	pyIdle, pyLoaded             []float64 // seconds
	statsIdle, statsLoaded       []float64
	rateBase, rateProbed         float64   // queries/s, both jobs together
	detect                       []float64 // ms, worst live observer per kill
	falseFailures, pauses        int       // false failures (distinct victim lives), detector pauses logged
	jobAQueries, jobBQueries     int
	rateWindowsBase, rateWindows []float64
	probeCPU, probedSeconds      float64 // CPU seconds the probes used, and the probed windows' length
}

func main() {
	var o options
	bin := flag.String("bin", "bin/idunno", "the idunno binary")
	oldBin := flag.String("old-bin", "", "a second binary to compare with (optional)")
	out := flag.String("out", "", "CSV of every probe and window (optional)")
	flag.StringVar(&o.fmnist, "fmnist", "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "Fashion-MNIST 10k images (the idle-call job)")
	flag.StringVar(&o.train, "train", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "Fashion-MNIST 60k images (the two long jobs)")
	flag.StringVar(&o.python, "python", "python3", "the short unrelated process (run with -c pass)")
	flag.IntVar(&o.nodes, "nodes", 10, "cluster size")
	flag.IntVar(&o.probes, "probes", 20, "probes of each kind per phase")
	flag.IntVar(&o.kills, "kills", 3, "workers killed one after another (detection)")
	flag.IntVar(&o.rounds, "rounds", 3, "probed windows (each between two unprobed ones)")
	flag.DurationVar(&o.window, "window", 20*time.Second, "length of each throughput window")
	flag.StringVar(&o.resnetSize, "resnet-size", "112x112", "ResNet-18 input size")
	flag.BoolVar(&keep, "keep", false, "keep the cluster directory (node logs)")
	flag.DurationVar(&o.warmup, "warmup", 30*time.Second, "time both jobs run before the first window")
	flag.Parse()
	var rs []*result
	arms := []string{*bin}
	if *oldBin != "" {
		arms = append(arms, *oldBin)
	}
	for _, b := range arms {
		r, err := run(o, b)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench responsive:", err)
			os.Exit(1)
		}
		report(r)
		rs = append(rs, r)
	}
	if *out != "" {
		if err := writeCSV(*out, rs); err != nil {
			fmt.Fprintln(os.Stderr, "bench responsive:", err)
			os.Exit(1)
		}
	}
}

func run(o options, bin string) (*result, error) {
	r := &result{label: bin}
	py, err := exec.LookPath(o.python)
	if err != nil {
		return nil, err
	}
	for i := 0; i < o.probes; i++ {
		r.pyIdle = append(r.pyIdle, timeCmd(exec.Command(py, "-c", "pass")))
	}
	dir, err := os.MkdirTemp("", "idunno-responsive-")
	if err != nil {
		return nil, err
	}
	if keep {
		fmt.Println("cluster directory kept:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	d, err := scenario.Up(bin, dir, o.nodes, 0, false)
	if err != nil {
		return nil, err
	}
	defer d.Down()
	lenet, resnet := filepath.Join(dir, "lenet5.onnx"), filepath.Join(dir, "resnet18.onnx")
	h, w, _ := strings.Cut(o.resnetSize, "x")
	if err := d.Steps(
		[]string{"put", o.fmnist, "t10k.idx.gz"}, []string{"put", o.train, "train.idx.gz"},
		[]string{"train", "start"},
		[]string{"zoo", "lenet5", "--out", lenet, "--classes", "10", "--input-shape", "1,28,28"},
		[]string{"zoo", "resnet18", "--out", resnet, "--classes", "10", "--input-shape", "3," + h + "," + w},
		[]string{"train", "add", "--name", "lenet5", "--model", lenet},
		[]string{"train", "add", "--name", "resnet18", "--model", resnet},
		[]string{"train", "stop"}, []string{"inference", "start"},
		// A short job, run to completion on the idle cluster: `job stats` is then timed on it
		// idle and again while the long jobs run.
		[]string{"job", "add", "--name", "idle", "--model", "lenet5", "--data", "t10k.idx.gz", "--batch", "64", "--scale", "0.003921569"},
		[]string{"job", "wait", "idle"},
	); err != nil {
		return nil, err
	}
	stats := func() float64 {
		c := exec.Command(bin, "job", "stats", "idle")
		c.Env = append(os.Environ(), "IDUNNO_CLUSTER="+d.Cluster.Dir())
		return timeCmd(c)
	}
	for i := 0; i < o.probes; i++ {
		r.statsIdle = append(r.statsIdle, stats())
	}
	if err := d.Steps(
		// Tasks of a few hundred queries, so a window's query count moves in small steps.
		[]string{"job", "add", "--name", "a-lenet5", "--model", "lenet5", "--data", "train.idx.gz", "--batch", "64", "--task-size", "256", "--scale", "0.003921569"},
		[]string{"job", "add", "--name", "b-resnet18", "--model", "resnet18", "--data", "train.idx.gz", "--batch", "8",
			"--scale", "0.003921569", "--grey-to-rgb", "--resize", o.resnetSize},
	); err != nil {
		return nil, err
	}
	jobs := []string{"a-lenet5", "b-resnet18"}
	done := func() int {
		n := 0
		for _, j := range jobs {
			if st, err := d.Stats(j); err == nil {
				n += st.Done
			}
		}
		return n
	}
	time.Sleep(o.warmup) // every worker has loaded the models and data; both jobs measured and split fairly
	window := func(probe bool) float64 {
		t0, n0 := time.Now(), done()
		if probe {
			for time.Since(t0) < o.window {
				w, c := timeCmdCPU(exec.Command(py, "-c", "pass"))
				r.pyLoaded = append(r.pyLoaded, w)
				r.probeCPU += c
				sc := exec.Command(bin, "job", "stats", "idle")
				sc.Env = append(os.Environ(), "IDUNNO_CLUSTER="+d.Cluster.Dir())
				w, c = timeCmdCPU(sc)
				r.statsLoaded = append(r.statsLoaded, w)
				r.probeCPU += c
				time.Sleep(o.window / time.Duration(o.probes))
			}
			r.probedSeconds += time.Since(t0).Seconds()
		} else {
			time.Sleep(o.window)
		}
		return float64(done()-n0) / time.Since(t0).Seconds()
	}
	// base, probed, base, probed, ..., base: the probed windows are compared with the
	// base windows around them, so a slow drift of the rate cancels out.
	for i := 0; i < o.rounds; i++ {
		r.rateWindowsBase = append(r.rateWindowsBase, window(false))
		r.rateWindows = append(r.rateWindows, window(true))
	}
	r.rateWindowsBase = append(r.rateWindowsBase, window(false))
	r.rateBase, r.rateProbed = mean(r.rateWindowsBase), mean(r.rateWindows)

	// Detection: kill a worker (neither coordinator nor standby) while the jobs run.
	offs := logOffsets(d)
	killed := map[string]bool{}
	for k := 0; k < o.kills; k++ {
		ws, err := d.Workers()
		if err != nil || len(ws) == 0 {
			return nil, fmt.Errorf("no worker to kill: %v", err)
		}
		victim := ws[len(ws)-1]
		killed[victim] = true
		t0 := time.Now()
		if err := d.Cluster.Kill(victim); err != nil {
			return nil, err
		}
		worst := 5 * time.Second
		seen := map[string]time.Duration{}
		for time.Since(t0) < 5*time.Second {
			time.Sleep(100 * time.Millisecond)
			for _, e := range scanFailed(d, offs) {
				if e.subject == victim && e.observer != victim {
					if _, ok := seen[e.observer]; !ok {
						seen[e.observer] = e.at.Sub(t0)
					}
				}
			}
			if len(seen) >= len(d.Cluster.Live()) {
				break
			}
		}
		if len(seen) >= len(d.Cluster.Live()) {
			worst = 0
			for _, l := range seen {
				worst = max(worst, l)
			}
		}
		r.detect = append(r.detect, float64(worst.Microseconds())/1000)
		if err := d.Cluster.Restart(victim); err != nil {
			return nil, err
		}
		time.Sleep(2 * time.Second)
		offs = logOffsets(d)
	}
	// A node declared failed although it was not killed is a false failure (counted once
	// per life of the victim, however many members declared it).
	falsely := map[string]bool{}
	for _, e := range scanFailed(d, map[string]int64{}) {
		if !killed[e.subject] {
			falsely[e.subject+" "+e.life] = true
		}
	}
	r.falseFailures = len(falsely)
	r.pauses = countPauses(d)
	for i, j := range jobs {
		if st, err := d.Stats(j); err == nil {
			if i == 0 {
				r.jobAQueries = st.Done
			} else {
				r.jobBQueries = st.Done
			}
		}
	}
	return r, nil
}

// timeCmd runs c and returns its wall time in seconds (-1 if it failed).
func timeCmd(c *exec.Cmd) float64 {
	w, _ := timeCmdCPU(c)
	return w
}

// timeCmdCPU runs c and returns its wall time and the CPU time it used (user + system), in seconds.
func timeCmdCPU(c *exec.Cmd) (wall, cpu float64) {
	t0 := time.Now()
	if err := c.Run(); err != nil {
		return -1, 0
	}
	wall = time.Since(t0).Seconds()
	if ps := c.ProcessState; ps != nil {
		cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	return wall, cpu
}

type failedLine struct {
	at                      time.Time
	observer, subject, life string
}

// countPauses counts the "paused for" lines of every node's detector: its loop did not
// run for over 200 ms.
func countPauses(d *scenario.Driver) int {
	n := 0
	for _, nd := range d.Cluster.Nodes() {
		b, _ := os.ReadFile(filepath.Join(nd.DataDir, "node.log"))
		n += strings.Count(string(b), " fd: paused for ")
	}
	return n
}

// logOffsets is the current size of every node's log.
func logOffsets(d *scenario.Driver) map[string]int64 {
	offs := map[string]int64{}
	for _, n := range d.Cluster.Nodes() {
		if fi, err := os.Stat(filepath.Join(n.DataDir, "node.log")); err == nil {
			offs[n.Name] = fi.Size()
		}
	}
	return offs
}

// scanFailed reads the fd "NAME (ADDR) failed" lines every node logged after offs.
// Lines look like "2026-11-23T19:40:01.123Z node3 fd: node7 (127.0.0.1:7070) failed ...".
func scanFailed(d *scenario.Driver, offs map[string]int64) []failedLine {
	var out []failedLine
	for _, n := range d.Cluster.Nodes() {
		f, err := os.Open(filepath.Join(n.DataDir, "node.log"))
		if err != nil {
			continue
		}
		f.Seek(offs[n.Name], 0)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 6 || fs[2] != "fd:" || fs[5] != "failed" {
				continue
			}
			at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", fs[0])
			if err != nil {
				continue
			}
			life := ""
			if len(fs) > 7 {
				life = fs[7]
			}
			out = append(out, failedLine{at: at, observer: fs[1], subject: fs[3], life: life})
		}
		f.Close()
	}
	return out
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func report(r *result) {
	fmt.Printf("responsive (%s)\n", r.label)
	pi, pl := pct(r.pyIdle, 50), pct(r.pyLoaded, 50)
	si, sl := pct(r.statsIdle, 50), pct(r.statsLoaded, 50)
	fmt.Printf("  python3 -c pass: idle p50 %.3f s; under load p50 %.3f s (%.2fx), max %.3f s (%.2fx)\n",
		pi, pl, pl/pi, pct(r.pyLoaded, 100), pct(r.pyLoaded, 100)/pi)
	fmt.Printf("  idunno job stats: idle p50 %.3f s; under load p50 %.3f s (%.2fx), max %.3f s (%.2fx)\n",
		si, sl, sl/si, pct(r.statsLoaded, 100), pct(r.statsLoaded, 100)/si)
	fmt.Printf("  jobs' rate: %.1f q/s without probes (windows %s), %.1f q/s with probes (windows %s): %+.1f%%; the probes used %.1f%% of the machine's CPU time in their windows\n",
		r.rateBase, fmtList(r.rateWindowsBase), r.rateProbed, fmtList(r.rateWindows), 100*(r.rateProbed/r.rateBase-1),
		100*r.probeCPU/(r.probedSeconds*float64(runtime.NumCPU())))
	fmt.Printf("  detection of a killed worker at every live member: %s ms (max %.0f ms); false failures: %d; detector pauses over 200 ms: %d\n",
		fmtList(r.detect), pct(r.detect, 100), r.falseFailures, r.pauses)
	fmt.Printf("  queries done: a-lenet5 %d, b-resnet18 %d\n", r.jobAQueries, r.jobBQueries)
}

func fmtList(xs []float64) string {
	var p []string
	for _, x := range xs {
		p = append(p, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(p, "/")
}

func writeCSV(path string, rs []*result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"binary", "what", "i", "value"})
	for _, r := range rs {
		rows := []struct {
			what string
			xs   []float64
		}{{"python_idle_s", r.pyIdle}, {"python_loaded_s", r.pyLoaded}, {"stats_idle_s", r.statsIdle},
			{"stats_loaded_s", r.statsLoaded}, {"rate_base_qps", r.rateWindowsBase}, {"rate_probed_qps", r.rateWindows},
			{"detect_ms", r.detect}}
		for _, row := range rows {
			for i, x := range row.xs {
				w.Write([]string{r.label, row.what, fmt.Sprint(i), fmt.Sprintf("%.4f", x)})
			}
		}
	}
	w.Flush()
	return w.Error()
}
