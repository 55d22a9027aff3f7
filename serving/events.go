package serving

import (
	"sync"
	"time"
)

// Event is one thing the dashboard lists: a node failing or joining, a model placed again,
// a job starting or ending.
type Event struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
}

// Events keeps the latest events, at most Max (oldest dropped first). Safe for concurrent use.
type Events struct {
	Max int

	mu   sync.Mutex
	list []Event
}

// Add records an event.
func (e *Events) Add(at time.Time, kind, detail string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	limit := e.Max
	if limit <= 0 {
		limit = 200
	}
	if len(e.list) >= limit {
		e.list = append(e.list[:0], e.list[len(e.list)-limit+1:]...)
	}
	e.list = append(e.list, Event{At: at, Kind: kind, Detail: detail})
}

// List returns the events, newest first.
func (e *Events) List() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := make([]Event, len(e.list))
	for i, ev := range e.list {
		r[len(r)-1-i] = ev
	}
	return r
}
