package fd

import (
	"runtime"
	"syscall"
)

// lockThreadNice wires the calling goroutine to its OS thread for good and gives that
// thread the nice value nice (Linux nice is per thread). The goroutine must never unlock:
// the thread then exits with it instead of carrying the priority to other goroutines.
// A negative nice needs CAP_SYS_NICE (or RLIMIT_NICE); the error says so.
func lockThreadNice(nice int) error {
	runtime.LockOSThread()
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
}
