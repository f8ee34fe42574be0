package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestClientAddr: X-Forwarded-For names the caller only when the
// connection comes from a trusted proxy, and then only its right-most
// address that is not itself a trusted proxy: whatever a caller writes to
// the left of what the proxies appended is never read.
func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/24"),    // the ingress controller's pods
		netip.MustParsePrefix("192.168.1.1/32"), // a load balancer in front of it
		netip.MustParsePrefix("fd00::/64"),
	}
	many := strings.Repeat("10.0.0.9, ", maxForwardedHops) + "10.0.0.8"
	for _, tc := range []struct {
		name   string
		peer   string
		xff    []string
		want   string
		reason string
	}{
		{"no proxy configured", "203.0.113.7:5000", nil, "203.0.113.7", ""},
		{"untrusted peer's header is ignored", "203.0.113.7:5000", []string{"198.51.100.1"}, "203.0.113.7", "anyone can send the header"},
		{"untrusted peer's chain is ignored", "203.0.113.7:5000", []string{"198.51.100.1, 10.0.0.5"}, "203.0.113.7", "naming a trusted proxy gives nothing"},
		{"trusted peer, one hop", "10.0.0.5:5000", []string{"198.51.100.1"}, "198.51.100.1", ""},
		{"trusted peer without the header", "10.0.0.5:5000", nil, "10.0.0.5", "the proxy itself"},
		{"trusted peer, empty header", "10.0.0.5:5000", []string{""}, "10.0.0.5", ""},
		{"spoofed left-most entry", "10.0.0.5:5000", []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1", "the caller's own entry is never read"},
		{"spoofed entry naming a trusted proxy", "10.0.0.5:5000", []string{"10.0.0.7, 198.51.100.1"}, "198.51.100.1", ""},
		{"chain of trusted proxies", "10.0.0.5:5000", []string{"198.51.100.1, 192.168.1.1"}, "198.51.100.1", "the load balancer appended the caller, the ingress the load balancer"},
		{"chain over several header lines", "10.0.0.5:5000", []string{"6.6.6.6, 198.51.100.1", "192.168.1.1"}, "198.51.100.1", "lines are one list, in order"},
		{"only trusted proxies", "10.0.0.5:5000", []string{"10.0.0.6, 192.168.1.1"}, "10.0.0.6", "the left-most proxy read"},
		{"ports and spaces", "10.0.0.5:5000", []string{" 198.51.100.1:4711 ,192.168.1.1:80 "}, "198.51.100.1", ""},
		{"IPv6 caller", "10.0.0.5:5000", []string{"2001:db8::1"}, "2001:db8::1", ""},
		{"bracketed IPv6 with a port", "10.0.0.5:5000", []string{"[2001:db8::1]:443"}, "2001:db8::1", ""},
		{"bracketed IPv6", "10.0.0.5:5000", []string{"[2001:db8::1]"}, "2001:db8::1", ""},
		{"IPv6 zone dropped", "10.0.0.5:5000", []string{"fe80::1%eth0"}, "fe80::1", ""},
		{"IPv6 trusted peer", "[fd00::5]:5000", []string{"2001:db8::1"}, "2001:db8::1", ""},
		{"IPv4-mapped peer and entry", "[::ffff:10.0.0.5]:5000", []string{"::ffff:198.51.100.1"}, "198.51.100.1", "mapped addresses match IPv4 ranges"},
		{"untrusted IPv6 peer", "[2001:db8::9]:5000", []string{"198.51.100.1"}, "2001:db8::9", ""},
		{"malformed entry", "10.0.0.5:5000", []string{"not-an-address"}, "10.0.0.5", "counted as the proxy's"},
		{"malformed entry left of the caller", "10.0.0.5:5000", []string{"garbage, 198.51.100.1"}, "198.51.100.1", "never read"},
		{"malformed entry behind a trusted hop", "10.0.0.5:5000", []string{"198.51.100.1, junk, 192.168.1.1"}, "192.168.1.1", "the last proxy read"},
		{"empty entry", "10.0.0.5:5000", []string{"198.51.100.1,"}, "10.0.0.5", ""},
		{"unknown", "10.0.0.5:5000", []string{"unknown"}, "10.0.0.5", ""},
		{"unspecified address", "10.0.0.5:5000", []string{"0.0.0.0"}, "10.0.0.5", ""},
		{"bracketed IPv4", "10.0.0.5:5000", []string{"[198.51.100.1]"}, "10.0.0.5", ""},
		{"too many trusted hops", "10.0.0.5:5000", []string{"198.51.100.1, " + many}, "10.0.0.9", "the walk stops after maxForwardedHops"},
		{"a long header of garbage", "10.0.0.5:5000", []string{strings.Repeat("x,", 10000) + "198.51.100.1"}, "198.51.100.1", "only the right-most entries are read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var trust []netip.Prefix
			if tc.name != "no proxy configured" {
				trust = trusted
			}
			got := clientAddr(tc.peer, tc.xff, trust)
			if got.String() != tc.want {
				t.Errorf("clientAddr(%s, %q) = %s, want %s (%s)", tc.peer, tc.xff, got, tc.want, tc.reason)
			}
		})
	}
	if got := clientAddr("@", []string{"198.51.100.1"}, trusted); got.IsValid() {
		t.Errorf("a peer that is no address gave %s, want none", got)
	}
}

// FuzzClientAddr: whatever the header holds, a peer outside the trusted
// ranges is always its own caller, and a trusted one's caller is itself or
// an address its header names.
func FuzzClientAddr(f *testing.F) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, seed := range []string{"", "198.51.100.1", "1.1.1.1, 198.51.100.1, 10.0.0.1", "[2001:db8::1]:80", "x,,y", "::ffff:10.0.0.1", "fe80::1%zone"} {
		f.Add("10.0.0.5:5000", seed)
		f.Add("203.0.113.7:5000", seed)
	}
	f.Fuzz(func(t *testing.T, peer, xff string) {
		got := clientAddr(peer, []string{xff}, trusted)
		ap, err := netip.ParseAddrPort(peer)
		if err != nil {
			if got.IsValid() {
				t.Fatalf("peer %q is no address, got %s", peer, got)
			}
			return
		}
		p := ap.Addr().Unmap().WithZone("")
		if !isTrusted(p, trusted) {
			if got != p {
				t.Fatalf("untrusted peer %s: got %s", p, got)
			}
			return
		}
		if got == p {
			return
		}
		named := false
		for entry := range strings.SplitSeq(xff, ",") {
			if a, ok := parseForwarded(strings.TrimSpace(entry)); ok && a == got {
				named = true
			}
		}
		if !named {
			t.Fatalf("peer %s, header %q: got %s, which the header does not name", p, xff, got)
		}
	})
}

// refusingReviewer refuses every token, counting reviews.
type refusingReviewer struct{ calls atomic.Int32 }

func (r *refusingReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	r.calls.Add(1)
	return tr.DeepCopy(), nil
}

// TestTrustedProxySeparatesCallers: behind a trusted proxy, each caller
// that X-Forwarded-For names has its own budget of refused ServiceAccount
// tokens, so one caller's flood of forged tokens does not get the others
// refused; a caller cannot leave its budget by writing the header, neither
// through the proxy (a spoofed left-most entry) nor directly (the header of
// an untrusted peer is ignored), nor by moving within its IPv6 /64. Through
// the server's real handler and authenticator (a serviceAccount policy).
func TestTrustedProxySeparatesCallers(t *testing.T) {
	const ns = "kobe-system"
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		&kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: ns}, Spec: kobev1.AccessPolicySpec{
			Auth:  kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{"kobe"}}},
			Rules: []kobev1.AccessRule{{MatchAny: true, Pools: []string{"*"}}},
		}},
	).Build()
	reviewer := &refusingReviewer{}
	s := newIdleServer(t, Options{
		Namespace: ns, Log: logr.Discard(),
		Auth:           auth.NewAuthenticator(auth.Options{Reader: reader, Namespace: ns, TokenReviewer: reviewer}),
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
	})
	tokens := 0
	// send makes one request with a token nobody has sent yet (a cached
	// refusal costs no budget), and returns its status and whether the
	// token was reviewed.
	send := func(peer string, xff ...string) (int, bool) {
		tokens++
		r := httptest.NewRequest(http.MethodGet, "/v1/whoami", nil)
		r.RemoteAddr = peer
		for _, v := range xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		// JWT-shaped, naming an issuer: with none configured or
		// discovered, every such token may be the host's and is reviewed.
		r.Header.Set("Authorization", fmt.Sprintf("Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMifQ.forged%d", tokens))
		before := reviewer.calls.Load()
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		return w.Code, reviewer.calls.Load() > before
	}
	spend := func(who string, peer string, xff ...string) {
		t.Helper()
		for i := range auth.DefaultRefusalBurst {
			if code, reviewed := send(peer, xff...); code != http.StatusUnauthorized || !reviewed {
				t.Fatalf("%s: forged token %d answered %d (reviewed %v), want a review and 401", who, i, code, reviewed)
			}
		}
	}
	refused := func(who string, peer string, xff ...string) {
		t.Helper()
		if code, reviewed := send(peer, xff...); code != http.StatusTooManyRequests || reviewed {
			t.Fatalf("%s: answered %d (reviewed %v), want 429 without a review: the caller left its budget", who, code, reviewed)
		}
	}
	const proxy = "10.0.0.5:40000"

	spend("caller A behind the proxy", proxy, "198.51.100.1")
	refused("caller A, budget spent", proxy, "198.51.100.1")
	if code, reviewed := send(proxy, "198.51.100.2"); code != http.StatusUnauthorized || !reviewed {
		t.Fatalf("caller B behind the same proxy: %d (reviewed %v), want its own budget: a review and 401", code, reviewed)
	}
	refused("caller A spoofing a left-most entry", proxy, "198.51.100.99, 198.51.100.1")
	refused("caller A spoofing a header line of its own", proxy, "198.51.100.99", "198.51.100.1")

	const direct = "203.0.113.7:40000"
	spend("untrusted peer sending the header", direct, "198.51.100.50")
	refused("untrusted peer naming another address", direct, "198.51.100.51")
	refused("untrusted peer without the header", direct)
	refused("the same address behind the proxy", proxy, "203.0.113.7")

	spend("IPv6 peer", "[2001:db8:1:2::1]:40000")
	refused("IPv6 peer, another address of its /64", "[2001:db8:1:2::ffff]:40000")
	if code, reviewed := send("[2001:db8:1:3::1]:40000"); code != http.StatusUnauthorized || !reviewed {
		t.Fatalf("IPv6 peer of another /64: %d (reviewed %v), want its own budget", code, reviewed)
	}
	spend("IPv6 caller behind the proxy", proxy, "2001:db8:2::1")
	refused("IPv6 caller behind the proxy, another address of its /64", proxy, "2001:db8:2::2")
}
