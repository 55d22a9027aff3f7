package logs

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// The cost of one record of a per-task message, the busiest kind a node logs.
func BenchmarkPrintf(b *testing.B) {
	for _, format := range []string{Text, JSON} {
		b.Run(format, func(b *testing.B) {
			l, _ := New(io.Discard, "node3", format, slog.LevelInfo)
			logf := Printf(l, "sched")
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				logf("sched: completed task %s/%d on %s (%d queries, %.1f ms); job %d/%d tasks", "job1", i, "node5", 8, 1.5, 5, 9)
			}
		})
	}
	// The printf line nodes wrote before, for comparison.
	b.Run("printf-line", func(b *testing.B) {
		var mu sync.Mutex
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			msg := fmt.Sprintf("sched: completed task %s/%d on %s (%d queries, %.1f ms); job %d/%d tasks", "job1", i, "node5", 8, 1.5, 5, 9)
			line := fmt.Sprintf("%s %s %s: %s\n", time.Now().UTC().Format(timeLayout), "node3", "sched", msg)
			mu.Lock()
			io.WriteString(io.Discard, line)
			mu.Unlock()
		}
	})
}
