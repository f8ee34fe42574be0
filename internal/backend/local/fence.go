package local

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

var _ backend.Fencer = (*Backend)(nil)

// fencedFailure is the Failure a fenced member's state file records: a
// failed member is never started again (neither the supervisor nor Create
// resumes it), and Observe says why.
const fencedFailure = "fenced: its API server was stopped for its teardown"

// fenceWait bounds the wait for a SIGKILLed API server to be gone.
const fenceWait = 10 * time.Second

// Fence implements backend.Fencer: it stops the start-up supervisor (which
// restarts the core after a port clash), SIGKILLs the member's
// kube-apiserver, records the member failed so that nothing starts it
// again, and waits until the process is gone. etcd keeps running until
// Delete; it listens only on sockets inside the member's directory.
func (b *Backend) Fence(ctx context.Context, m backend.Member) error {
	if validMember(m) != nil {
		return nil // Create refuses such a member.
	}
	rt := b.member(m.UID)
	p := b.paths(m)
	b.stopSupervisor(rt)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	procs, err := scanProcs(p.dir)
	if err != nil {
		return err
	}
	procs = slices.DeleteFunc(procs, func(pr procInfo) bool { return pr.component() != compAPIServer })
	// The kill comes before the state write: it is the cut, and the
	// supervisor that could restart the process is stopped already.
	for _, pr := range procs {
		if err := signal(pr, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing %s (pid %d) of %s: %w", pr.component(), pr.pid, p.dir, err)
		}
	}
	// A state file that cannot be read is never resumed either (Create
	// leaves it to Observe, which reports the member Failed).
	if st, err := readState(p); err == nil && st.Failure == "" {
		st.Failure = fencedFailure
		if err := writeState(p, st); err != nil {
			return fmt.Errorf("recording the fence of %s: %w", p.dir, err)
		}
	}
	if len(procs) == 0 {
		return nil
	}
	if !b.waitGone(ctx, rt, procs, fenceWait) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for kube-apiserver of %s to stop: %w", p.dir, err)
		}
		return fmt.Errorf("%w: kube-apiserver of %s survived SIGKILL", errStillRunning, p.dir)
	}
	b.log.Info("Member fenced: kube-apiserver stopped", "dir", p.dir)
	return nil
}
