package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"idunno/benchmarks/plot"
	"idunno/demo/scenario"
	"idunno/sched"
)

// manyConfig is one kind of job of the many-jobs runs: a zoo model at an input size, over
// Fashion-MNIST's 60,000 training images, with the task size left to the coordinator (as a
// new user would).
type manyConfig struct {
	model, size string
	batch       int
	weight      float64 // fair-time weight (job add --weight); 1 by default
}

// The four jobs, whose costs per query span about 1,000x; the 8-job run adds each
// twice.
var manyConfigs = []manyConfig{
	{"resnet50", "64x64", 8, 1}, {"resnet18", "32x32", 8, 1}, {"mobilenet_v2", "64x64", 8, 1}, {"lenet5", "28x28", 64, 1},
}

func manyJobArgs(name string, c manyConfig) []string {
	a := []string{"job", "add", "--name", name, "--model", c.model, "--data", "fmnist-train.idx.gz",
		"--batch", fmt.Sprint(c.batch), "--scale", "0.003921569"}
	if c.model != "lenet5" {
		a = append(a, "--grey-to-rgb", "--resize", c.size)
	}
	if c.weight != 1 {
		a = append(a, "--weight", fmt.Sprint(c.weight))
	}
	return a
}

// listSampler records every job's done count and share from one job-list call per sample.
type listSampler struct {
	d     *scenario.Driver
	jobs  []string
	start time.Time
	t     []float64
	done  [][]float64
	tasks [][]float64 // committed tasks
	share [][]float64
	live  [][]bool  // the job ran (added, not complete) at the sample
	cpu   []float64 // the cluster's processes' CPU seconds (user+system) at the sample
	pids  map[int]float64
	names map[int]string       // node name of each pid seen
	nodes []map[string]float64 // per node name (all its processes), CPU seconds at the sample
	mach  []machineCPU         // the whole machine's CPU at the sample
}

// machineCPU is the machine's cumulative CPU time in seconds from /proc/stat: busy (user,
// nice, system, irq, softirq) and steal (taken by the hypervisor).
type machineCPU struct{ busy, steal float64 }

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}
	}
	v := func(i int) float64 { var x float64; fmt.Sscan(f[i], &x); return x / 100 } // USER_HZ
	return machineCPU{busy: v(1) + v(2) + v(3) + v(6) + v(7), steal: v(8)}
}

// clusterCPU is the CPU time (user+system, seconds) the cluster's node processes have
// used, a killed one's last reading kept.
func (s *listSampler) clusterCPU() float64 {
	if s.pids == nil {
		s.pids, s.names = map[int]float64{}, map[int]string{}
	}
	for _, n := range s.d.Cluster.Nodes() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.PID))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		var u, st float64
		fmt.Sscan(f[11], &u)
		fmt.Sscan(f[12], &st)
		s.pids[n.PID] = (u + st) / 100 // USER_HZ
		s.names[n.PID] = n.Name
	}
	t := 0.0
	per := map[string]float64{}
	for pid, c := range s.pids {
		t += c
		per[s.names[pid]] += c
	}
	s.nodes = append(s.nodes, per)
	return t
}

// cpuBetween says where the machine's CPU went between samples k0 and k1, in cores: the
// cluster's nodes (each), the machine's other processes, and steal.
func (s *listSampler) cpuBetween(k0, k1 int) string {
	dt := s.t[k1] - s.t[k0]
	if dt <= 0 {
		return ""
	}
	var names []string
	for n := range s.nodes[k1] {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	cl := 0.0
	for _, n := range names {
		c := (s.nodes[k1][n] - s.nodes[k0][n]) / dt
		cl += c
		parts = append(parts, fmt.Sprintf("%s %.2f", n, c))
	}
	busy := (s.mach[k1].busy - s.mach[k0].busy) / dt
	return fmt.Sprintf("cluster %.2f cores (%s), other processes %.2f, steal %.2f",
		cl, strings.Join(parts, ", "), busy-cl, (s.mach[k1].steal-s.mach[k0].steal)/dt)
}

func (s *listSampler) sample() {
	var list []sched.JobSummary
	if err := s.d.Call("sched.job.list", struct{}{}, &list); err != nil {
		return // a missed sample; the rates read the neighbours
	}
	s.t = append(s.t, time.Since(s.start).Seconds())
	s.cpu = append(s.cpu, s.clusterCPU())
	s.mach = append(s.mach, readMachineCPU())
	for i, j := range s.jobs {
		k := slices.IndexFunc(list, func(x sched.JobSummary) bool { return x.Name == j })
		d, dt, sh, live := 0.0, 0.0, 0.0, false
		if k >= 0 {
			d, dt, sh, live = float64(list[k].Done), float64(list[k].DoneTasks), list[k].Share, !list[k].Complete
		} else if n := len(s.done[i]); n > 0 {
			d, dt = s.done[i][n-1], s.tasks[i][n-1] // removed: keep the last count
		}
		s.done[i] = append(s.done[i], d)
		s.tasks[i] = append(s.tasks[i], dt)
		s.share[i] = append(s.share[i], sh)
		s.live[i] = append(s.live[i], live)
	}
}

// rate is job i's queries/s from the last sample at least w seconds before sample k (0 if
// the samples don't reach back that far): a missed sample lengthens the window a little
// instead of leaving a hole.
func (s *listSampler) rate(i, k int, w float64) float64 {
	j := k
	for j > 0 && s.t[k]-s.t[j] < w-1e-9 {
		j--
	}
	if dt := s.t[k] - s.t[j]; dt >= w-1e-9 {
		return (s.done[i][k] - s.done[i][j]) / dt
	}
	return 0
}

// step is job i's one-task step at sample k: how far one completion moves its 10 s rate,
// as a fraction, i.e. one over the tasks it committed in the last 10 s (0 if none).
func (s *listSampler) step(i, k int) float64 {
	j := k
	for j > 0 && s.t[k]-s.t[j] < 10-1e-9 {
		j--
	}
	if dt := s.tasks[i][k] - s.tasks[i][j]; dt > 0 {
		return 1 / dt
	}
	return 0
}

// spreadAt is the spread (fastest/slowest-1) at sample k of the 10 s rates over weight
// of the jobs live at k and 10 s before it (false with fewer than two).
func (s *listSampler) spreadAt(k int, cfg []manyConfig) (float64, bool) {
	j := k
	for j > 0 && s.t[k]-s.t[j] < 10-1e-9 {
		j--
	}
	if s.t[k]-s.t[j] < 10-1e-9 {
		return 0, false
	}
	lo, hi, n := math.Inf(1), 0.0, 0
	for i := range s.jobs {
		if !s.live[i][k] || !s.live[i][j] {
			continue
		}
		r := s.rate(i, k, 10) / cfg[i].weight
		lo, hi, n = math.Min(lo, r), math.Max(hi, r), n+1
	}
	if n < 2 || lo <= 0 {
		return 0, false
	}
	return hi/lo - 1, true
}

func newSampler(d *scenario.Driver, jobs []string) *listSampler {
	n := len(jobs)
	return &listSampler{d: d, jobs: jobs, start: time.Now(), done: make([][]float64, n), tasks: make([][]float64, n),
		share: make([][]float64, n), live: make([][]bool, n)}
}

func (s *listSampler) runFor(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		next := time.Now().Add(250 * time.Millisecond)
		s.sample()
		time.Sleep(time.Until(next))
	}
}

// manyJobs runs n jobs (the 4 configs, each n/4 times) added 3 s apart and measures the
// spread of their 10 s rates while all run; each config alone, before and after those
// runs, gives the aggregate-throughput ratio.
func manyJobs(o options, counts []int) error {
	var models []string
	for _, c := range manyConfigs {
		models = append(models, c.model+":"+c.size)
	}
	// The runs alone before the others use the same models under other names: workers
	// keep 4 models, so the jobs together still start on workers that have none of
	// theirs (a cold start).
	d, err := setupAs(o, func(m string) []string { return []string{"alone-" + m} }, models...)
	if err != nil {
		return err
	}
	defer down(o, d)
	train := strings.Replace(o.fmnist, "t10k-images", "train-images", 1)
	if _, err := d.Run("put", train, "fmnist-train.idx.gz"); err != nil {
		return err
	}
	fmt.Printf("manyjobs: load average before: %s\n", loadavg())
	type result struct {
		n int
		manyResult
	}
	// Alone, before and after each run together: the machine is shared and its speed
	// drifts (the same job alone measured 80 and 97 queries per CPU-second in two runs an
	// hour apart, and moved 9-17% within one), so each run together is compared with the
	// alone rates measured right before and right after it, and with their mean.
	var sets []aloneRates // sets[i] just before the run of counts[i], sets[i+1] just after
	var setNames []string
	if o.manyAlone {
		before, err := measureAlone(d, "before", "alone-", 15*time.Second)
		if err != nil {
			return err
		}
		sets, setNames = append(sets, before), append(setNames, "before")
	}
	var results []result
	for _, n := range counts {
		r, err := manyRun(o, d, n)
		if err != nil {
			return err
		}
		results = append(results, result{n, r})
		if o.manyAlone {
			a, err := measureAlone(d, fmt.Sprintf("after%d", n), "", 0)
			if err != nil {
				return err
			}
			sets, setNames = append(sets, a), append(setNames, fmt.Sprintf("after the %d jobs", n))
		}
	}
	if !o.manyAlone {
		for _, r := range results {
			for _, l := range r.lines {
				fmt.Println(l)
			}
		}
		return nil
	}
	for _, c := range manyConfigs {
		var parts []string
		for i, a := range sets {
			parts = append(parts, fmt.Sprintf("%s %.1f queries/s, %.1f per cluster CPU-second", setNames[i], a.rate[c], a.perCPU[c]))
		}
		fmt.Printf("manyjobs: alone: %s %s: %s\n", c.model, c.size, strings.Join(parts, "; "))
	}
	for i, r := range results {
		for _, l := range r.lines {
			fmt.Println(l)
		}
		// The time the same queries would take run one after another, alone, over the
		// time they took together.
		work := func(a aloneRates, m manyResult) (seq, seqCPU float64) {
			for c, q := range m.done {
				seq += q / a.rate[c]
				seqCPU += q / a.perCPU[c]
			}
			return seq, seqCPU
		}
		before, after := sets[i], sets[i+1]
		report := func(what string, m manyResult) {
			sb, cb := work(before, m)
			sa, ca := work(after, m)
			seq, seqCPU := (sb+sa)/2, (cb+ca)/2
			fmt.Printf("manyjobs: %d jobs, %s: aggregate throughput %.1f%% of running the same jobs one after another (%.1f s of work alone done in %.1f s together; %.1f%% against the alone rates %s, %.1f%% %s)\n",
				r.n, what, 100*seq/m.secs, seq, m.secs, 100*sb/m.secs, setNames[i], 100*sa/m.secs, setNames[i+1])
			// The same per CPU-second the cluster's processes got: the machine is shared, and
			// what other processes take differs between the runs.
			fmt.Printf("manyjobs: %d jobs, %s: per cluster CPU-second, %.1f%% (%.1f CPU-s of work alone done in %.1f CPU-s together, the cluster using %.2f cores; %.1f%% %s, %.1f%% %s)\n",
				r.n, what, 100*seqCPU/m.cpu, seqCPU, m.cpu, m.cpu/m.secs, 100*cb/m.cpu, setNames[i], 100*ca/m.cpu, setNames[i+1])
		}
		report(fmt.Sprintf("the steady window (%d model loads in it)", r.loads), r.manyResult)
		if r.warm != nil {
			report("after the workers' last model load", *r.warm)
		}
	}
	fmt.Printf("manyjobs: load average after: %s\n", loadavg())
	return nil
}

// profileSegments counts the profile segments profileMark has started.
var profileSegments int

// profileMark starts a new CPU profile segment on every node, when the nodes profile
// (IDUNNO_CPUPROFILE in this process's environment, which they inherit): each node ends
// its profile file at SIGUSR1 and starts FILE.1, FILE.2, ... (a restarted node counts from
// 1 again). The line printed says which segment holds which phase.
func profileMark(d *scenario.Driver, phase string, except ...string) {
	if os.Getenv("IDUNNO_CPUPROFILE") == "" {
		return
	}
	profileSegments++
	for _, n := range d.Cluster.Nodes() {
		if slices.Contains(except, n.Name) {
			continue // just started: SIGUSR1 before its handler is set would end it
		}
		if p, err := os.FindProcess(n.PID); err == nil {
			p.Signal(syscall.SIGUSR1)
		}
	}
	fmt.Printf("manyjobs: profile segment %d (FILE.%d): %s\n", profileSegments, profileSegments, phase)
}

// aloneRates are each config's rate alone on the whole cluster: queries per second and
// per cluster CPU-second.
type aloneRates struct{ rate, perCPU map[manyConfig]float64 }

// measureAlone runs each config by itself on the whole cluster (its model stored as
// prefix+model), from warm after its first completion (past plan builds and model loads on
// the other workers; from the first completion if the job has ended by then) for 15 s or
// until its last task is committed.
func measureAlone(d *scenario.Driver, tag, prefix string, warm time.Duration) (aloneRates, error) {
	a := aloneRates{rate: map[manyConfig]float64{}, perCPU: map[manyConfig]float64{}}
	for i, c := range manyConfigs {
		name := fmt.Sprintf("alone-%s-%d-%s", tag, i, c.model)
		args := manyJobArgs(name, c)
		args[slices.Index(args, "--model")+1] = prefix + c.model
		if _, err := d.Run(args...); err != nil {
			return a, err
		}
		s := newSampler(d, []string{name})
		deadline := time.Now().Add(2 * time.Minute)
		for s.sample(); len(s.t) == 0 || s.done[0][len(s.t)-1] == 0; s.sample() {
			if time.Now().After(deadline) {
				return a, fmt.Errorf("%s alone: nothing done after 2 minutes", name)
			}
			time.Sleep(250 * time.Millisecond)
		}
		k0 := len(s.t) - 1
		for t0 := s.t[k0]; s.t[len(s.t)-1] < t0+warm.Seconds() && s.live[0][len(s.t)-1]; {
			s.runFor(250 * time.Millisecond)
		}
		if s.live[0][len(s.t)-1] {
			k0 = len(s.t) - 1
		}
		profileMark(d, fmt.Sprintf("alone (%s) %s, measured", tag, c.model))
		end := time.Now().Add(15 * time.Second)
		for time.Now().Before(end) && s.live[0][len(s.t)-1] {
			s.runFor(250 * time.Millisecond)
		}
		k1 := len(s.t) - 1
		for k1 > k0+1 && s.done[0][k1] == s.done[0][k1-1] {
			k1-- // samples after the last commit add time, not queries
		}
		if k1 == k0 {
			return a, fmt.Errorf("%s alone: done within one sample; no rate", name)
		}
		a.rate[c] = (s.done[0][k1] - s.done[0][k0]) / (s.t[k1] - s.t[k0])
		a.perCPU[c] = (s.done[0][k1] - s.done[0][k0]) / (s.cpu[k1] - s.cpu[k0])
		fmt.Printf("manyjobs: alone (%s): %s %s batch %d: %.1f queries/s, %.1f queries per cluster CPU-second, the cluster using %.2f cores (%.1f s measured); %s\n",
			tag, c.model, c.size, c.batch, a.rate[c], a.perCPU[c], (s.cpu[k1]-s.cpu[k0])/(s.t[k1]-s.t[k0]), s.t[k1]-s.t[k0], s.cpuBetween(k0, k1))
		profileMark(d, fmt.Sprintf("alone (%s) %s, past the measured window", tag, c.model))
		d.Run("job", "remove", name)
	}
	return a, nil
}

type manyResult struct {
	done  map[manyConfig]float64
	secs  float64
	cpu   float64 // the cluster's CPU seconds in the steady window
	lines []string
	// warm is the same over the part of the steady window after the last model load on
	// any worker (nil with no load in the window, or under 20 s after it): the alone runs are measured with every worker's
	// model loaded, while in the runs together workers go on loading the models of jobs
	// they help for a while (each a fetch from SDFS and a plan build).
	warm  *manyResult
	loads int // model loads in the steady window
}

// modelLoads returns when workers had a job's model ready (the scheduler logs it), in
// seconds from start, from every node's log.
func modelLoads(d *scenario.Driver, start time.Time) []float64 {
	var out []float64
	for _, n := range d.Cluster.Nodes() {
		b, err := os.ReadFile(filepath.Join(n.DataDir, "node.log"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "ready (model") {
				continue
			}
			ts, _, _ := strings.Cut(line, " ")
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				out = append(out, t.Sub(start).Seconds())
			}
		}
	}
	slices.Sort(out)
	return out
}

func manyRun(o options, d *scenario.Driver, n int) (manyResult, error) {
	var jobs []string
	var cfg []manyConfig
	for k := 0; k < n/len(manyConfigs); k++ {
		for _, c := range manyConfigs {
			jobs = append(jobs, fmt.Sprintf("m%d-%s-%c", n, strings.ReplaceAll(c.model, "_", ""), 'a'+k))
			cfg = append(cfg, c)
		}
	}
	if n == 2 { // the most and the least expensive, added at the same moment
		for _, c := range []manyConfig{manyConfigs[0], manyConfigs[3]} {
			jobs = append(jobs, fmt.Sprintf("m2-%s", c.model))
			cfg = append(cfg, c)
		}
	}
	// With --many-events, a job of the last config is added again at the end (into a
	// warm cluster: its model is loaded on workers already); the sampler follows it too.
	again := jobs[len(jobs)-1] + "-again"
	s := newSampler(d, append(slices.Clone(jobs), again))
	allCfg := append(slices.Clone(cfg), cfg[len(cfg)-1])
	var marks []plot.Mark
	load0 := loadavg()
	for i, j := range jobs {
		if _, err := d.Run(manyJobArgs(j, cfg[i])...); err != nil {
			return manyResult{}, err
		}
		marks = append(marks, plot.Mark{X: time.Since(s.start).Seconds(), Label: "+" + j})
		if n > 2 { // two jobs are added at the same moment
			s.runFor(3 * time.Second)
		}
	}
	lastAdd := marks[len(marks)-1].X
	s.runFor(20 * time.Second)
	profileMark(d, fmt.Sprintf("%d jobs, from 20 s after the last add", n))
	steady := 60 * time.Second
	if o.manyAlone {
		steady = 120 * time.Second // room for a window after the workers' last model load
	}
	s.runFor(steady)
	// Events (--many-events): two workers killed (SIGKILL), the same two restarted (they
	// rejoin), then the last job removed; the steady-state figures stop at the first.
	steadyTo := math.Inf(1)
	var events []plot.Mark
	if o.manyEvents {
		steadyTo = time.Since(s.start).Seconds()
		ws, err := d.Workers()
		if err != nil || len(ws) < 2 {
			return manyResult{}, fmt.Errorf("%d jobs: workers to kill: %v %v", n, ws, err)
		}
		events = append(events, plot.Mark{X: time.Since(s.start).Seconds(), Label: "kill " + strings.Join(ws[:2], ",")})
		if err := d.Cluster.Kill(ws[:2]...); err != nil {
			return manyResult{}, err
		}
		profileMark(d, fmt.Sprintf("%d jobs, from the kill of %s", n, strings.Join(ws[:2], ",")))
		s.runFor(30 * time.Second)
		events = append(events, plot.Mark{X: time.Since(s.start).Seconds(), Label: "join " + strings.Join(ws[:2], ",")})
		if err := d.Cluster.Restart(ws[:2]...); err != nil {
			return manyResult{}, err
		}
		profileMark(d, fmt.Sprintf("%d jobs, from the rejoin of %s (not marked: their files count from their restart)", n, strings.Join(ws[:2], ",")), ws[:2]...)
		s.runFor(30 * time.Second)
		events = append(events, plot.Mark{X: time.Since(s.start).Seconds(), Label: "-" + jobs[len(jobs)-1]})
		if _, err := d.Run("job", "remove", jobs[len(jobs)-1]); err != nil {
			return manyResult{}, err
		}
		profileMark(d, fmt.Sprintf("%d jobs, from the removal of %s", n, jobs[len(jobs)-1]))
		s.runFor(30 * time.Second)
		events = append(events, plot.Mark{X: time.Since(s.start).Seconds(), Label: "+" + again})
		if _, err := d.Run(manyJobArgs(again, cfg[len(cfg)-1])...); err != nil {
			return manyResult{}, err
		}
		s.runFor(30 * time.Second)
		marks = append(marks, events...)
		d.Run("job", "remove", again)
	}
	for _, j := range jobs {
		d.Run("job", "remove", j)
	}
	// Steady state: from 10 s after every job's first completion (and the last add) while
	// every job runs. Before that a 10 s window holds a job's start: under load a worker
	// new to a model fetches it from SDFS and builds its plan (ResNet-50 is 100 MB), which
	// took up to 25 s, and fair time holds the other jobs to the pace of the slowest.
	steadyFrom := lastAdd
	var firsts []string
	for i, j := range jobs {
		k := slices.IndexFunc(s.done[i], func(d float64) bool { return d > 0 })
		if k < 0 {
			return manyResult{}, fmt.Errorf("%d jobs: %s never completed a task", n, j)
		}
		steadyFrom = math.Max(steadyFrom, s.t[k])
		firsts = append(firsts, fmt.Sprintf("%s %.1f s", j, s.t[k]-marks[i].X))
	}
	steadyFrom += 10
	var at, spreads []float64
	first, last := -1, -1
	for k := range s.t {
		all := true
		for i := range jobs {
			all = all && s.live[i][k]
		}
		if s.t[k] < steadyFrom || s.t[k] > steadyTo || !all {
			continue
		}
		if first < 0 {
			first = k
		}
		last = k
		lo, hi := math.Inf(1), 0.0
		for i := range jobs {
			r := s.rate(i, k, 10) / cfg[i].weight
			lo, hi = math.Min(lo, r), math.Max(hi, r)
		}
		if lo > 0 && (len(at) == 0 || s.t[k]-at[len(at)-1] >= 0.99) { // one sample a second
			at, spreads = append(at, s.t[k]), append(spreads, hi/lo-1)
		}
	}
	if first < 0 || last <= first {
		return manyResult{}, fmt.Errorf("%d jobs: no steady window (a job finished early?)", n)
	}
	// window is the queries each config did, the seconds and the cluster's CPU seconds
	// from sample k to the end of the steady window.
	window := func(k int) manyResult {
		w := manyResult{done: map[manyConfig]float64{}, secs: s.t[last] - s.t[k], cpu: s.cpu[last] - s.cpu[k]}
		for i := range jobs {
			w.done[cfg[i]] += s.done[i][last] - s.done[i][k]
		}
		return w
	}
	res := window(first)
	warmFrom := s.t[first]
	for _, t := range modelLoads(d, s.start) {
		if t >= s.t[first] && t <= s.t[last] {
			res.loads++
			warmFrom = t
		}
	}
	line := fmt.Sprintf("manyjobs: %d jobs: %d model loads in the steady window (%.0f-%.0f s)", n, res.loads, s.t[first], s.t[last])
	if res.loads > 0 {
		line += fmt.Sprintf(", the last at %.0f s", warmFrom)
		// With no load in it, the window after the last is the steady window itself.
		if k := slices.IndexFunc(s.t, func(x float64) bool { return x >= warmFrom }); k >= first && s.t[last]-s.t[k] >= 20 {
			w := window(k)
			res.warm = &w
		} else {
			line += ": no 20 s window after it"
		}
	}
	res.lines = append(res.lines, line)
	// Files: rates and shares over time, the spread per sample.
	header := []string{"seconds"}
	rows := make([][]float64, len(s.t))
	var rateSeries, shareSeries, stepSeries []plot.Series
	var stepLines []string
	for i, j := range jobs {
		header = append(header, j+"_qps_10s", j+"_share", j+"_step")
		rs := plot.Series{Name: j}
		ss := plot.Series{Name: j}
		ts := plot.Series{Name: j}
		var steady []float64
		for k := range s.t {
			r, st := s.rate(i, k, 10), s.step(i, k)
			rows[k] = append(rows[k], r, s.share[i][k], st)
			rs.X, rs.Y = append(rs.X, s.t[k]), append(rs.Y, r)
			if s.share[i][k] > 0 { // a log scale: leave out the samples before the add and after the end
				ss.X, ss.Y = append(ss.X, s.t[k]), append(ss.Y, s.share[i][k])
			}
			if st > 0 {
				ts.X, ts.Y = append(ts.X, s.t[k]), append(ts.Y, 100*st)
			}
			if k >= first && k <= last && st > 0 {
				steady = append(steady, st)
			}
		}
		rateSeries, shareSeries, stepSeries = append(rateSeries, rs), append(shareSeries, ss), append(stepSeries, ts)
		if len(steady) > 0 {
			slices.Sort(steady)
			stepLines = append(stepLines, fmt.Sprintf("%s %.1f%%", j, 100*steady[len(steady)/2]))
		}
	}
	for k := range s.t {
		rows[k] = append([]float64{s.t[k]}, rows[k]...)
	}
	base := filepath.Join(o.out, fmt.Sprintf("manyjobs%d", n))
	if err := plot.WriteCSV(base+".csv", header, rows); err != nil {
		return res, err
	}
	var sprows [][]float64
	for k := range at {
		sprows = append(sprows, []float64{at[k], spreads[k]})
	}
	if err := plot.WriteCSV(base+"_spread.csv", []string{"seconds", "spread_10s"}, sprows); err != nil {
		return res, err
	}
	if err := (plot.Chart{Title: fmt.Sprintf("%d jobs: query rate of each (10 s window)", n), XLabel: "time (s)", YLabel: "queries/s",
		Series: rateSeries, Marks: marks}).Save(base + ".png"); err != nil {
		return res, err
	}
	if err := (plot.Chart{Title: fmt.Sprintf("%d jobs: share of worker time the controller gives each", n), XLabel: "time (s)", YLabel: "share",
		LogY: true, Series: shareSeries}).Save(base + "_share.png"); err != nil {
		return res, err
	}
	if err := (plot.Chart{Title: fmt.Sprintf("%d jobs: one task's step in each job's 10 s rate", n), XLabel: "time (s)", YLabel: "% of the 10 s count",
		LogY: true, Series: stepSeries}).Save(base + "_step.png"); err != nil {
		return res, err
	}
	sorted := slices.Clone(spreads)
	slices.Sort(sorted)
	res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: load average %s at the start, %s at the end", n, load0, loadavg()))
	res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: first completion after the add: %s", n, strings.Join(firsts, ", ")))
	res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: one task's step in the 10 s rate (median in the steady state): %s", n, strings.Join(stepLines, ", ")))
	res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: spread of the 10 s rates over weight (fastest/slowest-1), one sample a second from 10 s after every job's first completion (%.0f s), %d samples over %.0f s: median %.1f%%, worst %.1f%%",
		n, steadyFrom, len(spreads), res.secs, 100*sorted[len(sorted)/2], 100*sorted[len(sorted)-1]))
	// The cold start as the issue bounds an arrival: how long after the last add until the
	// spread of all the jobs' 10 s rates stays within 15% (a job with nothing done yet
	// counts as infinitely far), from when the last job's window is 10 s old.
	coldSettled, coldEnd := math.NaN(), math.Min(steadyTo, s.t[len(s.t)-1])
	for k := range s.t {
		if s.t[k] < lastAdd+10 || s.t[k] > coldEnd {
			continue
		}
		lo, hi := math.Inf(1), 0.0
		for i := range jobs {
			r := s.rate(i, k, 10) / cfg[i].weight
			lo, hi = math.Min(lo, r), math.Max(hi, r)
		}
		if lo <= 0 || hi/lo-1 > 0.15 {
			coldSettled = math.NaN()
		} else if math.IsNaN(coldSettled) {
			coldSettled = s.t[k] - lastAdd
		}
	}
	res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: cold start: spread of all %d jobs within 15%% for good %.1f s after the last add (the first sample is at 10 s)",
		n, len(jobs), coldSettled))
	// After each event: how long until the spread of the jobs that ran through the 10 s
	// window stays within 15% (the bound on one sample) until the next event.
	for e, ev := range events {
		next := s.t[len(s.t)-1] + 1
		if e+1 < len(events) {
			next = events[e+1].X
		}
		settled, worst, over := math.NaN(), 0.0, 0
		var after []float64
		for k := range s.t {
			if s.t[k] < ev.X || s.t[k] >= next {
				continue
			}
			sp, ok := s.spreadAt(k, allCfg)
			if !ok {
				continue
			}
			if sp > 0.15 {
				settled, over = math.NaN(), over+1
			} else if math.IsNaN(settled) {
				settled = s.t[k] - ev.X
			}
			if s.t[k] >= ev.X+10 {
				worst = math.Max(worst, sp)
				after = append(after, sp)
			}
		}
		slices.Sort(after)
		med := math.NaN()
		if len(after) > 0 {
			med = after[len(after)/2]
		}
		res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: event at %.0f s (%s): spread within 15%% for good %.1f s after it; from 10 s after it to the next event median %.1f%%, worst %.1f%%",
			n, ev.X, ev.Label, settled, 100*med, 100*worst))
	}
	// Where the CPU went in each phase: the steady state, then 0-10 s and 10 s to the
	// next event after each event (a rejoin that slows the cluster shows here).
	phases := []float64{steadyFrom, math.Min(steadyTo, s.t[len(s.t)-1])}
	for e, ev := range events {
		next := s.t[len(s.t)-1]
		if e+1 < len(events) {
			next = events[e+1].X
		}
		phases = append(phases, ev.X, math.Min(ev.X+10, next), math.Min(ev.X+10, next), next)
	}
	for p := 0; p+1 < len(phases); p += 2 {
		k0 := slices.IndexFunc(s.t, func(x float64) bool { return x >= phases[p] })
		k1 := slices.IndexFunc(s.t, func(x float64) bool { return x >= phases[p+1] })
		if k1 < 0 {
			k1 = len(s.t) - 1
		}
		if k0 < 0 || k1 <= k0 {
			continue
		}
		total := 0.0
		for i := range jobs {
			total += (s.done[i][k1] - s.done[i][k0]) / (s.t[k1] - s.t[k0])
		}
		res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: %.0f-%.0f s: %.0f queries/s in all; %s",
			n, s.t[k0], s.t[k1], total, s.cpuBetween(k0, k1)))
	}
	// With weights: each job's rate over its weight, over the mean of that (1 is exact).
	weighted := false
	for i := range jobs {
		weighted = weighted || cfg[i].weight != 1
	}
	if weighted {
		var per []float64
		mean := 0.0
		for i := range jobs {
			q := (s.done[i][last] - s.done[i][first]) / res.secs / cfg[i].weight
			per = append(per, q)
			mean += q / float64(len(jobs))
		}
		var parts []string
		for i, j := range jobs {
			parts = append(parts, fmt.Sprintf("%s weight %g: %.0f q/s, ratio %.3f", j, cfg[i].weight, per[i]*cfg[i].weight, per[i]/mean))
		}
		res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: rate over weight against the mean over the steady state: %s", n, strings.Join(parts, "; ")))
	}
	// The spread per non-overlapping 10 s window, and each job's rate in it.
	for w0 := s.t[first]; w0+10 <= s.t[last]+1e-9; w0 += 10 {
		k0 := slices.IndexFunc(s.t, func(x float64) bool { return x >= w0 })
		k1 := slices.IndexFunc(s.t, func(x float64) bool { return x >= w0+10 })
		if k1 < 0 {
			k1 = last
		}
		var parts []string
		lo, hi := math.Inf(1), 0.0
		for i, j := range jobs {
			r := (s.done[i][k1] - s.done[i][k0]) / (s.t[k1] - s.t[k0])
			lo, hi = math.Min(lo, r/cfg[i].weight), math.Max(hi, r/cfg[i].weight)
			parts = append(parts, fmt.Sprintf("%s %.0f", j, r))
		}
		res.lines = append(res.lines, fmt.Sprintf("manyjobs: %d jobs: window %.0f-%.0f s: spread %.1f%% (%s q/s)", n, s.t[k0], s.t[k1], 100*(hi/lo-1), strings.Join(parts, ", ")))
	}
	for _, l := range res.lines {
		fmt.Println(l)
	}
	return res, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
