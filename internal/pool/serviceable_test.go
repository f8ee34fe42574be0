package pool

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestCheckServiceable(t *testing.T) {
	capacity := func(status metav1.ConditionStatus, reason string, gen int64) func(*kobev1.ClusterPool) {
		return func(p *kobev1.ClusterPool) {
			p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{
				Type: kobev1.ConditionCapacity, Status: status, Reason: reason, Message: "backend \"capi\" is not wired", ObservedGeneration: gen,
			})
		}
	}
	counters := func(ready, leased, creating, recycling, quarantined int32) func(*kobev1.ClusterPool) {
		return func(p *kobev1.ClusterPool) {
			p.Status.Ready, p.Status.Leased, p.Status.Creating, p.Status.Recycling, p.Status.Quarantined = ready, leased, creating, recycling, quarantined
		}
	}
	beingDeleted := func(p *kobev1.ClusterPool) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now)) }
	scalingMax := func(maxClusters *int32) func(*kobev1.ClusterPool) {
		return func(p *kobev1.ClusterPool) { p.Spec.Scaling = &kobev1.ScalingSpec{MaxClusters: maxClusters} }
	}
	generation := func(g int64) func(*kobev1.ClusterPool) { return func(p *kobev1.ClusterPool) { p.Generation = g } }

	for _, tc := range []struct {
		name string
		pool *kobev1.ClusterPool
		want Cause // "" means serviceable
	}{
		{"new pool without status queues", testPool(), ""},
		{"empty pool queues", testPool(counters(0, 0, 0, 0, 0)), ""},
		{"fully leased pool queues", testPool(counters(0, 2, 0, 0, 0)), ""},
		{"scaling from zero queues", testPool(scalingMax(ptr.To[int32](3)), counters(0, 0, 0, 0, 0)), ""},
		{"capacity available", testPool(capacity(metav1.ConditionTrue, kobev1.ReasonCapacityAvailable, 1)), ""},
		{"at maxClusters with leased members queues", testPool(scalingMax(ptr.To[int32](2)), capacity(metav1.ConditionFalse, kobev1.ReasonMaxClustersReached, 1), counters(0, 2, 0, 0, 0)), ""},
		{"backend failing still queues", testPool(capacity(metav1.ConditionFalse, kobev1.ReasonBackendFailing, 1)), ""},
		{"being deleted", testPool(beingDeleted, counters(2, 0, 0, 0, 0)), CauseDeleting},
		{"being deleted wins over backend unavailable", testPool(beingDeleted, capacity(metav1.ConditionFalse, kobev1.ReasonBackendUnavailable, 1)), CauseDeleting},
		{"backend unavailable", testPool(capacity(metav1.ConditionFalse, kobev1.ReasonBackendUnavailable, 1)), CauseBackendUnavailable},
		{"a bundle runs a Job", testPool(capacity(metav1.ConditionFalse, kobev1.ReasonBootstrapJobsUnsupported, 1)), CauseBackendUnavailable},
		{"members' NetworkPolicy not enforced", testPool(capacity(metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced, 1)), CauseBackendUnavailable},
		{"a Kubernetes version not built here, Ready members or not", testPool(capacity(metav1.ConditionFalse, kobev1.ReasonVersionUnavailable, 1), counters(2, 0, 0, 0, 0)), CauseBackendUnavailable},
		{"NetworkPolicy verdict for an older generation is not trusted", testPool(generation(2), capacity(metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced, 1)), ""},
		{"backend unavailable, condition without generation", testPool(capacity(metav1.ConditionFalse, kobev1.ReasonBackendUnavailable, 0)), CauseBackendUnavailable},
		{"backend unavailable for an older generation is not trusted", testPool(generation(2), capacity(metav1.ConditionFalse, kobev1.ReasonBackendUnavailable, 1)), ""},
		{"fixed pool at size, all quarantined", testPool(counters(0, 0, 0, 0, 2)), CauseQuarantined},
		{"fixed pool, some quarantined, one ready", testPool(counters(1, 0, 0, 0, 2)), ""},
		{"fixed pool below size quarantined", testPool(counters(0, 0, 0, 0, 1)), ""},
		{"fixed pool, quarantined and one creating", testPool(counters(0, 0, 1, 0, 2)), ""},
		{"scaling at maxClusters, all quarantined", testPool(scalingMax(ptr.To[int32](3)), counters(0, 0, 0, 0, 3)), CauseQuarantined},
		{"scaling below maxClusters, all quarantined", testPool(scalingMax(ptr.To[int32](3)), counters(0, 0, 0, 0, 2)), ""},
		{"scaling without maxClusters never caps", testPool(scalingMax(nil), counters(0, 0, 0, 0, 50)), ""},
		{"size zero pool without quarantine queues", testPool(func(p *kobev1.ClusterPool) { p.Spec.Size = ptr.To[int32](0) }), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckServiceable(tc.pool)
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("CheckServiceable = %+v, want serviceable", *got)
			case tc.want != "" && got == nil:
				t.Fatalf("CheckServiceable = serviceable, want %s", tc.want)
			case got != nil && (got.Cause != tc.want || !strings.Contains(got.Message, `"ci"`)):
				t.Fatalf("CheckServiceable = %+v, want cause %s and a message naming the pool", *got, tc.want)
			}
		})
	}
}
