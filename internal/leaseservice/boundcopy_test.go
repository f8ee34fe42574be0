//go:build integration

package leaseservice_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestReleaseRightAfterTheAnswer: a caller that releases the moment its
// lease is answered (a CI step that failed at once, make bench's cycles)
// does not race the deferred write of the lease's bound copy: the release
// waits for it, so neither write conflicts (a write the API server serves
// for nothing) and the ended lease still names the member it held; it ends
// the copy that write left, with no live read.
func TestReleaseRightAfterTheAnswer(t *testing.T) {
	makePool(t, "quick-release", 1)
	var conflicts, leaseReads atomic.Int32
	direct, err := client.NewWithWatch(fx.env.Config, client.Options{Scheme: fx.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	s := newService(func(o *leaseservice.Options) {
		o.Client = interceptor.NewClient(direct, interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				err := c.SubResource(sub).Update(ctx, obj, opts...)
				if apierrors.IsConflict(err) {
					conflicts.Add(1)
				}
				return err
			},
		})
		o.APIReader = interceptor.NewClient(direct, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*kobev1.ClusterLease); ok {
					leaseReads.Add(1)
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		// The deferred write lags the answer, as it does on a busy server.
		o.Defer = func(f func()) {
			go func() {
				time.Sleep(200 * time.Millisecond)
				f()
			}()
		}
	})
	p := caller("quick-release", kobev1.AccessRule{Pools: []string{"quick-release"}})
	l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "quick-release", TTL: 10 * time.Minute})
	if err != nil || !l.Bound() {
		t.Fatalf("Create = %+v, %v; want it bound at once", l, err)
	}
	// Resolving the lease reads it live when the cache lacks it still:
	// that read is not the release's.
	testenv.Eventually(t, 150*time.Millisecond, "the lease in the cache", func() error {
		return fx.mgr.GetClient().Get(t.Context(), client.ObjectKeyFromObject(l.Object), &kobev1.ClusterLease{})
	})
	reads := leaseReads.Load()
	if err := s.Release(t.Context(), p, l.Object.Name); err != nil {
		t.Fatal(err)
	}
	// The release starts from the bound copy it waited for, newer than
	// the cache shows.
	if n := leaseReads.Load() - reads; n != 0 {
		t.Errorf("the release read the lease live %d times; want none", n)
	}
	testenv.Eventually(t, 10*time.Second, "the lease released", func() error {
		got := &kobev1.ClusterLease{}
		if err := fx.env.Client.Get(t.Context(), client.ObjectKeyFromObject(l.Object), got); err != nil {
			return err
		}
		if got.Status.Phase != kobev1.LeaseReleased {
			return fmt.Errorf("phase %s", got.Status.Phase)
		}
		if got.Status.InstanceRef == nil {
			t.Fatalf("the released lease names no member: the release overtook the bound copy")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // the deferred write, were it still to come
	if n := conflicts.Load(); n != 0 {
		t.Errorf("%d status writes conflicted; want none", n)
	}
}
