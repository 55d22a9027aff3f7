package kernel

import "runtime"

// osThread runs functions on one OS thread of its own, for the C calls of a multi-threaded
// plan (they start OpenMP parallel regions). libgomp keeps a pool of worker threads per
// calling thread, and Go moves a goroutine between OS threads at will: a plan run from
// whichever thread its caller happens to be on leaves a pool on each of them. Once libgomp
// manages more threads than there are CPUs it throttles its workers' spinning
// (GOMP_SPINCOUNT no longer applies: about a microsecond), so they sleep after every
// primitive and each primitive waits for a futex wake-up first (MnasNet batch 1 on two
// threads of a 2-vCPU VM: three pools after a few seconds, a 6 µs pooling primitive taking
// 66 µs at the median, 95-127 images/s against 186-205 on one thread). A plan compiled,
// run and destroyed on one thread keeps one pool. The hand-over costs thread wake-ups,
// about 40-50 µs a call on that VM: single-threaded plans, which start no pool, run on
// their caller's thread.
type osThread struct {
	work chan func()
}

// newOSThread starts the thread, at the nice value of the calling thread (a node runs
// the kernel's calls on threads of lowered priority, and the OpenMP workers a plan starts
// inherit its thread's: so compute keeps yielding to the rest of the machine); stop ends it.
func newOSThread() *osThread {
	t := &osThread{work: make(chan func())}
	nice, ok := callerNice()
	go func() {
		runtime.LockOSThread()
		if ok {
			setThreadNice(nice)
		}
		// Returning without UnlockOSThread ends the OS thread with the goroutine, except
		// the process's main thread, which Go keeps (wedged) if the goroutine was put on
		// it: so the OpenMP pool this thread started is freed here (idk_thread_release),
		// not left to libgomp's hook at the thread's exit, which the main thread never
		// reaches (its pool's worker stayed counted, and libgomp then throttled the spin
		// of every later plan, see idk_thread_release).
		defer idkThreadRelease()
		for f := range t.work {
			f()
		}
	}()
	return t
}

// do runs f on the thread and waits for it to return; on a nil thread, it calls f.
func (t *osThread) do(f func()) {
	if t == nil {
		f()
		return
	}
	done := make(chan struct{})
	t.work <- func() {
		defer close(done)
		f()
	}
	<-done
}

// stop ends the thread once the function it runs (if any) returns.
func (t *osThread) stop() {
	if t != nil {
		close(t.work)
	}
}

// onOwnThread runs f on a new OS thread that ends afterwards, taking any OpenMP pool f
// started with it (the peak measurements, which would otherwise leave one on a Go thread).
func onOwnThread(f func()) {
	t := newOSThread()
	t.do(f)
	t.stop()
}
