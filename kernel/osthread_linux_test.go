package kernel

import (
	"runtime"
	"syscall"
	"testing"
)

// TestOSThreadKeepsCallerNice: a plan's thread runs at the nice value of the thread that
// made it (a node's lowered compute threads), not the process's.
func TestOSThreadKeepsCallerNice(t *testing.T) {
	done := make(chan struct{})
	var want, got int
	var ok bool
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the raised nice ends with this thread
		base, k := callerNice()
		if !k {
			return
		}
		want = base + 3
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), want); err != nil {
			return
		}
		th := newOSThread()
		th.do(func() { got, ok = callerNice() })
		th.stop()
	}()
	<-done
	if !ok {
		t.Skip("nice values not readable here")
	}
	if got != want {
		t.Fatalf("plan thread at nice %d, want the caller's %d", got, want)
	}
}
