package dispatch

import (
	"math"
	"slices"
	"sort"
)

// JobLoad is what the fair-time controller knows about one running job.
type JobLoad struct {
	Name  string
	Cost  float64 // measured worker-seconds per query; 0 while unknown
	FLOPs float64 // the model's compute per query; 0 if unknown
	Rate  float64 // measured queries per second over the last control period; 0 if unknown
	Gain  float64 // correction carried from the previous decision (0 means 1)
	// Weight is the job's fair-time weight: its rate is Weight times a weight-1 job's
	// (0 means 1). Rate is compared with the others' divided by it.
	Weight float64
}

func (j JobLoad) weight() float64 {
	if usable(j.Weight) {
		return j.Weight
	}
	return 1
}

// Fair-time controller tuning.
const (
	gainDeadBand = 0.01 // rates within 1% of the mean leave the correction alone
	gainExponent = 0.3  // how hard one decision corrects a rate error
	gainStepMax  = 1.08 // at most ±8% per decision (per job: ±17% on a ratio of two), so a noisy rate can't swing shares
	gainMin      = 0.33
	gainMax      = 3.0

	// Before anything is measured, costs are guessed on an absolute scale (only their
	// ratios decide shares; the scale matters for charging leases, which completions correct).
	defaultSecPerFLOP = 1e-11 // 100 GFLOP/s
	defaultCost       = 1e-3  // seconds per query of a job with nothing known
)

// SecPerFLOP is the seconds per FLOP measured on the jobs that have both a measured cost
// and FLOPs (false if none): the cluster's speed, which CostEstimates scales priors by.
func SecPerFLOP(jobs []JobLoad) (float64, bool) {
	cf, ff := 0.0, 0.0
	for _, j := range jobs {
		if usable(j.Cost) && usable(j.FLOPs) {
			cf += j.Cost
			ff += j.FLOPs
		}
	}
	return cf / ff, ff > 0
}

func usable(x float64) bool { return x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }

// CostEstimates returns each job's cost per query in worker-seconds: the measured cost
// where there is one, else a prior. The prior of a job whose model's FLOPs are known is
// its FLOPs times the seconds per FLOP measured on the jobs that have both (a cluster-wide
// speed, so a cheap job added next to an expensive one starts with a share close to fair);
// without FLOPs, it is the mean cost of the others. While no job in jobs has both,
// secPerFLOP is the scale (what earlier jobs measured; 0: defaultSecPerFLOP): only the
// ratios of priors decide shares, but the scale sizes the first tasks and the fair rate.
func CostEstimates(jobs []JobLoad, secPerFLOP float64) []float64 {
	out := make([]float64, len(jobs))
	known, sumCost := 0, 0.0
	for _, j := range jobs {
		if usable(j.Cost) {
			known++
			sumCost += j.Cost
		}
	}
	spf := defaultSecPerFLOP
	if usable(secPerFLOP) {
		spf = secPerFLOP
	}
	// Summed, the heaviest jobs dominate: their cost is mostly compute, the cheap jobs'
	// mostly per-query overhead.
	measured, ok := SecPerFLOP(jobs)
	if ok {
		spf = measured
	}
	flopsPrior := func(j JobLoad) (float64, bool) {
		if usable(j.FLOPs) && (ok || known == 0) {
			return j.FLOPs * spf, true
		}
		return 0, false
	}
	mean := defaultCost
	if known > 0 {
		mean = sumCost / float64(known)
	} else {
		n, sum := 0, 0.0
		for _, j := range jobs {
			if c, ok := flopsPrior(j); ok {
				n++
				sum += c
			}
		}
		if n > 0 {
			mean = sum / float64(n)
		}
	}
	for i, j := range jobs {
		switch c, ok := flopsPrior(j); {
		case usable(j.Cost):
			out[i] = j.Cost
		case ok:
			out[i] = c
		default:
			out[i] = mean
		}
	}
	return out
}

// FairShares is the fair-time controller's split: it returns each job's share of worker
// time (summing to 1) and the corrections to carry into the next decision.
//
// A job's query rate is its share of worker time divided by its cost per query, so
// shares proportional to cost (times weight) give equal rates (in proportion to weight). Measured costs already include every
// overhead a worker pays; what they miss (workers of unequal speed, time lost to
// stragglers) shows up as unequal measured rates, which the multiplicative gain corrects
// a little each period. A job with no measured cost yet gets a prior (CostEstimates): from
// its model's FLOPs when known, so a new job starts with a fair guess instead of nothing.
func FairShares(jobs []JobLoad) (shares, gains []float64) {
	n := len(jobs)
	shares, gains = make([]float64, n), make([]float64, n)
	if n == 0 {
		return shares, gains
	}
	costs := CostEstimates(jobs, 0) // the scale cancels out of shares
	// The rate the gains steer to: the geometric mean of the measured rates.
	measured, logSum := 0, 0.0
	for _, j := range jobs {
		if j.Rate > 0 && !math.IsInf(j.Rate, 0) {
			measured++
			logSum += math.Log(j.Rate / j.weight())
		}
	}
	target := math.Exp(logSum / float64(max(measured, 1)))
	total := 0.0
	for i, j := range jobs {
		g := j.Gain
		if g <= 0 || math.IsNaN(g) {
			g = 1
		}
		if measured == n && n > 1 {
			if e := target / (j.Rate / j.weight()); math.Abs(e-1) > gainDeadBand {
				step := math.Pow(e, gainExponent)
				g *= math.Min(gainStepMax, math.Max(1/gainStepMax, step))
			}
		}
		g = math.Min(gainMax, math.Max(gainMin, g))
		gains[i] = g
		shares[i] = costs[i] * g * j.weight()
		total += shares[i]
	}
	for i := range shares {
		shares[i] /= total
	}
	return shares, gains
}

// FairRate is the query rate per unit of weight that every job gets under fair time when
// workers workers are kept busy: rate_j = weight_j * workers / sum(weight_k * cost_k),
// the costs estimated as CostEstimates does with secPerFLOP.
func FairRate(workers int, jobs []JobLoad, secPerFLOP float64) float64 {
	costs := CostEstimates(jobs, secPerFLOP)
	sum := 0.0
	for i, j := range jobs {
		sum += costs[i] * j.weight()
	}
	if sum <= 0 || workers <= 0 {
		return 0
	}
	return float64(workers) / sum
}

// Share is one job's weight on one worker: the fraction of that worker's time it gets.
type Share struct {
	Job    string  `json:"job"`
	Weight float64 `json:"weight"`
}

// AssignWorkers turns job shares (summing to 1) into per-worker weights. Workers are filled
// in name order, one job after another, so most workers serve one job (its model stays
// loaded) and at most len(jobs)-1 workers split their time between two.
func AssignWorkers(workers []string, jobs []string, shares []float64) map[string][]Share {
	out := make(map[string][]Share, len(workers))
	if len(workers) == 0 || len(jobs) == 0 {
		return out
	}
	ws := append([]string(nil), workers...)
	sort.Slice(ws, func(a, b int) bool { return NameLess(ws[a], ws[b]) })
	w, room := 0, 1.0
	for ji, job := range jobs {
		units := shares[ji] * float64(len(ws))
		for units > 1e-9 && w < len(ws) {
			take := math.Min(units, room)
			out[ws[w]] = append(out[ws[w]], Share{Job: job, Weight: take})
			units -= take
			room -= take
			if room <= 1e-9 {
				w, room = w+1, 1.0
			}
		}
	}
	return out
}

// ReassignWorkers is AssignWorkers that moves as little as it can from prev, the split in
// force: each worker keeps its previous jobs, in name order, as far as their new shares
// allow, and what is left of each job goes first to workers that hold it already, then to
// the workers with the most room, but not as a sliver under minNewShare of a worker new
// to the job once the job has a worker (left unassigned: a sliver would have the worker
// load a model, a warming job's first tasks among them, for next to no work; the split
// only says what a worker prefers). A worker that fails or joins then changes the jobs of
// a few workers, where packing in order shifted every worker after it to other jobs, and
// each shift is a model to fetch and plan (measured: eight jobs' rates fell from ~40 to
// ~13 q/s for 10 s after two workers rejoined). With no prev it packs in order, as
// AssignWorkers does, but for those slivers.
func ReassignWorkers(prev map[string][]Share, workers []string, jobs []string, shares []float64) map[string][]Share {
	out := make(map[string][]Share, len(workers))
	if len(workers) == 0 || len(jobs) == 0 {
		return out
	}
	ws := append([]string(nil), workers...)
	sort.Slice(ws, func(a, b int) bool { return NameLess(ws[a], ws[b]) })
	units := make(map[string]float64, len(jobs))
	for i, j := range jobs {
		units[j] = shares[i] * float64(len(ws))
	}
	room := make(map[string]float64, len(ws))
	give := func(w, job string, x float64) {
		units[job] -= x
		room[w] -= x
		for i := range out[w] {
			if out[w][i].Job == job {
				out[w][i].Weight += x
				return
			}
		}
		out[w] = append(out[w], Share{Job: job, Weight: x})
	}
	placed := map[string]bool{}
	for _, w := range ws {
		room[w] = 1
		for _, sh := range prev[w] {
			if take := math.Min(sh.Weight, math.Min(units[sh.Job], room[w])); take > 1e-9 {
				give(w, sh.Job, take)
				placed[sh.Job] = true
			}
		}
	}
	// The largest remainders first, each to holders first, then to new workers with room
	// for at least minNewShare, most room first (a rejoined worker takes a large part of
	// one job rather than a sliver of each), then (for a job with no worker yet) anywhere.
	order := slices.Clone(jobs)
	sort.SliceStable(order, func(a, b int) bool { return units[order[a]] > units[order[b]] })
	for _, job := range order {
		for pass := 0; pass < 3 && units[job] > 1e-9; pass++ {
			byRoom := slices.Clone(ws)
			if pass > 0 {
				sort.SliceStable(byRoom, func(a, b int) bool { return room[byRoom[a]] > room[byRoom[b]] })
			}
			for _, w := range byRoom {
				if units[job] <= 1e-9 {
					break
				}
				held := slices.ContainsFunc(out[w], func(sh Share) bool { return sh.Job == job })
				ok := [3]bool{held, !held && room[w] >= minNewShare, !held && !placed[job]}[pass]
				if room[w] > 1e-9 && ok {
					give(w, job, math.Min(units[job], room[w]))
					placed[job] = true
				}
			}
		}
	}
	return out
}

// minNewShare is the least share of a worker that ReassignWorkers gives a job new to it.
const minNewShare = 0.05

// NameLess orders node names naturally: node2 before node10.
func NameLess(a, b string) bool {
	if len(a) != len(b) {
		pa, pb := prefixLen(a), prefixLen(b)
		if a[:pa] == b[:pb] {
			return len(a) < len(b)
		}
	}
	return a < b
}

func prefixLen(s string) int {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return i
}

// FairQueue decides which job a worker runs next so that the running jobs' query rates
// stay level, in proportion to their weights, whatever their costs per query and
// whatever the workers' speeds. It is pure (no clock, no I/O); the coordinator tells it
// what it leases and what comes back, and asks it on every pull.
//
// Each job has a progress: the queries leased to it over its weight. A worker takes the
// job furthest behind among those with pending tasks, preferring the jobs it is assigned
// (whose models it keeps loaded) by slack: it helps another job only when that job is
// more than slack behind its own. Leased queries, not measured time, are what is leveled,
// so an error in a job's estimated cost, or a slow worker, cannot make its rate drift:
// it only makes the job fall behind, and then more workers take it. Progress over
// weight also makes a job of weight W run W times as fast as a job of weight 1.
//
// No job leases more than slack ahead of the job furthest behind, including a job
// whose remaining tasks are all running (its tail): workers then wait rather than run
// a cheap job far ahead of the others. A job added (or one given back work) starts at the
// furthest-behind progress, so it neither waits for the others nor runs on banked credit.
//
// A job marked warming (Warm: nothing of it completed yet, its workers are fetching its
// model and building its plan) holds nobody back: its leases sit in the queues of workers
// busy loading it, so were it counted as furthest behind, every worker would wait for the
// slowest model to load (the whole cluster idled for the 15-25 s a ResNet-50 takes to load
// on the benchmark's shared cores). Only the workers assigned to it lease it meanwhile (the
// others keep the running jobs going), and its first completion (Started) lifts it to the
// furthest-behind progress of the others, so it does not catch up in a burst either.
// Not safe for concurrent use (the Coordinator's mutex guards it).
type FairQueue struct {
	jobs  map[string]*fairJob
	order []*fairJob // in the order they were added: ties go to the oldest
	has   []bool     // Pick's scratch space
}

type fairJob struct {
	name     string
	weight   float64
	progress float64 // queries leased (less those given back) / weight, from the start level
	waiting  float64 // of those, leased to workers loading the job's model (Wait) / weight
	warming  bool    // nothing completed yet (Warm, Started)
}

// NewFairQueue returns an empty queue.
func NewFairQueue() *FairQueue { return &FairQueue{jobs: map[string]*fairJob{}} }

// Add starts tracking a job of the given weight (<= 0 means 1), level with the job
// furthest behind. Adding a tracked job changes only its weight.
func (q *FairQueue) Add(job string, weight float64) {
	if !usable(weight) {
		weight = 1
	}
	if j := q.jobs[job]; j != nil {
		j.progress *= j.weight / weight // the same queries leased, over the new weight
		j.weight = weight
		return
	}
	floor, ok := q.floor()
	if !ok { // no job, or only warming ones: level with the one furthest behind
		floor = 0
		for i, o := range q.order {
			if i == 0 || o.progress < floor {
				floor = o.progress
			}
		}
	}
	j := &fairJob{name: job, weight: weight, progress: floor}
	q.jobs[job] = j
	q.order = append(q.order, j)
}

// Warm marks a tracked job as warming: nothing of it has completed yet (see FairQueue).
func (q *FairQueue) Warm(job string) {
	if j := q.jobs[job]; j != nil {
		j.warming = true
	}
}

// Started records a completion of job: a warming job stops warming, and a job that fell
// behind the others while warming starts level with the one furthest behind.
func (q *FairQueue) Started(job string) {
	j := q.jobs[job]
	if j == nil || !j.warming {
		return
	}
	floor, ok := q.floor() // of the others: j is still warming
	j.warming = false
	if ok && j.progress < floor {
		j.progress = floor
	}
}

// Remove forgets a job (finished or removed).
func (q *FairQueue) Remove(job string) {
	if q.jobs[job] == nil {
		return
	}
	delete(q.jobs, job)
	for i, j := range q.order {
		if j.name == job {
			q.order = append(q.order[:i], q.order[i+1:]...)
			break
		}
	}
}

// Jobs lists the tracked jobs in the order they were added.
func (q *FairQueue) Jobs() []string {
	out := make([]string, len(q.order))
	for i, j := range q.order {
		out[i] = j.name
	}
	return out
}

// Leased records queries of job handed to a worker.
func (q *FairQueue) Leased(job string, queries int) {
	if j := q.jobs[job]; j != nil {
		j.progress += float64(queries) / j.weight
	}
}

// Returned records queries of job taken back from a worker (it failed, or gave them up):
// they will be leased again, and the job is behind by them.
func (q *FairQueue) Returned(job string, queries int) {
	if j := q.jobs[job]; j != nil {
		j.progress -= float64(queries) / j.weight
	}
}

// Wait records queries of job leased to a worker that waits for the job's model to load
// before it can run them; Unwait that they run (or are done, or given back). A job's
// waiting queries still count in its progress for the limit on the others (a load does
// not hold the cluster back), but not for which job is furthest behind: the workers that
// have the model take the job first, so its completions keep up with its leases.
func (q *FairQueue) Wait(job string, queries int) {
	if j := q.jobs[job]; j != nil {
		j.waiting += float64(queries) / j.weight
	}
}

// Unwait: see Wait.
func (q *FairQueue) Unwait(job string, queries int) {
	if j := q.jobs[job]; j != nil {
		j.waiting = math.Max(0, j.waiting-float64(queries)/j.weight)
	}
}

// Progress is a job's leased queries over its weight, from its start level.
func (q *FairQueue) Progress(job string) float64 {
	if j := q.jobs[job]; j != nil {
		return j.progress
	}
	return 0
}

// floor is the furthest-behind progress of the jobs that are not warming (false if none).
func (q *FairQueue) floor() (float64, bool) {
	floor, ok := math.Inf(1), false
	for _, j := range q.order {
		if !j.warming {
			floor, ok = math.Min(floor, j.progress), true
		}
	}
	return floor, ok
}

// Affinity is how a worker stands to a job when it asks FairQueue.Pick for work.
type Affinity int

const (
	// Assigned: the split gives the worker's time to the job (its model is loaded there or
	// will be); the worker prefers it by slack.
	Assigned Affinity = iota
	// Other: the worker helps the job when the job is behind its own by more than slack.
	Other
	// Barred: the worker must not take the job.
	Barred
)

// Pick returns the job a worker runs next ("" for none): pending says whether a job has a
// task to lease, affinity how the worker stands to the job, and slack is the lead, in
// queries over weight, that affinity may cost and that no job may exceed. A job whose
// remaining tasks are all leased (its tail) gets no slack: the others lease no further
// ahead of it than its own progress, and wait for it. A warming job goes only to the
// workers assigned to it, and limits nobody.
func (q *FairQueue) Pick(pending func(job string) bool, affinity func(job string) Affinity, slack float64) string {
	if len(q.order) == 0 {
		return ""
	}
	slack = math.Max(slack, 0)
	floor, tail := math.Inf(1), math.Inf(1)
	q.has = q.has[:0]
	for _, j := range q.order {
		p := pending(j.name)
		q.has = append(q.has, p)
		if j.warming {
			continue // holds nobody back
		}
		floor = math.Min(floor, j.progress)
		if !p {
			tail = math.Min(tail, j.progress)
		}
	}
	limit := math.Min(floor+slack, tail)
	best, bestScore := "", math.Inf(1)
	for i, j := range q.order {
		if !q.has[i] || (!j.warming && j.progress > limit) {
			continue
		}
		a := affinity(j.name)
		if a == Barred || (j.warming && a != Assigned) {
			continue
		}
		score := j.progress - j.waiting
		if score-slack < bestScore && a == Assigned {
			score -= slack
		}
		if score < bestScore {
			best, bestScore = j.name, score
		}
	}
	return best
}
