package auth

import (
	"errors"
	"fmt"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// ValidatePolicy reports what makes a policy unusable beyond what the CRD
// already refuses: not exactly one method, an identity template or a claim
// match that cannot work, authorizedKeys entries that are left out. Its
// messages name fields, never secret values.
func ValidatePolicy(p *kobev1.AccessPolicy) error {
	var errs []error
	a := p.Spec.Auth
	n := 0
	for _, set := range []bool{a.OIDC != nil, a.SSH != nil, a.Token != nil, a.ServiceAccount != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		errs = append(errs, errors.New("auth must set exactly one of oidc, ssh, token or serviceAccount"))
	}
	if err := ValidateTemplate(p.Spec.Identity); err != nil {
		errs = append(errs, fmt.Errorf("identity: %w", err))
	}
	if len(p.Spec.Rules) == 0 {
		errs = append(errs, errors.New("rules: at least one rule is needed"))
	}
	for i, r := range p.Spec.Rules {
		if len(r.Pools) == 0 {
			errs = append(errs, fmt.Errorf("rules[%d].pools is empty", i))
		}
		if r.Match != nil && r.Match.Claim == "" {
			errs = append(errs, fmt.Errorf("rules[%d].match.claim is empty", i))
		}
		if r.Match != nil && r.MatchAny {
			errs = append(errs, fmt.Errorf("rules[%d] sets both match and matchAny: true; keep one", i))
		}
	}
	if a.OIDC != nil && len(a.OIDC.Audience) == 0 {
		errs = append(errs, errors.New("oidc.audience is empty"))
	}
	if a.ServiceAccount != nil && len(a.ServiceAccount.Audiences) == 0 {
		// Else every pod's default token, which the host API server
		// accepts, would authenticate here: callers would hand kobe (and
		// anything between) a credential for the host cluster.
		errs = append(errs, errors.New("serviceAccount.audiences is empty: name an audience of kobe's own (e.g. \"kobe\") and have callers send a token projected for it"))
	}
	errs = append(errs, oidcIssuerError(a.OIDC))
	if a.SSH != nil {
		keys, err := ParseAuthorizedKeys(a.SSH.AuthorizedKeys)
		if err != nil {
			errs = append(errs, err)
		}
		if len(keys) == 0 {
			errs = append(errs, errors.New("ssh.authorizedKeys holds no usable key"))
		}
	}
	return errors.Join(errs...)
}

// MatchesEveryToken reports whether rule r of a policy of method would hold
// for every token its issuer signs without saying so: an oidc or
// serviceAccount rule with no match and no matchAny: true. Such a rule
// authenticates nobody. Token and ssh policies name their callers (one
// Secret, listed keys), so a rule without match is fine there.
func MatchesEveryToken(method string, r *kobev1.AccessRule) bool {
	return (method == MethodOIDC || method == MethodServiceAccount) && r.Match == nil && !r.MatchAny
}

// RulesMatchingEveryToken lists the indexes of p's rules for which
// MatchesEveryToken holds.
func RulesMatchingEveryToken(p *kobev1.AccessPolicy) []int {
	method := MethodOf(p)
	var out []int
	for i := range p.Spec.Rules {
		if MatchesEveryToken(method, &p.Spec.Rules[i]) {
			out = append(out, i)
		}
	}
	return out
}
