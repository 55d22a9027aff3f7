package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		label, unit string
		n, total    int64
		bar         bool
		want        string
	}{
		{"put big", "B", 5e6, 10e6, true, "put big [===============               ]  50% 5.0/10.0 MB 2.5 MB/s"},
		{"put big", "B", 5e6, 10e6, false, "put big  50% 5.0/10.0 MB 2.5 MB/s"},
		{"put stdin", "B", 3e6, 0, false, "put stdin 3.0 MB 1.5 MB/s"},
		{"job j1", "queries", 250, 1000, false, "job j1  25% 250/1000 queries"},
		{"job j1", "queries", 2000, 1000, true, "job j1 [==============================] 100% 2000/1000 queries"},
	} {
		if got := progressLine(c.label, c.unit, c.n, c.total, 2*time.Second, c.bar); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

// On a terminal a report redraws one line in place; elsewhere each is a plain line.
func TestProgressDraw(t *testing.T) {
	for _, tty := range []bool{true, false} {
		var buf bytes.Buffer
		p := &progress{w: &buf, tty: tty, label: "get x", unit: "B", start: time.Now(), stop: make(chan struct{})}
		p.total.Store(100)
		p.add(50)
		p.draw()
		p.finish()
		p.finish() // a second call does nothing
		out := buf.String()
		if tty && (!strings.HasPrefix(out, "\r\033[Kget x [") || !strings.HasSuffix(out, "\r\033[K") || strings.Contains(out, "\n")) {
			t.Errorf("terminal: %q", out)
		}
		if !tty && (strings.ContainsRune(out, '\033') || !strings.HasPrefix(out, "get x  50% ") || strings.Count(out, "\n") != 1) {
			t.Errorf("pipe: %q", out)
		}
	}
}
