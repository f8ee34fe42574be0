package auth

import (
	"strings"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Authentication methods, as policies name them and Principal.Method reports.
const (
	MethodOIDC           = "oidc"
	MethodSSH            = "ssh"
	MethodToken          = "token"
	MethodServiceAccount = "serviceAccount"
)

// DefaultMaxExtensions applies when a rule does not set maxExtensions.
const DefaultMaxExtensions int32 = 2

// DefaultMaxTTL caps a lease's TTL, and each extension, when the rule sets
// no maxTtl and Options.DefaultMaxTTL is not set either.
const DefaultMaxTTL = 24 * time.Hour

// Principal is an authenticated and authorised caller.
type Principal struct {
	// Identity is rendered from the policy's identity template.
	Identity string
	// Policy is the AccessPolicy's name.
	Policy string
	// Method is MethodOIDC, MethodSSH, MethodToken or MethodServiceAccount.
	Method string
	// Rule is a copy of the first rule whose match held.
	Rule kobev1.AccessRule
	// RuleIndex is Rule's index in the policy's rules.
	RuleIndex int
	// DefaultMaxTTL caps TTLs when Rule sets no maxTtl (Options.DefaultMaxTTL);
	// zero means DefaultMaxTTL.
	DefaultMaxTTL time.Duration
	// DefaultMaxConcurrentLeases caps the leases held at once when Rule
	// sets no maxConcurrentLeases (Options.DefaultMaxConcurrentLeases);
	// zero means no cap.
	DefaultMaxConcurrentLeases int32
}

// AllowsPool reports whether the rule grants pool: an exact name, a
// "prefix*" glob or "*".
func (p *Principal) AllowsPool(pool string) bool {
	if p == nil || pool == "" {
		return false
	}
	for _, pattern := range p.Rule.Pools {
		if poolMatches(pattern, pool) {
			return true
		}
	}
	return false
}

func poolMatches(pattern, pool string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(pool, prefix)
	}
	return pattern == pool
}

// MaxTTL is the longest TTL, and the longest single extension, the caller
// may get: the rule's maxTtl, else the default maximum. A caller is never
// unbounded.
func (p *Principal) MaxTTL() time.Duration {
	switch {
	case p != nil && p.Rule.MaxTTL != nil && p.Rule.MaxTTL.Duration > 0:
		return p.Rule.MaxTTL.Duration
	case p != nil && p.DefaultMaxTTL > 0:
		return p.DefaultMaxTTL
	}
	return DefaultMaxTTL
}

// ClampTTL caps requested at MaxTTL (the rule's maxTtl, else the default
// maximum) and reports whether it did.
func (p *Principal) ClampTTL(requested time.Duration) (effective time.Duration, clamped bool) {
	if limit := p.MaxTTL(); requested > limit {
		return limit, true
	}
	return requested, false
}

// MaxHeartbeatTimeout is the rule's maxHeartbeatTimeout: the longest
// heartbeat timeout the caller's leases get, which also makes heartbeats
// required (lease.ResolveHeartbeatTimeout); 0 when the rule sets none.
func (p *Principal) MaxHeartbeatTimeout() time.Duration {
	if p == nil || p.Rule.MaxHeartbeatTimeout == nil {
		return 0
	}
	return p.Rule.MaxHeartbeatTimeout.Duration
}

// IdleTimeout is the rule's idleTimeout for Proxy-access leases
// (lease.ResolveIdleTimeout); 0 when the rule sets none.
func (p *Principal) IdleTimeout() time.Duration {
	if p == nil || p.Rule.IdleTimeout == nil {
		return 0
	}
	return p.Rule.IdleTimeout.Duration
}

// MaxExtensions is how often a lease may be extended (DefaultMaxExtensions
// unless the rule says otherwise).
func (p *Principal) MaxExtensions() int32 {
	if p == nil {
		return 0
	}
	if p.Rule.MaxExtensions == nil {
		return DefaultMaxExtensions
	}
	return *p.Rule.MaxExtensions
}

// MaxConcurrentLeases is the cap on leases (Bound and Pending) held at
// once: the rule's maxConcurrentLeases, else DefaultMaxConcurrentLeases
// when positive; false means unlimited.
func (p *Principal) MaxConcurrentLeases() (int32, bool) {
	switch {
	case p == nil:
		return 0, false
	case p.Rule.MaxConcurrentLeases != nil:
		return *p.Rule.MaxConcurrentLeases, true
	case p.DefaultMaxConcurrentLeases > 0:
		return p.DefaultMaxConcurrentLeases, true
	}
	return 0, false
}

// RuleCapsLeases reports whether the rule itself sets maxConcurrentLeases,
// which then bounds waiting leases too.
func (p *Principal) RuleCapsLeases() bool {
	return p != nil && p.Rule.MaxConcurrentLeases != nil
}

// AuditFields are key/values describing p that are safe to log.
func AuditFields(p *Principal) []any {
	if p == nil {
		return []any{"identity", "", "policy", "", "method", ""}
	}
	return []any{"identity", p.Identity, "policy", p.Policy, "method", p.Method}
}
