// Package netfault cuts this process off the network on demand, for fault-injection tests.
//
// While the cut is on, rpc calls from this process fail at once, connections it serves are
// dropped without an answer, and the failure detector's datagrams are dropped both ways:
// to the rest of the cluster the process looks unreachable while it keeps running (unlike
// SIGSTOP, its own timers and goroutines go on). A node arms the switch only when started
// with IDUNNO_TEST_NETCUT=1 in its environment; then SIGUSR1 cuts and SIGUSR2 restores.
// Without that variable the signals keep their default meaning and the switch stays off.
package netfault

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// EnvVar arms the signal control when set to 1 in a node's environment.
const EnvVar = "IDUNNO_TEST_NETCUT"

// ErrCut is what calls made during a cut fail with.
var ErrCut = errors.New("network cut (fault injection)")

var cut atomic.Bool

// Cut reports whether the process is cut off.
func Cut() bool { return cut.Load() }

// Set turns the cut on or off.
func Set(on bool) { cut.Store(on) }

// ArmFromEnv installs the SIGUSR1 (cut) / SIGUSR2 (restore) handlers when EnvVar is 1, and
// logs each change with logf. It returns a function that removes them and ends any cut
// (calling it again does nothing).
func ArmFromEnv(logf func(format string, args ...any)) (disarm func()) {
	if os.Getenv(EnvVar) != "1" {
		return func() {}
	}
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				on := s == syscall.SIGUSR1
				Set(on)
				logf("netfault: network cut %v (%v)", on, s)
			}
		}
	}()
	logf("netfault: armed (%s=1): SIGUSR1 cuts this node off the network, SIGUSR2 restores it", EnvVar)
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			Set(false)
		})
	}
}
