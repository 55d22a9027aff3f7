package serving

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// procUsage reads this process's CPU time and resident memory from Linux's /proc; ok is
// false elsewhere or when /proc cannot be read.
func procUsage() (cpu time.Duration, rss int64, ok bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, false
	}
	// Fields after the command name (which may hold spaces and is in parentheses).
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 22 { // utime and stime are fields 14 and 15, rss 24 (1-based, with pid and comm)
		return 0, 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	pages, err3 := strconv.ParseInt(f[21], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	const ticks = 100 // USER_HZ: 100 on every Linux this runs on
	return time.Duration(utime+stime) * time.Second / ticks, pages * int64(os.Getpagesize()), true
}

// cpuMeter turns successive CPU-time readings into a share of one core.
type cpuMeter struct {
	lastCPU  time.Duration
	lastWall time.Time
}

// percent returns the process's CPU use since the previous call, in percent of one core
// (-1 on the first call or without /proc), and its resident memory in bytes (-1 unknown).
func (m *cpuMeter) percent(now time.Time) (float64, int64) {
	cpu, rss, ok := procUsage()
	if !ok {
		return -1, -1
	}
	pct := -1.0
	if !m.lastWall.IsZero() && now.After(m.lastWall) {
		pct = 100 * float64(cpu-m.lastCPU) / float64(now.Sub(m.lastWall))
	}
	m.lastCPU, m.lastWall = cpu, now
	return pct, rss
}
