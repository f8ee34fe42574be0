package leaseservice

import (
	"context"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// DefaultFenceTimeout is Options.FenceTimeout's default: how long the
// answer to a release waits for its fence. Access must end within 2 s of
// the answer, and a kubernetes member's fence ends only once its kubelet
// stopped the API server, which a busy node took 3 s to do; a fence not
// done by then (a kubelet that does not act) is left to the operator's
// teardown, which fences again.
const DefaultFenceTimeout = 10 * time.Second

// fence stops the API server of the member that l (as read before its end)
// held, through Options.Fence, whatever replica serves the release: the
// leader's teardown fences as well, but only after the answer, and not at
// all if the leader dies right then. The fence is not recorded on the
// member (that would be one more write before the answer): the teardown
// fences again, at no cost, and records it. A failure is logged and does
// not fail the release, which is done.
func (s *Service) fence(ctx context.Context, l *kobev1.ClusterLease) {
	if s.opts.Fence == nil {
		return
	}
	// A caller who hangs up does not call the fence off.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.FenceTimeout)
	defer cancel()
	inst, err := s.member(ctx, l)
	if err != nil {
		s.opts.Log.Error(err, "Finding the member of a released lease to fence failed; the operator's teardown fences it", "lease", l.Name)
		return
	}
	if inst == nil {
		return // no member confirms the bind: nothing to cut
	}
	start := time.Now()
	if err := s.opts.Fence(ctx, inst); err != nil {
		s.opts.Log.Error(err, "Fencing the member of a released lease failed; the operator's teardown fences it", "lease", l.Name, "member", inst.Name)
		return
	}
	s.opts.Log.V(1).Info("Member fenced before the release answered", "lease", l.Name, "member", inst.Name, "took", time.Since(start))
}
