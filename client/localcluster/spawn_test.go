package localcluster

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestStartCmdSurvivesThreadExits: a child with a Pdeathsig, started by StartCmd, lives on
// while goroutines that lock their thread return (each ends an OS thread, as the kernel
// package's multi-threaded plans do when closed). Started with cmd.Start instead, the
// child was killed within the first few such goroutines.
func TestStartCmdSurvivesThreadExits(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartCmd(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for range 200 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
		}()
		<-done
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pid != 0 {
		t.Fatalf("the child died (%v) when threads of this process ended", ws)
	}
}
