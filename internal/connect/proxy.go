package connect

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/truncate"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Defaults and limits.
const (
	// DefaultMaxInFlight bounds concurrent connect requests (open watches
	// and exec, attach and port-forward sessions included); beyond it the
	// proxy answers 429. It is separate from the lease API's limit, so
	// that open streams cannot starve the lease API.
	DefaultMaxInFlight = 1000
	// DefaultMaxStreamsPerLease bounds one lease's concurrent connect
	// requests on a replica, so that one holder cannot take every slot.
	DefaultMaxStreamsPerLease = 50
	// DefaultResponseHeaderTimeout bounds the wait for a member's response
	// headers, except for watches, followed logs and upgrades: longer than
	// kube-apiserver's own 60 s request timeout, so that only a hung
	// member (an aggregated API or a proxied pod that never answers) hits it.
	DefaultResponseHeaderTimeout = 90 * time.Second
	// MaxBodyBytes bounds a proxied request body (413 beyond it).
	MaxBodyBytes = 64 << 20
	// maxLoggedPath bounds a request's path in a log line (truncate.Log):
	// the path is the caller's, and may be read before its certificate is.
	maxLoggedPath = 256
)

// Options configure the proxy.
type Options struct {
	// Namespace holds the leases and members.
	Namespace string
	// Access opens members' sealed access material. Required to reach a
	// member.
	Access *memberaccess.Sealer
	// Reader reads the operator's cache; APIReader reads live (the
	// members' admin kubeconfigs, which the cache drops).
	Reader, APIReader client.Reader
	// Informers deliver lease and member events, which close the streams of
	// leases that end. Without them streams end only at their expiry.
	Informers cache.Informers
	Clock     clock.WithDelayedExecution
	Log       logr.Logger
	// Activity, when set, is told of every checked request to a lease's
	// member, and of open ones every quarter of the lease's idle timeout
	// (idle release, leaseservice.Service.RecordActivity). It must return
	// at once.
	Activity func(l *kobev1.ClusterLease)
	// MaxInFlight bounds concurrent connect requests (DefaultMaxInFlight).
	MaxInFlight int
	// MaxStreamsPerLease bounds one lease's concurrent connect requests
	// (DefaultMaxStreamsPerLease).
	MaxStreamsPerLease int
	// ResponseHeaderTimeout bounds the wait for a member's response headers
	// of requests that are not watches, followed logs or upgrades
	// (DefaultResponseHeaderTimeout).
	ResponseHeaderTimeout time.Duration
}

// Proxy serves /connect/<lease>/... (an http.Handler). Start registers the
// event handlers that close streams.
type Proxy struct {
	opts    Options
	slots   chan struct{}
	streams streams

	mu      sync.Mutex
	members map[types.UID]*member
}

// member is what the proxy keeps of one member's access material, valid
// while its accessVersion is rv.
type member struct {
	rv        string
	clientCAs *x509.CertPool
	// up is built on first use, from the admin kubeconfig read live.
	up *upstream
}

// upstream reaches one member with the operator's admin credentials.
type upstream struct {
	location *url.URL
	// transport waits for response headers at most the header timeout;
	// streaming, for watches and followed logs, as long as the lease lasts.
	transport, streaming http.RoundTripper
	upgrade              proxy.UpgradeRequestRoundTripper
	// bases are the transports' connection pools.
	bases []*http.Transport
}

// closeIdle closes the pools' idle connections; streams in use end with
// their requests.
func (u *upstream) closeIdle() {
	for _, b := range u.bases {
		b.CloseIdleConnections()
	}
}

// New returns a proxy.
func New(opts Options) *Proxy {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.MaxStreamsPerLease <= 0 {
		opts.MaxStreamsPerLease = DefaultMaxStreamsPerLease
	}
	if opts.ResponseHeaderTimeout <= 0 {
		opts.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Proxy{opts: opts, slots: make(chan struct{}, opts.MaxInFlight), members: map[types.UID]*member{}}
}

// OpenStreams is the number of connect requests being served.
func (p *Proxy) OpenStreams() int { return p.streams.count() }

// InFlight is the number of connect slots taken.
func (p *Proxy) InFlight() int { return len(p.slots) }

// ServeHTTP checks a connect request and forwards it to the lease's member
// as the lease (Impersonate-User: its certificate's common name), with the
// operator's admin credentials, which the caller never sees.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		writeRefusal(w, refuse(http.StatusTooManyRequests, wire.ReasonTooManyRequests, "too many requests",
			"the server is proxying %d requests; retry after a second", cap(p.slots)))
		return
	}
	// A connect path names its lease; a Kubernetes API path at the root
	// (RootPaths) is the lease's whose certificate the caller presents.
	var name, rest string
	var refusal *Refusal
	route := routeConnect
	if IsConnectPath(r) {
		name, rest, refusal = SplitPath(r.URL.EscapedPath())
	} else {
		route = routeRoot
		rest, refusal = RootPath(r.URL.EscapedPath())
	}
	if refusal != nil {
		writeRefusal(w, refusal)
		return
	}
	if r.TLS == nil {
		writeRefusal(w, refuse(http.StatusServiceUnavailable, wire.ReasonProxyNotConfigured, "connect proxy not configured",
			"kobe serves its API without TLS, which the connect proxy needs; start kobe-operator with --api-tls-cert-file and --api-tls-key-file"))
		return
	}
	if len(r.TLS.PeerCertificates) == 0 {
		writeRefusal(w, refuse(http.StatusUnauthorized, wire.ReasonUnauthorized, "missing credentials", "present the client certificate of the lease's kubeconfig"))
		return
	}
	if route == routeRoot {
		if name, refusal = LeaseOf(r.TLS.PeerCertificates[0]); refusal != nil {
			p.opts.Log.V(1).Info("Connect refused", "route", route, "reason", refusal.Reason, "detail", refusal.Detail)
			writeRefusal(w, refusal)
			return
		}
	}
	l := &kobev1.ClusterLease{}
	if err := p.opts.Reader.Get(r.Context(), types.NamespacedName{Namespace: p.opts.Namespace, Name: name}, l); err != nil {
		if apierrors.IsNotFound(err) {
			writeRefusal(w, refuse(http.StatusNotFound, wire.ReasonLeaseNotFound, "lease not found", "there is no lease %q", name))
			return
		}
		p.internal(w, r, fmt.Errorf("reading lease %s: %w", name, err))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s := &stream{lease: l.UID, cancel: cancel}
	if ref := l.Status.InstanceRef; ref != nil {
		s.member = ref.UID
	}
	// Tracked before it is checked: a lease that ends after the check
	// below read the cache closes the stream through its event.
	p.streams.add(s)
	defer p.streams.remove(s)

	t, refusal, err := p.target(ctx, l, r.TLS.PeerCertificates)
	switch {
	case err != nil:
		p.internal(w, r, err)
		return
	case refusal != nil:
		p.opts.Log.V(1).Info("Connect refused", "lease", name, "route", route, "reason", refusal.Reason, "detail", refusal.Detail)
		writeRefusal(w, refusal)
		return
	}
	// Counted only once checked: callers without the lease's certificate
	// cannot use up its streams.
	if !p.streams.admit(s, p.opts.MaxStreamsPerLease) {
		p.opts.Log.V(1).Info("Connect refused", "lease", name, "reason", wire.ReasonTooManyRequests, "limit", p.opts.MaxStreamsPerLease)
		w.Header().Set("Retry-After", "1")
		writeRefusal(w, refuse(http.StatusTooManyRequests, wire.ReasonTooManyRequests, "too many requests",
			"lease %s has %d connect requests open (watches, exec, attach and port-forward sessions included), the most one lease may have; close one and retry", name, p.opts.MaxStreamsPerLease))
		return
	}
	// The stream ends when the lease or the caller's certificate does.
	end := t.notAfter
	if leaf := r.TLS.PeerCertificates[0]; leaf.NotAfter.Before(end) {
		end = leaf.NotAfter
	}
	s.timer = p.opts.Clock.AfterFunc(end.Sub(p.opts.Clock.Now()), s.close)
	defer s.timer.Stop()
	defer p.keepActive(t.lease)()

	p.forward(w, r.WithContext(ctx), t, s, route, rest)
}

// Routes of a forwarded request, as audit lines name them.
const (
	// routeConnect is /connect/<lease>/<member path>.
	routeConnect = "connect"
	// routeRoot is a member path at the root (RootPaths), whose lease the
	// caller's certificate names.
	routeRoot = "root"
)

// auditSession logs one forwarded connect request, with who made it (the
// lease's requester), the member, its size and duration. Never the query
// (exec commands), headers or credentials.
func (p *Proxy) auditSession(t *target, r *http.Request, route, rest string, s *stream, kind string, start time.Time) {
	l, end := t.lease, p.opts.Clock.Now()
	plain, _ := url.PathUnescape(rest) // SplitPath or RootPath checked it
	code, upgraded := s.status()
	p.opts.Log.Info("Connect audit", "lease", l.Name, "leaseUID", l.UID,
		"identity", l.Spec.Requester.Identity, "policy", l.Spec.Requester.Policy, "method", l.Spec.Requester.Method,
		"member", t.member, "memberUID", s.member, "route", route, "verb", r.Method, "path", plain, "kind", kind,
		"code", code, "upgraded", upgraded, "bytesIn", s.in.Load(), "bytesOut", s.out.Load(),
		"start", start.UTC().Format(time.RFC3339Nano), "end", end.UTC().Format(time.RFC3339Nano), "duration", end.Sub(start).String())
}

// forward sends r, checked, to t's member at its path rest (escaped),
// tracking an upgraded connection and the bytes both ways in s; route is
// how r reached the proxy, for the audit line.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, t *target, s *stream, route, rest string) {
	// A watch or an exec session lasts as long as the lease allows, not
	// the server's read and write timeouts (which exist for the lease API).
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})

	out := r.Clone(r.Context())
	upgrade := forwardAs(out.Header, t.user)
	plain, _ := url.PathUnescape(rest) // SplitPath or RootPath checked it
	kind, transport := "request", t.up.transport
	switch {
	case upgrade:
		kind = "upgrade"
	case streaming(out, plain):
		kind, transport = "stream", t.up.streaming
	}
	start := p.opts.Clock.Now()
	if kind != "request" {
		p.opts.Log.Info("Connect stream opened", "lease", t.lease.Name, "identity", t.lease.Spec.Requester.Identity,
			"member", t.member, "kind", kind, "start", start.UTC().Format(time.RFC3339Nano))
	}
	defer p.auditSession(t, r, route, rest, s, kind, start)
	if r.Body != nil && r.Body != http.NoBody {
		// Upgrades (GETs without a body) read their stream from the
		// hijacked connection: this bounds plain request bodies only.
		out.Body = &countingBody{ReadCloser: http.MaxBytesReader(w, r.Body, MaxBodyBytes), n: &s.in}
	}
	loc := *t.up.location
	basePath := strings.TrimSuffix(loc.EscapedPath(), "/")
	loc.Path = strings.TrimSuffix(loc.Path, "/") + plain
	loc.RawPath = basePath + rest
	loc.RawQuery = r.URL.RawQuery
	h := &proxy.UpgradeAwareHandler{
		Location:         &loc,
		Transport:        transport,
		UpgradeTransport: t.up.upgrade,
		UseLocationHost:  true,
		// Watch events reach the caller as the member sends them.
		FlushInterval: -1,
		Responder:     responder{log: p.opts.Log, headerTimeout: p.opts.ResponseHeaderTimeout},
	}
	h.ServeHTTP(&trackingWriter{ResponseWriter: w, s: s}, out)
}

// target is a checked connect request.
type target struct {
	up       *upstream
	user     string
	notAfter time.Time
	lease    *kobev1.ClusterLease
	// member is the member's name.
	member string
}

// target checks l and the caller's certificates against the cache (see
// CheckLease and VerifyClient) and returns how to reach l's member.
func (p *Proxy) target(ctx context.Context, l *kobev1.ClusterLease, certs []*x509.Certificate) (*target, *Refusal, error) {
	now := p.opts.Clock.Now()
	// A certificate that does not even name the lease learns nothing of
	// its state.
	if certs[0].Subject.CommonName != leasecreds.CommonName(l) {
		return nil, notThisLease(l), nil
	}
	inst, pl, err := p.memberOf(ctx, l)
	if err != nil {
		return nil, nil, err
	}
	if r := CheckLease(l, inst, pl, now); r != nil {
		return nil, r, nil
	}
	m, err := p.member(ctx, inst)
	if err != nil {
		p.opts.Log.Error(err, "Reading member access failed", "lease", l.Name, "member", inst.Name)
		return nil, refuse(http.StatusServiceUnavailable, wire.ReasonMemberUnavailable, "member unavailable", "lease %s's member cannot be reached now; retry later", l.Name), nil
	}
	if r := VerifyClient(certs, m.clientCAs, l, inst, now); r != nil {
		return nil, r, nil
	}
	return &target{up: m.up, user: leasecreds.CommonName(l), notAfter: leasecreds.NotAfter(l, inst, pl), lease: l, member: inst.Name}, nil, nil
}

// memberOf reads from the cache the member l's status names, or, before
// the status copy is written, the one member whose leaseRef names l (nil
// when gone or none), and l's pool (nil when gone).
func (p *Proxy) memberOf(ctx context.Context, l *kobev1.ClusterLease) (*kobev1.ClusterInstance, *kobev1.ClusterPool, error) {
	var inst *kobev1.ClusterInstance
	if ref := l.Status.InstanceRef; ref == nil {
		var ms kobev1.ClusterInstanceList
		if err := p.opts.Reader.List(ctx, &ms, client.InNamespace(l.Namespace), client.MatchingFields{index.InstanceLeaseUID: string(l.UID)}); err != nil {
			return nil, nil, fmt.Errorf("listing members of lease %s: %w", l.Name, err)
		}
		inst = binding.Record(ms.Items, l)
	} else {
		inst = &kobev1.ClusterInstance{}
		err := p.opts.Reader.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: ref.Name}, inst)
		if apierrors.IsNotFound(err) {
			inst = nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("reading member %s: %w", ref.Name, err)
		}
	}
	pl := &kobev1.ClusterPool{}
	err := p.opts.Reader.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}, pl)
	if apierrors.IsNotFound(err) {
		pl = nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("reading pool %s: %w", l.Spec.Pool, err)
	}
	return inst, pl, nil
}

// member returns inst's client CAs and upstream, from its access material
// (sealed in its status, opening only for inst's UID): the admin
// kubeconfig, which the cache drops, is read live once per member.
func (p *Proxy) member(ctx context.Context, inst *kobev1.ClusterInstance) (*member, error) {
	version := accessVersion(inst)
	p.mu.Lock()
	m, ok := p.members[inst.UID]
	p.mu.Unlock()
	if ok && version != "" && m.rv == version {
		return m, nil
	}
	key := client.ObjectKeyFromObject(inst)
	live := &kobev1.ClusterInstance{}
	if err := p.opts.APIReader.Get(ctx, key, live); err != nil {
		return nil, fmt.Errorf("reading member %s: %w", key, err)
	}
	if live.UID != inst.UID {
		return nil, fmt.Errorf("member %s was replaced (uid %s, want %s)", key, live.UID, inst.UID)
	}
	a, err := memberaccess.Read(ctx, p.opts.APIReader, p.opts.Access, live, true)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", key, err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(a.ClientCACert) {
		return nil, fmt.Errorf("member %s: no client CA certificate", key)
	}
	up, err := newUpstream(a.AdminKubeconfig, a.CACert, p.opts.ResponseHeaderTimeout)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", key, err)
	}
	m = &member{rv: accessVersion(live), clientCAs: cas, up: up}
	p.mu.Lock()
	old := p.members[inst.UID]
	p.members[inst.UID] = m
	p.mu.Unlock()
	if old != nil {
		old.up.closeIdle()
	}
	return m, nil
}

// forget drops what the proxy keeps of a deleted member.
func (p *Proxy) forget(uid types.UID) {
	p.mu.Lock()
	m := p.members[uid]
	delete(p.members, uid)
	p.mu.Unlock()
	if m != nil {
		m.up.closeIdle()
	}
}

// newUpstream builds the transports that reach a member with the admin
// kubeconfig's credentials, verifying the member's serving certificate
// against servingCA (the member's status.access.caCert), never skipping it. The
// plain transport waits headerTimeout at most for response headers.
func newUpstream(adminKubeconfig, servingCA []byte, headerTimeout time.Duration) (*upstream, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(adminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parsing admin kubeconfig: %w", err)
	}
	loc, err := url.Parse(cfg.Host)
	if err != nil || loc.Scheme != "https" || loc.Host == "" {
		return nil, fmt.Errorf("admin kubeconfig's server %q is not an https URL", cfg.Host)
	}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig's TLS settings: %w", err)
	}
	if tlsCfg == nil {
		return nil, errors.New("admin kubeconfig has no TLS settings")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(servingCA) {
		return nil, errors.New("no serving CA certificate")
	}
	tlsCfg.RootCAs, tlsCfg.InsecureSkipVerify = roots, false
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	streamBase := &http.Transport{
		TLSClientConfig: tlsCfg, DialContext: dialer.DialContext, TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 32, IdleConnTimeout: 90 * time.Second,
	}
	base := streamBase.Clone()
	base.ResponseHeaderTimeout = headerTimeout
	// Upgrades dial their own HTTP/1.1 connection (proxy.DialURL reads the
	// dialer and TLS settings from this transport).
	dial := &http.Transport{TLSClientConfig: tlsCfg.Clone(), DialContext: dialer.DialContext, TLSHandshakeTimeout: 10 * time.Second}
	// Certificates are in the TLS settings; these wrappers add a bearer
	// token or basic auth when the kubeconfig has one.
	rt, err := rest.HTTPWrappersForConfig(cfg, base)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	streamRT, err := rest.HTTPWrappersForConfig(cfg, streamBase)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	headers, err := rest.HTTPWrappersForConfig(cfg, proxy.MirrorRequest)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	return &upstream{
		location: loc, transport: rt, streaming: streamRT,
		upgrade: proxy.NewUpgradeRequestRoundTripper(dial, headers), bases: []*http.Transport{base, streamBase},
	}, nil
}

// streaming reports whether a request for the member's path memberPath
// (unescaped) may get its response headers late: a watch (a /watch/ path
// or watch=true) or a followed log. It decides only the header timeout;
// the per-lease cap bounds what it lets wait.
func streaming(r *http.Request, memberPath string) bool {
	q := r.URL.Query()
	for _, param := range []string{"watch", "follow"} {
		var on bool
		// As the member's API server reads the parameter.
		vals := q[param]
		if err := runtime.Convert_Slice_string_To_bool(&vals, &on, nil); err == nil && on {
			return true
		}
	}
	// /api/<version>/watch/... or /apis/<group>/<version>/watch/...
	parts := strings.Split(strings.Trim(memberPath, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		return parts[2] == "watch"
	case len(parts) > 3 && parts[0] == "apis":
		return parts[3] == "watch"
	}
	return false
}

// forwardAs removes the caller's credentials, impersonation and hop-by-hop
// headers and makes the request the lease's: the member's audit log shows
// user. The headers the caller's Connection header names go first: the
// reverse proxy would otherwise delete them after the impersonation is
// set (Connection: Impersonate-User would send the request as kobe's
// admin). Upgrade requests keep Connection: Upgrade and their Upgrade;
// it reports whether r is one.
func forwardAs(h http.Header, user string) (upgrade bool) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			name = textproto.TrimString(name)
			if strings.EqualFold(name, "Upgrade") {
				upgrade = true
				continue
			}
			if name != "" {
				h.Del(name)
			}
		}
	}
	h.Del("Connection")
	if upgrade {
		h.Set("Connection", "Upgrade")
	} else {
		h.Del("Upgrade")
	}
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Impersonate-") {
			delete(h, k)
		}
	}
	h.Del("Authorization")
	h.Del("Proxy-Authorization")
	h.Set("Impersonate-User", user)
	h.Set("Impersonate-Group", leasecreds.AdminGroup)
	return upgrade
}

// accessVersion names inst's access material, which is written once per
// member: the key and the nonce of its sealed client CA key, or "legacy"
// for a member whose material is still in its access Secret ("" when it
// has none yet: nothing is remembered).
func accessVersion(inst *kobev1.ClusterInstance) string {
	switch a := inst.Status.Access; {
	case a != nil && len(a.SealedClientCAKey) >= 12:
		return a.KeyID + ":" + hex.EncodeToString(a.SealedClientCAKey[:12])
	case a == nil && inst.Status.AccessSecretRef != nil:
		return "legacy"
	}
	return ""
}

// responder answers a member that could not be reached.
type responder struct {
	log           logr.Logger
	headerTimeout time.Duration
}

func (r responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	if req.Context().Err() != nil {
		// The stream was closed (its lease ended) or the caller left.
		writeRefusal(w, refuse(http.StatusGone, wire.ReasonLeaseEnded, "lease ended", "the request was ended with its lease or by the caller"))
		return
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		r.log.Info("Connect upstream timed out", "path", truncate.Log(req.URL.Path, maxLoggedPath), "error", err.Error())
		writeRefusal(w, refuse(http.StatusGatewayTimeout, wire.ReasonMemberUnavailable, "member timed out",
			"the lease's member did not answer in time (a response is awaited %s, a watch as long as the lease); retry later", r.headerTimeout))
		return
	}
	r.log.Info("Connect upstream failed", "path", truncate.Log(req.URL.Path, maxLoggedPath), "error", err.Error())
	writeRefusal(w, refuse(http.StatusBadGateway, wire.ReasonMemberUnavailable, "member unavailable", "the lease's member did not answer; retry later"))
}

func (p *Proxy) internal(w http.ResponseWriter, r *http.Request, err error) {
	p.opts.Log.Error(err, "Connect request failed", "path", truncate.Log(r.URL.Path, maxLoggedPath))
	writeRefusal(w, refuse(http.StatusInternalServerError, wire.ReasonInternalError, "internal error", "the request failed; the error has been logged"))
}

// refusalBody is a refusal as kubectl and kobe's clients both read it: a
// Kubernetes Status, whose message kubectl prints ("error: lease ended: ..."
// instead of "the server responded with the status code 410 but did not
// return more information"), that also carries the API's error fields
// (wire.ErrorBody's "error", "detail" and "reason").
type refusalBody struct {
	metav1.TypeMeta `json:",inline"`
	Status          string `json:"status"`
	Message         string `json:"message"`
	Reason          string `json:"reason"`
	Code            int    `json:"code"`
	Error           string `json:"error"`
	Detail          string `json:"detail,omitempty"`
}

func writeRefusal(w http.ResponseWriter, r *Refusal) {
	if r.Code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(5))
	}
	msg := r.Message
	if r.Detail != "" {
		msg += ": " + r.Detail
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.Code)
	_ = json.NewEncoder(w).Encode(refusalBody{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Message: msg, Reason: r.Reason, Code: r.Code,
		Error: r.Message, Detail: r.Detail,
	})
}

// keepActive reports the lease's activity (Options.Activity) now, every
// quarter of its idle timeout while the request stays open (a watch, an exec
// session: someone is using the member), and when the returned func is
// called at the request's end.
func (p *Proxy) keepActive(l *kobev1.ClusterLease) (done func()) {
	report := p.opts.Activity
	if report == nil {
		return func() {}
	}
	report(l)
	timeout, ok := lease.IdleTimeout(l)
	if !ok {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
		timer   clock.Timer
	)
	var tick func()
	tick = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		report(l)
		timer = p.opts.Clock.AfterFunc(lease.HeartbeatGrain(timeout), tick)
	}
	mu.Lock()
	timer = p.opts.Clock.AfterFunc(lease.HeartbeatGrain(timeout), tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
		report(l)
	}
}
