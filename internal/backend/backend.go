// Package backend defines how kobe builds, observes and destroys pool
// members. Each provisioner lives in its own sub-package and is wired
// explicitly in cmd/kobe-operator; nothing registers itself.
package backend

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Member identifies one pool member to a backend. Namespace, Name and UID
// come from the ClusterInstance; the UID is what makes a member unique across
// deletions and re-creations of objects with the same name.
type Member struct {
	Namespace string
	Name      string
	UID       types.UID
	// Pool is the name of the member's pool.
	Pool string
	// Spec is the ClusterInstance spec: backend settings and cluster template.
	Spec kobev1.ClusterInstanceSpec
	// Created is the ClusterInstance's creationTimestamp. The API server
	// keeps it, so a backend that times a member from its creation (sim)
	// gives every replica, and every restart, the same answer.
	Created time.Time
}

// MemberOf is the Member that inst is to its backend.
func MemberOf(inst *kobev1.ClusterInstance) Member {
	return Member{Namespace: inst.Namespace, Name: inst.Name, UID: inst.UID, Pool: inst.Spec.PoolRef.Name, Spec: inst.Spec,
		Created: inst.CreationTimestamp.Time}
}

// State is what a backend says about a member.
type State string

const (
	// StateProvisioning: the member is being built.
	StateProvisioning State = "Provisioning"
	// StateReady: the member's control plane is up and Access is filled in.
	StateReady State = "Ready"
	// StateFailed: the member cannot become (or stay) usable; it must be
	// destroyed, never repaired.
	StateFailed State = "Failed"
	// StateAbsent: nothing of the member exists (never created, or destroyed).
	StateAbsent State = "Absent"
)

// Access is what the operator needs to use a member and to mint per-lease
// credentials for it. All fields are PEM or kubeconfig bytes.
type Access struct {
	// Endpoint is the member API server's URL, reachable by lease holders.
	Endpoint string
	// CACert is the CA that signed the member API server's serving certificate.
	CACert []byte
	// ClientCACert and ClientCAKey sign client certificates the member's API
	// server accepts; the operator signs per-lease certificates with them.
	ClientCACert []byte
	ClientCAKey  []byte
	// AdminKubeconfig is the operator's own credential for the member
	// (readiness gates, health checks, bootstrap).
	AdminKubeconfig []byte
}

// Observation is a member's state as the backend sees it now.
type Observation struct {
	State State
	// Message explains Failed and Provisioning states to humans.
	Message string
	// Access is set when State is StateReady.
	Access *Access
}

// Backend builds, observes and destroys members.
//
// Call order for one member: Create, then Observe until StateReady or
// StateFailed (and afterwards, to notice failure), then Delete until it
// reports gone. The operator may restart at any point and will then call
// Observe (and Create, while the member is still Creating) again for members
// it finds in the API, so every method must work from what the backend keeps
// outside the process (files, processes, cloud objects), not from memory
// alone.
//
// Idempotency: Create on a member that already exists is a no-op and returns
// nil. Delete on a member that is already gone returns gone=true. Observe
// never creates or destroys anything.
type Backend interface {
	// Type is the pool backend type this backend serves.
	Type() kobev1.BackendType

	// Capabilities says what the backend can build (Kubernetes versions,
	// servers per member, scheduling), so that a pool can name the fields it
	// sets that this backend does not act on. It does no IO and returns the
	// same answer for the backend's whole life; a backend that cannot build
	// at all still answers, and Create reports ErrUnavailable.
	Capabilities() Capabilities

	// Create starts building the member and returns without waiting for it.
	// It returns ErrUnavailable (wrapped) when the backend cannot build
	// members at all, e.g. a binary it needs is missing.
	Create(ctx context.Context, m Member) error

	// Observe reports the member's current state.
	Observe(ctx context.Context, m Member) (Observation, error)

	// Delete destroys the member. It reports gone=true only once nothing of
	// the member is left (processes, data, cloud resources); until then the
	// caller retries.
	Delete(ctx context.Context, m Member) (gone bool, err error)
}

// Capabilities is what a backend can build.
type Capabilities struct {
	// KubernetesVersions lists the Kubernetes versions (without a leading
	// "v") the backend builds; empty when it honours any cluster.version.
	KubernetesVersions []string
	// MaxServers is the largest cluster.servers the backend builds; 0 means
	// no limit.
	MaxServers int32
	// Scheduling is whether the backend can give members a scheduler and
	// nodes (backend.local.scheduling).
	Scheduling bool
	// Simulated says the backend's members have no API server behind their
	// endpoint (the sim backend): the operator then neither runs built-in
	// readiness gates nor health probes against them, which could only fail.
	Simulated bool
}

// NodeDefaulter is implemented by backends whose members can have real
// nodes (backend.local.nodes, backend.kubernetes.nodes).
type NodeDefaulter interface {
	// DefaultNodes is how many real nodes a member of a pool with this spec
	// gets when the pool leaves nodes unset, and, when that is 0, why
	// (shown on the pool: "the operator is not root"). It may look at the
	// host (files, its own privileges) but never blocks on the network.
	DefaultNodes(spec *kobev1.ClusterPoolSpec) (nodes int32, why string)
}

// LimitEnforcer is implemented by backends whose members run on a host they
// could exhaust (spec.cluster.limits; issue 42).
type LimitEnforcer interface {
	// EnforcesLimits reports whether members built now get their
	// cluster.limits enforced by the kernel, and when not, why (shown on
	// the pool: "the operator is not root"). It may look at the host but
	// never blocks on the network.
	EnforcesLimits() (ok bool, why string)
}

// Fencer is implemented by backends that can make a member's API server
// stop answering at once, before the slower Delete. Every credential a
// lease holder has (the lease's client certificate, ServiceAccount tokens
// minted inside the member) is only accepted by that API server, so fencing
// it cuts them all, in every access mode.
//
// The operator fences a leased member as the first step of its teardown,
// and again before Delete until it has recorded a fence, so a new leader
// fences a member its predecessor left half-recycled.
type Fencer interface {
	// Fence stops the member's API server for good: nothing of the backend
	// starts it again, and nothing a lease holder can do inside the member
	// undoes it. It returns once the API server refuses requests (or, where
	// the backend's host only acts asynchronously, once the stop is
	// ordered with the shortest grace it allows). Idempotent: fencing a
	// fenced, failed or absent member returns nil. Observe may report a
	// fenced member Failed; Delete works on it as on any other.
	Fence(ctx context.Context, m Member) error
}

// Freezer is implemented by backends that can freeze a Ready member's
// processes while it waits for a lease (local: the cgroup v2 freezer), so
// that it costs no CPU. The pool controller decides which members freeze
// (spec.frozen); the instance controller freezes and thaws them, and
// checks a thawed member's health before it may be handed out. Every
// method is idempotent and works from what the host keeps (the cgroup),
// not from memory.
type Freezer interface {
	// CanFreeze says whether this operator can freeze members at all
	// (root, cgroup v2) and, when not, why. It does no blocking IO and
	// returns the same answer for the backend's whole life.
	CanFreeze() (ok bool, why string)
	// Freeze stops every process of a Ready member and returns once the
	// kernel reports them stopped.
	Freeze(ctx context.Context, m Member) error
	// Thaw resumes a frozen member (a member never frozen is left alone)
	// and returns once the kernel reports it running.
	Thaw(ctx context.Context, m Member) error
	// Frozen reports whether the member is frozen (or being frozen).
	Frozen(m Member) (bool, error)
}

// ImageLoader is implemented by backends whose members have real nodes,
// each with its own containerd (kobe load): LoadImages imports a
// docker-archive file into the CRI namespace of every node of the member
// and returns how many nodes hold it. A member without nodes is
// ErrNoNodes. The archive comes from the lease's holder, who may use it
// only in that member.
type ImageLoader interface {
	LoadImages(ctx context.Context, m Member, archive string) (nodes int, err error)
}

// ErrNoNodes is a member that has no nodes to load images into.
var ErrNoNodes = errors.New("the member has no nodes")

// Sweeper is implemented by backends that can find members nobody owns.
type Sweeper interface {
	// Sweep destroys every member for which owned returns false. It is run
	// once at operator start, after the cache has synced, so that nothing
	// leaks across crashes.
	Sweep(ctx context.Context, owned OwnedFunc) (removed []string, err error)
}

// PoolForgetter is implemented by backends that keep something of a pool
// beyond its members (local: the logs of its failed members); the pool's
// finalizer calls it once the pool's unbound members are gone.
type PoolForgetter interface {
	// ForgetPool removes what is kept of the members of namespace for
	// which member(name) is true.
	ForgetPool(namespace string, member func(name string) bool) error
}

// LeakFinder is implemented by backends that can report what Sweep would
// destroy without destroying it: the periodic leak report.
type LeakFinder interface {
	// Leaks lists, in the words Sweep uses, every member (or piece of one)
	// for which owned returns false.
	Leaks(ctx context.Context, owned OwnedFunc) ([]string, error)
}

// Verifier is implemented by backends that can prove a member destroyed:
// the only ones a lease with cleanupMode VerifiedDestroy may bind to.
type Verifier interface {
	// Manifest lists every resource the backend made for a member that
	// Observe reports Ready (processes, ports, paths; host objects with
	// their UIDs). The operator records it on the member once; it is the
	// list Verify proves absent.
	Manifest(ctx context.Context, m Member) ([]kobev1.ManifestResource, error)

	// Verify checks, after Delete reported the member gone (or failed),
	// every resource of manifest, in order, and then anything else of the
	// member the backend can find on its host (a process started after the
	// manifest was recorded). An error means nothing could be checked.
	Verify(ctx context.Context, m Member, manifest []kobev1.ManifestResource) ([]Check, error)
}

// Check is the verdict on one resource of a member after its teardown.
type Check struct {
	kobev1.ManifestResource `json:",inline"`
	// Absent is true when the resource is proven gone.
	Absent bool `json:"absent"`
	// Detail says how it was checked, or what was found.
	Detail string `json:"detail"`
}

// CanVerify reports whether b can prove a member destroyed.
func CanVerify(b Backend) bool {
	_, ok := b.(Verifier)
	return ok
}

// OwnedFunc answers a Sweeper: whether the member with this namespace and
// UID must be kept. It is true when a ClusterInstance with that UID exists,
// and for a member of a namespace the operator does not manage (another
// installation's, which is never this one's to destroy).
type OwnedFunc func(namespace string, uid types.UID) bool

// ErrUnavailable says the backend cannot build members at all (missing
// binary, missing credentials). Retrying the same call will not help until an
// operator fixes the environment, so callers back off.
var ErrUnavailable = errors.New("backend unavailable")

// ErrInvalidSpec says the backend cannot build a member from its spec as
// written (e.g. a cluster.version it cannot parse): only a change to the
// pool helps, so the member says why and the pool reports it.
var ErrInvalidSpec = errors.New("member spec cannot be built")

// Registry maps backend types to the backends wired in this operator.
type Registry map[kobev1.BackendType]Backend

// For returns the backend for a type, or false when it is not wired.
func (r Registry) For(t kobev1.BackendType) (Backend, bool) {
	b, ok := r[t]
	return b, ok
}
