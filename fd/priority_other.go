//go:build !linux

package fd

import "errors"

// lockThreadNice is Linux-only (nice is per thread there); elsewhere the detector runs at
// the process's priority.
func lockThreadNice(nice int) error {
	return errors.New("fd: per-thread priority is only supported on Linux")
}
