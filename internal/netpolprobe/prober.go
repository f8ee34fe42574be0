package netpolprobe

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Defaults of the Prober's timings.
const (
	DefaultInterval = 10 * time.Minute
	DefaultDeadline = 3 * time.Minute
	defaultPoll     = time.Second
	// cleanupTimeout bounds the deletes after a run, which run on a
	// context that outlives the Prober's own (a leader stepping down).
	cleanupTimeout = 30 * time.Second
)

// Prober runs probes in Namespace, one at a time, for each etcd image
// asked for (Request): at once when first asked, again every Interval and
// when asked again. It is leader-only: verdicts live in memory and the pool
// controller, which reads them, runs on the leader.
type Prober struct {
	// Client creates and deletes the probe's pods and policy; uncached.
	Client client.Client
	// Namespace is where members live (the operator's), so that the
	// namespace's own policies weigh on the probe as on members.
	Namespace string
	// DefaultImage is the etcd image of pools that name none.
	DefaultImage string
	Clock        clock.WithTicker
	Log          logr.Logger
	// Interval between probes of an image already judged; DefaultInterval
	// when zero.
	Interval time.Duration
	// Deadline of one run; DefaultDeadline when zero.
	Deadline time.Duration
	// Poll is how often a run looks at its pods; a second when zero.
	Poll time.Duration
	// Owner, when set, owns every object of a run: the operator's own pod
	// in a host cluster, so that what a run under way when the operator
	// stops (helm uninstall, a killed leader) left is collected with it.
	Owner *metav1.OwnerReference

	mu       sync.Mutex
	verdicts map[string]Verdict
	// due are the images to probe next, with their pull policy.
	due     map[string]corev1.PullPolicy
	pulls   map[string]corev1.PullPolicy
	running string
	wake    chan struct{}
	changes chan event.GenericEvent
}

// NeedLeaderElection: probes run on the leader only.
func (p *Prober) NeedLeaderElection() bool { return true }

func (p *Prober) init() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wake == nil {
		p.verdicts, p.due, p.pulls = map[string]Verdict{}, map[string]corev1.PullPolicy{}, map[string]corev1.PullPolicy{}
		p.wake = make(chan struct{}, 1)
		p.changes = make(chan event.GenericEvent, 1)
	}
}

func (p *Prober) image(img string) string {
	if img == "" {
		return p.DefaultImage
	}
	return img
}

// Verdict is the latest verdict for img ("" is DefaultImage); Pending when
// none has finished.
func (p *Prober) Verdict(img string) Verdict {
	p.init()
	img = p.image(img)
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.verdicts[img]; ok {
		return v
	}
	return Verdict{State: Unknown, Pending: true, Message: fmt.Sprintf("probing whether the host cluster enforces NetworkPolicy (namespace %s, image %s)", p.Namespace, img)}
}

// Request asks for a probe of img ("" is DefaultImage) soon, unless one is
// running; pull is the pool's pull policy (an image imported on the nodes
// may be Never).
func (p *Prober) Request(img string, pull corev1.PullPolicy) {
	p.init()
	img = p.image(img)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == img {
		return
	}
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	p.due[img], p.pulls[img] = pull, pull
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Changes tells, coalesced, that some verdict changed: the pool controller
// then reads every kubernetes pool's again.
func (p *Prober) Changes() <-chan event.GenericEvent {
	p.init()
	return p.changes
}

// Start probes what is asked until ctx ends.
func (p *Prober) Start(ctx context.Context) error {
	p.init()
	interval := p.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	tick := p.Clock.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, img := range p.takeDue() {
			p.mu.Lock()
			pull := p.pulls[img]
			p.mu.Unlock()
			p.setRunning(img)
			v, err := p.Probe(ctx, img, pull)
			p.setRunning("")
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				v = Verdict{State: Unknown, At: p.Clock.Now(), Message: fmt.Sprintf("probe of NetworkPolicy enforcement failed (namespace %s, image %s): %v", p.Namespace, img, err)}
			}
			p.record(img, v)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-tick.C():
			p.mu.Lock()
			maps.Copy(p.due, p.pulls)
			p.mu.Unlock()
		}
	}
}

// takeDue empties the queue, in order of image name.
func (p *Prober) takeDue() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	imgs := slices.Sorted(maps.Keys(p.due))
	clear(p.due)
	return imgs
}

// setRunning marks img as being probed ("" none): a Request meanwhile is
// answered by the run under way.
func (p *Prober) setRunning(img string) {
	p.mu.Lock()
	p.running = img
	p.mu.Unlock()
}

// record keeps v for img. A run that proved nothing does not replace a
// verdict that proved something: pods that could not be scheduled once
// say nothing about the CNI, which rarely changes under a running cluster.
func (p *Prober) record(img string, v Verdict) {
	p.mu.Lock()
	old, had := p.verdicts[img]
	keep := had && v.State == Unknown && old.State != Unknown
	if !keep {
		p.verdicts[img] = v
	}
	p.mu.Unlock()
	if keep {
		p.Log.Info("A NetworkPolicy probe proved nothing; the previous verdict stands", "image", img, "verdict", old.State, "reason", v.Message)
		return
	}
	if !had || old.State != v.State || old.Message != v.Message {
		p.Log.Info("NetworkPolicy enforcement probed", "image", img, "verdict", v.State, "message", v.Message)
		select {
		case p.changes <- event.GenericEvent{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "netpol-probe", Namespace: p.Namespace}}}:
		default: // one is pending already; it reads the latest verdicts
		}
	}
}

// Probe runs one probe of img and removes its objects afterwards. An error
// is an API failure; a probe that ran but proved nothing is an Unknown
// verdict.
func (p *Prober) Probe(ctx context.Context, img string, pull corev1.PullPolicy) (_ Verdict, retErr error) {
	poll := p.Poll
	if poll <= 0 {
		poll = defaultPoll
	}
	deadline := p.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	if err := p.cleanup(ctx, ""); err != nil {
		return Verdict{}, err
	}
	run := utilrand.String(8)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := p.cleanup(cctx, run); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	r := objects{namespace: p.Namespace, run: run, image: img, pull: pull, deadline: deadline, owner: p.Owner}
	if err := p.Client.Create(ctx, r.policy()); err != nil {
		return Verdict{}, fmt.Errorf("creating the probe's NetworkPolicy: %w", err)
	}
	listener := r.listener()
	if err := p.Client.Create(ctx, listener); err != nil {
		return Verdict{}, fmt.Errorf("creating the probe's listener pod: %w", err)
	}
	obs := Observation{Namespace: p.Namespace, Image: img, Started: p.Clock.Now(), Deadline: deadline}
	var control, probe *corev1.Pod
	var verdict Verdict
	err := wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		var err error
		if obs.Listener, err = p.observe(ctx, listener); err != nil {
			return false, err
		}
		if control != nil {
			if obs.Control, err = p.observe(ctx, control); err != nil {
				return false, err
			}
			if obs.Probe, err = p.observe(ctx, probe); err != nil {
				return false, err
			}
		}
		v, done := Judge(obs, p.Clock.Now())
		if done {
			verdict = v
			return true, nil
		}
		if control == nil && obs.Listener.Ready && obs.Listener.IP != "" {
			control, probe = r.client(roleControl, obs.Listener.IP), r.client(roleProbe, obs.Listener.IP)
			for _, c := range []*corev1.Pod{control, probe} {
				if err := p.Client.Create(ctx, c); err != nil {
					return false, fmt.Errorf("creating the probe's %s pod: %w", c.Labels[LabelRole], err)
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return Verdict{}, err
	}
	return verdict, nil
}

// observe reads pod live.
func (p *Prober) observe(ctx context.Context, pod *corev1.Pod) (PodState, error) {
	cur := &corev1.Pod{}
	if err := p.Client.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
		return PodState{}, fmt.Errorf("reading probe pod %s: %w", pod.Name, err)
	}
	return stateOf(cur), nil
}

// stateOf sums up a pod for Judge.
func stateOf(pod *corev1.Pod) PodState {
	s := PodState{Created: true, Phase: pod.Status.Phase, IP: pod.Status.PodIP}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue:
			s.Ready = true
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			s.Why = c.Reason + " " + c.Message
		}
	}
	for _, c := range pod.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil {
			s.ExitCode = &t.ExitCode
			s.Why = t.Reason
		}
		if w := c.State.Waiting; w != nil {
			s.Why = w.Reason + " " + w.Message
		}
	}
	if s.Why == "" && pod.Status.Reason != "" {
		s.Why = pod.Status.Reason + " " + pod.Status.Message
	}
	return s
}

// cleanup deletes the probe's objects of run, or of every run when run is
// "" (what a leader that died mid-run left).
func (p *Prober) cleanup(ctx context.Context, run string) error {
	sel := client.MatchingLabels{LabelProbe: "true"}
	if run != "" {
		sel[LabelRun] = run
	}
	var pods corev1.PodList
	if err := p.Client.List(ctx, &pods, client.InNamespace(p.Namespace), sel); err != nil {
		return fmt.Errorf("listing probe pods: %w", err)
	}
	var policies networkingv1.NetworkPolicyList
	if err := p.Client.List(ctx, &policies, client.InNamespace(p.Namespace), sel); err != nil {
		return fmt.Errorf("listing probe NetworkPolicies: %w", err)
	}
	var errs []error
	// Pods before their policy: a probe pod never runs unguarded.
	for i := range pods.Items {
		errs = append(errs, p.delete(ctx, &pods.Items[i]))
	}
	for i := range policies.Items {
		errs = append(errs, p.delete(ctx, &policies.Items[i]))
	}
	return errors.Join(errs...)
}

func (p *Prober) delete(ctx context.Context, o client.Object) error {
	err := p.Client.Delete(ctx, o, client.GracePeriodSeconds(1), client.Preconditions{UID: ptr.To(o.GetUID())})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting probe object %s: %w", o.GetName(), err)
	}
	return nil
}
