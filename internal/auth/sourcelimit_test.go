package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestSourceLimiter(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := newSourceLimiter(1, 3)
	for i := range 3 {
		if !l.mayReview("10.0.0.1", now) {
			t.Fatalf("review %d of the burst refused", i)
		}
		l.refused("10.0.0.1", now)
	}
	if l.mayReview("10.0.0.1", now) {
		t.Fatal("a source that spent its burst on refused tokens may still review")
	}
	if !l.mayReview("10.0.0.2", now) {
		t.Fatal("another source was refused because of the first one's flood")
	}
	if !l.mayReview("10.0.0.1", now.Add(time.Second)) {
		t.Fatal("the budget did not refill after a second")
	}
	// Memory stays bounded whatever the number of sources.
	for i := range 3 * reviewSources {
		l.refused(fmt.Sprint(i), now)
	}
	if n := l.recent.Len(); n > reviewSources {
		t.Fatalf("%d sources remembered, want at most %d", n, reviewSources)
	}
}

// goodTokenReviewer accepts the tokens whose signature starts with "good"
// and refuses the others, counting reviews.
type goodTokenReviewer struct{ calls atomic.Int32 }

func (r *goodTokenReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	r.calls.Add(1)
	out := tr.DeepCopy()
	if strings.HasPrefix(tr.Spec.Token[strings.LastIndex(tr.Spec.Token, ".")+1:], "good") {
		out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authnv1.UserInfo{Username: "system:serviceaccount:ci:runner"}}
	}
	return out, nil
}

// TestOnlyRefusedTokensSpendTheSourceBudget: many callers behind one
// address, each with a fresh valid token, are all served; a source that
// sends refused tokens gets DefaultRefusalBurst reviews, then a 429 without
// a review for any token the cache has not seen, while another source and
// the cached tokens are unaffected; a second later the budget has refilled.
func TestOnlyRefusedTokensSpendTheSourceBudget(t *testing.T) {
	pol := newPolicy("sa", "", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{"kobe"}}},
		kobev1.AccessRule{MatchAny: true, Pools: []string{"*"}})
	reviewer := &goodTokenReviewer{}
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_800_000_000, 0))
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS, TokenReviewer: reviewer, Clock: clk})
	// JWT-shaped, naming an issuer: with no issuer configured or
	// discovered, every such token may be the host's and is reviewed.
	token := func(sig string) string {
		return "Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMifQ." + sig
	}
	from := func(source, header string) error {
		r := httptest.NewRequest(http.MethodGet, "/v1/leases", nil)
		r.RemoteAddr = source + ":40000"
		r.Header.Set("Authorization", header)
		_, err := a.Authenticate(t.Context(), r, nil)
		return err
	}
	const proxy = "10.1.0.1"
	for i := range 3 * DefaultRefusalBurst {
		if err := from(proxy, token(fmt.Sprintf("good%d", i))); err != nil {
			t.Fatalf("fresh valid token %d behind one address: %v", i, err)
		}
	}
	before := reviewer.calls.Load()
	for i := range DefaultRefusalBurst {
		if err := from(proxy, token(fmt.Sprintf("bad%d", i))); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("refused token %d: %v, want invalid credentials", i, err)
		}
	}
	if n := reviewer.calls.Load() - before; n != DefaultRefusalBurst {
		t.Fatalf("%d reviews for %d refused tokens", n, DefaultRefusalBurst)
	}
	before = reviewer.calls.Load()
	for _, tok := range []string{"bad-more", "good-fresh"} {
		if err := from(proxy, token(tok)); !errors.Is(err, ErrBusy) {
			t.Fatalf("uncached token %s once the budget is spent: %v, want ErrBusy", tok, err)
		}
	}
	if n := reviewer.calls.Load() - before; n != 0 {
		t.Fatalf("%d reviews once the budget was spent, want 0", n)
	}
	if err := from(proxy, token("good0")); err != nil {
		t.Fatalf("cached valid token once the budget is spent: %v", err)
	}
	if err := from("10.2.0.1", token("good-other")); err != nil {
		t.Fatalf("another source: %v", err)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if err := from(proxy, token("good-fresh")); err != nil {
		t.Fatalf("a second later: %v", err)
	}
}

// TestSourceOf: the per-source limits charge the address the API server
// named (WithSource) or else the connection's peer; an IPv6 caller by its
// /64, so that it cannot take a fresh budget from each of its addresses.
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		name, peer string
		named      netip.Addr
		want       string
	}{
		{"IPv4 peer", "192.0.2.1:4000", netip.Addr{}, "192.0.2.1"},
		{"IPv6 peer", "[2001:db8:1:2:3::4]:4000", netip.Addr{}, "2001:db8:1:2::/64"},
		{"mapped IPv4 peer", "[::ffff:192.0.2.1]:4000", netip.Addr{}, "192.0.2.1"},
		{"named caller", "10.0.0.5:4000", netip.MustParseAddr("198.51.100.1"), "198.51.100.1"},
		{"named IPv6 caller", "10.0.0.5:4000", netip.MustParseAddr("2001:db8::1"), "2001:db8::/64"},
		{"peer that is no address", "@", netip.Addr{}, "@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/leases", nil)
			r.RemoteAddr = tc.peer
			if tc.named.IsValid() {
				r = r.WithContext(WithSource(r.Context(), tc.named))
			}
			if got := sourceOf(r); got != tc.want {
				t.Errorf("sourceOf = %q, want %q", got, tc.want)
			}
		})
	}
}
