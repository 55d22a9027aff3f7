package main

import (
	"os"
	"path/filepath"
	"testing"

	"idunno/client/localcluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	localcluster.RemoveBinary()
	os.Exit(code)
}

// testBinary returns the idunno binary the command tests run ($IDUNNO_BIN, or built once).
func testBinary(t *testing.T) string {
	t.Helper()
	b, err := localcluster.Binary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kernelBinary is testBinary for commands that run the kernel: the library must be found
// through IDUNNO_KERNEL_LIB or next to the binary.
func kernelBinary(t *testing.T) string {
	t.Helper()
	b := testBinary(t)
	if os.Getenv("IDUNNO_KERNEL_LIB") == "" {
		if _, err := os.Stat(filepath.Join(filepath.Dir(b), "libidunno_kernel.so")); err != nil {
			t.Fatal("kernel library not found: run make, or set IDUNNO_KERNEL_LIB")
		}
	}
	return b
}
