package backend

import (
	"context"
	"fmt"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// LoadImages imports a docker-archive into every node of inst (kobe load)
// through inst's backend, and returns how many nodes hold it. A backend
// that is not an ImageLoader, or a member without nodes, is ErrNoNodes; a
// local member of another operator host is ErrOtherHost.
func (r Registry) LoadImages(ctx context.Context, inst *kobev1.ClusterInstance, archive string) (int, error) {
	b, ok := r.For(inst.Spec.Backend.Type)
	if !ok {
		return 0, fmt.Errorf("%w: backend %q is not served by this operator", ErrUnavailable, inst.Spec.Backend.Type)
	}
	l, ok := b.(ImageLoader)
	if !ok {
		return 0, fmt.Errorf("%w: %s members have no nodes", ErrNoNodes, inst.Spec.Backend.Type)
	}
	if check, why := CheckHost(inst, b); check == HostElsewhere {
		return 0, fmt.Errorf("loading images into member %s: %w: %s", inst.Name, ErrOtherHost, why)
	}
	n, err := l.LoadImages(ctx, MemberOf(inst), archive)
	if err != nil {
		return n, fmt.Errorf("loading images into member %s: %w", inst.Name, err)
	}
	return n, nil
}
