package netfault

import (
	"syscall"
	"testing"
	"time"
)

// TestArmFromEnv: without the variable nothing is armed; with it, SIGUSR1 cuts and SIGUSR2
// restores, and disarming ends the cut.
func TestArmFromEnv(t *testing.T) {
	t.Setenv(EnvVar, "")
	ArmFromEnv(t.Logf)()
	if Cut() {
		t.Fatal("cut without being armed")
	}
	t.Setenv(EnvVar, "1")
	disarm := ArmFromEnv(t.Logf)
	defer disarm()
	wait := func(want bool) {
		t.Helper()
		for i := 0; i < 200 && Cut() != want; i++ {
			time.Sleep(5 * time.Millisecond)
		}
		if Cut() != want {
			t.Fatalf("cut %v, want %v", Cut(), want)
		}
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
	wait(true)
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR2)
	wait(false)
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
	wait(true)
	disarm()
	disarm()
	if Cut() {
		t.Fatal("still cut after disarming")
	}
}
