package sched

import (
	"runtime"
	"sync"
	"syscall"
)

// lowThreads runs functions on OS threads of their own whose nice value is raised (lower
// priority): the kernel's calls, whose OpenMP threads inherit the nice of the thread that
// starts them. Only the C calls run there. Go code that holds one of the runtime's Ps on a
// low-priority thread would be a priority inversion: a stop-the-world or a timer on that P
// would wait for the thread to be scheduled, and a busy machine can leave it waiting for
// hundreds of milliseconds, stalling the failure detector's goroutine with it. A thread
// inside a C call holds no P. Raising nice needs no privilege; threads are kept for reuse
// (at most maxLowThreads idle) and never return to the Go scheduler's pool.
type lowThreads struct {
	nice int
	logf func(string, ...any)

	mu     sync.Mutex
	idle   []chan func()
	warned bool
}

const maxLowThreads = 4

// do runs f on a low-priority thread and returns when it has (f runs inline when nice is 0).
func (p *lowThreads) do(f func()) {
	if p == nil || p.nice == 0 {
		f()
		return
	}
	work := p.get()
	done := make(chan struct{})
	work <- func() { defer close(done); f() }
	<-done
	p.put(work)
}

func (p *lowThreads) get() chan func() {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w
	}
	p.mu.Unlock()
	w := make(chan func())
	go p.serve(w)
	return w
}

func (p *lowThreads) put(w chan func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) < maxLowThreads {
		p.idle = append(p.idle, w)
		return
	}
	close(w) // its goroutine exits, and its locked thread with it
}

// serve runs work on a locked thread at the lowered priority until w is closed. A thread
// that already runs at nice p.nice or above (a node started with nice 15) is left as it is:
// compute never runs ahead of the rest of its node, even where the process could raise it.
func (p *lowThreads) serve(w chan func()) {
	runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
	tid := syscall.Gettid()
	if cur, err := threadNice(tid); err == nil && cur >= p.nice {
		// already as low as asked
	} else if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, p.nice); err != nil {
		p.mu.Lock()
		warn := !p.warned
		p.warned = true
		p.mu.Unlock()
		if warn && p.logf != nil {
			p.logf("sched: cannot run the kernel at nice %d: %v (running at the process's priority)", p.nice, err)
		}
	}
	for f := range w {
		f()
	}
}

// threadNice returns the nice value of thread tid (the raw getpriority system call returns
// 20 - nice, so that it is never negative).
func threadNice(tid int) (int, error) {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil {
		return 0, err
	}
	return 20 - prio, nil
}
