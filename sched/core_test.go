package sched

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func testSpec(name string, queries, batch, taskSize int) *JobSpec {
	return &JobSpec{Name: name, Model: "m.onnx", Data: "d.idx", Batch: batch, Queries: queries, TaskSize: taskSize}
}

// entries builds a journal: an epoch, inference phase, a job of 10 tasks, some tasks done.
func sampleEntries() []*Entry {
	es := []*Entry{
		{Kind: EntryEpoch, Epoch: 1, Node: "node0"},
		{Kind: EntryPhase, Epoch: 1, Phase: PhaseInference},
		{Kind: EntryJobAdd, Epoch: 1, Job: testSpec("a", 95, 5, 10)},
		{Kind: EntryTaskDone, Epoch: 1, Name: "a", Task: 3, Node: "node4"},
		{Kind: EntryTaskDone, Epoch: 1, Name: "a", Task: 9, Node: "node5"},
		{Kind: EntryEpoch, Epoch: 2, Node: "node1"},
		{Kind: EntryTaskDone, Epoch: 2, Name: "a", Task: 0, Node: "node4"},
	}
	for i, e := range es {
		e.Seq = uint64(i + 1)
	}
	return es
}

func TestStateApply(t *testing.T) {
	s := NewState()
	for _, e := range sampleEntries() {
		if err := s.Apply(e); err != nil {
			t.Fatalf("apply %+v: %v", e, err)
		}
	}
	j := s.Jobs["a"]
	if s.Epoch != 2 || s.Coordinator != "node1" || j.NDone != 3 || !j.IsDone(9) || j.IsDone(1) {
		t.Fatalf("state wrong: %+v %+v", s, j)
	}
	if got := doneQueries(j); got != 25 { // tasks 0 and 3 (10 each) and 9 (5)
		t.Fatalf("done queries %d, want 25", got)
	}
	bad := []struct {
		e    Entry
		want string
	}{
		{Entry{Seq: 9, Epoch: 2, Kind: EntryPhase, Phase: PhaseIdle}, "out of order"},
		{Entry{Seq: 8, Epoch: 1, Kind: EntryPhase, Phase: PhaseIdle}, "fenced"},
		{Entry{Seq: 8, Epoch: 2, Kind: EntryEpoch, Node: "node3"}, "fenced"},
		{Entry{Seq: 8, Epoch: 3, Kind: EntryPhase, Phase: PhaseIdle}, "without its epoch"},
		{Entry{Seq: 8, Epoch: 2, Kind: EntryTaskDone, Name: "a", Task: 3}, "already done"},
		{Entry{Seq: 8, Epoch: 2, Kind: EntryTaskDone, Name: "a", Task: 10}, "no task 10"},
		{Entry{Seq: 8, Epoch: 2, Kind: EntryTaskDone, Name: "b", Task: 1}, "no job"},
		{Entry{Seq: 8, Epoch: 2, Kind: EntryJobAdd, Job: testSpec("a", 10, 1, 1)}, "already in use"},
		{Entry{Seq: 8, Epoch: 2, Kind: EntryJobAdd, Job: testSpec("b", 10, 0, 1)}, "batch size"},
		{Entry{Seq: 8, Epoch: 2, Kind: EntryJobAdd, Job: testSpec("b", 10, 4, 6)}, "bad task split"},
		{Entry{Seq: 8, Epoch: 2, Kind: "bogus"}, "unknown entry kind"},
	}
	for _, b := range bad {
		before := s.Clone()
		err := s.Apply(&b.e)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want %q", b.e, err, b.want)
		}
		if IsFenced(err) != (b.want == "fenced") {
			t.Errorf("%+v: error %v: IsFenced %v", b.e, err, IsFenced(err))
		}
		if s.Seq != before.Seq || s.Jobs["a"].NDone != before.Jobs["a"].NDone {
			t.Errorf("%+v changed the state", b.e)
		}
	}
}

func TestJournalRoundTripTornTailAndSnapshot(t *testing.T) {
	dir := t.TempDir()
	j, st, err := OpenJournal(dir)
	if err != nil || st.Seq != 0 {
		t.Fatal(err, st)
	}
	for _, e := range sampleEntries() {
		if err := j.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	// A crash cut the last write short.
	f, _ := os.OpenFile(filepath.Join(dir, "journal"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`E 00000000 {"seq":8,"ki`)
	f.Close()
	j, st, err = OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Seq != 7 || st.Jobs["a"].NDone != 3 {
		t.Fatalf("reopened state seq %d", st.Seq)
	}
	// New entries append cleanly after the cut.
	next := &Entry{Seq: 8, Epoch: 2, Kind: EntryTaskDone, Name: "a", Task: 5}
	if err := st.Apply(next); err != nil {
		t.Fatal(err)
	}
	j.Append(next)
	if err := j.Reset(st); err != nil {
		t.Fatal(err)
	}
	e9 := &Entry{Seq: 9, Epoch: 2, Kind: EntryJobComplete, Name: "a"}
	st.Apply(e9)
	j.Append(e9)
	j.Close()
	_, st2, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Seq != 9 || !st2.Jobs["a"].Complete || !st2.Jobs["a"].IsDone(5) || st2.Jobs["a"].NDone != 4 {
		t.Fatalf("after snapshot: %+v %+v", st2, st2.Jobs["a"])
	}
}

func TestFormatResultLinesDeterministic(t *testing.T) {
	preds := Argmax([]float32{0.1, 0.7, 0.2, 1e-8, -3, 2.5}, 2, 3)
	got := string(FormatResultLines(40, preds))
	if got != "40,1,0.7\n41,2,2.5\n" {
		t.Fatalf("got %q", got)
	}
}

func TestChooseTaskSize(t *testing.T) {
	for _, c := range []struct{ q, b, target, want int }{
		{10000, 8, 64, 64}, {10000, 100, 64, 100}, {10000, 7, 64, 63}, {MaxTasks * 10, 1, 1, 16},
	} {
		got := ChooseTaskSize(c.q, c.b, c.target)
		if got != c.want || got%c.b != 0 {
			t.Errorf("ChooseTaskSize(%d,%d,%d)=%d want %d", c.q, c.b, c.target, got, c.want)
		}
	}
}

// TestJobStatsLatencyOneScan: the percentiles read in one scan are those of a scan each.
func TestJobStatsLatencyOneScan(t *testing.T) {
	s := NewJobStats()
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(100, 0)
	for i := 0; i < 200; i++ {
		lat := make([]int64, 4)
		for k := range lat {
			lat[k] = 1 + rng.Int64N(5_000_000)>>uint(rng.IntN(12))
		}
		s.Record(TaskReport{Queries: 32, BusyNanos: 1e6, BatchUS: lat}, 8, now)
		if i%37 != 0 {
			continue
		}
		ms := func(p float64) float64 { return math.Round(float64(s.hist.ValueAtQuantile(p))) / 1000 }
		l := s.Latency()
		if want := [4]float64{ms(50), ms(90), ms(95), ms(99)}; [4]float64{l.P50, l.P90, l.P95, l.P99} != want {
			t.Fatalf("after %d tasks: percentiles %v, one scan each %v", i+1, [4]float64{l.P50, l.P90, l.P95, l.P99}, want)
		}
	}
}

func TestJobStats(t *testing.T) {
	s := NewJobStats()
	now := time.Unix(100, 0)
	s.Record(TaskReport{Queries: 16, BusyNanos: 16e6, BatchUS: []int64{1000, 3000}}, 8, now)
	s.Record(TaskReport{Queries: 16, BusyNanos: 16e6, BatchUS: []int64{2000, 2000}}, 8, now.Add(2*time.Second))
	if l := s.Latency(); math.Abs(l.Mean-2) > 0.01 || math.Abs(l.P99-3) > 0.01 {
		t.Fatalf("latency %+v", l)
	}
	if r := s.Rate(now.Add(2*time.Second), rateWindow); math.Abs(r-16) > 0.01 { // 32 queries in 2 s
		t.Fatalf("rate %v", r)
	}
	if r := s.Rate(now.Add(30*time.Second), rateWindow); r != 0 {
		t.Fatalf("stale rate %v", r)
	}
	if math.Abs(s.cost-0.001) > 1e-9 {
		t.Fatalf("cost %v", s.cost)
	}
	// 8 queries at 1 ms, 16 at 2 ms, 8 at 3 ms, as cumulative buckets.
	h := s.Histogram([]float64{0.5, 1, 2.5, 5})
	if want := []int64{0, 8, 24, 32}; !slices.Equal(h.Counts, want) || h.Count != 32 || math.Abs(h.SumMS-64) > 0.1 {
		t.Fatalf("histogram %+v, want counts %v, count 32, sum 64 ms", h, want)
	}
}

func FuzzDecodeJournal(f *testing.F) {
	var b []byte
	for _, e := range sampleEntries() {
		b, _ = appendLine(b, 'E', e)
	}
	f.Add(b)
	st := NewState()
	for _, e := range sampleEntries() {
		st.Apply(e)
	}
	snap, _ := appendLine(nil, 'S', st)
	f.Add(snap)
	// A resized job (tasks from 4 on of 5 queries), as a snapshot and as an entry.
	rs := &Entry{Seq: st.Seq + 1, Epoch: 2, Kind: EntryJobResize, Name: "a", Task: 4, Size: 5, Time: 9}
	line, _ := appendLine(nil, 'E', rs)
	f.Add(append(append([]byte{}, snap...), line...))
	st.Apply(rs)
	snap, _ = appendLine(nil, 'S', st)
	f.Add(snap)
	// A second resize on top of the first.
	rs2 := &Entry{Seq: st.Seq + 1, Epoch: 2, Kind: EntryJobResize, Name: "a", Task: 6, Size: 10, Time: 11}
	line, _ = appendLine(nil, 'E', rs2)
	f.Add(append(append([]byte{}, snap...), line...))
	// A journal written before Splits: its one resize in ResizeFrom/ResizeSize/ResizeID.
	old := NewState()
	for _, e := range sampleEntries() {
		old.Apply(e)
	}
	old.Jobs["a"].Spec.ResizeFrom, old.Jobs["a"].Spec.ResizeSize, old.Jobs["a"].Spec.ResizeID = 4, 5, 9
	old.Jobs["a"].Done = make([]byte, (old.Jobs["a"].Spec.NumTasks()+7)/8)
	old.Jobs["a"].NDone = 0
	oldSnap, _ := appendLine(nil, 'S', old)
	f.Add(append(oldSnap, line...))
	f.Add([]byte("S 00000000 {}\n"))
	// A snapshot with the job statistics line after it, then entries.
	js := NewJobStats()
	js.Record(TaskReport{Queries: 10, BusyNanos: 5e6, BatchUS: []int64{400, 600}}, 5, time.Unix(1, 0))
	withStats, _ := appendLine(snap, 'T', map[string]*StatsSnapshot{"j": js.Snapshot()})
	f.Add(append(withStats, b...))
	f.Add(append(append([]byte(nil), snap...), "T 00000000 {\"j\":null}\n"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec Recovered
		st, good, _, _ := decodeJournal(data, &rec)
		if good > len(data) || st == nil {
			t.Fatal("bad result")
		}
		// Recovered statistics must restore or be refused, never panic.
		for _, ss := range rec.Stats {
			if ss != nil {
				ss.Restore()
			}
		}
		// Whatever decoded must be usable: count done queries of every job.
		for _, j := range st.Jobs {
			doneQueries(j)
		}
	})
}

// TestJournalKeepsStatistics: a snapshot written with the job statistics, and the entries
// after it, come back at open (Recovered), so a restarted node can rebuild the statistics.
func TestJournalKeepsStatistics(t *testing.T) {
	dir := t.TempDir()
	j, st, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	js := NewJobStats()
	js.Record(TaskReport{Queries: 10, BusyNanos: 5e6, BatchUS: []int64{400, 600}}, 5, time.Unix(1, 0))
	if err := j.ResetWithStats(st, map[string]*StatsSnapshot{"j": js.Snapshot()}); err != nil {
		t.Fatal(err)
	}
	for _, e := range sampleEntries() {
		if err := j.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	j, _, err = OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rec := j.TakeRecovered()
	if rec.Stats["j"] == nil || len(rec.Entries) != len(sampleEntries()) {
		t.Fatalf("recovered %d stats, %d entries", len(rec.Stats), len(rec.Entries))
	}
	back, err := rec.Stats["j"].Restore()
	if err != nil || back.Histogram(LatencyBucketsMS).Count != 10 || back.Latency() != js.Latency() {
		t.Fatalf("statistics back: %v %+v", err, back)
	}
	if again := j.TakeRecovered(); again.Entries != nil {
		t.Fatal("recovered twice")
	}
}

// TestJobStatsSnapshotRestore: the stats a coordinator sends a new standby rebuild the
// same latencies, histogram, rate and cost; a snapshot out of bounds is refused.
func TestJobStatsSnapshotRestore(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := NewJobStats()
	for i := 0; i < 300; i++ {
		us := []int64{int64(100 + i*37%5000), int64(90 + i*i%20000), 1}
		s.Record(TaskReport{Queries: 20, BusyNanos: int64(1e6 + i*1000), BatchUS: us}, 8, now.Add(time.Duration(i)*30*time.Millisecond))
	}
	s.gain = 1.07
	end := now.Add(9 * time.Second)
	b, err := json.Marshal(s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var ss StatsSnapshot
	if err := json.Unmarshal(b, &ss); err != nil {
		t.Fatal(err)
	}
	r, err := ss.Restore()
	if err != nil {
		t.Fatal(err)
	}
	if s.Latency() != r.Latency() || s.cost != r.cost || s.gain != r.gain || s.Rate(end, rateWindow) != r.Rate(end, rateWindow) ||
		!slices.Equal(s.Histogram(LatencyBucketsMS).Counts, r.Histogram(LatencyBucketsMS).Counts) || r.hist.TotalCount() != 300*20 {
		t.Fatalf("restored stats differ:\n%+v %v %v\n%+v %v %v", s.Latency(), s.cost, s.Rate(end, rateWindow),
			r.Latency(), r.cost, r.Rate(end, rateWindow))
	}
	t.Logf("snapshot of 300 tasks: %d bytes of JSON", len(b))
	for _, bad := range []StatsSnapshot{
		{Hist: [][2]int64{{100, -1}}},
		{Events: [][2]int64{{1, -5}}},
		{Cost: math.NaN()},
		{Hist: make([][2]int64, maxHistBuckets+1)},
	} {
		if _, err := bad.Restore(); err == nil {
			t.Errorf("snapshot %+v accepted", bad)
		}
	}
}
