//go:build integration

package netpolprobe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// kubelet plays the part of the node, which the test control plane lacks:
// it makes the listener Ready at ip (unless listenerUp is false) and ends
// the control and probe pods with the given exit codes.
func kubelet(ctx context.Context, t *testing.T, c client.Client, ns string, listenerUp bool, controlExit, probeExit int32) {
	t.Helper()
	done := map[string]bool{}
	err := testenv.Poll(ctx, time.Minute, func() error {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelProbe: "true"}); err != nil {
			return err
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			role := pod.Labels[LabelRole]
			if done[pod.Name] {
				continue
			}
			cs := corev1.ContainerStatus{Name: role, Image: pod.Spec.Containers[0].Image}
			switch role {
			case roleListener:
				if !listenerUp {
					continue
				}
				pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "10.0.0.5"
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
				cs.Ready, cs.State.Running = true, &corev1.ContainerStateRunning{}
			case roleControl, roleProbe:
				code := controlExit
				if role == roleProbe {
					code = probeExit
				}
				pod.Status.Phase = corev1.PodFailed
				if code == 0 {
					pod.Status.Phase = corev1.PodSucceeded
				}
				cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed"}
			}
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
			if err := c.Status().Update(ctx, pod); err != nil {
				return fmt.Errorf("updating %s: %w", pod.Name, err)
			}
			done[pod.Name] = true
		}
		if len(done) < 3 {
			return fmt.Errorf("%d of 3 probe pods seen", len(done))
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		t.Logf("kubelet: %v", err)
	}
}

func newProber(t *testing.T, env *testenv.Env, ns string, clk *clocktesting.FakeClock) *Prober {
	return &Prober{Client: env.Client, Namespace: ns, DefaultImage: "registry.example/etcd:probe", Clock: clk,
		Poll: 20 * time.Millisecond, Log: testr.New(t)}
}

// TestProbe runs the probe's steps against the real API server, with the
// pods' statuses written as a node would: the verdict follows what the
// pods did, the pods are those a restricted namespace admits, the policy
// guards the probe pod and not the control one, and nothing is left.
func TestProbe(t *testing.T) {
	env := testenv.Shared(t)
	cases := []struct {
		name                   string
		listenerUp             bool
		controlExit, probeExit int32
		want                   State
	}{
		{"the probe pod is refused", true, 0, 1, Enforced},
		{"the probe pod connects", true, 0, 0, NotEnforced},
		{"the control pod is refused too", true, 1, 1, Unknown},
		{"the listener never gets Ready", false, 0, 0, Unknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			ns := env.NewNamespace(t)
			clk := clocktesting.NewFakeClock(t0)
			p := newProber(t, env, ns, clk)
			// A probe that never ends fails the test in minutes, not at
			// the package's timeout.
			probeCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if !tc.listenerUp {
				// The listener is never Ready: once it exists, the deadline
				// passes. The clock moves until the probe ends, since the
				// prober may take its start time after the listener exists.
				go func() {
					_ = testenv.Poll(probeCtx, time.Minute, func() error {
						var pods corev1.PodList
						if err := env.Client.List(probeCtx, &pods, client.InNamespace(ns)); err != nil {
							return err
						}
						if len(pods.Items) == 0 {
							return errors.New("no listener yet")
						}
						return nil
					})
					for probeCtx.Err() == nil {
						clk.Step(DefaultDeadline)
						time.Sleep(200 * time.Millisecond)
					}
				}()
			}
			go kubelet(ctx, t, env.Client, ns, tc.listenerUp, tc.controlExit, tc.probeExit)
			var seen []corev1.Pod
			var policy *networkingv1.NetworkPolicy
			observed := make(chan struct{})
			go func() {
				defer close(observed)
				// Look at the objects while they exist.
				_ = testenv.Poll(ctx, time.Minute, func() error {
					var pods corev1.PodList
					var nps networkingv1.NetworkPolicyList
					if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
						return err
					}
					if err := env.Client.List(ctx, &nps, client.InNamespace(ns)); err != nil {
						return err
					}
					if len(nps.Items) == 1 && policy == nil {
						policy = nps.Items[0].DeepCopy()
					}
					for _, pod := range pods.Items {
						if !slices.ContainsFunc(seen, func(s corev1.Pod) bool { return s.Name == pod.Name }) {
							seen = append(seen, pod)
						}
					}
					if len(seen) < 3 {
						return fmt.Errorf("%d pods", len(seen))
					}
					return nil
				})
			}()
			v, err := p.Probe(probeCtx, "registry.example/etcd:probe", corev1.PullNever)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if v.State != tc.want {
				t.Fatalf("verdict %+v, want %s", v, tc.want)
			}
			var pods corev1.PodList
			var nps networkingv1.NetworkPolicyList
			if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.List(ctx, &nps, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items)+len(nps.Items) != 0 {
				t.Errorf("left behind: %d pods, %d NetworkPolicies", len(pods.Items), len(nps.Items))
			}
			if !tc.listenerUp {
				return
			}
			<-observed
			checkObjects(t, seen, policy)
		})
	}
}

// checkObjects checks the pods and the policy a run made.
func checkObjects(t *testing.T, pods []corev1.Pod, policy *networkingv1.NetworkPolicy) {
	t.Helper()
	if policy == nil || len(pods) != 3 {
		t.Fatalf("saw %d pods and policy %v", len(pods), policy)
	}
	if !slices.Equal(policy.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) ||
		len(policy.Spec.Ingress)+len(policy.Spec.Egress) != 0 {
		t.Errorf("policy is not deny-all both ways: %+v", policy.Spec)
	}
	sel := labels.SelectorFromSet(policy.Spec.PodSelector.MatchLabels)
	for _, pod := range pods {
		role := pod.Labels[LabelRole]
		if guarded := sel.Matches(labels.Set(pod.Labels)); guarded != (role == roleProbe) {
			t.Errorf("pod %s (%s): guarded by the policy = %v", pod.Name, role, guarded)
		}
		s, c := pod.Spec, pod.Spec.Containers[0]
		if s.RestartPolicy != corev1.RestartPolicyNever || s.ActiveDeadlineSeconds == nil || *s.AutomountServiceAccountToken ||
			!*s.SecurityContext.RunAsNonRoot || s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			*c.SecurityContext.AllowPrivilegeEscalation || len(c.SecurityContext.Capabilities.Drop) != 1 ||
			c.Resources.Limits.Memory().IsZero() || c.ImagePullPolicy != corev1.PullNever || c.Image != "registry.example/etcd:probe" {
			t.Errorf("pod %s (%s) is not a restricted, bounded probe pod: %+v", pod.Name, role, s)
		}
		if role != roleListener && !strings.Contains(strings.Join(c.Args, " "), "--endpoints=http://10.0.0.5:2379") {
			t.Errorf("client %s does not ask the listener: %v", pod.Name, c.Args)
		}
	}
}

// TestProberStart checks the runnable: a requested image is probed, its
// verdict read back and a change told; the default image stands for "".
func TestProberStart(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ns := env.NewNamespace(t)
	clk := clocktesting.NewFakeClock(t0)
	p := newProber(t, env, ns, clk)
	if v := p.Verdict(""); v.State != Unknown || !v.Pending || !strings.Contains(v.Message, "registry.example/etcd:probe") {
		t.Fatalf("verdict before any probe: %+v", v)
	}
	stopped := make(chan error)
	go func() { stopped <- p.Start(ctx) }()
	go kubelet(ctx, t, env.Client, ns, true, 0, 0)
	p.Request("", corev1.PullIfNotPresent)
	select {
	case <-p.Changes():
	case <-time.After(time.Minute):
		t.Fatal("no change told within a minute")
	}
	if v := p.Verdict("registry.example/etcd:probe"); v.State != NotEnforced || v.Pending {
		t.Fatalf("verdict: %+v", v)
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
