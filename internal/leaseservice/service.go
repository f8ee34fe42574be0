package leaseservice

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Options configure the service.
type Options struct {
	// Namespace holds the pools, leases and policies the service serves.
	Namespace string
	// Client writes; Reader reads from the manager's cache (with the
	// indexes of package index); APIReader reads uncached.
	Client    client.Client
	Reader    client.Reader
	APIReader client.Reader
	Binder    *binding.Binder
	Clock     clock.PassiveClock
	// Access opens members' sealed access material to mint kubeconfigs.
	Access *memberaccess.Sealer
	// Log receives one audit line per lease operation; never credentials.
	Log logr.Logger
	// Defer runs work that follows a hand-out's answer (the lease's status
	// copy, its Event, metrics) on a context the caller cannot cancel.
	// Default: go f(). A test may hold the work to count the answer's writes.
	Defer func(f func())
	// MaxQueuedPerOwner caps the leases one owner (policy and identity)
	// may have waiting for a member when its rule sets no
	// maxConcurrentLeases. Default: DefaultMaxQueuedPerOwner.
	MaxQueuedPerOwner int32
	// ProxyEndpoint says where the request in ctx reaches kobe's connect
	// proxy: the base URL (https://host[:port]) that lease kubeconfigs of
	// Proxy-mode members point under, and the PEM CA that verifies kobe's
	// serving certificate (nil: the system's roots). It fails wrapping
	// ErrProxyNotConfigured, naming what to configure, when the server
	// cannot proxy; nil means it never can.
	ProxyEndpoint func(ctx context.Context) (base string, caPEM []byte, err error)
	// Fence stops the API server of the member a lease held (see
	// backend.Registry.Fence) before Release answers, so that no credential
	// of the lease works after the answer even if the operator's leader,
	// whose teardown fences too, dies right then. nil: only the teardown
	// fences.
	Fence func(ctx context.Context, inst *kobev1.ClusterInstance) error
	// FenceTimeout bounds how long Release's answer waits for Fence
	// (DefaultFenceTimeout when 0).
	FenceTimeout time.Duration
	// LoadImages imports a docker-archive into every node of a member and
	// says how many hold it (backend.Registry.LoadImages; nil: kobe load is
	// refused with ErrNoImages).
	LoadImages func(ctx context.Context, inst *kobev1.ClusterInstance, archive string) (int, error)
}

// Service carries out lease and pool operations for authenticated callers.
type Service struct {
	opts Options
	// requesters serialise the ledger writes of one requester within this
	// process; across replicas the ledger's resourceVersion does.
	requesters requesterLocks
	// activity dedupes the recording of connect activity (RecordActivity).
	activity activityLog
	// recording holds, by lease UID, this replica's deferred write of a new
	// lease's bound copy (*boundCopy) until it is done (bindNow).
	recording sync.Map
}

// New returns a service.
func New(opts Options) *Service {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Defer == nil {
		opts.Defer = func(f func()) { go f() }
	}
	if opts.MaxQueuedPerOwner <= 0 {
		opts.MaxQueuedPerOwner = DefaultMaxQueuedPerOwner
	}
	if opts.FenceTimeout <= 0 {
		opts.FenceTimeout = DefaultFenceTimeout
	}
	return &Service{opts: opts}
}

// Lease is a lease as its caller sees it.
type Lease struct {
	Object *kobev1.ClusterLease
	// Pool is the lease's pool, nil when it is gone.
	Pool *kobev1.ClusterPool
	// QueuePosition is the lease's live 1-based place in its pool's queue
	// while it is Pending, else 0.
	QueuePosition int32
	// Kubeconfig is minted for the owner of a Bound lease by Create, Get and
	// Extend; listings never carry one.
	Kubeconfig []byte
	// Owned is whether the caller requested the lease.
	Owned bool
}

// Bound reports whether the lease holds a member.
func (l *Lease) Bound() bool { return l.Object.Status.Phase == kobev1.LeaseBound }

// RequesterHash is the value of kobev1.LabelRequesterHash for a caller: a
// hash of its policy and identity, which do not fit a label value.
func RequesterHash(p *auth.Principal) string {
	sum := sha256.Sum256([]byte(p.Policy + "\x00" + p.Identity))
	return hex.EncodeToString(sum[:])[:32]
}

// owns reports whether p requested l. It compares everything that makes an
// owner (policy and identity), never a display string or a hash.
func owns(p *auth.Principal, l *kobev1.ClusterLease) bool {
	return p != nil && l.Spec.Requester.Identity == p.Identity && l.Spec.Requester.Policy == p.Policy
}

// Pool returns the pool name if p may use it. Authorisation comes first: a
// pool p may not use is ErrPoolNotAllowed whether or not it exists.
func (s *Service) Pool(ctx context.Context, p *auth.Principal, name string) (*kobev1.ClusterPool, error) {
	if err := validName("pool", name); err != nil {
		return nil, err
	}
	if err := allowPool(p, name); err != nil {
		return nil, err
	}
	pool := &kobev1.ClusterPool{}
	if err := s.opts.Reader.Get(ctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: name}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, poolNotFound(name)
		}
		return nil, fmt.Errorf("reading pool %s: %w", name, err)
	}
	return pool, nil
}

// allowPool is ErrPoolNotAllowed when p may not use pool name.
func allowPool(p *auth.Principal, name string) error {
	if !p.AllowsPool(name) {
		return fmt.Errorf("%w: identity %q may not lease from pool %q under policy %s", ErrPoolNotAllowed, p.Identity, name, p.Policy)
	}
	return nil
}

func poolNotFound(name string) error {
	return fmt.Errorf("%w: there is no pool %q; GET /v1/pools lists the pools you may use", ErrPoolNotFound, name)
}

// Pools lists the pools p may use, by name.
func (s *Service) Pools(ctx context.Context, p *auth.Principal) ([]kobev1.ClusterPool, error) {
	var ps kobev1.ClusterPoolList
	if err := s.opts.Reader.List(ctx, &ps, client.InNamespace(s.opts.Namespace)); err != nil {
		return nil, fmt.Errorf("listing pools: %w", err)
	}
	out := slices.DeleteFunc(ps.Items, func(pool kobev1.ClusterPool) bool { return !p.AllowsPool(pool.Name) })
	slices.SortFunc(out, func(a, b kobev1.ClusterPool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// poolOrNil reads a pool the caller already holds a lease of.
func (s *Service) poolOrNil(ctx context.Context, name string) *kobev1.ClusterPool {
	p := &kobev1.ClusterPool{}
	if err := s.opts.Reader.Get(ctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: name}, p); err != nil {
		return nil
	}
	return p
}

// resolve finds the caller's lease named by ref, a lease id or an alias. An
// alias resolves among the caller's own leases only: its active lease, else
// the one queued last. Another caller's lease is ErrLeaseNotFound, exactly
// as a lease that does not exist.
func (s *Service) resolve(ctx context.Context, p *auth.Principal, ref string) (*kobev1.ClusterLease, error) {
	if err := wire.ValidateLeaseRef(ref); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	notFound := fmt.Errorf("%w: you hold no lease %q; GET /v1/leases lists yours", ErrLeaseNotFound, ref)
	if wire.IsLeaseID(ref) {
		key := types.NamespacedName{Namespace: s.opts.Namespace, Name: ref}
		l := &kobev1.ClusterLease{}
		err := s.opts.Reader.Get(ctx, key, l)
		if apierrors.IsNotFound(err) { // the cache may not have seen it yet
			err = s.opts.APIReader.Get(ctx, key, l)
		}
		switch {
		case apierrors.IsNotFound(err):
			return nil, notFound
		case err != nil:
			return nil, fmt.Errorf("reading lease %s: %w", ref, err)
		case !owns(p, l):
			return nil, notFound
		}
		return l, nil
	}
	sel := client.MatchingLabels{kobev1.LabelRequesterHash: RequesterHash(p), kobev1.LabelAlias: ref}
	var ls kobev1.ClusterLeaseList
	if err := s.opts.Reader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), sel); err != nil {
		return nil, fmt.Errorf("listing leases with alias %s: %w", ref, err)
	}
	if len(ls.Items) == 0 {
		if err := s.opts.APIReader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), sel); err != nil {
			return nil, fmt.Errorf("listing leases with alias %s: %w", ref, err)
		}
	}
	own := slices.DeleteFunc(ls.Items, func(l kobev1.ClusterLease) bool { return !owns(p, &l) })
	if len(own) == 0 {
		return nil, notFound
	}
	best := slices.MaxFunc(own, func(a, b kobev1.ClusterLease) int {
		return cmp.Or(
			cmpBool(lease.IsActive(&a), lease.IsActive(&b)),
			lease.QueuedAt(&a).Compare(lease.QueuedAt(&b)),
			strings.Compare(a.Name, b.Name))
	})
	return &best, nil
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// positions returns the live queue position of each lease of pool, from
// the pool's leases in the cache (see lease.Queue).
func (s *Service) positions(ctx context.Context, pool string) (func(*kobev1.ClusterLease) int32, error) {
	var ls kobev1.ClusterLeaseList
	if err := s.opts.Reader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), client.MatchingFields{index.ActiveLeasePool: pool}); err != nil {
		return nil, fmt.Errorf("listing leases of pool %s: %w", pool, err)
	}
	return queuePositions(ls.Items, pool), nil
}

// cacheCatchUp bounds how long positionsAfter waits for the cache.
const cacheCatchUp = time.Second

// positionsAfter is positions once the cache holds l, a lease this request
// just created: a watch delivers a kind's changes in order, so a cache
// that shows l has seen every lease created before it, which l's position
// must count. Should the cache not catch up within cacheCatchUp, the
// positions are read from the API server (positionsNow).
func (s *Service) positionsAfter(ctx context.Context, l *kobev1.ClusterLease) (func(*kobev1.ClusterLease) int32, error) {
	err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, cacheCatchUp, true, func(ctx context.Context) (bool, error) {
		err := s.opts.Reader.Get(ctx, client.ObjectKeyFromObject(l), &kobev1.ClusterLease{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return s.positionsNow(ctx, l.Spec.Pool)
	}
	return s.positions(ctx, l.Spec.Pool)
}

// positionsNow is positions read from the API server. It lists by the pool
// label, which the API puts on every lease it creates, ended ones included:
// the slow way.
func (s *Service) positionsNow(ctx context.Context, pool string) (func(*kobev1.ClusterLease) int32, error) {
	var ls kobev1.ClusterLeaseList
	if err := s.opts.APIReader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), client.MatchingLabels{kobev1.LabelPool: pool}); err != nil {
		return nil, fmt.Errorf("listing leases of pool %s: %w", pool, err)
	}
	return queuePositions(ls.Items, pool), nil
}

func queuePositions(ls []kobev1.ClusterLease, pool string) func(*kobev1.ClusterLease) int32 {
	q := lease.Queue(ls, pool)
	return func(l *kobev1.ClusterLease) int32 {
		if !lease.IsQueued(l) {
			return 0
		}
		return lease.Position(q, l)
	}
}

// view renders one lease of its owner p, read live, with its live queue
// position and, once its member confirms the bind, a fresh kubeconfig,
// audited as op "get".
func (s *Service) view(ctx context.Context, p *auth.Principal, l *kobev1.ClusterLease) (*Lease, error) {
	live := &kobev1.ClusterLease{}
	if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), live); err != nil || live.UID != l.UID {
		if err == nil || apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: you hold no lease %q; GET /v1/leases lists yours", ErrLeaseNotFound, l.Name)
		}
		return nil, fmt.Errorf("reading lease %s: %w", l.Name, err)
	}
	pool := s.poolOrNil(ctx, live.Spec.Pool)
	shown, inst, err := s.confirmed(ctx, live, pool)
	if err != nil {
		return nil, err
	}
	out := &Lease{Object: shown, Pool: pool, Owned: true}
	if lease.IsQueued(shown) {
		pos, err := s.positions(ctx, shown.Spec.Pool)
		if err != nil {
			return nil, err
		}
		out.QueuePosition = pos(shown)
	}
	if inst != nil {
		kc, err := s.kubeconfig(ctx, shown, inst)
		if err != nil {
			s.audit(p, "get", shown.Name, shown.Spec.Pool, "failed: kubeconfig", "member", inst.Name)
			return nil, err
		}
		s.audit(p, "get", shown.Name, shown.Spec.Pool, "kubeconfig minted", minted(inst, kc)...)
		out.Kubeconfig = kc
	}
	return out, nil
}

// confirmed returns l as its owner may see it, and the member a kubeconfig
// may be minted for, or nil. A kubeconfig is minted only when a live read of
// the member shows its write-once leaseRef naming l's UID, the member is not
// being deleted, and l (read live by the caller) is active and not past its
// expiry. A lease whose status copy is not written yet is shown Bound, with
// expiresAt = boundAt + ttl; a lease whose status names a member that does
// not confirm it is shown Pending, without the member.
func (s *Service) confirmed(ctx context.Context, l *kobev1.ClusterLease, pool *kobev1.ClusterPool) (*kobev1.ClusterLease, *kobev1.ClusterInstance, error) {
	if !lease.IsActive(l) {
		return l, nil, nil
	}
	inst, err := s.member(ctx, l)
	if err != nil {
		return nil, nil, err
	}
	shown := l.DeepCopy()
	if inst == nil {
		if l.Status.Phase == kobev1.LeaseBound || l.Status.InstanceRef != nil {
			binding.Unbind(shown, s.opts.Clock.Now())
		}
		return shown, nil, nil
	}
	binding.RecordBound(shown, inst, lease.TTL(l, pool))
	// The status is a copy anyone with clusterleases/status may write: the
	// lease lasts no longer than its bind (the member's boundAt) allows,
	// and shows the member's boundAt.
	boundAt := binding.BoundAt(inst, l)
	lease.CapExpiry(shown, pool, boundAt)
	if shown.Status.BoundAt == nil || !shown.Status.BoundAt.Time.Equal(boundAt) {
		shown.Status.BoundAt = &metav1.Time{Time: boundAt}
	}
	if !s.opts.Clock.Now().Before(shown.Status.ExpiresAt.Time) {
		return shown, nil, nil // the lease controller ends it
	}
	return shown, inst, nil
}

// member finds, read live, the member whose leaseRef names l: the one l's
// status names, else (no status copy yet) the one member naming l in the
// cache (index.InstanceLeaseUID) or, while the fast path may still be
// recording it (no phase yet), labelled with l on the API server. It is nil
// when no member confirms the bind, or when two do and l's status does not
// say which (binding.Record).
func (s *Service) member(ctx context.Context, l *kobev1.ClusterLease) (*kobev1.ClusterInstance, error) {
	name := ""
	if ref := l.Status.InstanceRef; ref != nil {
		name = ref.Name
	} else {
		var ms kobev1.ClusterInstanceList
		if err := s.opts.Reader.List(ctx, &ms, client.InNamespace(l.Namespace), client.MatchingFields{index.InstanceLeaseUID: string(l.UID)}); err != nil {
			return nil, fmt.Errorf("listing members of lease %s: %w", l.Name, err)
		}
		if len(ms.Items) == 0 && l.Status.Phase == "" {
			if err := s.opts.APIReader.List(ctx, &ms, client.InNamespace(l.Namespace), client.MatchingLabels{kobev1.LabelLease: l.Name}); err != nil {
				return nil, fmt.Errorf("listing members of lease %s: %w", l.Name, err)
			}
		}
		m := binding.Record(ms.Items, l)
		if m == nil {
			return nil, nil
		}
		name = m.Name
	}
	inst := &kobev1.ClusterInstance{}
	err := s.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: name}, inst)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading member %s: %w", name, err)
	case !binding.Names(inst, l) || inst.DeletionTimestamp != nil:
		return nil, nil
	case l.Status.InstanceRef != nil && l.Status.InstanceRef.UID != inst.UID:
		return nil, nil
	}
	return inst, nil
}

// kubeconfig mints a kubeconfig for l, bound to inst (which the caller has
// confirmed with a live read), from inst's sealed access material: it opens
// only for inst's UID. The certificate ends at l's expiry, never later than
// the bind allows (leasecreds.NotAfter).
func (s *Service) kubeconfig(ctx context.Context, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance) ([]byte, error) {
	a, err := memberaccess.Read(ctx, s.opts.APIReader, s.opts.Access, inst, false)
	if err != nil {
		return nil, fmt.Errorf("reading the access material of member %s: %w", inst.Name, err)
	}
	pl := s.poolOrNil(ctx, l.Spec.Pool)
	var kc []byte
	if pool.MemberAccessMode(inst) == kobev1.AccessProxy {
		base, ca, perr := s.proxyEndpoint(ctx)
		if perr != nil {
			return nil, perr
		}
		kc, err = leasecreds.ProxyKubeconfig(a, l, inst, pl, s.opts.Clock.Now(), base, ca)
	} else {
		kc, err = leasecreds.Kubeconfig(a, l, inst, pl, s.opts.Clock.Now())
	}
	if err != nil {
		return nil, fmt.Errorf("minting kubeconfig of lease %s: %w", l.Name, err)
	}
	return kc, nil
}

// proxyEndpoint is Options.ProxyEndpoint, ErrProxyNotConfigured without one.
func (s *Service) proxyEndpoint(ctx context.Context) (string, []byte, error) {
	if s.opts.ProxyEndpoint == nil {
		return "", nil, fmt.Errorf("%w: this server has no connect proxy", ErrProxyNotConfigured)
	}
	return s.opts.ProxyEndpoint(ctx)
}

// audit logs one lease operation: who, under which policy, what, and the
// outcome, then extra key/values (minted's). Never credentials.
func (s *Service) audit(p *auth.Principal, op, id, pool, outcome string, extra ...any) {
	kv := append([]any{"op", op, "lease", id, "pool", pool, "outcome", outcome}, auth.AuditFields(p)...)
	s.opts.Log.Info("Lease audit", append(kv, extra...)...)
}

// minted are the audit key/values of a kubeconfig minted for inst: the
// member and the client certificate's serial (hex), which tells one
// kubeconfig from another in the member's own audit log. Never the key.
func minted(inst *kobev1.ClusterInstance, kubeconfig []byte) []any {
	return []any{"member", inst.Name, "serial", certSerial(kubeconfig)}
}

// certSerial is the serial of the client certificate in kubeconfig, "" if
// it has none (it always has one: leasecreds minted it).
func certSerial(kubeconfig []byte) string {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return ""
	}
	for _, user := range cfg.AuthInfos {
		if block, _ := pem.Decode(user.ClientCertificateData); block != nil {
			if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
				return cert.SerialNumber.Text(16)
			}
		}
	}
	return ""
}

// validName checks a pool name before it reaches the API server.
func validName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s is required", ErrInvalid, kind)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%w: %s %q is not a valid name: %s", ErrInvalid, kind, name, strings.Join(errs, "; "))
	}
	return nil
}
