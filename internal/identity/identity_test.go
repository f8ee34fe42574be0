package identity

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func githubClaims(t testing.TB) Claims {
	t.Helper()
	c, err := Decode([]byte(`{
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

func TestRenderIdentity(t *testing.T) {
	claims := githubClaims(t)
	cases := []struct {
		tmpl    string
		want    string
		missing string
		invalid bool
	}{
		{tmpl: "", want: "repo:my-org/my-repo:ref:refs/heads/main"},
		{tmpl: "{repository}:{ref}", want: "my-org/my-repo:refs/heads/main"},
		{tmpl: "{org.team}", want: "platform"},
		{tmpl: "team-{org.depth.x}!", want: "team-deep!"},
		{tmpl: "literal only", want: "literal only"},
		{tmpl: "{repository_id}", want: "123456789012"},
		{tmpl: "{run_attempt}/{fork}", want: "1.5/false"},
		{tmpl: "{https://example.com/groups}", want: `["admins","ci"]`},
		{tmpl: "{org}", want: `{"depth":{"x":"deep"},"team":"platform"}`},
		{tmpl: "{workflow}", missing: "workflow"},
		{tmpl: "{org.nope}", missing: "org.nope"},
		{tmpl: "{repository.x}", missing: "repository.x"},
		{tmpl: "{nothing}", missing: "nothing"},
		{tmpl: "{repository", invalid: true},
		{tmpl: "repository}", invalid: true},
		{tmpl: "{}", invalid: true},
		{tmpl: "{ }", invalid: true},
		{tmpl: "{a{b}}", invalid: true},
	}
	for _, tc := range cases {
		t.Run(tc.tmpl, func(t *testing.T) {
			got, err := Render(tc.tmpl, claims)
			var missing *MissingClaimError
			switch {
			case tc.missing != "":
				if !errors.As(err, &missing) || missing.Claim != tc.missing {
					t.Fatalf("got %q, %v; want missing claim %q", got, err, tc.missing)
				}
				if !strings.Contains(err.Error(), tc.missing) {
					t.Fatalf("error %q does not name the claim", err)
				}
			case tc.invalid:
				if !errors.Is(err, ErrInvalidTemplate) {
					t.Fatalf("got %q, %v; want ErrInvalidTemplate", got, err)
				}
			default:
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
			}
		})
	}
}

func TestRenderIdentityLimits(t *testing.T) {
	if _, err := Render("{sub}", Claims{"sub": ""}); err == nil {
		t.Error("empty identity accepted")
	}
	if _, err := Render("{sub}", Claims{"sub": strings.Repeat("x", MaxIdentityLen+1)}); err == nil {
		t.Error("over-long identity accepted")
	}
	if _, err := Render("{sub}", Claims{"sub": "a\nb"}); err == nil {
		t.Error("control character accepted")
	}
	if _, err := Render("{sub}", Claims{"sub": "\xff"}); err == nil {
		t.Error("invalid UTF-8 accepted")
	}
}

func FuzzRenderIdentity(f *testing.F) {
	f.Add("{repository}:{ref}", `{"repository":"a/b","ref":"main"}`)
	f.Add("{org.team}", `{"org":{"team":"x"}}`)
	f.Add("", `{"sub":"s"}`)
	f.Add("{a}{", `{"a":1}`)
	f.Add("}{", `{}`)
	f.Add("{a.b.c.d}", `{"a":{"b":[1,2]}}`)
	f.Fuzz(func(t *testing.T, tmpl, claimsJSON string) {
		claims, err := Decode([]byte(claimsJSON))
		if err != nil {
			claims = Claims{}
		}
		id, err := Render(tmpl, claims)
		if err != nil {
			if id != "" {
				t.Fatalf("error %v with identity %q", err, id)
			}
			return
		}
		if id == "" || len(id) > MaxIdentityLen {
			t.Fatalf("identity %q out of limits", id)
		}
		if !strings.ContainsAny(tmpl, "{}") && tmpl != "" && id != tmpl {
			t.Fatalf("literal template %q rendered %q", tmpl, id)
		}
		_ = json.Valid([]byte(id))
	})
}
