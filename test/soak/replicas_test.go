//go:build soak

package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// acquiredMarker is what client-go's leader elector logs once it holds the
// lease (test/ha reads it the same way).
const acquiredMarker = "Successfully acquired lease"

// restartDelay is how long a replica that exited stays down before it is
// started again, as a Deployment's kubelet would.
const restartDelay = 2 * time.Second

// replicas are two kobe-operator slots, r0 and r1, each restarted whenever
// its process exits (a kill, or a leader that lost its lease and quit),
// each process with a log and ports of its own.
type replicas struct {
	ns, dir string

	mu     sync.Mutex
	procs  [2]*operatorproc.Process
	starts [2]int
	frozen [2]bool
	// killed marks a slot whose exit the soak caused.
	killed [2]bool
	// selfExits counts exits nobody caused (a leader giving up its lease).
	selfExits int
	all       []*operatorproc.Process
}

// args are both replicas' flags: production leader-election timings.
var replicaArgs = []string{
	"--leader-elect",
	"--enable-sim-backend",
	"--disable-local-backend",
	"--lease-retention", "3h",
	"--default-max-concurrent-leases", "0",
}

func (r *replicas) start(i int) error {
	r.mu.Lock()
	r.starts[i]++
	name := fmt.Sprintf("r%d-%d", i, r.starts[i])
	r.mu.Unlock()
	link := filepath.Join(r.dir, fmt.Sprintf("kobe-operator-r%d", i))
	if err := ensureSymlink(suite.binary, link); err != nil {
		return err
	}
	p, err := operatorproc.Start(operatorproc.Options{
		Binary: link, Kubeconfig: suite.env.Kubeconfig, Namespace: r.ns, Dir: r.dir, Name: name, Args: replicaArgs,
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.procs[i], r.killed[i], r.frozen[i] = p, false, false
	r.all = append(r.all, p)
	r.mu.Unlock()
	return nil
}

// supervise restarts slot i whenever its process exits, until ctx ends.
func (r *replicas) supervise(ctx context.Context, i int) {
	for {
		p := r.proc(i)
		select {
		case <-ctx.Done():
			return
		case <-p.Exited():
		}
		r.mu.Lock()
		if !r.killed[i] {
			r.selfExits++
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(restartDelay):
		}
		for r.start(i) != nil && ctx.Err() == nil {
			time.Sleep(time.Second)
		}
	}
}

func (r *replicas) proc(i int) *operatorproc.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[i]
}

// url is slot i's API URL now.
func (r *replicas) url(i int) string { return r.proc(i).APIURL }

// leader waits until exactly one live, running replica has logged that it
// acquired the leader lease.
func (r *replicas) leader(ctx context.Context, within time.Duration) (int, error) {
	lead := -1
	err := testenv.Poll(ctx, within, func() error {
		var leaders []int
		for i := range 2 {
			r.mu.Lock()
			p, frozen := r.procs[i], r.frozen[i]
			r.mu.Unlock()
			if !frozen && p.Alive() == nil && p.LogContains(acquiredMarker) {
				leaders = append(leaders, i)
			}
		}
		if len(leaders) != 1 {
			return fmt.Errorf("%d live replicas lead", len(leaders))
		}
		lead = leaders[0]
		return nil
	})
	return lead, err
}

// kill SIGKILLs slot i's process; supervise starts it again.
func (r *replicas) kill(i int) {
	r.mu.Lock()
	r.killed[i] = true
	p := r.procs[i]
	r.mu.Unlock()
	p.Kill()
}

// freeze SIGSTOPs slot i's process for d, then SIGCONTs it.
func (r *replicas) freeze(ctx context.Context, i int, d time.Duration) error {
	r.mu.Lock()
	p := r.procs[i]
	r.frozen[i] = true
	r.mu.Unlock()
	if err := p.Freeze(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	err := p.Thaw()
	r.mu.Lock()
	r.frozen[i] = false
	r.mu.Unlock()
	return err
}

// exitedWithin returns how long slot i's process, as it is now, takes to
// exit, up to within (then within and false).
func (r *replicas) exitedWithin(p *operatorproc.Process, within time.Duration) (time.Duration, bool) {
	start := time.Now()
	select {
	case <-p.Exited():
		return time.Since(start), true
	case <-time.After(within):
		return within, false
	}
}

// waitServing waits until slot i's current process answers /readyz.
func (r *replicas) waitServing(ctx context.Context, i int, within time.Duration) error {
	return testenv.Poll(ctx, within, func() error {
		p := r.proc(i)
		if err := p.Alive(); err != nil {
			return errors.New("not running")
		}
		code, err := p.GetStatus(ctx, p.APIURL+"/readyz")
		if err != nil {
			return err
		}
		if code != 200 {
			return fmt.Errorf("/readyz answers %d", code)
		}
		return nil
	})
}

// stop thaws and stops every process ever started (SIGTERM, then SIGKILL).
func (r *replicas) stop() {
	r.mu.Lock()
	all := append([]*operatorproc.Process(nil), r.all...)
	r.mu.Unlock()
	for _, p := range all {
		_ = p.Thaw()
		_ = p.Stop()
	}
}

// tails is the end of each slot's current log, for a failure report.
func (r *replicas) tails(n int) string {
	var s string
	for i := range 2 {
		p := r.proc(i)
		s += fmt.Sprintf("--- %s (%s):\n%s\n", p.Name, p.LogPath, p.Tail(n))
	}
	return s
}

// ensureSymlink makes link point at target unless it already exists.
func ensureSymlink(target, link string) error {
	if _, err := os.Lstat(link); err == nil {
		return nil
	}
	return os.Symlink(target, link)
}
