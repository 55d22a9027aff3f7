package kernel

import "syscall"

// callerNice returns the nice value of the calling thread (the raw getpriority system
// call returns 20 - nice); nice is per thread on Linux.
func callerNice() (int, bool) {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		return 0, false
	}
	return 20 - prio, true
}

// setThreadNice sets the calling thread's nice value; lowering it below the process's
// needs a privilege the node may not have, and then the thread keeps what it has.
func setThreadNice(n int) {
	syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), n)
}
