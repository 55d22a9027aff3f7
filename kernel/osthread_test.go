package kernel

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestOSThreadOneThread: every call runs on the same OS thread, from callers on many
// goroutines at once, and a nil thread calls on the caller's.
func TestOSThreadOneThread(t *testing.T) {
	th := newOSThread()
	var tid int
	th.do(func() { tid = syscall.Gettid() })
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				var got int
				th.do(func() {
					got = syscall.Gettid()
				})
				mu.Lock()
				n++
				mu.Unlock()
				if got != tid {
					t.Errorf("call ran on thread %d, want %d", got, tid)
					return
				}
				if i%70 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if n != 800 {
		t.Fatalf("%d calls returned, want 800", n)
	}
	th.stop()
	var nilThread *osThread
	ran := false
	nilThread.do(func() { ran = true })
	nilThread.stop()
	if !ran {
		t.Fatal("a nil thread did not call its function")
	}
	ran = false
	onOwnThread(func() { ran = true })
	if !ran {
		t.Fatal("onOwnThread did not run its function")
	}
}
