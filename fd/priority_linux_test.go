package fd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// threadNices returns the nice value of every thread of this process, by thread id.
func threadNices(t *testing.T) map[int]int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3 (state) on
		tid, err1 := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		nice, err2 := strconv.Atoi(f[19-3])
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %q", p, s)
		}
		out[tid] = nice
	}
	return out
}

// The detector's two threads (protocol loop, socket reader) run at Config.ThreadNice, as
// /proc shows it, and no other thread does: the priority stays with them (threads the Go
// runtime starts for locked goroutines come from its template thread, not cloned from
// them), and goes with them when the detector stops.
func TestDetectorThreadsNice(t *testing.T) {
	base := threadNices(t)[syscall.Gettid()]
	want := base + 3
	if base > 16 {
		want = base - 3 // raising needs CAP_SYS_NICE: skipped below if the process lacks it
	}
	// A locked goroutine that exits takes its thread with it, except the process's main
	// thread, which Go wedges (parked for good, never running Go code again) instead: a
	// detector goroutine that ran there leaves it at the detector's nice, asleep. So the
	// main thread is not counted once the detector has stopped (nor before it starts, for
	// -count > 1).
	count := func(main bool) int {
		n := 0
		for tid, nice := range threadNices(t) {
			if nice == want && (main || tid != os.Getpid()) {
				n++
			}
		}
		return n
	}
	if n := count(false); n != 0 {
		t.Fatalf("%d threads at nice %d before the detector starts", n, want)
	}
	wedged := count(true)
	var logged []string
	cfg := DefaultConfig()
	cfg.Name, cfg.Addr, cfg.Secret, cfg.ThreadNice = "node0", "127.0.0.1:0", []byte("s"), want
	cfg.Logf = func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	d, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for count(true)-wedged < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	n := count(true) - wedged
	d.Stop()
	if want < base && n == 0 {
		t.Skipf("cannot raise threads to nice %d here (no CAP_SYS_NICE): %v", want, logged)
	}
	if n != 2 {
		t.Fatalf("%d threads at nice %d while the detector runs, want 2 (loop and reader); log %v", n, want, logged)
	}
	left := func() int { return count(false) }
	for left() != 0 && time.Now().Before(deadline.Add(2*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := left(); n != 0 {
		t.Fatalf("%d threads (besides the main one) still at nice %d after Stop", n, want)
	}
}
