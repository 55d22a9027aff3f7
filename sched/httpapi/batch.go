package httpapi

import (
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

// batchQueue is the pure batching decision: requests go in with their arrival time and row
// count, and Next says which of them form the next batch, or how long to wait for one.
// It reads no clock and is not safe for concurrent use; its owner (modelRunner) locks it.
type batchQueue[T any] struct {
	cfg   BatchConfig
	items []queued[T]
	rows  int
}

type queued[T any] struct {
	v    T
	rows int
	at   time.Time
}

func newBatchQueue[T any](cfg BatchConfig) *batchQueue[T] {
	return &batchQueue[T]{cfg: cfg.withDefaults()}
}

// Push queues v (rows rows, arrived at now). It reports false when the queue is full.
func (q *batchQueue[T]) Push(now time.Time, rows int, v T) bool {
	if len(q.items) >= q.cfg.MaxQueue {
		return false
	}
	q.items = append(q.items, queued[T]{v: v, rows: rows, at: now})
	q.rows += rows
	return true
}

// Len is the number of queued requests.
func (q *batchQueue[T]) Len() int { return len(q.items) }

// Next returns the next batch if one is due at now: the longest prefix of the queue whose
// rows fit MaxBatch (always at least the oldest request), taken when it is full — the next
// request would not fit or MaxBatch is reached — or when the oldest request has waited
// MaxDelay. Otherwise it returns nil and how long until the oldest request's delay runs out
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
	due := q.items[0].at.Add(q.cfg.MaxDelay)
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
