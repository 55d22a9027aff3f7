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

// The OpenMP spin count the kernel runs with, unless the user sets OMP_WAIT_POLICY or
// GOMP_SPINCOUNT: how long a libgomp worker waiting for the next primitive spins before it
// sleeps in the kernel.
//
// spinShared, the default: libgomp's own default (300,000 spins) burns whole time slices at
// every barrier when the cores are shared (several node processes on one machine, as in a
// local cluster, or other processes), while a short spin keeps back-to-back primitives from
// sleeping. 3,000 spins of PAUSE are about 150 µs on the Ice Lake VM, far more than the gap
// between two primitives; 30,000 (until plans kept one OpenMP pool each, libgomp throttled
// the spin anyway, see osThread) made MnasNet batch 1 on two threads fall to 12-20 images/s
// beside one or two busy loops, where 3,000 keeps 62-103 (ONNX Runtime: 42-60).
//
// spinOwn, for a process that has the machine to itself (OwnMachine): a worker that sleeps
// between primitives leaves its vCPU idle, and on a virtual machine whose host is busy the
// host gives that core away and the wake-up at the next primitive waits for it. In such
// minutes (steal time 20-40% of each vCPU) ResNet-50 batch 1 on two threads averaged 92.6 ms
// a run with 3,000 spins, 61.5 with 300,000 (about 15 ms, as ONNX Runtime's threads spin
// after a run) and 74.3 under ONNX Runtime; in quiet minutes the two counts measured level
// (benchmarks/README.md, the twelfth session). Beside a busy loop of another process the
// long spin costs (ResNet-50 batch 1: 10.6-12.0 -> 6.6-9.9 images/s), which is why nodes
// keep the short one.
const (
	spinShared = "3000"
	spinOwn    = "300000"
)

var (
	spinMu     sync.Mutex
	spinCount  = spinShared
	spinLoaded bool // tuneOpenMP ran: libgomp has read the count
)

// OwnMachine declares, before the kernel's first use, that this process has the CPUs to
// itself (a one-off command: bench, infer, eval, quantize, local training; not a cluster
// node, which shares them): libgomp's workers then spin spinOwn times before they sleep
// instead of spinShared. It reports whether it took effect: not once the library is loaded,
// nor when the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT.
func OwnMachine() bool {
	spinMu.Lock()
	defer spinMu.Unlock()
	if spinLoaded || userOpenMP() != "" {
		return false
	}
	spinCount = spinOwn
	return true
}

// userOpenMP returns the user's own OpenMP wait setting (NAME=VALUE of OMP_WAIT_POLICY or
// GOMP_SPINCOUNT, the first set), which wins over the kernel's, or "".
func userOpenMP() string {
	for _, k := range []string{"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} {
		if v := os.Getenv(k); v != "" {
			return k + "=" + v
		}
	}
	return ""
}

// OpenMPSpin reports the spin setting the kernel runs (or will run) with: the user's
// OMP_WAIT_POLICY or GOMP_SPINCOUNT when set, else the count chosen here.
func OpenMPSpin() string {
	if u := userOpenMP(); u != "" {
		return u
	}
	spinMu.Lock()
	defer spinMu.Unlock()
	return "GOMP_SPINCOUNT=" + spinCount
}

// tuneOpenMP sets GOMP_SPINCOUNT in the C environment before libgomp is loaded (it reads
// its settings once, when it is loaded with the kernel library).
func tuneOpenMP() {
	spinMu.Lock()
	spinLoaded = true
	count := spinCount
	spinMu.Unlock()
	if userOpenMP() != "" {
		return
	}
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return
	}
	var setenv func(name, value string, overwrite int32) int32
	purego.RegisterLibFunc(&setenv, libc, "setenv")
	setenv("GOMP_SPINCOUNT", count, 0)
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
