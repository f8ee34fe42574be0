package local

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// DefaultMemberNice is --local-member-nice: a member's processes yield the
// CPU to the operator, so that a burst of member builds (each about a core
// for ten seconds) does not starve the hand-out path (docs/benchmarks.md,
// "Fill of real members").
const DefaultMemberNice = 10

// maxNice is the lowest priority Linux knows.
const maxNice = 19

// startNiced starts cmd with a niceness nice above this process's (0: the
// same), capped at 19, from its very first thread. Linux keeps a niceness
// per thread and a child inherits that of the thread that forked it, so
// cmd starts from a thread of its own (startFromOwnThread).
func startNiced(cmd *exec.Cmd, nice int) error {
	if nice <= 0 {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go startFromOwnThread(cmd, nice, errc)
	return <-errc
}

// startFromOwnThread lowers the priority of the thread it runs on, locked
// to it, starts cmd and returns without unlocking: the Go runtime ends such
// a thread with its goroutine rather than reuse a thread whose priority an
// unprivileged operator could not raise again. The main thread is never
// lowered (the runtime would keep it, parked): from there it starts again
// on a goroutine that, while this one holds the main thread, runs on
// another.
func startFromOwnThread(cmd *exec.Cmd, nice int, errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == os.Getpid() {
		inner := make(chan error, 1)
		go startFromOwnThread(cmd, nice, inner)
		err := <-inner
		runtime.UnlockOSThread()
		errc <- err
		return
	}
	// The raw getpriority(2) answers 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		errc <- fmt.Errorf("reading this thread's niceness: %w", err)
		return
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, min(20-prio+nice, maxNice)); err != nil {
		errc <- fmt.Errorf("lowering the priority of %s: %w", cmd.Path, err)
		return
	}
	errc <- cmd.Start()
}
