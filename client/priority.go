package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// raisePriority gives this node process CPU priority over ordinary work on the machine, so
// that heartbeats keep flowing when the CPUs are saturated (the failure detector's timeouts
// are sub-second; a node starved of CPU for that long looks dead). Like corosync's realtime
// scheduling, but milder: nice for every thread, and for the process's autogroup when the
// node leads its own session (as local clusters start it), because with autogroup
// scheduling a thread's nice only counts inside its session. Best effort: without the
// privilege (CAP_SYS_NICE) it reports why and carries on.
func raisePriority(nice int, logf func(string, ...any)) {
	if nice == 0 {
		return
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil {
			logf("cannot set nice %d: %v (continuing at normal priority)", nice, err)
			return
		}
	}
	sid, _, _ := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	if int(sid) == os.Getpid() {
		if err := os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(nice)), 0); err != nil && !os.IsNotExist(err) {
			logf("cannot set autogroup nice %d: %v", nice, err)
			return
		}
	}
	logf("%s", fmt.Sprintf("running at nice %d", nice))
}
