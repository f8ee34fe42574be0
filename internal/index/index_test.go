package index

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestActiveLeasePoolName(t *testing.T) {
	deleting := metav1.NewTime(time.Unix(1_800_000_000, 0))
	leaseIn := func(phase kobev1.LeasePhase) *kobev1.ClusterLease {
		return &kobev1.ClusterLease{Spec: kobev1.ClusterLeaseSpec{Pool: "ci"}, Status: kobev1.ClusterLeaseStatus{Phase: phase}}
	}
	beingDeleted := leaseIn(kobev1.LeaseBound)
	beingDeleted.DeletionTimestamp = &deleting
	for _, tc := range []struct {
		name string
		obj  client.Object
		want []string
	}{
		{"just created (no phase yet)", leaseIn(""), []string{"ci"}},
		{"pending", leaseIn(kobev1.LeasePending), []string{"ci"}},
		{"bound", leaseIn(kobev1.LeaseBound), []string{"ci"}},
		{"released", leaseIn(kobev1.LeaseReleased), nil},
		{"expired", leaseIn(kobev1.LeaseExpired), nil},
		{"being deleted", beingDeleted, nil},
		{"not a lease", &corev1.ConfigMap{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ActiveLeasePoolName(tc.obj); !slices.Equal(got, tc.want) {
				t.Errorf("ActiveLeasePoolName = %v, want %v", got, tc.want)
			}
		})
	}
}
