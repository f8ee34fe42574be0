//go:build heavy

package clusterpool

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/netpolprobe"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// verdicts stands for the netpolprobe.Prober, whose pods need a node: the
// test sets the verdict and tells the change, as the prober would.
type verdicts struct {
	mu        sync.Mutex
	v         netpolprobe.Verdict
	requested map[string]corev1.PullPolicy
	changes   chan event.GenericEvent
}

func (f *verdicts) Verdict(string) netpolprobe.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v
}

func (f *verdicts) Request(img string, pull corev1.PullPolicy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requested[img] = pull
}

func (f *verdicts) Changes() <-chan event.GenericEvent { return f.changes }

func (f *verdicts) set(v netpolprobe.Verdict) {
	f.mu.Lock()
	f.v = v
	f.mu.Unlock()
	f.changes <- event.GenericEvent{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "netpol-probe"}}}
}

// TestNetworkPolicyRequired runs the pool controller against a real API
// server with enforcement required: a kubernetes pool asks for a probe of
// its etcd image, builds nothing while the verdict is pending or not
// enforced and says so in both conditions, and fills once the verdict is
// Enforced; a local pool is not judged.
func TestNetworkPolicyRequired(t *testing.T) {
	env := testenv.Shared(t)
	c := env.Client
	ctx := t.Context()
	ns := env.NewNamespace(t)
	mgr := env.NewManager(t, ns)
	if err := index.Setup(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	prober := &verdicts{v: netpolprobe.Verdict{State: netpolprobe.Unknown, Pending: true, Message: "probing"},
		requested: map[string]corev1.PullPolicy{}, changes: make(chan event.GenericEvent)}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName),
		Backends: backend.Registry{kobev1.BackendLocal: unbuildable{kobev1.BackendLocal}, kobev1.BackendKubernetes: unbuildable{kobev1.BackendKubernetes}},
		Clock:    clock.RealClock{}, NetworkPolicy: prober, RequireNetworkPolicy: true}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)

	kp := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "k", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](2), Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes,
			Kubernetes: &kobev1.KubernetesBackendSpec{Images: &kobev1.KubernetesImages{Etcd: "mirror.example/etcd:3", PullPolicy: corev1.PullNever}}}}}
	lp := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](0), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	for _, p := range []*kobev1.ClusterPool{kp, lp} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	members := func() int {
		var list kobev1.ClusterInstanceList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	expect := func(what, capacity, enforced string, n int) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, what, func() error {
			got := &kobev1.ClusterPool{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(kp), got); err != nil {
				return err
			}
			cc := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionCapacity)
			nc := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionNetworkPolicyEnforced)
			if cc == nil || nc == nil || string(cc.Status)+"/"+cc.Reason != capacity || string(nc.Status)+"/"+nc.Reason != enforced || members() != n {
				return fmt.Errorf("Capacity %+v, NetworkPolicyEnforced %+v, %d members", cc, nc, members())
			}
			return nil
		})
	}
	expect("a pending verdict refuses", "False/NetworkPolicyNotEnforced", "Unknown/NetworkPolicyProbePending", 0)
	prober.mu.Lock()
	pull, asked := prober.requested["mirror.example/etcd:3"]
	prober.mu.Unlock()
	if !asked || pull != corev1.PullNever {
		t.Errorf("probe requests %v: want the pool's etcd image with its pull policy", prober.requested)
	}

	prober.set(netpolprobe.Verdict{State: netpolprobe.NotEnforced, Message: "connected"})
	expect("not enforced refuses", "False/NetworkPolicyNotEnforced", "False/NetworkPolicyNotEnforced", 0)

	prober.set(netpolprobe.Verdict{State: netpolprobe.Enforced, Message: "refused"})
	expect("enforced fills", "True/CapacityAvailable", "True/NetworkPolicyEnforced", 2)

	got := &kobev1.ClusterPool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(lp), got); err != nil {
		t.Fatal(err)
	}
	if nc := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionNetworkPolicyEnforced); nc != nil {
		t.Errorf("a local pool reports %+v", nc)
	}
}
