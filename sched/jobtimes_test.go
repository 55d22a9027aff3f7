package sched

import (
	"fmt"
	"testing"
)

func TestRecordTimesBucketsQueueAndComputePerTask(t *testing.T) {
	s := NewJobStats()
	added := int64(1_000_000_000_000)
	s.RecordTimes(TaskReport{StartNanos: added + 3_000_000, BusyNanos: 40_000_000}, added)  // 3 ms, 40 ms
	s.RecordTimes(TaskReport{StartNanos: added + 2_000_000_000, BusyNanos: 700_000}, added) // 2 s, 0.7 ms
	s.RecordTimes(TaskReport{BusyNanos: 20_000_000}, added)                                 // no start: compute only
	s.RecordTimes(TaskReport{StartNanos: added - 5, BusyNanos: 0}, added)                   // clock skew: 0 ms queue
	q, c := s.Times()
	if q.Count != 3 || c.Count != 3 {
		t.Fatalf("counts: queue %d, compute %d", q.Count, c.Count)
	}
	if got := fmt.Sprint(q.Counts[:8]); got != "[1 2 2 2 2 2 2 3]" { // bounds 1 5 10 50 100 500 1000 5000
		t.Fatalf("queue counts %s", got)
	}
	if got := fmt.Sprint(c.Counts[:5]); got != "[1 1 1 3 3]" {
		t.Fatalf("compute counts %s", got)
	}
	if q.SumMS != 2003 || c.SumMS != 60.7 {
		t.Fatalf("sums: queue %v, compute %v", q.SumMS, c.SumMS)
	}
	c.Counts[0] = 99 // a copy
	if _, c2 := s.Times(); c2.Counts[0] != 1 {
		t.Fatal("Times returned the live counts")
	}
}
