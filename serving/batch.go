package serving

import (
	"slices"
	"time"
)

// BatchConfig is a served model's dynamic batching policy.
type BatchConfig struct {
	MaxBatch int           // rows per kernel call; 1 disables batching
	MaxDelay time.Duration // longest a request waits for others to join its batch
	MaxQueue int           // requests waiting at most; a request beyond it gets 503
}

// Batching defaults: no batching, a queue of 256 requests.
const (
	DefaultMaxQueue = 256
)

// Request priorities, as in Triton's dynamic batcher: levels 1 (first) to PriorityLevels;
// a request without one (0), or with one past the last level, gets DefaultPriorityLevel.
const (
	PriorityLevels       = 10
	DefaultPriorityLevel = 5
)

// priorityLevel maps a request's priority parameter to its level.
func priorityLevel(p uint64) int {
	if p == 0 || p > PriorityLevels {
		return DefaultPriorityLevel
	}
	return int(p)
}

func (c BatchConfig) withDefaults() BatchConfig {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1
	}
	if c.MaxDelay < 0 {
		c.MaxDelay = 0
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	return c
}

// batchQueue is the pure batching decision: requests go in with their arrival time, row
// count and priority level, and Next says which of them form the next batch, or how long
// to wait for one. The queue is kept in (level, arrival) order.
// It reads no clock and is not safe for concurrent use; its owner (modelRunner) locks it.
type batchQueue[T any] struct {
	cfg   BatchConfig
	items []queued[T]
	rows  int
}

type queued[T any] struct {
	v     T
	rows  int
	level int
	at    time.Time
}

func newBatchQueue[T any](cfg BatchConfig) *batchQueue[T] {
	return &batchQueue[T]{cfg: cfg.withDefaults()}
}

// Push queues v (rows rows, arrived at now) at the default priority level. It reports
// false when the queue is full.
func (q *batchQueue[T]) Push(now time.Time, rows int, v T) bool {
	return q.PushLevel(now, rows, DefaultPriorityLevel, v)
}

// PushLevel queues v at a priority level (lower first): behind every request of its level
// or a lower one, ahead of the rest.
func (q *batchQueue[T]) PushLevel(now time.Time, rows, level int, v T) bool {
	if len(q.items) >= q.cfg.MaxQueue {
		return false
	}
	i := len(q.items)
	for i > 0 && q.items[i-1].level > level {
		i--
	}
	q.items = slices.Insert(q.items, i, queued[T]{v: v, rows: rows, level: level, at: now})
	q.rows += rows
	return true
}

// Len is the number of queued requests.
func (q *batchQueue[T]) Len() int { return len(q.items) }

// Next returns the next batch if one is due at now: the longest prefix of the queue whose
// rows fit MaxBatch (always at least the first request), taken when it is full — the next
// request would not fit or MaxBatch is reached — or when the oldest request (of any level)
// has waited MaxDelay. Otherwise it returns nil and how long until the oldest request's delay runs out
// (negative when the queue is empty: wait for a Push).
func (q *batchQueue[T]) Next(now time.Time) ([]T, time.Duration) {
	if len(q.items) == 0 {
		return nil, -1
	}
	n, rows := 0, 0
	for n < len(q.items) && (n == 0 || rows+q.items[n].rows <= q.cfg.MaxBatch) {
		rows += q.items[n].rows
		n++
	}
	full := rows >= q.cfg.MaxBatch || n < len(q.items)
	oldest := q.items[0].at
	for _, it := range q.items[1:] {
		if it.at.Before(oldest) {
			oldest = it.at
		}
	}
	due := oldest.Add(q.cfg.MaxDelay)
	if !full && now.Before(due) {
		return nil, due.Sub(now)
	}
	batch := make([]T, n)
	for i := range n {
		batch[i] = q.items[i].v
	}
	clear(q.items[:n])
	q.items = q.items[n:]
	q.rows -= rows
	return batch, 0
}
