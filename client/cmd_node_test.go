package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestProfileCPUSegments: each SIGUSR1 ends the profile file and starts the next, and stop
// ends the last; every file is a whole profile.
func TestProfileCPUSegments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.pprof")
	stop, err := profileCPU(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, next := range []string{path + ".1", path + ".2"} {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, err := os.Stat(next); err != nil; _, err = os.Stat(next) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not started 10 s after SIGUSR1", next)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop()
	for _, f := range []string{path, path + ".1", path + ".2"} {
		b, err := os.ReadFile(f)
		// A profile is gzip-compressed protobuf: a finished one has the gzip header.
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: not a finished profile (%d bytes, %v)", f, len(b), err)
		}
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Errorf("a fourth file without a fourth signal")
	}
}
