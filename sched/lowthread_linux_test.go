package sched

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// procNice reads thread tid's nice value from /proc (field 19 of its stat line).
func procNice(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3 (state) on
	n, err := strconv.Atoi(f[19-3])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The kernel's calls run on threads at the compute nice (ComputeNice), as /proc shows it,
// and reuse them; a node already started at that nice or lower is never raised.
func TestLowThreadsNice(t *testing.T) {
	base := procNice(t, syscall.Gettid()) // the process's nice (threads start with it)
	if n, err := threadNice(syscall.Gettid()); err != nil || n != base {
		t.Fatalf("threadNice %d, %v; /proc says %d", n, err, base)
	}
	run := func(p *lowThreads) (int, int) {
		var tid int
		p.do(func() { tid = syscall.Gettid() })
		// the thread waits in the pool for the next call, so /proc still has it
		return tid, procNice(t, tid)
	}
	if base <= 16 {
		p := &lowThreads{nice: base + 3, logf: t.Logf}
		tid, nice := run(p)
		if nice != base+3 {
			t.Errorf("compute thread at nice %d, want %d", nice, base+3)
		}
		if tid2, nice2 := run(p); tid2 != tid || nice2 != base+3 {
			t.Errorf("second call on thread %d at nice %d, want thread %d (reused) at %d", tid2, nice2, tid, base+3)
		}
	} else {
		t.Logf("the test runs at nice %d: lowering is not checked", base)
	}
	// Asked for a higher priority than the process has (compute_nice 10 in a node started
	// at nice 19, as root): left at the process's.
	var warned []string
	p := &lowThreads{nice: base - 5, logf: func(f string, a ...any) { warned = append(warned, fmt.Sprintf(f, a...)) }}
	if _, nice := run(p); nice != base {
		t.Errorf("compute thread at nice %d, want the process's %d (never raised)", nice, base)
	}
	if len(warned) != 0 {
		t.Errorf("warned: %v", warned)
	}
}
