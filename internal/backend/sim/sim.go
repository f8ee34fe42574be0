package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
)

// Endpoint is every simulated member's API server URL. Port 1 on the
// loopback address: nothing listens there (binding it needs privileges
// nobody grants to a tcpmux service), so a client is refused at once, and the
// address never routes off the machine. A TEST-NET address would instead
// hang until a timeout, or leave the host through its default route.
const Endpoint = "https://127.0.0.1:1"

// Options configure the simulated backend.
type Options struct {
	// Clock is the time readiness is judged at. Default: the real clock.
	Clock clock.PassiveClock
}

// Backend builds simulated members. It keeps no state: see the package doc.
type Backend struct {
	clock clock.PassiveClock
	// minted holds the access material already minted per member UID, so
	// that a member observed again (while its gates are checked) does not
	// cost three key pairs each time: at benchmark rates that was 7% of the
	// operator's CPU. Only a saving: after a restart the material is minted
	// anew, which is safe (see doc.go: the access material is written once).
	minted sync.Map
}

var _ backend.Backend = (*Backend)(nil)

// New returns the simulated backend.
func New(o Options) *Backend {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Backend{clock: o.Clock}
}

// Type is kobev1.BackendSim.
func (b *Backend) Type() kobev1.BackendType { return kobev1.BackendSim }

// Capabilities: any Kubernetes version (nothing is run), one server, no
// scheduling, and Simulated, so that the operator does not probe an
// endpoint that answers nothing.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{MaxServers: 1, Simulated: true}
}

// Create does nothing: a simulated member's life is timed from its
// ClusterInstance's creation, which the API server keeps.
func (b *Backend) Create(context.Context, backend.Member) error { return nil }

// Delete reports the member gone at once: nothing of it exists outside its
// ClusterInstance (its access material included), which the operator
// deletes.
func (b *Backend) Delete(_ context.Context, m backend.Member) (bool, error) {
	b.minted.Delete(m.UID)
	return true, nil
}

// Observe reports Provisioning until readyAfter has passed since the member
// was created, then Failed for the members failurePercent picks, else Ready
// with freshly minted access material. A simulated member never reports
// Absent: it exists as long as its ClusterInstance does.
func (b *Backend) Observe(_ context.Context, m backend.Member) (backend.Observation, error) {
	readyAfter, failurePercent := settings(m.Spec.Backend.Sim)
	readyAt := m.Created.Add(readyAfter)
	if left := readyAt.Sub(b.clock.Now()); left > 0 {
		return backend.Observation{State: backend.StateProvisioning,
			// A message that does not count down: it lands in the member's
			// status, and a changing one would cost a write per observation.
			Message: fmt.Sprintf("simulated member: Ready at %s (readyAfter %s)", readyAt.UTC().Format(time.RFC3339), readyAfter)}, nil
	}
	if Fails(m.UID, failurePercent) {
		return backend.Observation{State: backend.StateFailed,
			Message: fmt.Sprintf("simulated failure (failurePercent %d picked this member by its UID)", failurePercent)}, nil
	}
	if a, ok := b.minted.Load(m.UID); ok {
		return backend.Observation{State: backend.StateReady, Access: a.(*backend.Access)}, nil
	}
	a, err := NewAccess()
	if err != nil {
		return backend.Observation{}, fmt.Errorf("minting access for simulated member %s/%s: %w", m.Namespace, m.Name, err)
	}
	b.minted.Store(m.UID, a)
	return backend.Observation{State: backend.StateReady, Access: a}, nil
}

// settings reads a pool's sim block; an absent block means Ready at once
// and no failures.
func settings(s *kobev1.SimBackendSpec) (readyAfter time.Duration, failurePercent int32) {
	if s == nil {
		return 0, 0
	}
	if s.ReadyAfter != nil && s.ReadyAfter.Duration > 0 {
		readyAfter = s.ReadyAfter.Duration
	}
	return readyAfter, min(max(s.FailurePercent, 0), 100)
}

// Fails decides, from the member's UID alone, whether it is one of the
// failurePercent in a hundred that fail: the same member gets the same
// verdict on every replica and after every restart.
func Fails(uid types.UID, failurePercent int32) bool {
	if failurePercent <= 0 {
		return false
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	var sum [8]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))%100 < uint64(failurePercent)
}

// NewAccess mints a simulated member's access material as a real member's
// is made (membercerts.NewAuthorities): a serving CA (nothing is served with
// it), a client CA whose key signs lease certificates, and an admin
// kubeconfig for Endpoint.
func NewAccess() (*backend.Access, error) {
	a, err := membercerts.NewAuthorities()
	if err != nil {
		return nil, err
	}
	kc, err := membercerts.AdminKubeconfig(a.ServerCA.CertPEM, a.AdminCert, a.AdminKey, "kobe-sim-member", Endpoint)
	if err != nil {
		return nil, err
	}
	return &backend.Access{
		Endpoint:        Endpoint,
		CACert:          a.ServerCA.CertPEM,
		ClientCACert:    a.ClientCA.CertPEM,
		ClientCAKey:     a.ClientCA.KeyPEM,
		AdminKubeconfig: kc,
	}, nil
}
