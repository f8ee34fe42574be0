package auth

import (
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
			if got := firstRule(tc.rules, claims); got != tc.want {
				t.Fatalf("firstRule = %d, want %d", got, tc.want)
			}
		})
	}
}

// FuzzRenderIdentity renders arbitrary templates over arbitrary claims: no
// panic, only the documented errors, and a result within the limits.
