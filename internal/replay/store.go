package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

const (
	// Label marks the objects of this package; its value says what they
	// record. The janitor deletes only objects that carry it.
	Label = "kobe.kunobi.ninja/replay"
	// KindSSHNonce is Label's value on SSH nonce objects.
	KindSSHNonce = "ssh-nonce"
	// NamePrefix starts the name of every nonce object.
	NamePrefix = "kobe-nonce-"
)

// Store is an sshsig.NonceStore that records each nonce as a
// coordination.k8s.io Lease in Namespace, named from a hash of the nonce:
// the API server's create is the atomic test-and-set that every replica
// shares (AlreadyExists means seen). The Lease's acquireTime plus
// leaseDurationSeconds is when the janitor may delete it.
type Store struct {
	// Client creates the objects; it must write to the API server (a
	// controller-runtime client does, whatever its cache).
	Client    client.Client
	Namespace string
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

var _ sshsig.NonceStore = (*Store)(nil)

// Name is the object name recording id: a hash, so that neither the nonce
// nor the key shows in the name and any id fits.
func Name(id string) string {
	sum := sha256.Sum256([]byte(id))
	return NamePrefix + hex.EncodeToString(sum[:])
}

// Claim creates the object for id; see sshsig.NonceStore.
func (s *Store) Claim(ctx context.Context, id string, expires time.Time) error {
	if s.Client == nil || s.Namespace == "" {
		return errors.New("replay store has no client or namespace")
	}
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	now := clk.Now()
	seconds := max(1, int32(min(math.Ceil(expires.Sub(now).Seconds()), math.MaxInt32)))
	obj := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(id),
			Namespace: s.Namespace,
			Labels:    map[string]string{Label: KindSSHNonce},
		},
		Spec: coordinationv1.LeaseSpec{
			AcquireTime:          ptr.To(metav1.NewMicroTime(now)),
			LeaseDurationSeconds: ptr.To(seconds),
		},
	}
	err := s.Client.Create(ctx, obj)
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		return sshsig.ErrReplayed
	}
	return fmt.Errorf("recording nonce %s: %w", obj.Name, err)
}

// Expiry is when the nonce object may be deleted, and false when it
// carries no expiry (then it is not one of ours, or was edited).
func Expiry(l *coordinationv1.Lease) (time.Time, bool) {
	if l.Spec.AcquireTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	return l.Spec.AcquireTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second), true
}
