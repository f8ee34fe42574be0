package binding_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// TestVerifiedDestroyBinds: a VerifiedDestroy lease is refused before
// anything is bound when its pool's backend cannot prove a teardown (or no
// backend can), takes only members with a recorded creation manifest, and
// its member carries the cleanup mode; a Standard lease takes any member.
func TestVerifiedDestroyBinds(t *testing.T) {
	pool := func(bt kobev1.BackendType) *kobev1.ClusterPool {
		return &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "pool-uid"},
			Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: bt}}}
	}
	member := func(name string, bt kobev1.BackendType, manifest bool) *kobev1.ClusterInstance {
		m := &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"), Labels: map[string]string{kobev1.LabelPool: "p"}},
			Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "p", UID: "pool-uid"}, Backend: kobev1.BackendSpec{Type: bt}},
			Status:     kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady},
		}
		if manifest {
			m.Status.CreationManifest = &kobev1.CreationManifest{Resources: []kobev1.ManifestResource{{Kind: "Path", Name: "/x"}}}
		}
		return m
	}
	localOnly := func(bt kobev1.BackendType) bool { return bt == kobev1.BackendLocal }
	tests := []struct {
		name       string
		mode       kobev1.CleanupMode
		verifiable func(kobev1.BackendType) bool
		objs       []client.Object
		want       string // the member bound; "" when refused
		refusal    error
		says       string
	}{
		{"verified on a backend that proves", kobev1.CleanupVerifiedDestroy, localOnly,
			[]client.Object{pool(kobev1.BackendLocal), member("old", kobev1.BackendLocal, false), member("new", kobev1.BackendLocal, true)}, "new", nil, ""},
		{"verified on sim", kobev1.CleanupVerifiedDestroy, localOnly,
			[]client.Object{pool(kobev1.BackendSim), member("m", kobev1.BackendSim, true)}, "", lease.ErrCleanupModeUnsupported, `backend "sim"`},
		{"verified with no verifying backend wired", kobev1.CleanupVerifiedDestroy, nil,
			[]client.Object{pool(kobev1.BackendLocal), member("m", kobev1.BackendLocal, true)}, "", lease.ErrCleanupModeUnsupported, "no backend wired"},
		{"verified, only members without a manifest: wait", kobev1.CleanupVerifiedDestroy, localOnly,
			[]client.Object{pool(kobev1.BackendLocal), member("m", kobev1.BackendLocal, false)}, "", binding.ErrNoReadyMember, ""},
		{"verified, pool unreadable: a member whose backend proves", kobev1.CleanupVerifiedDestroy, localOnly,
			[]client.Object{member("sim", kobev1.BackendSim, true), member("local", kobev1.BackendLocal, true)}, "local", nil, ""},
		{"standard takes a member without a manifest", kobev1.CleanupStandard, nil,
			[]client.Object{pool(kobev1.BackendSim), member("m", kobev1.BackendSim, false)}, "m", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 16 {
				objs := make([]client.Object, len(tt.objs))
				for i, o := range tt.objs {
					objs[i] = o.DeepCopyObject().(client.Object)
				}
				c := orderClient(t, objs)
				l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "default", UID: "lease-uid"},
					Spec: kobev1.ClusterLeaseSpec{Pool: "p", CleanupMode: tt.mode}}
				b := &binding.Binder{Client: c, Reader: c, Clock: clocktesting.NewFakePassiveClock(time.Now()), Verifiable: tt.verifiable}
				res, err := b.Bind(t.Context(), l)
				if tt.want == "" {
					if !errors.Is(err, tt.refusal) || !strings.Contains(errString(err), tt.says) {
						t.Fatalf("Bind = %v, %v; want %v saying %q", res, err, tt.refusal, tt.says)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Bind: %v", err)
				}
				if res.Instance.Name != tt.want || res.Instance.Spec.LeaseRef.CleanupMode != tt.mode {
					t.Fatalf("bound %s with cleanupMode %q; want %s with %q", res.Instance.Name, res.Instance.Spec.LeaseRef.CleanupMode, tt.want, tt.mode)
				}
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
