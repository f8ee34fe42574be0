package auth

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestAllowsPool(t *testing.T) {
	cases := []struct {
		pools []string
		pool  string
		want  bool
	}{
		{[]string{"ci-small"}, "ci-small", true},
		{[]string{"ci-small"}, "ci-small-2", false},
		{[]string{"ci-small"}, "ci", false},
		{[]string{"ci-*"}, "ci-small", true},
		{[]string{"ci-*"}, "ci-", true},
		{[]string{"ci-*"}, "ci", false},
		{[]string{"ci-*"}, "prod-ci-small", false},
		{[]string{"ci*"}, "ci", true},
		{[]string{"*"}, "anything", true},
		{[]string{"*"}, "", false},
		{[]string{"a", "b-*"}, "b-1", true},
		{[]string{"a", "b-*"}, "c", false},
		{nil, "a", false},
	}
	for _, tc := range cases {
		p := &Principal{Rule: kobev1.AccessRule{Pools: tc.pools}}
		if got := p.AllowsPool(tc.pool); got != tc.want {
			t.Errorf("pools %v AllowsPool(%q) = %v, want %v", tc.pools, tc.pool, got, tc.want)
		}
	}
	var nilP *Principal
	if nilP.AllowsPool("a") {
		t.Error("nil principal allows a pool")
	}
}

func TestClampTTL(t *testing.T) {
	hour := &metav1.Duration{Duration: time.Hour}
	cases := []struct {
		max        *metav1.Duration
		defaultMax time.Duration
		req        time.Duration
		want       time.Duration
		clamped    bool
	}{
		{nil, 0, 5 * time.Hour, 5 * time.Hour, false},
		{hour, 0, 30 * time.Minute, 30 * time.Minute, false},
		{hour, 0, time.Hour, time.Hour, false},
		{hour, 0, time.Hour + time.Second, time.Hour, true},
		{hour, 0, 48 * time.Hour, time.Hour, true},
		// No maxTtl on the rule: the default maximum (24h) still bounds
		// the caller, exactly as a rule's maxTtl would.
		{nil, 0, 24 * time.Hour, 24 * time.Hour, false},
		{nil, 0, 24*time.Hour + time.Nanosecond, 24 * time.Hour, true},
		{nil, 0, 1000 * time.Hour, DefaultMaxTTL, true},
		{nil, 2 * time.Hour, 3 * time.Hour, 2 * time.Hour, true},
		// A rule's maxTtl wins over the default, also when it is longer.
		{&metav1.Duration{Duration: 48 * time.Hour}, 2 * time.Hour, 40 * time.Hour, 40 * time.Hour, false},
		{hour, 2 * time.Hour, 90 * time.Minute, time.Hour, true},
	}
	for _, tc := range cases {
		p := &Principal{Rule: kobev1.AccessRule{MaxTTL: tc.max}, DefaultMaxTTL: tc.defaultMax}
		got, clamped := p.ClampTTL(tc.req)
		if got != tc.want || clamped != tc.clamped {
			t.Errorf("max %v default %s ClampTTL(%s) = %s, %v; want %s, %v", tc.max, tc.defaultMax, tc.req, got, clamped, tc.want, tc.clamped)
		}
		if got > p.MaxTTL() {
			t.Errorf("ClampTTL(%s) = %s beyond MaxTTL %s", tc.req, got, p.MaxTTL())
		}
	}
	var nilP *Principal
	if got, clamped := nilP.ClampTTL(100 * time.Hour); got != DefaultMaxTTL || !clamped {
		t.Errorf("nil principal ClampTTL = %s, %v; want the default maximum", got, clamped)
	}
}

func TestLimits(t *testing.T) {
	p := &Principal{}
	if got := p.MaxExtensions(); got != 2 {
		t.Errorf("default MaxExtensions = %d, want 2", got)
	}
	if _, limited := p.MaxConcurrentLeases(); limited {
		t.Error("no maxConcurrentLeases should be unlimited")
	}
	p.Rule.MaxExtensions = ptr.To[int32](0)
	p.Rule.MaxConcurrentLeases = ptr.To[int32](3)
	if got := p.MaxExtensions(); got != 0 {
		t.Errorf("MaxExtensions = %d, want 0", got)
	}
	if n, limited := p.MaxConcurrentLeases(); !limited || n != 3 {
		t.Errorf("MaxConcurrentLeases = %d, %v; want 3, true", n, limited)
	}
}

// TestMaxConcurrentLeases: the rule's maxConcurrentLeases wins (larger or
// smaller than the server's default); without one the default caps, and a
// default of 0 (or below) means no cap.
func TestMaxConcurrentLeases(t *testing.T) {
	cases := []struct {
		name        string
		rule        *int32
		def         int32
		want        int32
		limited     bool
		ruleCapsAll bool
	}{
		{name: "neither", limited: false},
		{name: "default only", def: 10, want: 10, limited: true},
		{name: "rule below the default", rule: ptr.To[int32](3), def: 10, want: 3, limited: true, ruleCapsAll: true},
		{name: "rule above the default", rule: ptr.To[int32](50), def: 10, want: 50, limited: true, ruleCapsAll: true},
		{name: "rule, no default", rule: ptr.To[int32](1), want: 1, limited: true, ruleCapsAll: true},
		{name: "default 0 is no cap", def: 0, limited: false},
		{name: "negative default is no cap", def: -1, limited: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &Principal{Rule: kobev1.AccessRule{MaxConcurrentLeases: tc.rule}, DefaultMaxConcurrentLeases: tc.def}
			if n, limited := p.MaxConcurrentLeases(); n != tc.want || limited != tc.limited {
				t.Errorf("MaxConcurrentLeases = %d, %v; want %d, %v", n, limited, tc.want, tc.limited)
			}
			if got := p.RuleCapsLeases(); got != tc.ruleCapsAll {
				t.Errorf("RuleCapsLeases = %v, want %v", got, tc.ruleCapsAll)
			}
		})
	}
	var none *Principal
	if _, limited := none.MaxConcurrentLeases(); limited || none.RuleCapsLeases() {
		t.Error("a nil principal has limits")
	}
}

func TestAuditFields(t *testing.T) {
	p := &Principal{Identity: "a/b:main", Policy: "github-ci", Method: MethodOIDC}
	got := AuditFields(p)
	want := []any{"identity", "a/b:main", "policy", "github-ci", "method", "oidc"}
	if len(got) != len(want) {
		t.Fatalf("AuditFields = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("AuditFields = %v, want %v", got, want)
		}
	}
	if len(AuditFields(nil))%2 != 0 {
		t.Fatal("AuditFields(nil) not key/value pairs")
	}
}
