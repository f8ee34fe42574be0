package auth

import (
	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/identity"
)

// Claims are what a method learnt about the caller: decoded JWT claims for
// oidc (numbers as json.Number), fixed keys for the others.
type Claims = identity.Claims

// MaxIdentityLen is the longest identity a lease can record.
const MaxIdentityLen = identity.MaxIdentityLen

// ErrInvalidTemplate is returned for an identity template that does not parse.
var ErrInvalidTemplate = identity.ErrInvalidTemplate

// MissingClaimError says which claim an identity template needed.
type MissingClaimError = identity.MissingClaimError

// ValidateTemplate reports whether tmpl is a usable identity template.
func ValidateTemplate(tmpl string) error { return identity.ValidateTemplate(tmpl) }

// RenderIdentity fills an identity template from claims (see identity.Render).
func RenderIdentity(tmpl string, claims Claims) (string, error) { return identity.Render(tmpl, claims) }

func decodeClaims(raw []byte) (Claims, error) { return identity.Decode(raw) }

// matches reports whether m holds for claims: the claim equals the value,
// or, for a list claim (aud, groups), one of its elements does.
func matches(m *kobev1.ClaimMatch, claims Claims) bool {
	if m == nil {
		return true
	}
	v, ok := identity.Lookup(claims, m.Claim)
	if !ok {
		return false
	}
	if list, isList := v.([]any); isList {
		for _, e := range list {
			if e != nil && identity.String(e) == m.Value {
				return true
			}
		}
	}
	return identity.String(v) == m.Value
}

// firstRule is the index of the first rule whose match holds, or -1. A
// rule that would hold for every token an issuer signs (MatchesEveryToken)
// is skipped: it applies only when it says so with matchAny.
func firstRule(method string, rules []kobev1.AccessRule, claims Claims) int {
	for i := range rules {
		if MatchesEveryToken(method, &rules[i]) {
			continue
		}
		if matches(rules[i].Match, claims) {
			return i
		}
	}
	return -1
}
