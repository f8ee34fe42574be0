package leaseservice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// CreateRequest asks for a lease.
type CreateRequest struct {
	Pool string
	// TTL is the lease's duration once bound; 0 means the pool's. The
	// caller's policy may clamp it.
	TTL time.Duration
	// Alias is the caller's own name for the lease; optional.
	Alias string
	// CleanupMode of the lease; "" means Standard.
	CleanupMode kobev1.CleanupMode
	// HeartbeatTimeout ends the lease once its holder is silent that long
	// (lease.CheckEnd); 0: no heartbeats.
	HeartbeatTimeout time.Duration
	// IdleTimeout ends the bound lease once nothing went through the
	// connect proxy that long; resolved from the pool and the policy, not
	// asked for by callers.
	IdleTimeout time.Duration
}

// Create requests a lease of req.Pool for p. It is admitted first (admit,
// a pure judgement of what gatherAdmission read: the request, the pool's
// authorisation before anything of the pool is read, its existence,
// whether it can ever serve, the cleanup mode and connect proxy it needs),
// then against the caller's alias (ErrAliasInUse) and lease limit
// (ErrLeaseLimit), exact on every replica (reserve). Every refusal is a
// *Refusal. The lease is bound at once when a member is Ready and nobody is
// queued ahead of it: the answer carries its kubeconfig after two API
// writes (the lease, the member's claim; see bindNow), three with a limit
// or an alias (the caller's ledger). Otherwise it takes a queue slot
// (ErrQueueLimit beyond Options.MaxQueuedPerOwner) and is left Pending with
// its queue position, for the lease controller to bind.
func (s *Service) Create(ctx context.Context, p *auth.Principal, req CreateRequest) (*Lease, error) {
	start := s.opts.Clock.Now()
	in, err := s.gatherAdmission(ctx, p, req)
	if err != nil {
		return nil, err
	}
	ttl, r := admit(in)
	metrics.HandoutPhase(metrics.PhaseAdmit, s.opts.Clock.Since(start))
	if r != nil {
		return nil, s.refused(p, req.Pool, r)
	}
	pl := in.pool
	req.HeartbeatTimeout = lease.ResolveHeartbeatTimeout(req.HeartbeatTimeout, poolHeartbeatTimeout(pl), p.MaxHeartbeatTimeout())
	req.IdleTimeout = resolveIdleTimeout(pl, p)

	// From here on the caller cannot cancel: a request that passed the
	// checks above is carried out (its lease created, then bound or queued)
	// whether or not the caller waits for the answer. Cut at any point, it
	// would leave a lease the caller may not know of (a create the API
	// server applied after the client gave up), unmarked until the lease
	// controller's grace is over.
	detached, cancel := context.WithTimeout(context.WithoutCancel(ctx), AfterAnswerTimeout)
	defer cancel()
	created := s.opts.Clock.Now()
	l, err := s.createLease(detached, p, pl.Name, ttl, req)
	metrics.HandoutPhase(metrics.PhaseCreate, s.opts.Clock.Since(created))
	if err != nil {
		return nil, s.refused(p, pl.Name, err)
	}

	out := &Lease{Object: l, Pool: pl, Owned: true}
	queued := false
	fp, err := s.bindNow(detached, p, l, ttl, start)
	switch {
	case err != nil:
		s.audit(p, "create", l.Name, pl.Name, "failed: kubeconfig")
		metrics.LeaseRequest(pl.Name, "error")
		return nil, err
	case fp.bound != nil:
		out.Object, out.Kubeconfig = fp.bound, fp.kubeconfig
		s.audit(p, "create", l.Name, pl.Name, "bound to "+fp.bound.Status.InstanceRef.Name, "member", fp.bound.Status.InstanceRef.Name, "serial", certSerial(fp.kubeconfig))
		return out, nil
	case !fp.uncertain:
		// Not when a member claim may have landed: Pending would let the
		// lease controller bind the lease at once, perhaps to a second
		// member. Unmarked, it waits lease.InFlightGrace, then looks for
		// the claim before binding. Nor is such a lease counted against
		// the queue cap: it may well hold a member.
		if err := s.queueOrRefuse(detached, p, l, req.Alias); err != nil {
			return nil, s.refused(p, pl.Name, err)
		}
		queued = true
	}
	pos, err := s.positionsAfter(ctx, l)
	if err == nil {
		out.QueuePosition = pos(l)
	}
	if queued {
		s.markPending(detached, l, out.QueuePosition)
	}
	if err != nil {
		return nil, err
	}
	metrics.LeaseRequest(pl.Name, "pending")
	s.audit(p, "create", l.Name, pl.Name, "pending")
	return out, nil
}

// createLease creates the ClusterLease when the caller's alias is free and
// its lease limit (its rule's maxConcurrentLeases, else the operator's
// default) not reached. A caller with no limit who asks for no alias pays
// nothing for it: the lease is created at once. Otherwise the lease is
// reserved in the caller's ledger first (see ledger.go), which makes the
// limit and the alias exact across replicas for one more API write. Within this process one requester reserves at a
// time, so that its concurrent requests do not race each other for the
// ledger.
func (s *Service) createLease(ctx context.Context, p *auth.Principal, poolName string, ttl time.Duration, req CreateRequest) (*kobev1.ClusterLease, error) {
	alias := req.Alias
	l, err := s.newLease(p, poolName, ttl, req)
	if err != nil {
		return nil, err
	}
	if _, limited := p.MaxConcurrentLeases(); !limited && alias == "" {
		if err := s.opts.Client.Create(ctx, l); err != nil {
			return nil, fmt.Errorf("creating lease: %w", err)
		}
		return l, nil
	}
	unlock := s.lockRequester(p)
	err = s.reserve(ctx, p, l, alias)
	unlock()
	if err != nil {
		return nil, err
	}
	// The entry counts for ReservationGrace: the create must be over well
	// before, or another replica could admit a lease beside it.
	createCtx, cancel := context.WithTimeout(ctx, reservationCreateBudget)
	defer cancel()
	if err := s.opts.Client.Create(createCtx, l); err != nil {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), AfterAnswerTimeout)
		defer cancel()
		s.dropEntry(dropCtx, p, l.Name)
		return nil, fmt.Errorf("creating lease: %w", err)
	}
	return l, nil
}

// lockRequester makes this process write p's ledger one request at a time:
// concurrent requests of one caller would otherwise conflict on the ledger
// until its retries ran out (seen as 500s with 20 queued requests at once).
// Across replicas, conflicts remain and are retried.
func (s *Service) lockRequester(p *auth.Principal) (unlock func()) {
	return s.requesters.lock(RequesterHash(p))
}

// queueOrRefuse gives l, which could not be bound at once, one of its
// owner's queue slots when the owner's rule sets no maxConcurrentLeases
// (which bounds queued leases as well; the operator's default cap does
// not replace the queue cap). At Options.MaxQueuedPerOwner, or when the
// slot cannot be written, it withdraws l and returns why.
func (s *Service) queueOrRefuse(ctx context.Context, p *auth.Principal, l *kobev1.ClusterLease, alias string) error {
	if p.RuleCapsLeases() {
		return nil
	}
	unlock := s.lockRequester(p)
	err := s.takeQueueSlot(ctx, p, l, alias, s.opts.MaxQueuedPerOwner)
	unlock()
	if err == nil {
		return nil
	}
	if werr := s.withdrawQueued(ctx, l); werr != nil {
		return fmt.Errorf("withdrawing lease %s (%w): %w", l.Name, err, werr)
	}
	return err
}

// withdrawQueued removes l, a lease nobody was told of. Unchanged since its
// create (fenced by resourceVersion), nothing can have bound it: it is not
// marked Pending and the lease controller leaves it for
// lease.InFlightGrace. If the controller has touched it after all, l is
// ended instead, so that a member it may hold is recycled.
func (s *Service) withdrawQueued(ctx context.Context, l *kobev1.ClusterLease) error {
	err := s.opts.Client.Delete(ctx, l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
	if !apierrors.IsConflict(err) {
		return client.IgnoreNotFound(err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || !lease.IsActive(l) {
			return client.IgnoreNotFound(err)
		}
		lease.End(l, kobev1.LeaseReleased, kobev1.ReasonReleased, "withdrawn: its requester had too many leases waiting", s.opts.Clock.Now())
		return s.opts.Client.Status().Update(ctx, l)
	})
}

// refused audits and counts a refused request as its Refusal says, and
// returns err.
func (s *Service) refused(p *auth.Principal, pool string, err error) error {
	var r *Refusal
	if !errors.As(err, &r) {
		return err
	}
	if r.audit != "" {
		s.audit(p, "create", "", pool, r.audit)
	}
	if r.counted {
		metrics.LeaseRequest(pool, "refused")
	}
	return err
}

// gatherAdmission reads what admit judges a request on. It reads nothing
// of a pool the caller may not use. A pool whose operator verdict the cache
// has not seen yet (created or changed a moment ago) is read again from the
// API server, so that a pool whose backend is unavailable refuses at once
// instead of queueing the lease. Whether this server can offer a connect
// proxy is asked only for a pool whose members are reached through one.
func (s *Service) gatherAdmission(ctx context.Context, p *auth.Principal, req CreateRequest) (admissionInput, error) {
	in := admissionInput{principal: p, req: req}
	if s.opts.Binder != nil {
		in.verifiable = s.opts.Binder.Verifiable
	}
	if validName("pool", req.Pool) != nil || allowPool(p, req.Pool) != nil {
		return in, nil
	}
	pl := &kobev1.ClusterPool{}
	key := types.NamespacedName{Namespace: s.opts.Namespace, Name: req.Pool}
	if err := s.opts.Reader.Get(ctx, key, pl); err != nil {
		if apierrors.IsNotFound(err) {
			return in, nil
		}
		return in, fmt.Errorf("reading pool %s: %w", req.Pool, err)
	}
	if pl.Status.ObservedGeneration < pl.Generation {
		fresh := &kobev1.ClusterPool{}
		if err := s.opts.APIReader.Get(ctx, key, fresh); err == nil {
			pl = fresh
		}
	}
	in.pool = pl
	if pool.AccessMode(&pl.Spec) == kobev1.AccessProxy {
		_, _, err := s.proxyEndpoint(ctx)
		if err != nil && !errors.Is(err, ErrProxyNotConfigured) {
			return in, err
		}
		in.proxyErr = err
	}
	return in, nil
}

// newLease renders a new ClusterLease of p, stamped with the moment it was
// queued.
func (s *Service) newLease(p *auth.Principal, poolName string, ttl time.Duration, req CreateRequest) (*kobev1.ClusterLease, error) {
	alias, mode := req.Alias, req.CleanupMode
	if mode == "" {
		mode = kobev1.CleanupStandard
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("making a lease id: %w", err)
	}
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "lease-" + hex.EncodeToString(b),
			Namespace:   s.opts.Namespace,
			Labels:      map[string]string{kobev1.LabelRequesterHash: RequesterHash(p), kobev1.LabelPool: poolName},
			Annotations: map[string]string{kobev1.AnnotationFastPath: "true"},
		},
		Spec: kobev1.ClusterLeaseSpec{
			Pool:          poolName,
			TTL:           &metav1.Duration{Duration: ttl},
			Requester:     kobev1.Requester{Identity: p.Identity, Policy: p.Policy, Method: p.Method},
			MaxExtensions: ptr.To(p.MaxExtensions()),
			MaxTTL:        &metav1.Duration{Duration: p.MaxTTL()},
			CleanupMode:   mode,
		},
	}
	if alias != "" {
		l.Labels[kobev1.LabelAlias] = alias
	}
	if req.HeartbeatTimeout > 0 {
		l.Spec.HeartbeatTimeout = &metav1.Duration{Duration: req.HeartbeatTimeout}
	}
	if req.IdleTimeout > 0 {
		l.Spec.IdleTimeout = &metav1.Duration{Duration: req.IdleTimeout}
	}
	lease.StampQueuedAt(l, s.opts.Clock.Now())
	return l, nil
}

// ClaimBudget bounds the fast path's member claim, counted from the moment
// the lease was queued (lease.QueuedAt). It is shorter than
// lease.InFlightGrace, so the lease controller never claims a member for a
// lease while the fast path still may.
const ClaimBudget = 3 * time.Second

// AfterAnswerTimeout bounds the work of a lease request that its caller
// cannot cancel (from the lease's create to its answer), and separately the
// work done after a hand-out's answer (the lease's status copy, its Event).
const AfterAnswerTimeout = 10 * time.Second

// bindNow binds a new lease at once when its pool has a Ready member and
// nobody waits ahead of it; otherwise the lease controller binds it later.
// The bind is the member's claim alone (package binding): its successful
// answer confirms the bind, so the kubeconfig is minted from it at once and
// the lease's status copy, Event and metrics are left to s.opts.Defer. The
// claim runs on a context the caller cannot cancel, bounded by ClaimBudget:
// a caller who hangs up leaves a member that names the lease (which the
// deferred write or the lease controller records) or one it never touched.
// It returns the lease as its caller sees it and its kubeconfig, or nil
// when the lease stays queued. A lease bound but without a kubeconfig is
// ended at once, so that its member is recycled, and reported as an error.
//
// ctx must be one the caller cannot cancel (Create detaches it).
func (s *Service) bindNow(ctx context.Context, p *auth.Principal, l *kobev1.ClusterLease, ttl time.Duration, start time.Time) (fastPath, error) {
	if !s.headOfQueue(ctx, l) {
		return fastPath{}, nil
	}
	claimCtx, cancel := context.WithDeadline(ctx, lease.QueuedAt(l).Add(ClaimBudget))
	claimed := s.opts.Clock.Now()
	res, err := s.opts.Binder.Bind(claimCtx, l)
	cancel()
	metrics.HandoutPhase(metrics.PhaseBind, s.opts.Clock.Since(claimed))
	if err != nil {
		s.opts.Log.V(1).Info("Fast-path bind failed; the lease is queued", "lease", l.Name, "error", err.Error())
		return fastPath{uncertain: errors.Is(err, binding.ErrUncertain)}, nil
	}
	bound := l.DeepCopy()
	binding.RecordBound(bound, res.Instance, ttl)

	minted := s.opts.Clock.Now()
	kc, mintErr := s.kubeconfig(ctx, bound, res.Instance)
	metrics.HandoutPhase(metrics.PhaseMint, s.opts.Clock.Since(minted))
	if mintErr != nil {
		return fastPath{}, s.withdraw(ctx, l, mintErr)
	}
	elapsed := s.opts.Clock.Since(start)
	created, member := l.DeepCopy(), res.Instance.DeepCopy()
	// The deferred work outlives ctx (and its deadline).
	detached := context.WithoutCancel(ctx)
	recording := &boundCopy{done: make(chan struct{})}
	s.recording.Store(created.UID, recording)
	s.opts.Defer(func() {
		ctx, cancel := context.WithTimeout(detached, AfterAnswerTimeout)
		defer cancel()
		defer func() {
			close(recording.done)
			s.recording.Delete(created.UID)
		}()
		wrote, err := s.recordBound(ctx, created, member, ttl)
		switch {
		case err != nil:
			// The lease controller records it from the member.
			s.opts.Log.Info("Could not record a bind on its lease; the lease controller will", "lease", created.Name, "member", member.Name, "error", err.Error())
		case wrote:
			recording.written = created
		}
		metrics.LeaseBound(created.Spec.Pool, "api", elapsed)
		metrics.LeaseRequest(created.Spec.Pool, "bound")
	})
	return fastPath{bound: bound, kubeconfig: kc}, nil
}

// BoundCopyWait bounds how long a status write on a lease just handed out
// by this replica (its release, extension or heartbeat) waits for the
// lease's deferred bound copy. A caller who releases right after the answer
// would otherwise race that write: one of the two conflicts (a write the
// API server serves for nothing, a quarter of a write per cycle in make
// bench's cycles) and, when the release wins, the ended lease never names
// its member.
const BoundCopyWait = 500 * time.Millisecond

// boundCopy is this replica's deferred write of a new lease's bound copy
// (bindNow): done is closed once it is over; written is then the lease as
// the write left it, nil if it failed.
type boundCopy struct {
	done    chan struct{}
	written *kobev1.ClusterLease
}

// awaitBoundCopy waits, at most BoundCopyWait, until this replica's
// deferred write of the bound copy of the lease with uid is done; at once
// when there is none (another replica answered, or it is long done). It
// returns the lease as that write left it (the cache may not show it yet),
// or nil.
func (s *Service) awaitBoundCopy(ctx context.Context, uid types.UID) *kobev1.ClusterLease {
	v, ok := s.recording.Load(uid)
	if !ok {
		return nil
	}
	rec := v.(*boundCopy)
	t := time.NewTimer(BoundCopyWait)
	defer t.Stop()
	select {
	case <-rec.done:
		if rec.written != nil {
			return rec.written.DeepCopy()
		}
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// fastPath is what the request path made of a new lease.
type fastPath struct {
	// bound is the lease as its caller sees it once bound (its status copy
	// filled in memory), with its kubeconfig; nil when it stays queued.
	bound      *kobev1.ClusterLease
	kubeconfig []byte
	// uncertain: a member claim may have landed; the lease must not be
	// marked Pending (see Create).
	uncertain bool
}

// headOfQueue reports whether the new lease l may be bound at once: nobody
// waits ahead of it, or the pool has more Ready members than leases waiting
// ahead of it (lease.MayBindNow).
func (s *Service) headOfQueue(ctx context.Context, l *kobev1.ClusterLease) bool {
	var ls kobev1.ClusterLeaseList
	if err := s.opts.Reader.List(ctx, &ls, client.InNamespace(l.Namespace), client.MatchingFields{index.ActiveLeasePool: l.Spec.Pool}); err != nil {
		return false
	}
	pos := lease.Position(lease.Waiting(lease.Queue(ls.Items, l.Spec.Pool), s.opts.Clock.Now()), l)
	if pos <= 1 {
		return true
	}
	var members kobev1.ClusterInstanceList
	if err := s.opts.Reader.List(ctx, &members, client.InNamespace(l.Namespace), client.MatchingFields{index.InstancePool: l.Spec.Pool}); err != nil {
		return false
	}
	available := 0
	for i := range members.Items {
		if lease.Bindable(&members.Items[i]) {
			available++
		}
	}
	return lease.MayBindNow(pos, available)
}

// recordBound writes the lease's copy of the bind that inst confirms,
// starting from l as created, and says whether it did (l is then as the
// write left it). It stops when the lease ended meanwhile (its member is
// then recycled) or someone recorded the bind first.
func (s *Service) recordBound(ctx context.Context, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, ttl time.Duration) (wrote bool, err error) {
	first := true
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wrote = false
		if !first {
			if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
				return client.IgnoreNotFound(err)
			}
		}
		first = false
		if !lease.IsActive(l) || l.UID != inst.Spec.LeaseRef.UID || l.Status.Phase == kobev1.LeaseBound {
			return nil
		}
		binding.RecordBound(l, inst, ttl)
		if err := s.opts.Client.Status().Update(ctx, l); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	return wrote, err
}

// withdraw ends a lease whose kubeconfig could not be minted, so that it
// holds nothing (its member, if any, is recycled), and returns the error.
func (s *Service) withdraw(ctx context.Context, l *kobev1.ClusterLease, mintErr error) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || !lease.IsActive(l) {
			return err
		}
		lease.End(l, kobev1.LeaseReleased, kobev1.ReasonKubeconfigFailed, "no kubeconfig could be minted for the bound member", s.opts.Clock.Now())
		return s.opts.Client.Status().Update(ctx, l)
	})
	if err != nil {
		return fmt.Errorf("%w; releasing the lease: %w", mintErr, err)
	}
	return fmt.Errorf("%w (the lease was released)", mintErr)
}

// markPending records that the fast path could not bind the lease, so that
// the lease controller queues it at once, together with its place in the
// queue (pos; 0 when unknown) as the controller would write it
// (lease.MarkQueued): the controller then has nothing to add until the
// position has moved for lease.PositionEvery. Best effort: the controller
// marks it anyway once lease.InFlightGrace has passed.
func (s *Service) markPending(ctx context.Context, l *kobev1.ClusterLease, pos int32) {
	if l.Status.Phase != "" {
		return
	}
	before := l.DeepCopy()
	if pos > 0 {
		lease.MarkQueued(l, pos, s.opts.Clock.Now())
	} else {
		l.Status.Phase = kobev1.LeasePending
	}
	if err := s.opts.Client.Status().Patch(ctx, l, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		s.opts.Log.V(1).Info("Could not mark lease pending", "lease", l.Name, "error", err.Error())
		*l = *before
	}
}

// resolveIdleTimeout is the idle timeout of a new lease of pl for p: the
// shorter of the pool's and the rule's, for a pool whose members are
// reached through the connect proxy only (the only traffic kobe sees).
func resolveIdleTimeout(pl *kobev1.ClusterPool, p *auth.Principal) time.Duration {
	if pl == nil || pool.AccessMode(&pl.Spec) != kobev1.AccessProxy {
		return 0
	}
	var fromPool time.Duration
	if pl.Spec.IdleTimeout != nil {
		fromPool = pl.Spec.IdleTimeout.Duration
	}
	return lease.ResolveIdleTimeout(fromPool, p.IdleTimeout())
}

// poolHeartbeatTimeout is pl's spec.heartbeatTimeout, 0 when unset.
func poolHeartbeatTimeout(pl *kobev1.ClusterPool) time.Duration {
	if pl == nil || pl.Spec.HeartbeatTimeout == nil {
		return 0
	}
	return pl.Spec.HeartbeatTimeout.Duration
}
