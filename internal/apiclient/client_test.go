package apiclient_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func newClient(t *testing.T, endpoint string, creds apiclient.Credentials, opts ...apiclient.Option) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(endpoint, creds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	apiclient.SetPollInterval(c, 10*time.Millisecond)
	return c
}

func TestLeaseLifecycle(t *testing.T) {
	srv := apiclienttest.New(t)
	c := newClient(t, srv.URL, apiclient.BearerToken(apiclienttest.Token))
	ctx := t.Context()

	l, err := c.CreateLease(ctx, wire.CreateLeaseRequest{Pool: "ci-small", TTL: "30m"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Phase != wire.PhaseBound || l.Kubeconfig == "" || l.EffectiveTTL != "30m" || l.ExpiresAt == nil {
		t.Fatalf("created lease: %+v", l)
	}

	got, err := c.GetLease(ctx, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != l.ID || got.Kubeconfig != apiclienttest.Kubeconfig(l.ID) {
		t.Fatalf("get: %+v", got)
	}

	list, err := c.ListLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != l.ID {
		t.Fatalf("list: %+v", list)
	}

	ext, err := c.ExtendLease(ctx, l.ID, "30m")
	if err != nil {
		t.Fatal(err)
	}
	if !ext.ExpiresAt.Equal(l.ExpiresAt.Add(30*time.Minute)) || ext.Extensions != 1 || ext.MaxExtensions != 2 {
		t.Fatalf("extend: %+v", ext)
	}

	poolLeases, err := c.ListPoolLeases(ctx, "ci-small")
	if err != nil {
		t.Fatal(err)
	}
	if len(poolLeases) != 1 || poolLeases[0].Requester != "tester" {
		t.Fatalf("pool leases: %+v", poolLeases)
	}

	if err := c.ReleaseLease(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseLease(ctx, l.ID); err != nil {
		t.Fatalf("release must be idempotent: %v", err)
	}
	if got := srv.Released(); len(got) != 2 || got[0] != l.ID {
		t.Fatalf("released: %v", got)
	}
	list, err = c.ListLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("released lease still listed: %+v", list)
	}
}

func TestPoolsStatusWhoAmI(t *testing.T) {
	srv := apiclienttest.New(t)
	ctx := t.Context()
	c := newClient(t, srv.URL, apiclient.BearerToken(apiclienttest.Token))

	pools, err := c.ListPools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 || pools[0].Name != "ci-small" || pools[0].Policy.Mode != "fixed" {
		t.Fatalf("pools: %+v", pools)
	}
	p, err := c.GetPool(ctx, "ci-small")
	if err != nil {
		t.Fatal(err)
	}
	if p.Ready != 3 {
		t.Fatalf("pool: %+v", p)
	}
	if _, err := c.GetPool(ctx, "nope"); !apiclient.IsNotFound(err) {
		t.Fatalf("unknown pool: got %v, want 404", err)
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version == "" || len(st.Pools) != 1 {
		t.Fatalf("authenticated status: %+v", st)
	}
	anon := newClient(t, srv.URL, nil)
	st, err = anon.Status(ctx)
	if err != nil {
		t.Fatalf("status must work without credentials: %v", err)
	}
	if len(st.Pools) != 0 || len(st.Auth.Methods) == 0 {
		t.Fatalf("anonymous status: %+v", st)
	}

	who, err := c.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if who.Identity != "tester" || who.Policy == "" {
		t.Fatalf("whoami: %+v", who)
	}
	if _, err := anon.WhoAmI(ctx); !apiclient.IsUnauthorized(err) {
		t.Fatalf("anonymous whoami: got %v, want 401", err)
	}
}

func TestAPIErrors(t *testing.T) {
	srv := apiclienttest.New(t, apiclienttest.WithMaxExtensions(0), apiclienttest.WithMaxConcurrentLeases(1))
	ctx := t.Context()
	c := newClient(t, srv.URL, apiclient.BearerToken(apiclienttest.Token))

	l, err := c.CreateLease(ctx, wire.CreateLeaseRequest{Pool: "ci-small"})
	if err != nil {
		t.Fatal(err)
	}
	if l.EffectiveTTL != "1h" {
		t.Errorf("default ttl: got %q", l.EffectiveTTL)
	}

	_, err = c.ExtendLease(ctx, l.ID, "30m")
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict {
		t.Fatalf("extend over the limit: got %v, want *Error 409", err)
	}
	if !strings.HasPrefix(err.Error(), "extension limit reached: ") || !strings.Contains(err.Error(), "(HTTP 409, ExtensionLimitReached)") ||
		!apiclient.HasReason(err, wire.ReasonExtensionLimitReached) {
		t.Errorf("409 message or reason lost: %q", err)
	}

	_, err = c.CreateLease(ctx, wire.CreateLeaseRequest{Pool: "ci-small"})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.RetryAfter != 30*time.Second {
		t.Fatalf("over the concurrent limit: got %#v, want 429 with Retry-After 30s", err)
	}

	_, err = c.CreateLease(ctx, wire.CreateLeaseRequest{Pool: "ci-small", TTL: "forever"})
	if !apiclient.IsStatus(err, http.StatusBadRequest) {
		t.Fatalf("bad ttl: got %v, want 400", err)
	}
	if _, err := c.GetLease(ctx, "lease-0000000000ff"); !apiclient.IsNotFound(err) || !apiclient.HasReason(err, wire.ReasonLeaseNotFound) {
		t.Fatalf("unknown lease: got %v, want 404 LeaseNotFound", err)
	}
	if _, err := c.GetLease(ctx, "Lease_Nope"); !apiclient.IsStatus(err, http.StatusBadRequest) || !apiclient.HasReason(err, wire.ReasonBadRequest) {
		t.Fatalf("malformed lease id: got %v, want 400 BadRequest", err)
	}
	bad := newClient(t, srv.URL, apiclient.BearerToken("wrong"))
	if _, err := bad.ListLeases(ctx); !apiclient.IsUnauthorized(err) {
		t.Fatalf("bad token: got %v, want 401", err)
	}
}

func TestNonJSONErrorAndRetryAfterDate(t *testing.T) {
	when := time.Now().Add(90 * time.Second).UTC()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", when.Format(http.TimeFormat))
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>upstream down</html>\nmore"))
	}))
	t.Cleanup(srv.Close)
	_, err := newClient(t, srv.URL, nil).Status(t.Context())
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("got %v, want *Error", err)
	}
	if apiErr.StatusCode != http.StatusBadGateway || apiErr.Message != "bad gateway" || apiErr.Detail != "<html>upstream down</html>" {
		t.Errorf("got %#v", apiErr)
	}
	if apiErr.RetryAfter < 80*time.Second || apiErr.RetryAfter > 91*time.Second {
		t.Errorf("Retry-After date: got %v", apiErr.RetryAfter)
	}
}

func TestNetworkErrorNamesEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, err = newClient(t, "http://"+addr, nil).Status(t.Context())
	if err == nil || !strings.Contains(err.Error(), "http://"+addr+"/v1/status") {
		t.Fatalf("got %v, want the endpoint in the message", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("cause not wrapped: %v", err)
	}
}

func TestEndpointWithPathPrefix(t *testing.T) {
	var path atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path.Store(r.URL.Path)
		_, _ = w.Write([]byte(`{"version":"x","auth":{"methods":[]}}`))
	}))
	t.Cleanup(srv.Close)
	if _, err := newClient(t, srv.URL+"/kobe/", nil).Status(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := path.Load(); got != "/kobe/v1/status" {
		t.Errorf("path %v", got)
	}
}

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "https://kobe.example.com", want: "https://kobe.example.com"},
		{in: "https://kobe.example.com/", want: "https://kobe.example.com"},
		{in: " http://127.0.0.1:8080/api/ ", want: "http://127.0.0.1:8080/api"},
		{in: "", err: "empty"},
		{in: "kobe.example.com", err: "https://"},
		{in: "ftp://kobe.example.com", err: "https://"},
		{in: "https://", err: "no host"},
		{in: "https://kobe.example.com/?x=1", err: "query"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			u, err := apiclient.ParseEndpoint(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want error with %q", err, tt.err)
				}
				return
			}
			if err != nil || u.String() != tt.want {
				t.Fatalf("got %v, %v; want %s", u, err, tt.want)
			}
		})
	}
}

func TestWaitBound(t *testing.T) {
	t.Run("pending then bound", func(t *testing.T) {
		srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(3))
		c := newClient(t, srv.URL, apiclient.BearerToken(apiclienttest.Token))
		l, err := c.CreateLease(t.Context(), wire.CreateLeaseRequest{Pool: "ci-small", TTL: "30m"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Phase != wire.PhasePending || l.QueuePosition != 1 || l.Kubeconfig != "" {
			t.Fatalf("created: %+v", l)
		}
		var progress []string
		bound, err := c.WaitBound(t.Context(), l.ID, func(l *wire.Lease) {
			progress = append(progress, l.Phase)
		})
		if err != nil {
			t.Fatal(err)
		}
		if bound.Phase != wire.PhaseBound || bound.Kubeconfig == "" {
			t.Fatalf("bound: %+v", bound)
		}
		if strings.Join(progress, ",") != "Pending,Bound" { // the position stays 1: no call until the phase changes
			t.Errorf("progress calls: %v", progress)
		}
	})
	t.Run("ended while pending", func(t *testing.T) {
		srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(1), apiclienttest.WithEndWhilePending(wire.PhaseExpired))
		c := newClient(t, srv.URL, apiclient.BearerToken(apiclienttest.Token))
		l, err := c.CreateLease(t.Context(), wire.CreateLeaseRequest{Pool: "ci-small", TTL: "30m"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.WaitBound(t.Context(), l.ID, nil)
		var ended *apiclient.LeaseEndedError
		if !errors.As(err, &ended) || ended.Lease.Phase != wire.PhaseExpired {
			t.Fatalf("got %v, want LeaseEndedError", err)
		}
		if !strings.Contains(err.Error(), "queue timeout") {
			t.Errorf("reason missing: %v", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(1<<20))
		c := newClient(t, srv.URL, apiclient.BearerToken(apiclienttest.Token))
		l, err := c.CreateLease(t.Context(), wire.CreateLeaseRequest{Pool: "ci-small", TTL: "30m"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err = c.WaitBound(ctx, l.ID, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
	})
	t.Run("transient errors retried, 404 not", func(t *testing.T) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch n := calls.Add(1); {
			case r.URL.Path == "/v1/leases/gone":
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"error":"lease not found"}`))
			case n <= 2:
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"error":"pool cannot serve now"}`))
			default:
				_, _ = w.Write([]byte(`{"id":"l1","phase":"Bound","kubeconfig":"k"}`))
			}
		}))
		t.Cleanup(srv.Close)
		c := newClient(t, srv.URL, nil)
		l, err := c.WaitBound(t.Context(), "l1", nil)
		if err != nil || l.Kubeconfig != "k" {
			t.Fatalf("got %+v, %v", l, err)
		}
		before := calls.Load()
		if _, err := c.WaitBound(t.Context(), "gone", nil); !apiclient.IsNotFound(err) {
			t.Fatalf("got %v, want 404", err)
		}
		if calls.Load() != before+1 {
			t.Errorf("404 was retried")
		}
	})
}

func TestBearerTokenFileIsReadPerRequest(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`[]`))
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "token")
	c := newClient(t, srv.URL, apiclient.BearerTokenFile(file))
	for _, tok := range []string{"first\n", "second"} {
		if err := os.WriteFile(file, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ListLeases(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(seen, ",") != "Bearer first,Bearer second" {
		t.Fatalf("headers %v", seen)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListLeases(t.Context()); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Fatalf("missing token file: got %v", err)
	}
}

func TestTLSOptions(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"version":"x","auth":{"methods":[]}}`))
	}))
	t.Cleanup(srv.Close)
	ctx := t.Context()

	if _, err := newClient(t, srv.URL, nil).Status(ctx); err == nil {
		t.Fatal("untrusted certificate accepted")
	}
	if _, err := newClient(t, srv.URL, nil, apiclient.WithInsecureSkipTLSVerify(true)).Status(ctx); err != nil {
		t.Fatalf("insecure: %v", err)
	}

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	cert := srv.TLS.Certificates[0].Certificate[0]
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, srv.URL, nil, apiclient.WithCAFile(caFile)).Status(ctx); err != nil {
		t.Fatalf("CA file: %v", err)
	}

	empty := filepath.Join(t.TempDir(), "empty.crt")
	if err := os.WriteFile(empty, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := apiclient.New(srv.URL, nil, apiclient.WithCAFile(empty)); err == nil || !strings.Contains(err.Error(), "no PEM") {
		t.Fatalf("bad CA file: got %v", err)
	}
}

// TestWaitBoundAsksTheServerToWait: each poll asks the server to hold its
// answer while the lease is Pending; after an answer the server held for
// the whole wait the next poll follows at once, after one it did not hold
// (an older server, or one with too many waiting) the backoff applies.
func TestWaitBoundAsksTheServerToWait(t *testing.T) {
	const hold = 150 * time.Millisecond
	for _, tc := range []struct {
		name string
		// serverWaits: the server holds each Pending answer for the wait.
		serverWaits bool
		wantPolls   int32
		wantBound   bool
	}{
		{"a server that waits", true, 3, true},
		{"a server that answers at once", false, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var polls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := polls.Add(1)
				if got := r.URL.Query().Get(wire.LeaseWaitParam); got != hold.String() {
					t.Errorf("poll %d asked to wait %q, want %q", n, got, hold)
				}
				l := wire.Lease{ID: "lease-000000000001", Pool: "ci-small", Phase: wire.PhasePending, QueuePosition: 1}
				if n == 3 {
					l.Phase, l.QueuePosition, l.Kubeconfig = wire.PhaseBound, 0, apiclienttest.Kubeconfig(l.ID)
				} else if tc.serverWaits {
					time.Sleep(hold)
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(l)
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, srv.URL, apiclient.BearerToken("t"))
			apiclient.SetLeaseWait(c, hold)
			// A backoff longer than the test: only a poll that follows at
			// once can come.
			apiclient.SetPollInterval(c, time.Hour)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			bound, err := c.WaitBound(ctx, "lease-000000000001", nil)
			if tc.wantBound && (err != nil || bound.Phase != wire.PhaseBound) {
				t.Fatalf("WaitBound = %+v, %v; want Bound", bound, err)
			}
			if !tc.wantBound && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitBound = %+v, %v; want the context's deadline, waiting for the backoff", bound, err)
			}
			if polls.Load() != tc.wantPolls {
				t.Errorf("%d polls, want %d", polls.Load(), tc.wantPolls)
			}
		})
	}
}
