package apiserver

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// The pool's advertised policy is what the planner acts on: the effective
// warm target (a Predictive pool's measured one) and scale-down delay.
func TestToWirePoolPolicy(t *testing.T) {
	scaling := func(mode kobev1.ScalingMode, demand int32, after *metav1.Duration) *kobev1.ClusterPool {
		p := &kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: "ci"},
			Spec: kobev1.ClusterPoolSpec{Scaling: &kobev1.ScalingSpec{
				Mode: mode, MinReady: ptr.To[int32](1), MaxClusters: ptr.To[int32](8), ScaleDownAfter: after,
			}},
		}
		if demand > 0 {
			p.Status.Demand = &kobev1.DemandStatus{WarmTarget: demand}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pool *kobev1.ClusterPool
		want wire.PoolPolicy
	}{
		{"fixed size", &kobev1.ClusterPool{Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](2)}},
			wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: 2}},
		{"size unset is the CRD default", &kobev1.ClusterPool{},
			wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: 3}},
		{"reactive, scaleDownAfter defaulted", scaling("", 5, nil),
			wire.PoolPolicy{Mode: "autoscaled", TTL: "1h", WarmTarget: 1, MaxClusters: 8, ScaleDownAfter: "5m", QueueTimeout: "10m"}},
		{"predictive follows the measured target", scaling(kobev1.ScalingPredictive, 5, &metav1.Duration{Duration: 20 * time.Second}),
			wire.PoolPolicy{Mode: "autoscaled", TTL: "1h", WarmTarget: 5, MaxClusters: 8, ScaleDownAfter: "20s", QueueTimeout: "10m"}},
		{"predictive bounded by maxClusters", scaling(kobev1.ScalingPredictive, 50, nil),
			wire.PoolPolicy{Mode: "autoscaled", TTL: "1h", WarmTarget: 8, MaxClusters: 8, ScaleDownAfter: "5m", QueueTimeout: "10m"}},
		{"scaling mode Fixed does not autoscale", scaling(kobev1.ScalingFixed, 5, nil),
			wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: 1, MaxClusters: 8, QueueTimeout: "10m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toWirePool(tc.pool).Policy; got != tc.want {
				t.Fatalf("policy = %+v, want %+v", got, tc.want)
			}
		})
	}
}
