package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// LibName is the file name of the C kernel library.
const LibName = "libidunno_kernel.so"

var (
	loadOnce sync.Once
	loadErr  error
)

// candidates lists where the library is looked for, in order: next to the running
// executable, then $IDUNNO_KERNEL_LIB.
func candidates() []string {
	var paths []string
	if exe, err := os.Executable(); err == nil {
		paths = append(paths, filepath.Join(filepath.Dir(exe), LibName))
	}
	if env := os.Getenv("IDUNNO_KERNEL_LIB"); env != "" {
		paths = append(paths, env)
	}
	return paths
}

// load opens the library once; every later call returns the same result.
func load() error {
	loadOnce.Do(func() { loadErr = open() })
	return loadErr
}

// spinCount is the OpenMP spin count the kernel runs with unless the user sets
// OMP_WAIT_POLICY or GOMP_SPINCOUNT: libgomp's default (300,000 spins) burns whole time
// slices at every barrier when the cores are shared (several models in one worker, or
// other processes), while a short spin keeps back-to-back primitives from sleeping. 3,000
// spins of PAUSE are about 150 µs on the Ice Lake VM, far more than the gap between two
// primitives; 30,000 (until plans kept one OpenMP pool each, libgomp throttled the spin
// anyway, see osThread) made MnasNet batch 1 on two threads fall to 12-20 images/s beside
// one or two busy loops, where 3,000 keeps 62-103 (ONNX Runtime: 42-60).
const spinCount = "3000"

// tuneOpenMP sets GOMP_SPINCOUNT in the C environment before libgomp is loaded (it reads
// its settings once, when it is loaded with the kernel library).
func tuneOpenMP() {
	if os.Getenv("OMP_WAIT_POLICY") != "" || os.Getenv("GOMP_SPINCOUNT") != "" {
		return
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return
	}
	var setenv func(name, value string, overwrite int32) int32
	purego.RegisterLibFunc(&setenv, libc, "setenv")
	setenv("GOMP_SPINCOUNT", spinCount, 0)
}

func open() error {
	tuneOpenMP()
	var tried []string
	for _, p := range candidates() {
		if _, err := os.Stat(p); err != nil {
			tried = append(tried, p+" (not found)")
			continue
		}
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		if err := register(h); err != nil {
			return fmt.Errorf("kernel: %s: %w", p, err)
		}
		return nil
	}
	if len(tried) == 0 {
		tried = append(tried, "(no executable path and IDUNNO_KERNEL_LIB unset)")
	}
	return fmt.Errorf("kernel: cannot load %s; tried: %s. Build it with `make` (it lands in bin/, next to bin/idunno) or set IDUNNO_KERNEL_LIB to its path",
		LibName, strings.Join(tried, "; "))
}

// Available reports whether the kernel library can be loaded, and why not.
func Available() error { return load() }
