package backend

import (
	"context"
	"errors"
	"fmt"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// ErrOtherHost says a member was started on another host (CheckHost), so
// this operator's backend must not be asked about it.
var ErrOtherHost = errors.New("member belongs to another host")

// Fence stops the API server of inst through the backend of its
// spec.backend.type (Fencer), where this operator may: it does nothing for
// a backend that is not wired or cannot fence (the sim backend's members
// have no API server), and refuses (ErrOtherHost) a member another host
// started. Like Fencer.Fence it is idempotent.
func (r Registry) Fence(ctx context.Context, inst *kobev1.ClusterInstance) error {
	b, ok := r.For(inst.Spec.Backend.Type)
	if !ok {
		return nil
	}
	f, ok := b.(Fencer)
	if !ok {
		return nil
	}
	if check, why := CheckHost(inst, b); check == HostElsewhere {
		return fmt.Errorf("fencing member %s: %w: %s", inst.Name, ErrOtherHost, why)
	}
	if err := f.Fence(ctx, MemberOf(inst)); err != nil {
		return fmt.Errorf("fencing member %s: %w", inst.Name, err)
	}
	return nil
}
