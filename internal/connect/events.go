package connect

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Start registers the lease and member event handlers that close the
// streams of a lease the moment it ends (released, expired, deleted, its
// member rebound or deleted). Each replica closes its own streams; the
// next request of the lease fails from the cache that the same events
// update. It returns once the handlers are registered.
func (p *Proxy) Start(ctx context.Context) error {
	if p.opts.Informers == nil {
		return nil
	}
	leases, err := p.opts.Informers.GetInformer(ctx, &kobev1.ClusterLease{})
	if err != nil {
		return fmt.Errorf("watching leases for the connect proxy: %w", err)
	}
	if _, err := leases.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if l, ok := obj.(*kobev1.ClusterLease); ok {
				p.leaseChanged(ctx, l)
			}
		},
		DeleteFunc: func(obj any) {
			if l, ok := tombstone(obj).(*kobev1.ClusterLease); ok {
				p.closeLease(l, "deleted")
			}
		},
	}); err != nil {
		return fmt.Errorf("watching leases for the connect proxy: %w", err)
	}
	members, err := p.opts.Informers.GetInformer(ctx, &kobev1.ClusterInstance{})
	if err != nil {
		return fmt.Errorf("watching members for the connect proxy: %w", err)
	}
	if _, err := members.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if inst, ok := obj.(*kobev1.ClusterInstance); ok {
				p.memberChanged(inst)
			}
		},
		DeleteFunc: func(obj any) {
			if inst, ok := tombstone(obj).(*kobev1.ClusterInstance); ok {
				if n := p.streams.closeMember(inst.UID); n > 0 {
					p.opts.Log.Info("Closed connect streams", "member", inst.Name, "streams", n, "cause", "member deleted")
				}
				p.forget(inst.UID)
			}
		},
	}); err != nil {
		return fmt.Errorf("watching members for the connect proxy: %w", err)
	}
	return nil
}

// leaseChanged closes l's streams when l may no longer reach its member.
func (p *Proxy) leaseChanged(ctx context.Context, l *kobev1.ClusterLease) {
	if !p.streams.has(l.UID) {
		return
	}
	inst, pl, err := p.memberOf(ctx, l)
	if err != nil {
		p.opts.Log.Error(err, "Checking a lease with open connect streams failed", "lease", l.Name)
		return
	}
	if r := CheckLease(l, inst, pl, p.opts.Clock.Now()); r != nil {
		p.closeLease(l, r.Detail)
	}
}

func (p *Proxy) closeLease(l *kobev1.ClusterLease, cause string) {
	if n := p.streams.closeLease(l.UID); n > 0 {
		p.opts.Log.Info("Closed connect streams", "lease", l.Name, "streams", n, "cause", cause)
	}
}

// memberChanged closes the streams to inst of leases it no longer holds,
// and all of them once it is being deleted.
func (p *Proxy) memberChanged(inst *kobev1.ClusterInstance) {
	n := p.streams.closeWhere(func(s *stream) bool {
		return s.member == inst.UID && (inst.DeletionTimestamp != nil || inst.Spec.LeaseRef == nil || inst.Spec.LeaseRef.UID != s.lease)
	})
	if n > 0 {
		p.opts.Log.Info("Closed connect streams", "member", inst.Name, "streams", n, "cause", "member released or being deleted")
	}
}

// tombstone unwraps a deletion the informer missed the final state of.
func tombstone(obj any) any {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
