package clusterlease

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
)

// fenceTimeout bounds the fence an ended lease's reconcile waits for; one
// not done by then is left to the member's teardown, which fences again.
const fenceTimeout = 2 * time.Second

// fenceMember stops the API server of the member a just-ended lease held
// (Reconciler.Fence), right after the end was written. The member's teardown
// fences too, but only after the instance controller has seen the end: on a
// busy host that hop alone took over a second, while access must end within
// 2 s of the expiry. Like the release's fence in leaseservice it is not
// recorded on the member (the teardown fences again, at no cost, and
// records it), and a failure is logged, not returned: the lease has ended.
func (r *Reconciler) fenceMember(ctx context.Context, s *scope) {
	ref := s.lease.Status.InstanceRef
	if r.Fence == nil || ref == nil {
		return
	}
	inst := &kobev1.ClusterInstance{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.lease.Namespace, Name: ref.Name}, inst); err != nil {
		return // gone (nothing to cut) or not cached yet: the teardown fences
	}
	if !binding.Consistent(s.lease, inst) {
		return // the member does not name this lease: not its holder's
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fenceTimeout)
	defer cancel()
	start := time.Now()
	if err := r.Fence(ctx, inst); err != nil {
		s.log.Error(err, "Fencing the member of an ended lease failed; its teardown fences it", "member", klog.KObj(inst))
		return
	}
	s.log.V(1).Info("Member fenced as its lease ended", "member", klog.KObj(inst), "took", time.Since(start))
}
