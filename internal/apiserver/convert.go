package apiserver

import (
	"k8s.io/apimachinery/pkg/api/meta"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// toWireLease renders a lease as the API's lease object. The requester,
// the alias and the kubeconfig are shown only to the lease's owner.
func toWireLease(v *leaseservice.Lease) wire.Lease {
	l := v.Object
	phase := string(l.Status.Phase)
	if phase == "" {
		phase = wire.PhasePending
	}
	out := wire.Lease{
		ID:            l.Name,
		Phase:         phase,
		Pool:          l.Spec.Pool,
		Profile:       l.Spec.Pool,
		QueuePosition: int(v.QueuePosition),
		EffectiveTTL:  wire.FormatTTL(lease.TTL(l, v.Pool)),
		Extensions:    int(l.Status.Extensions),
		MaxExtensions: int(lease.MaxExtensions(l)),
		CreatedAt:     wire.WireTime(l.CreationTimestamp.Time),
	}
	if l.Status.InstanceRef != nil {
		out.ClusterName = l.Status.InstanceRef.Name
	}
	if l.Status.ExpiresAt != nil {
		out.ExpiresAt = wire.WireTime(l.Status.ExpiresAt.Time)
	}
	if l.Status.BoundAt != nil {
		out.BoundAt = wire.WireTime(l.Status.BoundAt.Time)
	}
	if timeout, ok := lease.IdleTimeout(l); ok {
		out.IdleTimeout = wire.FormatTTL(timeout)
		if ends := lease.IdleEndsAt(l); !ends.IsZero() && !lease.IsEnded(l.Status.Phase) {
			out.IdleEndsAt = wire.WireTime(ends)
		}
	}
	if timeout, ok := lease.HeartbeatTimeout(l); ok {
		out.HeartbeatTimeout = wire.FormatTTL(timeout)
		if !lease.IsEnded(l.Status.Phase) {
			out.HeartbeatEndsAt = wire.WireTime(lease.HeartbeatEndsAt(l))
		}
	}
	if v.Owned {
		out.Requester = l.Spec.Requester.Identity
		out.Alias = l.Labels[kobev1.LabelAlias]
		out.Kubeconfig = string(v.Kubeconfig)
	}
	if c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded); c != nil && lease.IsEnded(l.Status.Phase) {
		out.Reason = c.Reason
	} else if c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionBound); c != nil {
		out.Reason = c.Reason
	}
	return out
}

// toWireLeases renders a listing; never nil, so that it encodes as [].
func toWireLeases(ls []leaseservice.Lease) []wire.Lease {
	out := make([]wire.Lease, 0, len(ls))
	for i := range ls {
		out = append(out, toWireLease(&ls[i]))
	}
	return out
}

// toWirePools renders a pool listing; never nil.
func toWirePools(ps []kobev1.ClusterPool) []wire.Pool {
	out := make([]wire.Pool, 0, len(ps))
	for i := range ps {
		out = append(out, toWirePool(&ps[i]))
	}
	return out
}

// toWirePool renders a ClusterPool as the API's pool object.
func toWirePool(p *kobev1.ClusterPool) wire.Pool {
	out := wire.Pool{
		Name:        p.Name,
		Phase:       string(p.Status.Phase),
		Ready:       int(p.Status.Ready),
		Leased:      int(p.Status.Leased),
		Creating:    int(p.Status.Creating),
		Recycling:   int(p.Status.Recycling),
		Unhealthy:   int(p.Status.Unhealthy),
		Quarantined: int(p.Status.Quarantined),
		QueueDepth:  int(p.Status.QueueDepth),
		Policy:      wire.PoolPolicy{Mode: "fixed", TTL: wire.FormatTTL(lease.PoolTTL(p))},
	}
	// warmTarget is what the pool keeps Ready at rest: size, minReady, or
	// for scaling.mode Predictive the measured demand's target.
	out.Policy.WarmTarget = int(pool.WarmTarget(p))
	if sc := p.Spec.Scaling; sc != nil {
		if pool.FollowsDemand(&p.Spec) {
			out.Policy.Mode = "autoscaled"
			out.Policy.ScaleDownAfter = wire.FormatTTL(pool.ScaleDownAfter(&p.Spec))
		}
		if sc.MaxClusters != nil {
			out.Policy.MaxClusters = int(*sc.MaxClusters)
		}
		out.Policy.QueueTimeout = wire.FormatTTL(lease.QueueTimeout(p))
	}
	return out
}
