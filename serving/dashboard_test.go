package serving

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

var canvasPointsRE = regexp.MustCompile(`<canvas id="chart-(\w+)"[^>]*data-points="(\d+)"`)

// The dashboard page draws every history chart from known data (in headless Chromium):
// each chart has as many points as the data gives it, and the tables list the nodes,
// training jobs, cluster serving figures and events. With $IDUNNO_DASHBOARD_UNIT_PNG set it
// also writes a screenshot there, to look at.
func TestDashboardChartsAndTablesFromKnownData(t *testing.T) {
	ts := startServer(t, Config{}, BatchConfig{})
	now := time.Now()
	loss, acc := 2.3, 0.1
	for i := range 30 {
		at := now.Add(time.Duration(i-30) * historyEvery)
		l, a := loss-0.07*float64(i), acc+0.02*float64(i)
		smp := Sample{At: at.UnixMilli(),
			Models: map[string]ModelPoint{"double": {Rate: float64(100 + i), P50Ms: 0.4, P99Ms: 2 + float64(i%5)}},
			Jobs:   map[string]JobPoint{"quick": {Rate: 50, P50Ms: 3, P99Ms: 9}},
			Trains: map[string]TrainPoint{"lenet": {Loss: &l, EvalAccuracy: &a, SamplesPerSec: 800}}}
		if i < 10 { // the model had no requests then: no latency points
			smp.Models["double"] = ModelPoint{}
		}
		ts.srv.History.Add(smp)
	}
	losses := make([]float32, 40)
	for i := range losses {
		losses[i] = float32(2.3 * 20 / float64(20+i))
	}
	l, a := 0.9, 0.7
	ts.srv.setLive([]NodeRow{
		{Name: "node0", State: "alive", Role: "coordinator", NodeFigures: NodeFigures{CPUPercent: 35, RSSBytes: 300 << 20, Requests: map[string]ModelPoint{"double": {Rate: 12, P99Ms: 3}}}},
		{Name: "node1", State: "alive", Role: "standby", Jobs: 1, NodeFigures: NodeFigures{CPUPercent: 80, RSSBytes: 500 << 20, Models: 1,
			Tasks: &TaskCounts{Running: 1, Queued: 2, Done: 37}, Requests: map[string]ModelPoint{"double": {Rate: 8, P99Ms: 5}}}},
		{Name: "node2", State: "failed", NodeFigures: NodeFigures{CPUPercent: -1, RSSBytes: -1}},
	}, []TrainStats{{Name: "lenet", Step: 40, StepsTotal: 100, Epoch: 1, Epochs: 3, SamplesPerSec: 800, Loss: &l, EvalAccuracy: &a, Losses: losses}})
	ts.srv.Events.Add(now.Add(-time.Minute), "node failed", "node2")
	ts.srv.Events.Add(now.Add(-59*time.Second), "placed again", "double on node1 (replaces node2)")

	dom := runChromium(t, ts.url+"/", "--dump-dom")
	points := map[string]int{}
	for _, m := range canvasPointsRE.FindAllStringSubmatch(dom, -1) {
		points[m[1]], _ = strconv.Atoi(m[2])
	}
	// 30 samples; the model's latency only where it had requests (20 samples, p50 and p99).
	want := map[string]int{"rate": 30, "latency": 2 * 20, "jobrate": 30, "joblatency": 60, "loss": 40, "accuracy": 30}
	if fmt.Sprint(points) != fmt.Sprint(want) {
		t.Errorf("chart points %v, want %v", points, want)
	}
	for _, s := range []string{`data-node="node2" class="failed"`, `data-train="lenet"`, `<td class="rate">20.0</td>`, `<td class="p99">5.00</td>`,
		`data-kind="placed again"`, `<td class="role">coordinator</td>`, `<td class="memory">500</td>`,
		`<td class="tasks">1 / 2 / 37</td>`, `<td class="tasks">?</td>`} {
		if !bytes.Contains([]byte(dom), []byte(s)) {
			t.Errorf("dashboard lacks %s", s)
		}
	}
	if png := os.Getenv("IDUNNO_DASHBOARD_UNIT_PNG"); png != "" {
		runChromium(t, ts.url+"/", "--screenshot="+png, "--window-size=1500,2300", "--hide-scrollbars")
	}
}

// runChromium runs headless Chromium (Debian's chromium package; make test-deps installs
// it) on url for 3 s of virtual time and returns its standard output.
func runChromium(t *testing.T, url string, what ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(t.TempDir(), "chromium"), "--virtual-time-budget=3000"}, what...)
	cmd := exec.CommandContext(ctx, "/usr/bin/chromium", append(args, url)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium (Debian packages chromium and chromium-driver; make test-deps installs them): %v", err)
	}
	return out.String()
}
