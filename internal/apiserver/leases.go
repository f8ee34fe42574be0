package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
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
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func requesterHash(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(sum[:])[:32]
}

func newLeaseName() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "lease-" + hex.EncodeToString(b), nil
}

// createLease: POST /v1/leases. Answers 201 with a Bound lease and its
// kubeconfig when a Ready member exists and nobody is queued ahead, else 202
// with the lease Pending and its queue position.
func (s *Server) createLease(w http.ResponseWriter, r *http.Request) {
	start := s.opts.Clock.Now()
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	var body wire.CreateLeaseRequest
	if err := decodeBody(req.body, &body); err != nil {
		writeError(w, http.StatusBadRequest, "bad request", err.Error())
		return
	}
	if body.Pool != "" && body.Profile != "" && body.Pool != body.Profile {
		writeError(w, http.StatusBadRequest, "bad request", "pool and profile are synonyms; send one, or the same value in both")
		return
	}
	poolName := body.PoolName()
	if err := validName("pool", poolName); err != nil {
		writeError(w, http.StatusBadRequest, "bad request", err.Error())
		return
	}
	var requested time.Duration
	if body.TTL != "" {
		d, err := parseTTL("ttl", body.TTL)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad request", err.Error())
			return
		}
		requested = d
	}
	ctx := r.Context()
	pool := &kobev1.ClusterPool{}
	if err := s.opts.Reader.Get(ctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: poolName}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			writeError(w, http.StatusNotFound, "pool not found", fmt.Sprintf("there is no pool %q; GET /v1/pools lists the pools you may use", poolName))
			return
		}
		s.internalError(w, "reading pool", err)
		return
	}
	p := req.principal
	if !p.AllowsPool(poolName) {
		s.audit(p, "create", "", poolName, "refused: pool not allowed")
		metrics.LeaseRequest(poolName, "refused")
		writeError(w, http.StatusForbidden, "pool not allowed", fmt.Sprintf("identity %q may not lease from pool %q under policy %s", p.Identity, poolName, p.Policy))
		return
	}
	if pool.DeletionTimestamp != nil {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusServiceUnavailable, "pool unavailable", fmt.Sprintf("pool %q is being deleted", poolName))
		return
	}
	if requested == 0 {
		requested = lease.PoolTTL(pool)
	}
	ttl, _ := p.ClampTTL(requested)

	l, code, err := s.createLeaseObject(ctx, p, poolName, ttl)
	if err != nil {
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "30")
			s.audit(p, "create", "", poolName, "refused: concurrent lease limit")
			metrics.LeaseRequest(poolName, "refused")
			writeError(w, code, "concurrent lease limit reached", err.Error())
			return
		}
		s.internalError(w, "creating lease", err)
		return
	}

	kubeconfig, mintErr := s.tryFastBind(ctx, l, ttl)
	if mintErr != nil {
		// Bound, but unusable: end it at once so that it holds nothing.
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || lease.IsEnded(l.Status.Phase) {
				return err
			}
			return clusterlease.End(ctx, s.opts.Client, l, kobev1.LeaseReleased, kobev1.ReasonKubeconfigFailed,
				"no kubeconfig could be minted for the bound member", s.opts.Clock.Now())
		})
		s.audit(p, "create", l.Name, poolName, "failed: kubeconfig")
		metrics.LeaseRequest(poolName, "error")
		s.internalError(w, "minting the lease's kubeconfig (the lease was released)", mintErr)
		return
	}
	out := toWireLease(l, pool, true)
	if l.Status.Phase == kobev1.LeaseBound {
		out.Kubeconfig = string(kubeconfig)
		metrics.LeaseBound(poolName, "api", s.opts.Clock.Since(start))
		metrics.LeaseRequest(poolName, "bound")
		s.audit(p, "create", l.Name, poolName, "bound to "+l.Status.InstanceRef.Name)
		s.opts.Recorder.Eventf(l, nil, "Normal", kobev1.ReasonBound, "Create", "Leased by %s (policy %s, method %s), bound to %s", p.Identity, p.Policy, p.Method, l.Status.InstanceRef.Name)
		writeJSON(w, http.StatusCreated, out)
		return
	}
	s.markPending(ctx, l)
	metrics.LeaseRequest(poolName, "pending")
	s.audit(p, "create", l.Name, poolName, "pending")
	s.opts.Recorder.Eventf(l, nil, "Normal", kobev1.ReasonQueued, "Create", "Requested by %s (policy %s, method %s); waiting for a ready member", p.Identity, p.Policy, p.Method)
	out.Phase = wire.PhasePending
	writeJSON(w, http.StatusAccepted, out)
}

// createLeaseObject creates the ClusterLease, enforcing the caller's
// concurrent-lease limit. It returns 429 as code when the limit is reached.
func (s *Server) createLeaseObject(ctx context.Context, p *auth.Principal, pool string, ttl time.Duration) (*kobev1.ClusterLease, int, error) {
	hash := requesterHash(p.Identity)
	if limit, limited := p.MaxConcurrentLeases(); limited {
		mu, _ := s.identityLocks.LoadOrStore(hash, &sync.Mutex{})
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
		// Counted from the API server, not the cache: a lease this replica
		// created a millisecond ago must count.
		var ls kobev1.ClusterLeaseList
		if err := s.opts.APIReader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), client.MatchingLabels{kobev1.LabelRequesterHash: hash}); err != nil {
			return nil, http.StatusInternalServerError, fmt.Errorf("counting leases of %s: %w", p.Identity, err)
		}
		var active int32
		for i := range ls.Items {
			if ls.Items[i].DeletionTimestamp == nil && !lease.IsEnded(ls.Items[i].Status.Phase) {
				active++
			}
		}
		if active >= limit {
			return nil, http.StatusTooManyRequests, fmt.Errorf("identity %q holds %d of %d allowed leases; release one first", p.Identity, active, limit)
		}
	}
	name, err := newLeaseName()
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   s.opts.Namespace,
			Labels:      map[string]string{kobev1.LabelRequesterHash: hash, kobev1.LabelPool: pool},
			Annotations: map[string]string{kobev1.AnnotationFastPath: "true"},
		},
		Spec: kobev1.ClusterLeaseSpec{
			Pool:          pool,
			TTL:           &metav1.Duration{Duration: ttl},
			Requester:     kobev1.Requester{Identity: p.Identity, Policy: p.Policy, Method: p.Method},
			MaxExtensions: ptr.To(p.MaxExtensions()),
			CleanupMode:   kobev1.CleanupStandard,
		},
	}
	if err := s.opts.Client.Create(ctx, l); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	return l, 0, nil
}

// tryFastBind binds a new lease at once when its pool has a Ready member and
// nobody queued ahead of it; otherwise the lease controller binds it later.
// It returns the kubeconfig once bound; an error means the lease was bound
// but no kubeconfig could be minted for it.
func (s *Server) tryFastBind(ctx context.Context, l *kobev1.ClusterLease, ttl time.Duration) ([]byte, error) {
	var ls kobev1.ClusterLeaseList
	if err := s.opts.Reader.List(ctx, &ls, client.InNamespace(l.Namespace), client.MatchingFields{index.LeasePool: l.Spec.Pool}); err != nil {
		return nil, nil
	}
	if lease.Position(lease.Waiting(lease.Queue(ls.Items, l.Spec.Pool), s.opts.Clock.Now()), l) > 1 {
		return nil, nil
	}
	for attempt := 0; attempt < 3; attempt++ {
		_, err := s.opts.Binder.Bind(ctx, l, ttl)
		if err == nil {
			return s.kubeconfig(ctx, l)
		}
		if !errors.Is(err, binding.ErrLeaseChanged) {
			return nil, nil
		}
		// The lease controller got to it first: see what it did.
		if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			return nil, nil
		}
		if l.Status.Phase == kobev1.LeaseBound {
			return s.kubeconfig(ctx, l)
		}
		if lease.IsEnded(l.Status.Phase) {
			return nil, nil
		}
	}
	return nil, nil
}

// markPending records that the fast path could not bind the lease, so that
// the lease controller queues it at once. Best effort: the controller marks
// it anyway once InFlightGrace has passed.
func (s *Server) markPending(ctx context.Context, l *kobev1.ClusterLease) {
	if l.Status.Phase != "" {
		return
	}
	before := l.DeepCopy()
	l.Status.Phase = kobev1.LeasePending
	if err := s.opts.Client.Status().Patch(ctx, l, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		s.opts.Log.V(1).Info("Could not mark lease pending", "lease", l.Name, "error", err.Error())
		*l = *before
	}
}

// kubeconfig mints a kubeconfig for a bound lease from its member's access
// Secret.
func (s *Server) kubeconfig(ctx context.Context, l *kobev1.ClusterLease) ([]byte, error) {
	if l.Status.InstanceRef == nil {
		return nil, fmt.Errorf("lease %s is not bound", l.Name)
	}
	key := types.NamespacedName{Namespace: l.Namespace, Name: memberaccess.SecretName(l.Status.InstanceRef.Name)}
	sec, err := s.getSecret(ctx, key)
	if err != nil {
		return nil, err
	}
	a, err := memberaccess.FromSecret(sec)
	if err != nil {
		return nil, err
	}
	return leasecreds.Kubeconfig(a, l, s.opts.Clock.Now())
}

// getLease: GET /v1/leases/{id}. Another identity's lease is a 404.
func (s *Server) getLease(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	l, ok := s.ownLease(w, r, req.principal)
	if !ok {
		return
	}
	pool := s.poolOrNil(r.Context(), l.Spec.Pool)
	out := toWireLease(l, pool, true)
	if l.Status.Phase == kobev1.LeaseBound {
		kc, err := s.kubeconfig(r.Context(), l)
		if err != nil {
			s.internalError(w, "minting kubeconfig", err)
			return
		}
		out.Kubeconfig = string(kc)
	}
	writeJSON(w, http.StatusOK, out)
}

// ownLease loads the lease named in the path if the caller owns it, reading
// through to the API server when the cache has not seen it yet.
func (s *Server) ownLease(w http.ResponseWriter, r *http.Request, p *auth.Principal) (*kobev1.ClusterLease, bool) {
	id := r.PathValue("id")
	notFound := func() (*kobev1.ClusterLease, bool) {
		writeError(w, http.StatusNotFound, "lease not found", fmt.Sprintf("you hold no lease %q; GET /v1/leases lists yours", id))
		return nil, false
	}
	if validName("lease id", id) != nil {
		return notFound()
	}
	key := types.NamespacedName{Namespace: s.opts.Namespace, Name: id}
	l := &kobev1.ClusterLease{}
	err := s.opts.Reader.Get(r.Context(), key, l)
	if apierrors.IsNotFound(err) {
		err = s.opts.APIReader.Get(r.Context(), key, l)
	}
	if apierrors.IsNotFound(err) {
		return notFound()
	}
	if err != nil {
		s.internalError(w, "reading lease", err)
		return nil, false
	}
	if l.Spec.Requester.Identity != p.Identity {
		return notFound()
	}
	return l, true
}

// listLeases: GET /v1/leases, the caller's active leases.
func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	var ls kobev1.ClusterLeaseList
	if err := s.opts.Reader.List(r.Context(), &ls, client.InNamespace(s.opts.Namespace), client.MatchingFields{index.LeaseIdentity: req.principal.Identity}); err != nil {
		s.internalError(w, "listing leases", err)
		return
	}
	out := []wire.Lease{}
	for i := range ls.Items {
		l := &ls.Items[i]
		if l.DeletionTimestamp != nil || lease.IsEnded(l.Status.Phase) {
			continue
		}
		out = append(out, toWireLease(l, s.poolOrNil(r.Context(), l.Spec.Pool), true))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(w, http.StatusOK, out)
}

// releaseLease: DELETE /v1/leases/{id}. Idempotent for the owner.
func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	l, ok := s.ownLease(w, r, req.principal)
	if !ok {
		return
	}
	ctx := r.Context()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			return err
		}
		if lease.IsEnded(l.Status.Phase) {
			return nil
		}
		return clusterlease.End(ctx, s.opts.Client, l, kobev1.LeaseReleased, kobev1.ReasonReleased,
			fmt.Sprintf("released by %s", req.principal.Identity), s.opts.Clock.Now())
	})
	if apierrors.IsNotFound(err) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil {
		s.internalError(w, "releasing lease", err)
		return
	}
	metrics.LeaseEnded(l.Spec.Pool, kobev1.ReasonReleased)
	s.audit(req.principal, "release", l.Name, l.Spec.Pool, "released")
	s.opts.Recorder.Eventf(l, nil, "Normal", kobev1.ReasonReleased, "Release", "Released by %s (policy %s)", req.principal.Identity, req.principal.Policy)
	w.WriteHeader(http.StatusNoContent)
}

// extendLease: PATCH /v1/leases/{id} {"extend_ttl": "30m"}.
func (s *Server) extendLease(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	var body wire.ExtendLeaseRequest
	if err := decodeBody(req.body, &body); err != nil {
		writeError(w, http.StatusBadRequest, "bad request", err.Error())
		return
	}
	l, ok := s.ownLease(w, r, req.principal)
	if !ok {
		return
	}
	by := lease.TTL(l, nil)
	if body.ExtendTTL != "" {
		d, err := parseTTL("extend_ttl", body.ExtendTTL)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad request", err.Error())
			return
		}
		by = d
	}
	by, _ = req.principal.ClampTTL(by)
	ctx := r.Context()
	var refusal error
	var kc []byte
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		refusal = nil
		if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			return err
		}
		expires, err := lease.Extend(l, by, s.opts.Clock.Now())
		if err != nil {
			refusal = err
			return nil
		}
		l.Status.ExpiresAt = &metav1.Time{Time: expires}
		l.Status.Extensions++
		// Mint before saving, so that a failure does not use up an extension.
		if kc, err = s.kubeconfig(ctx, l); err != nil {
			return err
		}
		return s.opts.Client.Status().Update(ctx, l)
	})
	switch {
	case err != nil:
		s.internalError(w, "extending lease", err)
		return
	case refusal != nil:
		s.audit(req.principal, "extend", l.Name, l.Spec.Pool, "refused: "+refusal.Error())
		msg := "extension refused"
		if errors.Is(refusal, lease.ErrExtensionLimit) {
			msg = "extension limit reached"
		}
		writeError(w, http.StatusConflict, msg, refusal.Error())
		return
	}
	s.audit(req.principal, "extend", l.Name, l.Spec.Pool, "extended to "+l.Status.ExpiresAt.UTC().Format(time.RFC3339))
	s.opts.Recorder.Eventf(l, nil, "Normal", kobev1.ReasonExtended, "Extend", "Extended by %s to %s (%d of %d)", req.principal.Identity, l.Status.ExpiresAt.UTC().Format(time.RFC3339), l.Status.Extensions, lease.MaxExtensions(l))
	writeJSON(w, http.StatusOK, wire.ExtendLeaseResponse{
		ExpiresAt:     wire.WireTime(l.Status.ExpiresAt.Time),
		Extensions:    int(l.Status.Extensions),
		MaxExtensions: int(lease.MaxExtensions(l)),
		Kubeconfig:    string(kc),
	})
}

func (s *Server) poolOrNil(ctx context.Context, name string) *kobev1.ClusterPool {
	p := &kobev1.ClusterPool{}
	if err := s.opts.Reader.Get(ctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: name}, p); err != nil {
		return nil
	}
	return p
}

// audit logs one lease operation: who, under which policy, what, and the
// outcome. Never credentials.
func (s *Server) audit(p *auth.Principal, op, id, pool, outcome string) {
	kv := append([]any{"op", op, "lease", id, "pool", pool, "outcome", outcome}, auth.AuditFields(p)...)
	s.opts.Log.Info("Lease audit", kv...)
}

func (s *Server) internalError(w http.ResponseWriter, what string, err error) {
	s.opts.Log.Error(err, "Request failed", "step", what)
	writeError(w, http.StatusInternalServerError, "internal error", what+" failed; the error has been logged")
}
