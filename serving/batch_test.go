package serving

import (
	"slices"
	"testing"
	"time"
)

func TestBatchQueueDecisions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	type push struct {
		at   time.Duration
		rows int
		id   int
	}
	tests := []struct {
		name      string
		cfg       BatchConfig
		pushes    []push
		now       time.Duration
		wantBatch []int
		wantWait  time.Duration
	}{
		{"empty queue waits for a push", BatchConfig{MaxBatch: 4, MaxDelay: 10 * ms}, nil, 0, nil, -1},
		{"no batching runs at once", BatchConfig{MaxBatch: 1}, []push{{0, 1, 1}, {0, 1, 2}}, 0, []int{1}, 0},
		{"partial batch waits for the delay", BatchConfig{MaxBatch: 4, MaxDelay: 10 * ms}, []push{{0, 1, 1}, {2 * ms, 1, 2}}, 3 * ms, nil, 7 * ms},
		{"partial batch goes when the oldest has waited", BatchConfig{MaxBatch: 4, MaxDelay: 10 * ms}, []push{{0, 1, 1}, {2 * ms, 1, 2}}, 10 * ms, []int{1, 2}, 0},
		{"full batch goes at once", BatchConfig{MaxBatch: 3, MaxDelay: time.Second}, []push{{0, 1, 1}, {0, 1, 2}, {0, 1, 3}, {0, 1, 4}}, 0, []int{1, 2, 3}, 0},
		{"rows count, not requests", BatchConfig{MaxBatch: 4, MaxDelay: time.Second}, []push{{0, 3, 1}, {0, 1, 2}}, 0, []int{1, 2}, 0},
		{"a request that would overflow waits for the next batch", BatchConfig{MaxBatch: 4, MaxDelay: time.Second}, []push{{0, 3, 1}, {0, 2, 2}}, 0, []int{1}, 0},
		{"an oversize request runs alone", BatchConfig{MaxBatch: 4, MaxDelay: time.Second}, []push{{0, 9, 1}, {0, 1, 2}}, 0, []int{1}, 0},
		{"zero delay sends what is there", BatchConfig{MaxBatch: 8}, []push{{0, 1, 1}, {0, 1, 2}}, 0, []int{1, 2}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newBatchQueue[int](tc.cfg)
			for _, p := range tc.pushes {
				if !q.Push(t0.Add(p.at), p.rows, p.id) {
					t.Fatal("push refused")
				}
			}
			b, wait := q.Next(t0.Add(tc.now))
			if !slices.Equal(b, tc.wantBatch) || wait != tc.wantWait {
				t.Fatalf("Next = %v, %v; want %v, %v", b, wait, tc.wantBatch, tc.wantWait)
			}
			if q.Len() != len(tc.pushes)-len(b) {
				t.Fatalf("Len = %d after taking %d of %d", q.Len(), len(b), len(tc.pushes))
			}
		})
	}
}

func TestBatchQueueBoundAndOrder(t *testing.T) {
	t0 := time.Unix(0, 0)
	q := newBatchQueue[int](BatchConfig{MaxBatch: 2, MaxDelay: time.Millisecond, MaxQueue: 3})
	for i := range 3 {
		if !q.Push(t0, 1, i) {
			t.Fatalf("push %d refused below the bound", i)
		}
	}
	if q.Push(t0, 1, 3) {
		t.Fatal("push accepted beyond MaxQueue")
	}
	var got []int
	for now := t0; q.Len() > 0; now = now.Add(time.Millisecond) {
		b, _ := q.Next(now)
		got = append(got, b...)
	}
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("requests left in order %v", got)
	}
	if !q.Push(t0, 1, 9) {
		t.Fatal("push refused after the queue drained")
	}
}
