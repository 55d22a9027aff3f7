package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// isTerminal reports whether f is a terminal (not a pipe, a file or /dev/null).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// progress reports a long operation on stderr: on a terminal a bar drawn at the start and
// redrawn in place ten times a second; elsewhere (a pipe, a log file) a plain line every
// plainEvery, so scripts and CI logs get a few lines and no escape codes.
type progress struct {
	w     io.Writer
	tty   bool
	label string
	unit  string // "B" counts bytes (shown as MB), anything else is a plain count
	total atomic.Int64
	n     atomic.Int64
	start time.Time

	stop     chan struct{}
	done     sync.WaitGroup
	finished sync.Once
}

const plainEvery = 5 * time.Second

// startProgress starts reporting; total 0 means unknown. Call finish when done.
func startProgress(label, unit string, total int64) *progress {
	p := &progress{w: os.Stderr, tty: isTerminal(os.Stderr), label: label, unit: unit, start: time.Now(), stop: make(chan struct{})}
	p.total.Store(total)
	every := plainEvery
	if p.tty {
		every = 100 * time.Millisecond
		p.draw() // at once: a terminal shows the bar however short the operation
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

func (p *progress) add(n int64)      { p.n.Add(n) }
func (p *progress) set(n int64)      { p.n.Store(n) }
func (p *progress) setTotal(n int64) { p.total.Store(n) }

func (p *progress) draw() {
	line := progressLine(p.label, p.unit, p.n.Load(), p.total.Load(), time.Since(p.start), p.tty)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// finish stops the reports and clears the bar, leaving the terminal for the summary line.
// Calls after the first do nothing.
func (p *progress) finish() {
	p.finished.Do(func() {
		close(p.stop)
		p.done.Wait()
		if p.tty {
			fmt.Fprint(p.w, "\r\033[K")
		}
	})
}

// progressLine renders one report: "put big.bin [=====     ] 52% 10.0/19.2 MB 4.1 MB/s".
func progressLine(label, unit string, n, total int64, elapsed time.Duration, bar bool) string {
	var b strings.Builder
	b.WriteString(label)
	if total > 0 {
		frac := min(float64(n)/float64(total), 1)
		if bar {
			const width = 30
			done := int(frac * width)
			fmt.Fprintf(&b, " [%s%s]", strings.Repeat("=", done), strings.Repeat(" ", width-done))
		}
		fmt.Fprintf(&b, " %3.0f%% %s/%s", 100*frac, amount(n, unit, false), amount(total, unit, true))
	} else {
		fmt.Fprintf(&b, " %s", amount(n, unit, true))
	}
	if s := elapsed.Seconds(); s > 0 && unit == "B" {
		fmt.Fprintf(&b, " %.1f MB/s", float64(n)/1e6/s)
	}
	return b.String()
}

func amount(n int64, unit string, withUnit bool) string {
	if unit == "B" {
		s := fmt.Sprintf("%.1f", float64(n)/1e6)
		if withUnit {
			s += " MB"
		}
		return s
	}
	s := fmt.Sprint(n)
	if withUnit && unit != "" {
		s += " " + unit
	}
	return s
}

// progressReader counts what is read through it.
type progressReader struct {
	r io.Reader
	p *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(int64(n))
	return n, err
}

// progressWriter counts what is written through it.
type progressWriter struct {
	w io.Writer
	p *progress
}

func (w progressWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.p.add(int64(n))
	return n, err
}
