//go:build !linux

package kernel

// callerNice: nice is per thread on Linux only; elsewhere the plan's thread keeps the
// process's priority.
func callerNice() (int, bool) { return 0, false }

func setThreadNice(int) {}
