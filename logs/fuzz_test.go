package logs

import (
	"errors"
	"testing"
)

// Fields never panics, whatever the format (a message built at run time may be passed as
// one), and never names more fields than there are arguments plus one (task's job).
func FuzzFields(f *testing.F) {
	for _, s := range []string{"job %s", "task %s/%d", "%", "%%", "task %s/%", "x %-08.3f epoch %d", "job %"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, format string) {
		args := []any{"a", 1, errors.New("e")}
		if got := Fields(format, args); len(got) > len(args)+1 {
			t.Fatalf("Fields(%q) = %v", format, got)
		}
	})
}
