package auth

import (
	"strings"
	"testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func githubClaims(t testing.TB) Claims {
	t.Helper()
	c, err := decodeClaims([]byte(`{
		"sub": "repo:my-org/my-repo:ref:refs/heads/main",
		"repository": "my-org/my-repo",
		"ref": "refs/heads/main",
		"repository_id": 123456789012,
		"run_attempt": 1.5,
		"fork": false,
		"org": {"team": "platform", "depth": {"x": "deep"}},
		"https://example.com/groups": ["admins", "ci"],
		"aud": ["kobe", "other"],
		"nothing": null
	}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRuleMatching(t *testing.T) {
	claims := githubClaims(t)
	rule := func(claim, value string, pools ...string) kobev1.AccessRule {
		r := kobev1.AccessRule{Pools: pools}
		if claim != "" {
			r.Match = &kobev1.ClaimMatch{Claim: claim, Value: value}
		}
		return r
	}
	cases := []struct {
		name  string
		rules []kobev1.AccessRule
		want  int
	}{
		{"first match wins", []kobev1.AccessRule{rule("repository", "my-org/my-repo", "a"), rule("", "", "b")}, 0},
		{"order matters", []kobev1.AccessRule{rule("", "", "b"), rule("repository", "my-org/my-repo", "a")}, 0},
		{"skips non-matching", []kobev1.AccessRule{rule("repository", "other/repo", "a"), rule("ref", "refs/heads/main", "b")}, 1},
		{"nested claim", []kobev1.AccessRule{rule("org.team", "platform", "a")}, 0},
		{"number by JSON form", []kobev1.AccessRule{rule("repository_id", "123456789012", "a")}, 0},
		{"bool by JSON form", []kobev1.AccessRule{rule("fork", "false", "a")}, 0},
		{"list element", []kobev1.AccessRule{rule("aud", "other", "a")}, 0},
		{"url-named claim", []kobev1.AccessRule{rule("https://example.com/groups", "ci", "a")}, 0},
		{"missing claim", []kobev1.AccessRule{rule("workflow", "", "a")}, -1},
		{"null claim", []kobev1.AccessRule{rule("nothing", "null", "a")}, -1},
		{"case matters", []kobev1.AccessRule{rule("repository", "My-Org/My-Repo", "a")}, -1},
		{"prefix is not equal", []kobev1.AccessRule{rule("repository", "my-org", "a")}, -1},
		{"no rules", nil, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstRule(MethodToken, tc.rules, claims); got != tc.want {
				t.Fatalf("firstRule = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestRuleWithoutMatchAdmitsNoToken: in an oidc or serviceAccount policy a
// rule without match would hold for every token the issuer signs; it is
// skipped unless it says matchAny: true. Token and ssh policies name their
// callers, so a rule without match holds there.
func TestRuleWithoutMatchAdmitsNoToken(t *testing.T) {
	claims := githubClaims(t)
	open := kobev1.AccessRule{Pools: []string{"*"}}
	anyToken := kobev1.AccessRule{Pools: []string{"*"}, MatchAny: true}
	scoped := kobev1.AccessRule{Pools: []string{"ci-*"}, Match: &kobev1.ClaimMatch{Claim: "repository", Value: "my-org/my-repo"}}
	cases := []struct {
		method string
		rules  []kobev1.AccessRule
		want   int
	}{
		{MethodOIDC, []kobev1.AccessRule{open}, -1},
		{MethodServiceAccount, []kobev1.AccessRule{open}, -1},
		{MethodOIDC, []kobev1.AccessRule{open, scoped}, 1},
		{MethodServiceAccount, []kobev1.AccessRule{open, scoped}, 1},
		{MethodOIDC, []kobev1.AccessRule{anyToken}, 0},
		{MethodServiceAccount, []kobev1.AccessRule{anyToken, scoped}, 0},
		{MethodToken, []kobev1.AccessRule{open}, 0},
		{MethodSSH, []kobev1.AccessRule{open}, 0},
	}
	for _, tc := range cases {
		if got := firstRule(tc.method, tc.rules, claims); got != tc.want {
			t.Errorf("%s: firstRule = %d, want %d", tc.method, got, tc.want)
		}
	}
	pol := &kobev1.AccessPolicy{Spec: kobev1.AccessPolicySpec{
		Auth:  kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: "https://issuer", Audience: []string{"kobe"}}},
		Rules: []kobev1.AccessRule{scoped, open, anyToken, open},
	}}
	if got := RulesMatchingEveryToken(pol); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("RulesMatchingEveryToken = %v, want [1 3]", got)
	}
	pol.Spec.Auth = kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "s"}}}
	if got := RulesMatchingEveryToken(pol); len(got) != 0 {
		t.Errorf("token policy: RulesMatchingEveryToken = %v, want none", got)
	}
	both := scoped
	both.MatchAny = true
	pol.Spec.Rules = []kobev1.AccessRule{both}
	if err := ValidatePolicy(pol); err == nil || !strings.Contains(err.Error(), "rules[0] sets both match and matchAny") {
		t.Errorf("ValidatePolicy with match and matchAny = %v", err)
	}
}

// FuzzRenderIdentity renders arbitrary templates over arbitrary claims: no
// panic, only the documented errors, and a result within the limits.
