//go:build !linux

package sched

// lowThreads lowers the kernel's priority on Linux only (nice is per thread there);
// elsewhere f runs inline.
type lowThreads struct {
	nice int
	logf func(string, ...any)
}

func (p *lowThreads) do(f func()) { f() }
