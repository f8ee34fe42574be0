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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/gates"
	"github.com/kunobi-ninja/kobe/internal/memberaddons"
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
		port, host, stop := b.superviseStep(ctx, m, rt, p, sup)
		if stop {
			return
		}
		if port > 0 {
			err := b.probeLocal(ctx, p, host, port)
			if err == nil {
				err = b.startRest(ctx, rt, p, m)
				if err == nil {
					return
				}
				log.V(1).Info("Finishing start-up failed; retrying", "reason", err.Error())
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
func (b *Backend) superviseStep(ctx context.Context, m backend.Member, rt *memberRT, p paths, sup *supervisor) (port int, host string, stop bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if ctx.Err() != nil {
		return 0, "", true
	}
	st, err := readState(p)
	if err != nil || st.validate(m) != nil || st.Failure != "" || st.Started {
		return 0, "", true
	}
	if time.Since(st.StartedAt) > b.opts.ProvisionTimeout {
		b.recordFailure(p, st, fmt.Sprintf("kube-apiserver did not answer within %s of start", b.opts.ProvisionTimeout))
		return 0, "", true
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
				return 0, "", true
			}
			return 0, "", false
		}
		b.recordFailure(p, st, fmt.Sprintf("%s (pid %d) %s during start-up; its log is %s: %s", pr.logName(), pr.PID, why, p.log(pr.logName()), lastLogLine(p, pr.logName())))
		return 0, "", true
	}
	if nodesStarted(st) < st.Nodes {
		// Nodes start beside etcd and kube-apiserver: their containerd and
		// image imports overlap the API server's start, and each node's
		// agent waits for /readyz before kubelet (internal/node,
		// apiwait.go). About 1.3 s of a member's time to Ready.
		if err := b.startNodes(ctx, rt, p, st, m); err != nil {
			b.recordFailure(p, st, fmt.Sprintf("starting nodes: %v", err))
			return 0, "", true
		}
	}
	return st.APIServerPort, st.LocalHost, false
}

// nodesStarted counts the node processes the state records.
func nodesStarted(st *state) int {
	n := 0
	for _, pr := range st.Processes {
		if pr.Component == compNode {
			n++
		}
	}
	return n
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
func (b *Backend) startRest(ctx context.Context, rt *memberRT, p paths, m backend.Member) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, err := readState(p)
	if err != nil {
		return err
	}
	if err := st.validate(m); err != nil || st.Started || st.Failure != "" {
		return err
	}
	for _, c := range memberComponents(st.Scheduling, st.Nodes) {
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
		if err := writeState(p, st); err != nil {
			return err
		}
	}
	if st.Nodes > 0 {
		if err := b.startNodes(ctx, rt, p, st, m); err != nil {
			b.recordFailure(p, st, fmt.Sprintf("starting nodes: %v", err))
			return err
		}
		b.startAddons(ctx, p, st)
	}
	if st.Scheduling {
		// Not a permanent failure: the supervisor calls startRest again.
		if err := b.createFakeNode(ctx, p, st); err != nil {
			return fmt.Errorf("creating node %s: %w", FakeNodeName, err)
		}
	}
	st.Started = true
	return writeState(p, st)
}

// startAddons creates the member's cluster DNS and default StorageClass
// while its nodes start, so that CoreDNS is scheduled the moment a node
// registers instead of when the DNSHealthy gate first runs (after the
// backend reports Ready): about 3 s off a member's time to hand-out. The
// gates' probe pods get the same head start (startProbes). Best effort:
// the gates create whatever is missing.
func (b *Backend) startAddons(ctx context.Context, p paths, st *state) {
	acc, err := access(p, localURL(st.LocalHost, st.APIServerPort))
	if err == nil {
		var cfg *rest.Config
		if cfg, err = clientcmd.RESTConfigFromKubeConfig(acc.adminKubeconfig); err == nil {
			cfg.Timeout = probeTimeout
			var cs *kubernetes.Clientset
			if cs, err = kubernetes.NewForConfig(cfg); err == nil {
				if err = memberaddons.Ensure(ctx, cs, clusterdns.Image); err == nil {
					err = b.startProbes(ctx, cs, st)
				}
			}
		}
	}
	if err != nil {
		b.log.V(1).Info("Cluster DNS, storage or probe pods not created yet; the readiness gates will", "dir", p.dir, "reason", err.Error())
	}
}

// startProbes creates the DNSHealthy probe pod and each node's NodesReady
// probe pod (bound to the node by name, which the kubelet runs as soon as
// it registers) while the nodes start. The gates, first evaluated when
// Observe reports Ready, then find them finished instead of creating them:
// the DNS probe alone had taken about 3 s after that. The gates decide from
// what the member holds, so these pods are theirs to record and delete.
func (b *Backend) startProbes(ctx context.Context, cs kubernetes.Interface, st *state) error {
	// Pods need their ServiceAccount to exist (the ServiceAccount admission
	// refuses them otherwise), and kube-controller-manager makes
	// kube-system/default only seconds later: make it now, as it would.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: metav1.NamespaceSystem}}
	if _, err := cs.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	pods := []*corev1.Pod{clusterdns.ProbePod(clusterdns.Image)}
	for i := range st.Nodes {
		pods = append(pods, gates.ProbePod(NodeName(i), b.opts.PauseImage))
	}
	for _, pod := range pods {
		if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating probe pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// prepareComponent writes what component c reads at start.
func (b *Backend) prepareComponent(p paths, st *state, c string) error {
	switch c {
	case compScheduler:
		if err := writeComponentKubeconfig(p, c, st.LocalHost, st.APIServerPort); err != nil {
			return err
		}
		return writeSchedulerConfig(p)
	case compKCM, compKwok:
		return writeComponentKubeconfig(p, c, st.LocalHost, st.APIServerPort)
	}
	return nil
}

// probeLocal asks the member's API server on its local address whether it
// is ready, with the admin credentials.
func (b *Backend) probeLocal(ctx context.Context, p paths, host string, port int) error {
	acc, err := access(p, localURL(host, port))
	if err != nil {
		return err
	}
	return probeReady(ctx, acc.adminKubeconfig, false, nil)
}

// probeReady checks that the API server's /readyz answers "ok". With
// usable, it also checks that the member can take work at once:
// kube-controller-manager has given the "default" namespace its "default"
// ServiceAccount (pods cannot be created before that) and every node in
// nodes (the simulated node with scheduling, the real ones) is Ready.
func probeReady(ctx context.Context, kubeconfig []byte, usable bool, nodes []string) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = probeTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var code int
	res := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code)
	body, err := res.Raw()
	switch {
	case code != 0 && code != http.StatusOK:
		return fmt.Errorf("/readyz answered %d", code)
	case err != nil:
		return fmt.Errorf("/readyz: %w", err)
	case strings.TrimSpace(string(body)) != "ok":
		return fmt.Errorf("/readyz answered %q", truncate(string(body), 100))
	}
	if !usable {
		return nil
	}
	_, err = cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return errors.New("kube-controller-manager has not created the default ServiceAccount yet")
	case err != nil:
		return fmt.Errorf("reading the default ServiceAccount: %w", err)
	}
	return nodesReady(ctx, cs, nodes)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
