package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The examples of shared/notes/http-api.md, verbatim: the wire types must
// decode them and encode back the same field names.
const (
	contractLease = `{
  "id": "lease-a1b2c3d4e5f6",
  "phase": "Bound",
  "pool": "ci-small",
  "profile": "ci-small",
  "cluster_name": "pool-ci-small-0",
  "queue_position": 0,
  "effective_ttl": "30m",
  "expires_at": "2026-04-09T15:00:00Z",
  "extensions": 0,
  "max_extensions": 2,
  "kubeconfig": "apiVersion: v1\n..."
}`
	contractPool = `{"name": "ci-small", "phase": "Healthy", "ready": 3, "leased": 1, "creating": 0, "recycling": 0,
 "unhealthy": 0, "quarantined": 0, "queueDepth": 0,
 "policy": {"mode": "fixed", "ttl": "2h", "warmTarget": 3}}`
)

func TestLeaseMatchesContract(t *testing.T) {
	var l Lease
	if err := json.Unmarshal([]byte(contractLease), &l); err != nil {
		t.Fatal(err)
	}
	expires := time.Date(2026, 4, 9, 15, 0, 0, 0, time.UTC)
	want := Lease{
		ID: "lease-a1b2c3d4e5f6", Phase: PhaseBound, Pool: "ci-small", Profile: "ci-small",
		ClusterName: "pool-ci-small-0", EffectiveTTL: "30m", ExpiresAt: &expires,
		MaxExtensions: 2, Kubeconfig: "apiVersion: v1\n...",
	}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("decoded %+v, want %+v", l, want)
	}
	assertSameJSON(t, l, contractLease)
}

func TestPoolMatchesContract(t *testing.T) {
	var p Pool
	if err := json.Unmarshal([]byte(contractPool), &p); err != nil {
		t.Fatal(err)
	}
	if p.Name != "ci-small" || p.Ready != 3 || p.Leased != 1 || p.Policy.WarmTarget != 3 || p.Policy.TTL != "2h" {
		t.Fatalf("decoded %+v", p)
	}
	assertSameJSON(t, p, contractPool)

	auto := Pool{Name: "burst", QueueDepth: 4, Policy: PoolPolicy{Mode: "autoscaled", MaxClusters: 10, ScaleDownAfter: "10m", QueueTimeout: "5m"}}
	got := encodeToMap(t, auto)
	for _, key := range []string{"queueDepth"} {
		if _, ok := got[key]; !ok {
			t.Errorf("pool JSON lacks %q: %v", key, got)
		}
	}
	policy := got["policy"].(map[string]any)
	for _, key := range []string{"mode", "maxClusters", "scaleDownAfter", "queueTimeout", "warmTarget"} {
		if _, ok := policy[key]; !ok {
			t.Errorf("policy JSON lacks %q: %v", key, policy)
		}
	}
}

func TestWireFieldNames(t *testing.T) {
	expires := time.Date(2026, 4, 9, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"lease with alias", Lease{ID: "lease-1", Alias: "build-42", Phase: PhaseBound, Pool: "p", Profile: "p"},
			`{"id":"lease-1","alias":"build-42","phase":"Bound","pool":"p","profile":"p","cluster_name":"","queue_position":0,"effective_ttl":"","expires_at":null,"extensions":0,"max_extensions":0}`},
		{"pending lease", Lease{ID: "lease-1", Phase: PhasePending, Pool: "p", Profile: "p", QueuePosition: 2, EffectiveTTL: "30m", MaxExtensions: 2},
			`{"id":"lease-1","phase":"Pending","pool":"p","profile":"p","cluster_name":"","queue_position":2,"effective_ttl":"30m","expires_at":null,"extensions":0,"max_extensions":2}`},
		{"create request", CreateLeaseRequest{Pool: "ci-small", TTL: "30m"}, `{"pool":"ci-small","ttl":"30m"}`},
		{"extend request", ExtendLeaseRequest{ExtendTTL: "30m"}, `{"extend_ttl":"30m"}`},
		{"extend response", ExtendLeaseResponse{ExpiresAt: &expires, Extensions: 1, MaxExtensions: 2},
			`{"expires_at":"2026-04-09T15:00:00Z","extensions":1,"max_extensions":2}`},
		{"error", ErrorBody{Message: "extension limit reached", Detail: "lease a new cluster", Reason: ReasonExtensionLimitReached},
			`{"error":"extension limit reached","detail":"lease a new cluster","reason":"ExtensionLimitReached"}`},
		{"error without reason", ErrorBody{Message: "bad request"}, `{"error":"bad request"}`},
		{"create request with alias", CreateLeaseRequest{Pool: "ci-small", Alias: "build-42"}, `{"pool":"ci-small","alias":"build-42"}`},
		{"status", Status{Version: "v1", Auth: StatusAuth{Methods: []string{"oidc", "ssh"}}},
			`{"version":"v1","auth":{"methods":["oidc","ssh"]}}`},
		{"whoami", WhoAmI{Identity: "my-org/my-repo:main", Policy: "github-ci", Method: "oidc", Pools: []string{"ci-*"}, MaxTTL: "1h", MaxConcurrentLeases: 3, MaxExtensions: 2},
			`{"identity":"my-org/my-repo:main","policy":"github-ci","method":"oidc","pools":["ci-*"],"max_ttl":"1h","max_concurrent_leases":3,"max_extensions":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestCreateLeaseRequestPoolName(t *testing.T) {
	if got := (CreateLeaseRequest{Profile: "ci-small"}).PoolName(); got != "ci-small" {
		t.Errorf("profile synonym: got %q", got)
	}
	if got := (CreateLeaseRequest{Pool: "a", Profile: "b"}).PoolName(); got != "a" {
		t.Errorf("pool wins: got %q", got)
	}
}

func TestWireTime(t *testing.T) {
	if WireTime(time.Time{}) != nil {
		t.Error("zero time must give nil")
	}
	local := time.Date(2026, 4, 9, 17, 0, 0, 123456789, time.FixedZone("CEST", 2*3600))
	b, err := json.Marshal(WireTime(local))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `"2026-04-09T15:00:00Z"` {
		t.Errorf("got %s", b)
	}
}

func TestFormatTTL(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Minute:               "30m",
		2 * time.Hour:                  "2h",
		90 * time.Minute:               "1h30m",
		45 * time.Second:               "45s",
		time.Hour + 30*time.Second:     "1h0m30s",
		10*time.Minute + 5*time.Second: "10m5s",
		1500 * time.Millisecond:        "1.5s",
	} {
		if got := FormatTTL(d); got != want {
			t.Errorf("FormatTTL(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestPhaseEnded(t *testing.T) {
	for phase, want := range map[string]bool{
		PhasePending: false, PhaseBound: false, PhaseReleased: true,
		PhaseExpired: true, PhaseRecycling: true, PhaseQuarantined: true,
	} {
		if PhaseEnded(phase) != want {
			t.Errorf("PhaseEnded(%s) = %v", phase, !want)
		}
	}
}

func encodeToMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func assertSameJSON(t *testing.T, v any, want string) {
	t.Helper()
	got := encodeToMap(t, v)
	wantMap := map[string]any{}
	if err := json.Unmarshal([]byte(want), &wantMap); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantMap) {
		t.Errorf("encoded %v\nwant     %v", got, wantMap)
	}
}

func TestParseLeaseWait(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "15s": 15 * time.Second, "1ms": time.Millisecond, "30s": 30 * time.Second, "250ms": 250 * time.Millisecond} {
		if got, err := ParseLeaseWait(in); err != nil || got != want {
			t.Errorf("ParseLeaseWait(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0s", "-1s", "31s", "1h", "abc", "15", "1us"} {
		if got, err := ParseLeaseWait(in); err == nil || !strings.Contains(err.Error(), "want a duration from 1ms to 30s") {
			t.Errorf("ParseLeaseWait(%q) = %v, %v; want the refusal", in, got, err)
		}
	}
}
