// Command pause is the sandbox process of every pod on the real-node test
// host: it holds the pod's namespaces open, reaps the zombies it inherits as
// PID 1, and exits 0 on SIGTERM or SIGINT. It is built static and packed into
// the pause image by `make image-pause` (docs/images.md), so no image is
// pulled from outside the machine.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child, so that processes orphaned into a
// shared PID namespace do not linger as zombies.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
