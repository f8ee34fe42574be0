package local

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

const (
	// maxStartAttempts bounds restarts after a port clash.
	maxStartAttempts = 3
	// superviseInterval is how often start-up is checked.
	superviseInterval = 200 * time.Millisecond
	// probeTimeout bounds one request of a readiness probe.
	probeTimeout = 5 * time.Second
)

// startSupervisor runs the rest of a member's start-up in the background:
// kube-controller-manager (and the scheduling components) can only start
// once the API server answers, because kube-controller-manager gives up
// after ten seconds without one. Called with rt.mu held.
func (b *Backend) startSupervisor(m backend.Member, rt *memberRT, p paths) {
	ctx, cancel := context.WithCancel(b.ctx)
	sup := &supervisor{cancel: cancel, done: make(chan struct{}), status: "starting etcd and kube-apiserver"}
	rt.sup = sup
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(sup.done)
		defer cancel()
		b.supervise(ctx, m, rt, p, sup)
		rt.mu.Lock()
		if rt.sup == sup {
			rt.sup = nil
		}
		rt.mu.Unlock()
	}()
}

// stopSupervisor stops a member's supervisor and waits for it. Must not be
// called with rt.mu held.
func (b *Backend) stopSupervisor(rt *memberRT) {
	rt.mu.Lock()
	sup := rt.sup
	rt.mu.Unlock()
	if sup != nil {
		sup.cancel()
		<-sup.done
	}
}

func (b *Backend) supervise(ctx context.Context, m backend.Member, rt *memberRT, p paths, sup *supervisor) {
	log := b.log.WithValues("dir", p.dir)
	for {
		port, stop := b.superviseStep(ctx, m, rt, p, sup)
		if stop {
			return
		}
		if port > 0 {
			err := b.probeLocal(ctx, p, port)
			if err == nil {
				if err := b.startRest(rt, p, m); err != nil {
					log.Error(err, "Starting member components failed")
				}
				return
			}
			rt.mu.Lock()
			sup.status = fmt.Sprintf("waiting for kube-apiserver: %v", err)
			rt.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(superviseInterval):
		}
	}
}

// superviseStep checks etcd and kube-apiserver once, restarting them after a
// port clash. It returns the API server's port when both run, and stop when
// start-up is over (finished, failed or cancelled).
func (b *Backend) superviseStep(ctx context.Context, m backend.Member, rt *memberRT, p paths, sup *supervisor) (port int, stop bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if ctx.Err() != nil {
		return 0, true
	}
	st, err := readState(p)
	if err != nil || st.validate(m) != nil || st.Failure != "" || st.Started {
		return 0, true
	}
	if time.Since(st.StartedAt) > b.opts.ProvisionTimeout {
		b.recordFailure(p, st, fmt.Sprintf("kube-apiserver did not answer within %s of start", b.opts.ProvisionTimeout))
		return 0, true
	}
	for _, pr := range st.Processes {
		alive, why := b.alive(rt, p, pr)
		if alive {
			continue
		}
		if bindFailed(p, pr.Component) && st.Attempt < maxStartAttempts {
			b.log.Info("Port taken before the member could bind it; restarting with another", "dir", p.dir, "component", pr.Component, "attempt", st.Attempt)
			sup.status = "restarting after a port clash"
			if err := b.restartCore(ctx, rt, p, st); err != nil {
				b.recordFailure(p, st, fmt.Sprintf("restarting after a port clash: %v", err))
				return 0, true
			}
			return 0, false
		}
		b.recordFailure(p, st, fmt.Sprintf("%s (pid %d) %s during start-up; its log is %s: %s", pr.Component, pr.PID, why, p.log(pr.Component), lastLogLine(p, pr.Component)))
		return 0, true
	}
	return st.APIServerPort, false
}

// restartCore kills the member's processes and starts etcd and
// kube-apiserver afresh on a new port. Called with rt.mu held.
func (b *Backend) restartCore(ctx context.Context, rt *memberRT, p paths, st *state) error {
	if err := b.killProcs(ctx, rt, p.dir); err != nil {
		return err
	}
	// Nothing of value is in etcd yet; a fresh data directory avoids any
	// question about the old incarnation's membership.
	if err := os.RemoveAll(p.etcdData()); err != nil {
		return err
	}
	return b.launchCore(rt, p, st)
}

// recordFailure makes a member's failure permanent in its state file.
// Called with rt.mu held.
func (b *Backend) recordFailure(p paths, st *state, reason string) {
	st.Failure = reason
	if err := writeState(p, st); err != nil {
		b.log.Error(err, "Recording member failure failed", "dir", p.dir)
	}
	b.log.Info("Member failed", "dir", p.dir, "reason", reason)
}

// startRest starts the components that need a running API server and marks
// start-up finished.
func (b *Backend) startRest(rt *memberRT, p paths, m backend.Member) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, err := readState(p)
	if err != nil {
		return err
	}
	if err := st.validate(m); err != nil || st.Started || st.Failure != "" {
		return err
	}
	for _, c := range components(st.Scheduling) {
		if slices.ContainsFunc(st.Processes, func(pr process) bool { return pr.Component == c }) {
			continue
		}
		if err := b.prepareComponent(p, st, c); err != nil {
			b.recordFailure(p, st, fmt.Sprintf("preparing %s: %v", c, err))
			return err
		}
		pr, err := b.startComponent(rt, p, st, c)
		if err != nil {
			b.recordFailure(p, st, fmt.Sprintf("starting %s: %v", c, err))
			return err
		}
		st.Processes = append(st.Processes, pr)
	}
	st.Started = true
	return writeState(p, st)
}

// prepareComponent writes what component c reads at start.
func (b *Backend) prepareComponent(p paths, st *state, c string) error {
	switch c {
	case compKCM, compScheduler, compKwok:
		return writeComponentKubeconfig(p, c, st.APIServerPort)
	}
	return nil
}

// probeLocal asks the member's API server on its local address whether it
// is ready, with the admin credentials.
func (b *Backend) probeLocal(ctx context.Context, p paths, port int) error {
	acc, err := access(p, localURL(port))
	if err != nil {
		return err
	}
	return probeReady(ctx, acc.adminKubeconfig, false)
}

// probeReady checks that the API server's /readyz answers "ok". With
// usable, it also checks that kube-controller-manager has done its first
// work, so that a lease holder can create pods at once: the "default"
// namespace has its "default" ServiceAccount.
func probeReady(ctx context.Context, kubeconfig []byte, usable bool) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = probeTimeout
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	get := func(path string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
		if err != nil {
			return 0, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		var body strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		body.Write(buf[:n])
		return resp.StatusCode, body.String(), nil
	}
	code, body, err := get("/readyz")
	if err != nil {
		return fmt.Errorf("/readyz: %w", err)
	}
	if code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		return fmt.Errorf("/readyz answered %d", code)
	}
	if !usable {
		return nil
	}
	code, _, err = get("/api/v1/namespaces/default/serviceaccounts/default")
	switch {
	case err != nil:
		return fmt.Errorf("reading the default ServiceAccount: %w", err)
	case code == http.StatusNotFound:
		return errors.New("kube-controller-manager has not created the default ServiceAccount yet")
	case code != http.StatusOK:
		return fmt.Errorf("reading the default ServiceAccount: status %d", code)
	}
	return nil
}

// tuning holds the knobs that trade nothing in correctness for memory;
// defaultTuning's values come from docs/benchmarks.md.
type tuning struct {
	apiServerArgs []string
	env           map[string][]string
}

func defaultTuning() tuning {
	return tuning{}
}

func (b *Backend) kwokArgs(p paths) ([]string, error) {
	return nil, errors.New("scheduling is not supported yet")
}
