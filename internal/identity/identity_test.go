package identity

import (
	"errors"
	"slices"
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
		// Two claims must be separated by literal text, which must not
		// hold the escape character.
		{tmpl: "{repository}{ref}", invalid: true},
		{tmpl: "x{repository}{ref}:{sub}", invalid: true},
		{tmpl: "{repository}%{ref}", invalid: true},
		{tmpl: "{repository}:{ref}%", invalid: true},
		// One claim renders as it is, '%' or separators included.
		{tmpl: "{sub}%", want: "repo:my-org/my-repo:ref:refs/heads/main%"},
		{tmpl: "gh:{repository}", want: "gh:my-org/my-repo"},
		// Two claims: values escape '%' and the literal text's characters.
		{tmpl: "{sub}|{ref}", want: "repo:my-org/my-repo:ref:refs/heads/main|refs/heads/main"},
		{tmpl: "{sub}:{ref}", want: "repo%3Amy-org/my-repo%3Aref%3Arefs/heads/main:refs/heads/main"},
		{tmpl: "{repository}/{ref}", want: "my-org%2Fmy-repo/refs%2Fheads%2Fmain"},
		{tmpl: "{ref} @ {repository}", want: "refs/heads/main @ my-org/my-repo"},
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

// TestRenderSingleClaimUnchanged: a template with one claim renders the
// claim as it is, so identities recorded on leases before escaping existed
// (GitHub's sub contains ':' and '/') still name the same owner.
func TestRenderSingleClaimUnchanged(t *testing.T) {
	for _, sub := range []string{
		"repo:my-org/my-repo:ref:refs/heads/main",
		"repo:my-org/my-repo:environment:prod",
		"system:serviceaccount:ci:runner",
		"100%:{}/a b",
	} {
		for _, tmpl := range []string{"", "{sub}"} {
			if got, err := Render(tmpl, Claims{"sub": sub}); err != nil || got != sub {
				t.Errorf("Render(%q, sub=%q) = %q, %v; want it unchanged", tmpl, sub, got, err)
			}
		}
	}
}

// TestRenderForgedSeparator: the attack escaping closes. Without it, a
// caller whose repository claim is "team:deploy" and ref "prod" would
// render "team:deploy:prod", the identity of repository "team", ref
// "deploy:prod".
func TestRenderForgedSeparator(t *testing.T) {
	victim, err := Render("{repository}:{ref}", Claims{"repository": "team", "ref": "deploy:prod"})
	if err != nil {
		t.Fatal(err)
	}
	forgers := []Claims{
		{"repository": "team:deploy", "ref": "prod"},
		{"repository": "team%3Adeploy", "ref": "prod"},
		{"repository": "team", "ref": "deploy%3Aprod"},
		{"repository": "team:deploy:prod", "ref": ""},
	}
	for _, c := range forgers {
		got, err := Render("{repository}:{ref}", c)
		if err == nil && got == victim {
			t.Errorf("claims %v render the victim's identity %q", c, victim)
		}
	}
}

// TestRenderInjective renders every tuple of short values over an alphabet
// of separators, escapes and hex digits, under templates whose literal
// text uses them, and finds no two tuples with one identity.
func TestRenderInjective(t *testing.T) {
	alphabet := []string{"", ":", "%", "3", "A", "a", "%3A", "é", "-"}
	var values []string
	for _, x := range alphabet {
		for _, y := range alphabet {
			values = append(values, x+y)
		}
	}
	for _, tmpl := range []string{"{a}:{b}", "{a}3{b}", "{a}3A{b}", "x{a}aa{b}-", "{a}-{b}-{c}", "{a}::{b}", "{a}é{b}", "{a}"} {
		seen := map[string][]string{}
		claims := usedValues(tmpl, []string{"a", "b", "c"})
		vals := values
		if len(claims) == 3 {
			vals = values[:24] // 24^3 tuples are enough
		}
		var walk func(tuple []string)
		walk = func(tuple []string) {
			if len(tuple) < len(claims) {
				for _, v := range vals {
					walk(append(tuple, v))
				}
				return
			}
			c := Claims{}
			for i, name := range claims {
				c[name] = tuple[i]
			}
			id, err := Render(tmpl, c)
			if err != nil {
				return // empty identity
			}
			used := tuple
			if prev, ok := seen[id]; ok && strings.Join(prev, "\x00") != strings.Join(used, "\x00") {
				t.Fatalf("template %q: %q and %q both render %q", tmpl, prev, used, id)
			}
			seen[id] = slices.Clone(used)
		}
		walk(nil)
	}
}

// usedValues keeps the entries of tuple (values or names of claims a, b,
// c) that tmpl names.
func usedValues(tmpl string, tuple []string) []string {
	var out []string
	for i, name := range []string{"a", "b", "c"} {
		if strings.Contains(tmpl, "{"+name+"}") {
			out = append(out, tuple[i])
		}
	}
	return out
}

// FuzzRenderIdentity renders one template over two sets of claims: no
// panic, only the documented errors, a result within the limits, and
// injectivity: two different tuples of claim values never render the
// same identity.
func FuzzRenderIdentity(f *testing.F) {
	f.Add("{repository}:{ref}", `{"repository":"a/b","ref":"main"}`, `{"repository":"a/b","ref":"main"}`)
	f.Add("{org.team}", `{"org":{"team":"x"}}`, `{"org.team":"x"}`)
	f.Add("", `{"sub":"s"}`, `{"sub":"t"}`)
	f.Add("{a}{", `{"a":1}`, `{"a":2}`)
	f.Add("}{", `{}`, `{}`)
	f.Add("{a.b.c.d}", `{"a":{"b":[1,2]}}`, `{"a":{"b":[1,3]}}`)
	f.Add("{repository}:{ref}", `{"repository":"a:b","ref":"c"}`, `{"repository":"a","ref":"b:c"}`)
	f.Add("{a}3{b}", `{"a":"3","b":"3"}`, `{"a":"%33","b":""}`)
	f.Add("{a}:{b}", `{"a":"%","b":":"}`, `{"a":"%25","b":"%3A"}`)
	f.Add("{a}-{b.c}", `{"a":"x-","b":{"c":"y"}}`, `{"a":"x","b":{"c":"-y"}}`)
	f.Fuzz(func(t *testing.T, tmpl, claimsJSON, otherJSON string) {
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
		other, err := Decode([]byte(otherJSON))
		if err != nil {
			return
		}
		otherID, err := Render(tmpl, other)
		if err != nil || otherID != id {
			return
		}
		a, b := renderedValues(t, tmpl, claims), renderedValues(t, tmpl, other)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("template %q renders %q for claim values %q and %q", tmpl, id, a, b)
			}
		}
	})
}

// renderedValues is the tuple of claim values tmpl renders from claims.
func renderedValues(t *testing.T, tmpl string, claims Claims) []string {
	t.Helper()
	tp, err := parse(tmpl)
	if err != nil {
		t.Fatalf("template %q rendered but does not parse: %v", tmpl, err)
	}
	var out []string
	for _, s := range tp.segs {
		if s.claim {
			v, _ := Lookup(claims, s.text)
			out = append(out, String(v))
		}
	}
	return out
}
