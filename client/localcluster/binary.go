package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	binOnce sync.Once
	binPath string
	binDir  string
	binErr  error
)

// Binary returns the idunno binary for tests and benchmarks: $IDUNNO_BIN when set (make test
// sets it), else one built from idunno/client, once per process, into a temporary directory
// that RemoveBinary deletes. The Go toolchain must be on PATH for the build.
func Binary() (string, error) {
	binOnce.Do(func() {
		if binPath = os.Getenv("IDUNNO_BIN"); binPath != "" {
			return
		}
		if binDir, binErr = os.MkdirTemp("", "idunno-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "idunno")
		cmd := exec.Command("go", "build", "-o", binPath, "idunno/client")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("localcluster: build idunno: %v\n%s", err, out)
		}
	})
	return binPath, binErr
}

// RemoveBinary deletes a binary Binary built (call it from TestMain after m.Run).
func RemoveBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}
