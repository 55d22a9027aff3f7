package serving

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func hist(count uint64, cum ...uint64) *dto.Histogram {
	h := &dto.Histogram{SampleCount: &count}
	bounds := []float64{0.001, 0.01, 0.1}
	for i, c := range cum {
		c, b := c, bounds[i]
		h.Bucket = append(h.Bucket, &dto.Bucket{CumulativeCount: &c, UpperBound: &b})
	}
	return h
}

// The window's figures are those of the requests between the two snapshots only.
func TestWindowPointUsesOnlyTheRequestsInBetween(t *testing.T) {
	prev := hist(100, 100, 100, 100) // 100 fast requests before
	cur := hist(120, 100, 100, 120)  // then 20 between 10 and 100 ms
	p := windowPoint(prev, cur, 2*time.Second)
	if p.Rate != 10 || p.P50Ms < 10 || p.P50Ms > 100 || p.P99Ms < p.P50Ms || p.P99Ms > 100 {
		t.Fatalf("window %+v, want 10 requests/s with percentiles in (10, 100] ms", p)
	}
	if p := windowPoint(nil, cur, time.Second); p.Rate != 120 {
		t.Fatalf("no previous snapshot: %+v", p)
	}
	if p := windowPoint(cur, cur, time.Second); p != (ModelPoint{}) {
		t.Fatalf("no requests in between: %+v", p)
	}
}

func TestHistoryAndEventsAreBounded(t *testing.T) {
	h := History{Len: 3}
	for i := range 5 {
		h.Add(Sample{At: int64(i)})
	}
	if l := h.List(); len(l) != 3 || l[0].At != 2 || l[2].At != 4 {
		t.Fatalf("history %+v", l)
	}
	e := Events{Max: 2}
	for _, k := range []string{"a", "b", "c"} {
		e.Add(time.Unix(0, 0), k, "")
	}
	if l := e.List(); len(l) != 2 || l[0].Kind != "c" || l[1].Kind != "b" {
		t.Fatalf("events %+v", l)
	}
}

func TestClusterServingSumsTheNodesRequests(t *testing.T) {
	got := clusterServing(map[string][]string{"m": {"n2", "n1"}}, []NodeRow{
		{Name: "n0", NodeFigures: NodeFigures{Requests: map[string]ModelPoint{"m": {Rate: 3, P99Ms: 4}}}},
		{Name: "n1", NodeFigures: NodeFigures{Requests: map[string]ModelPoint{"m": {Rate: 2, P99Ms: 9}, "gone": {Rate: 1}}}},
	})
	if len(got) != 2 || got[0].Name != "gone" || got[1].Rate != 5 || got[1].P99Ms != 9 || len(got[1].Nodes) != 2 || got[1].Nodes[0] != "n1" {
		t.Fatalf("cluster serving %+v", got)
	}
}
