package binding_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
)

// TestBindRefusesUnprovenIsolation: a pool that reports its members'
// NetworkPolicy not enforced (Capacity False, NetworkPolicyNotEnforced), or
// a cluster.version this operator cannot build (VersionUnavailable: its
// Ready members are of another), hands a queued lease none of them; the lease waits as for a
// lost race. A verdict written for an older generation of the pool, or a
// pool with capacity, binds.
func TestBindRefusesUnprovenIsolation(t *testing.T) {
	capacity := func(status metav1.ConditionStatus, reason string, gen int64) *kobev1.ClusterPool {
		return &kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "pool-uid", Generation: 2},
			Spec:       kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes}},
			Status: kobev1.ClusterPoolStatus{Conditions: []metav1.Condition{{
				Type: kobev1.ConditionCapacity, Status: status, Reason: reason, ObservedGeneration: gen,
				Message: "the host cluster is not proven to enforce NetworkPolicy", LastTransitionTime: metav1.Now(),
			}}},
		}
	}
	member := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "default", UID: types.UID("m-uid"), Labels: map[string]string{kobev1.LabelPool: "p"}},
		Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "p", UID: "pool-uid"}},
		Status:     kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady},
	}
	for _, tc := range []struct {
		name string
		pool *kobev1.ClusterPool
		bind bool
	}{
		{"not enforced: no member", capacity(metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced, 2), false},
		{"a version not built here: no member of another one", capacity(metav1.ConditionFalse, kobev1.ReasonVersionUnavailable, 2), false},
		{"a verdict of an older generation is not trusted", capacity(metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced, 1), true},
		{"capacity available", capacity(metav1.ConditionTrue, kobev1.ReasonCapacityAvailable, 2), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := orderClient(t, []client.Object{tc.pool, member.DeepCopy()})
			l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "default", UID: "lease-uid"}, Spec: kobev1.ClusterLeaseSpec{Pool: "p"}}
			b := &binding.Binder{Client: c, Reader: c, Clock: clocktesting.NewFakePassiveClock(time.Now())}
			res, err := b.Bind(t.Context(), l)
			if tc.bind {
				if err != nil {
					t.Fatalf("Bind: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Bind took %s from a pool whose isolation is not proven", res.Instance.Name)
			}
			if !binding.LostRace(err) || !strings.Contains(err.Error(), `pool "p" hands out no member`) {
				t.Errorf("Bind error %v: want a wait (LostRace) that says why", err)
			}
			got := &kobev1.ClusterInstance{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(member), got); err != nil || got.Spec.LeaseRef != nil {
				t.Errorf("member after the refused bind: %+v (%v)", got.Spec.LeaseRef, err)
			}
		})
	}
}
