package kernel

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails loudly when the kernel library cannot be loaded: a test run without it
// is a broken environment, not a skipped feature.
func TestMain(m *testing.M) {
	if err := load(); err != nil {
		fmt.Fprintln(os.Stderr, "FATAL:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
