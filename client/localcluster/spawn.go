package localcluster

import (
	"os/exec"
	"runtime"
	"sync"
)

// Linux sends a child's Pdeathsig when the thread that forked it exits, not when its
// process does, and Go ends an OS thread whenever a goroutine locked to it returns: the
// kernel package does so for every multi-threaded plan it closes. A node forked from a
// thread that the runtime later handed to such a goroutine was killed with it (a test
// that evaluated a model in-process after restarting its cluster lost every node). So
// with DieWithParent, children are forked from one thread, locked for the life of the
// process, that no other goroutine can run on.
var (
	forkOnce sync.Once
	forkReq  chan func()
)

// StartCmd starts cmd from the forking thread: use it for any command with a Pdeathsig.
func StartCmd(cmd *exec.Cmd) error {
	forkOnce.Do(func() {
		forkReq = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range forkReq {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	forkReq <- func() { errc <- cmd.Start() }
	return <-errc
}
