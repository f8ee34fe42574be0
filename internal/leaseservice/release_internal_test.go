package leaseservice

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
)

// TestReleaseEndsTheCachedCopy: a release ends the lease as the cache shows
// it, with no live read when that copy is current (one GET of the host API
// server per lease-and-release cycle); a copy that is not current fails its
// fenced write, and the lease read live is ended instead, never a write
// that undoes what the cache missed. A lease the cache shows ended is not
// written at all.
func TestReleaseEndsTheCachedCopy(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kobev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	p := &auth.Principal{Identity: "repo:kunobi/kobe", Policy: "ci"}
	const id = "lease-0123456789ab"
	bound := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: "kobe", UID: "l-uid"},
		Spec:   kobev1.ClusterLeaseSpec{Pool: "ci", Requester: kobev1.Requester{Policy: p.Policy, Identity: p.Identity}},
		Status: kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: "m", UID: "m-uid"}}}

	run := func(t *testing.T, cacheBehind bool, phase kobev1.LeasePhase) (liveGets, conflicts int, got *kobev1.ClusterLease) {
		t.Helper()
		l := bound.DeepCopy()
		l.Status.Phase = phase
		store := fake.NewClientBuilder().WithScheme(scheme).WithObjects(l).WithStatusSubresource(&kobev1.ClusterLease{}).Build()
		cache := client.Reader(store)
		if cacheBehind {
			// The cache holds the lease as it was; since, it was extended.
			stale := &kobev1.ClusterLease{}
			if err := store.Get(t.Context(), client.ObjectKeyFromObject(l), stale); err != nil {
				t.Fatal(err)
			}
			cache = fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale.DeepCopy()).Build()
			stale.Status.Extensions = 1
			if err := store.Status().Update(t.Context(), stale); err != nil {
				t.Fatal(err)
			}
		}
		writer := interceptor.NewClient(store, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			err := c.SubResource(sub).Update(ctx, obj, opts...)
			if apierrors.IsConflict(err) {
				conflicts++
			}
			return err
		}})
		live := interceptor.NewClient(store, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			liveGets++
			return c.Get(ctx, key, obj, opts...)
		}})
		s := New(Options{Namespace: "kobe", Reader: cache, APIReader: live, Client: writer})
		if err := s.Release(t.Context(), p, id); err != nil {
			t.Fatal(err)
		}
		got = &kobev1.ClusterLease{}
		if err := store.Get(t.Context(), client.ObjectKeyFromObject(l), got); err != nil {
			t.Fatal(err)
		}
		return liveGets, conflicts, got
	}

	t.Run("the cache is current: no live read", func(t *testing.T) {
		gets, conflicts, got := run(t, false, kobev1.LeaseBound)
		if gets != 0 || conflicts != 0 {
			t.Errorf("%d live reads, %d conflicts; want none", gets, conflicts)
		}
		if got.Status.Phase != kobev1.LeaseReleased {
			t.Errorf("phase %s, want Released", got.Status.Phase)
		}
	})
	t.Run("the cache is behind: the fenced write fails, the live lease is ended", func(t *testing.T) {
		gets, conflicts, got := run(t, true, kobev1.LeaseBound)
		if gets != 1 || conflicts != 1 {
			t.Errorf("%d live reads, %d conflicts; want one each", gets, conflicts)
		}
		if got.Status.Phase != kobev1.LeaseReleased || got.Status.Extensions != 1 {
			t.Errorf("phase %s, extensions %d; want Released, keeping the extension the cache missed", got.Status.Phase, got.Status.Extensions)
		}
	})
	t.Run("the cache shows it ended: nothing written", func(t *testing.T) {
		gets, conflicts, got := run(t, false, kobev1.LeaseExpired)
		if gets != 0 || conflicts != 0 || got.Status.Phase != kobev1.LeaseExpired {
			t.Errorf("%d live reads, %d conflicts, phase %s; want none, Expired", gets, conflicts, got.Status.Phase)
		}
	})
}
