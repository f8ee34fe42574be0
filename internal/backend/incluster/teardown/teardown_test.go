//go:build integration

package teardown_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// slowDeath is a finalizer on a member's pods: a deleted pod stays until
// the test removes it, as one whose containers are slow to stop.
const slowDeath = "kobe.test/slow-death"

// podTemplate renders one pod that never runs (there is no node): enough
// for the machinery to make every object of a member.
type podTemplate struct{}

func (podTemplate) Settings(backend.Member) (incluster.Settings, error) {
	return incluster.Settings{APIPort: 6443}, nil
}

func (podTemplate) Pods(incluster.RenderInput) ([]corev1.Pod, error) {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	return []corev1.Pod{{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Image: "kobe.invalid/none:v1",
		Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
	}}}}}, nil
}

func newBackend(t *testing.T, c client.Client, ns string) *incluster.Backend {
	t.Helper()
	b, err := incluster.New(incluster.Options{
		Type: kobev1.BackendKubernetes, Template: podTemplate{}, Client: c, Namespace: ns,
		OperatorSelector: map[string]string{"app.kubernetes.io/name": "kobe"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// create makes member name's objects and puts slowDeath on its pods.
func create(t *testing.T, e *testenv.Env, b *incluster.Backend, ns, name string) backend.Member {
	t.Helper()
	m := backend.Member{Namespace: ns, Name: name, UID: uuid.NewUUID(), Pool: "ci"}
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods(t, e, m) {
		controllerutil.AddFinalizer(&p, slowDeath)
		if err := e.Client.Update(t.Context(), &p); err != nil {
			t.Fatal(err)
		}
	}
	if got := kindsOf(t, e, m); !slices.Equal(got, []string{"NetworkPolicy", "Pod", "PodDisruptionBudget", "Secret", "Service"}) {
		t.Fatalf("member %s was made of %v", name, got)
	}
	return m
}

// pods lists the member's pods, live.
func pods(t *testing.T, e *testenv.Env, m backend.Member) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := e.Client.List(t.Context(), &l, client.InNamespace(m.Namespace), client.MatchingLabels{incluster.LabelMemberUID: string(m.UID)}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// kindsOf lists, sorted, the kinds of the member's objects that are left.
func kindsOf(t *testing.T, e *testenv.Env, m backend.Member) []string {
	t.Helper()
	var out []string
	for kind, l := range map[string]client.ObjectList{
		"Pod": &corev1.PodList{}, "Service": &corev1.ServiceList{}, "Secret": &corev1.SecretList{},
		"NetworkPolicy": &networkingv1.NetworkPolicyList{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudgetList{},
	} {
		if err := e.Client.List(t.Context(), l, client.InNamespace(m.Namespace), client.MatchingLabels{incluster.LabelMemberUID: string(m.UID)}); err != nil {
			t.Fatal(err)
		}
		if meta.LenList(l) > 0 {
			out = append(out, kind)
		}
	}
	slices.Sort(out)
	return out
}

// policyOf says whether the member's NetworkPolicy exists, and that it is
// not being deleted.
func policyOf(t *testing.T, e *testenv.Env, m backend.Member) bool {
	t.Helper()
	var l networkingv1.NetworkPolicyList
	if err := e.Client.List(t.Context(), &l, client.InNamespace(m.Namespace), client.MatchingLabels{incluster.LabelMemberUID: string(m.UID)}); err != nil {
		t.Fatal(err)
	}
	for _, np := range l.Items {
		if np.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

// letDie removes slowDeath from the member's pods and waits until they are gone.
func letDie(t *testing.T, e *testenv.Env, m backend.Member) {
	t.Helper()
	for _, p := range pods(t, e, m) {
		patch := client.MergeFrom(p.DeepCopy())
		controllerutil.RemoveFinalizer(&p, slowDeath)
		if err := e.Client.Patch(t.Context(), &p, patch); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the member's pods gone", func() error {
		if left := pods(t, e, m); len(left) > 0 {
			return fmt.Errorf("%d pods left", len(left))
		}
		return nil
	})
}

// TestPolicyOutlivesPods: a member's pods keep their NetworkPolicy until
// the last of them is gone from the API, whether they are slow to die or
// their delete failed; Delete and Sweep remove the policy once they are.
func TestPolicyOutlivesPods(t *testing.T) {
	e := testenv.Start(t)
	ctx := t.Context()

	t.Run("Delete while the pods are dying", func(t *testing.T) {
		ns := e.NewNamespace(t)
		b := newBackend(t, e.Client, ns)
		m := create(t, e, b, ns, "pool-ci-0")
		for pass := 1; pass <= 2; pass++ {
			gone, err := b.Delete(ctx, m)
			if err != nil || gone {
				t.Fatalf("Delete pass %d with a pod dying: gone %v, err %v; want not gone, no error", pass, gone, err)
			}
			if ps := pods(t, e, m); len(ps) != 1 || ps[0].DeletionTimestamp == nil {
				t.Fatalf("pass %d: pods %v, want the one pod being deleted", pass, ps)
			}
			if !policyOf(t, e, m) {
				t.Fatalf("pass %d: the NetworkPolicy is gone (or going) while a pod of the member still runs", pass)
			}
		}
		if got := kindsOf(t, e, m); !slices.Equal(got, []string{"NetworkPolicy", "Pod"}) {
			t.Errorf("left while the pod dies: %v, want only the pod and its NetworkPolicy", got)
		}
		letDie(t, e, m)
		gone, err := b.Delete(ctx, m)
		if err != nil || !gone {
			t.Fatalf("Delete once the pods are gone: gone %v, err %v", gone, err)
		}
		if got := kindsOf(t, e, m); len(got) != 0 {
			t.Errorf("left after Delete reported gone: %v", got)
		}
	})

	t.Run("a pod's delete fails", func(t *testing.T) {
		ns := e.NewNamespace(t)
		refuse := errors.New("refused by the test")
		c, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		failing := interceptor.NewClient(c, interceptor.Funcs{
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if _, isPod := obj.(*corev1.Pod); isPod {
					return refuse
				}
				return c.Delete(ctx, obj, opts...)
			},
		})
		m := create(t, e, newBackend(t, e.Client, ns), ns, "pool-ci-1")
		b := newBackend(t, failing, ns)
		if _, err := b.Delete(ctx, m); !errors.Is(err, refuse) {
			t.Fatalf("Delete with the pod delete refused: %v, want the refusal", err)
		}
		if !policyOf(t, e, m) {
			t.Fatal("the NetworkPolicy went although the member's pod was not deleted")
		}
		if ps := pods(t, e, m); len(ps) != 1 || ps[0].DeletionTimestamp != nil {
			t.Fatalf("pods %v, want the one pod, not being deleted", ps)
		}
		cleanUp(t, e, m)
	})

	t.Run("Sweep while the pods are dying", func(t *testing.T) {
		ns := e.NewNamespace(t)
		b := newBackend(t, e.Client, ns)
		orphan := create(t, e, b, ns, "pool-ci-orphan")
		nobody := func(string, types.UID) bool { return false }
		removed, err := b.Sweep(ctx, nobody)
		if err != nil {
			t.Fatal(err)
		}
		if !policyOf(t, e, orphan) {
			t.Fatalf("Sweep removed %v, the NetworkPolicy among them, while a pod of the member still runs", removed)
		}
		if got := kindsOf(t, e, orphan); !slices.Equal(got, []string{"NetworkPolicy", "Pod"}) {
			t.Errorf("left while the pod dies: %v, want only the pod and its NetworkPolicy", got)
		}
		letDie(t, e, orphan)
		removed, err = b.Sweep(ctx, nobody)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) != 1 || policyOf(t, e, orphan) {
			t.Errorf("the sweep after the pods died removed %v; the NetworkPolicy is left: %v", removed, policyOf(t, e, orphan))
		}
	})

	t.Run("pods that go at once take the policy in the same call", func(t *testing.T) {
		ns := e.NewNamespace(t)
		b := newBackend(t, e.Client, ns)
		m := backend.Member{Namespace: ns, Name: "pool-ci-2", UID: uuid.NewUUID(), Pool: "ci"}
		if err := b.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		// No finalizer: an unscheduled pod leaves the API as soon as it is deleted.
		gone, err := b.Delete(ctx, m)
		if err != nil || !gone {
			t.Fatalf("Delete: gone %v, err %v; want gone in one call", gone, err)
		}
		if got := kindsOf(t, e, m); len(got) != 0 {
			t.Errorf("left: %v", got)
		}
	})
}

// cleanUp lets the member's pods die and deletes what is left.
func cleanUp(t *testing.T, e *testenv.Env, m backend.Member) {
	t.Helper()
	b := newBackend(t, e.Client, m.Namespace)
	if _, err := b.Delete(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	letDie(t, e, m)
	if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
		t.Fatalf("clean-up Delete: gone %v, err %v", gone, err)
	}
}
