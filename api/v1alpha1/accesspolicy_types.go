package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AccessPolicySpec authenticates callers with one method and turns their
// identity into limits.
type AccessPolicySpec struct {
	// auth is the single authentication method of this policy.
	// +required
	Auth AuthSpec `json:"auth"`

	// identity renders the caller's identity from its claims, e.g.
	// "{repository}:{ref}" or "{org.team}". Defaults to the subject.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Identity string `json:"identity,omitempty"`

	// rules are evaluated in order; the first whose match holds applies.
	// No matching rule means the request is refused.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Rules []AccessRule `json:"rules"`
}

// AuthSpec holds exactly one authentication method.
// +kubebuilder:validation:XValidation:rule="(has(self.oidc) ? 1 : 0) + (has(self.ssh) ? 1 : 0) + (has(self.token) ? 1 : 0) + (has(self.serviceAccount) ? 1 : 0) == 1",message="auth must set exactly one of oidc, ssh, token or serviceAccount"
type AuthSpec struct {
	// oidc accepts ID tokens from an OpenID Connect issuer (GitHub Actions and others).
	// +optional
	OIDC *OIDCAuth `json:"oidc,omitempty"`

	// ssh accepts requests signed by a key from the caller's SSH agent.
	// +optional
	SSH *SSHAuth `json:"ssh,omitempty"`

	// token accepts a bearer token kept in a Secret.
	// +optional
	Token *TokenAuth `json:"token,omitempty"`

	// serviceAccount accepts Kubernetes ServiceAccount tokens of the host cluster.
	// +optional
	ServiceAccount *ServiceAccountAuth `json:"serviceAccount,omitempty"`
}

// OIDCAuth configures an OpenID Connect issuer.
type OIDCAuth struct {
	// issuer URL; discovery is read from <issuer>/.well-known/openid-configuration.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="issuer must be an absolute http(s) URL with a host"
	Issuer string `json:"issuer"`

	// audience lists accepted "aud" values; a token must carry one of them.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=512
	Audience []string `json:"audience"`
}

// SSHAuth configures SSH agent key signatures.
type SSHAuth struct {
	// authorizedKeys in authorized_keys format ("ssh-ed25519 AAAA... comment").
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=16384
	AuthorizedKeys []string `json:"authorizedKeys"`
}

// TokenAuth configures a bearer token kept in a Secret.
type TokenAuth struct {
	// secretRef names the Secret and key holding the token.
	// +required
	SecretRef SecretKeyRef `json:"secretRef"`
}

// SecretKeyRef names a key of a Secret in the policy's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key within the Secret; "token" when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// ServiceAccountAuth configures ServiceAccount tokens checked with TokenReview.
type ServiceAccountAuth struct {
	// audiences the token must be issued for, at least one: an audience of
	// kobe's own (e.g. "kobe"), for which callers project a token, never
	// one the host API server accepts (its default tokens would pass).
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	Audiences []string `json:"audiences"`
}

// AccessRule grants pools and limits to the identities it matches.
// +kubebuilder:validation:XValidation:rule="!(has(self.match) && has(self.matchAny) && self.matchAny)",message="set either match or matchAny: true, not both"
type AccessRule struct {
	// match selects callers by a claim. A rule without match holds for
	// every caller of a token or ssh policy; in an oidc or serviceAccount
	// policy it would hold for every token the issuer signs, so there it
	// applies only with matchAny: true (else the policy is not Ready, with
	// reason RuleMatchesEveryToken, and the rule authenticates nobody).
	// +optional
	Match *ClaimMatch `json:"match,omitempty"`

	// matchAny: true says on purpose that a rule without match holds for
	// every caller the policy authenticates, including every token an OIDC
	// issuer or the host API server signs for the audience.
	// +optional
	MatchAny bool `json:"matchAny,omitempty"`

	// pools the caller may lease from: exact names, "prefix*", or "*".
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?|[a-z0-9][-a-z0-9.]*\*)$`
	Pools []string `json:"pools"`

	// maxTtl caps a lease's TTL and each extension; a longer request is
	// clamped to it. Without it the operator's --default-max-ttl (24h)
	// applies.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="maxTtl must be greater than zero"
	MaxTTL *metav1.Duration `json:"maxTtl,omitempty"`

	// maxHeartbeatTimeout requires heartbeats of the identity's leases: a
	// lease gets at most this heartbeat timeout (a longer one is clamped to
	// it) and one that would take none (neither the request nor the pool
	// names one) gets this one. Unset: heartbeats as asked. 10s to 24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="maxHeartbeatTimeout must be between 10s and 24h"
	MaxHeartbeatTimeout *metav1.Duration `json:"maxHeartbeatTimeout,omitempty"`

	// idleTimeout ends the identity's Proxy-access leases (reason Idle)
	// once nothing went through the connect proxy to their member for that
	// long; with the pool's idleTimeout, the shorter applies. Leases of
	// Direct-access pools are not affected: kobe does not see their
	// traffic. 10s to 24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="idleTimeout must be between 10s and 24h"
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// maxConcurrentLeases caps the leases the identity may hold at once.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxConcurrentLeases *int32 `json:"maxConcurrentLeases,omitempty"`

	// maxExtensions caps how many times a lease may be extended (default 2).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxExtensions *int32 `json:"maxExtensions,omitempty"`
}

// ClaimMatch holds when the claim has the value.
type ClaimMatch struct {
	// claim name, a dot-path into nested claims (e.g. "org.team").
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Claim string `json:"claim"`

	// value the claim must equal.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value"`
}

// AccessPolicyStatus is what the operator observed of the policy.
type AccessPolicyStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready says whether the policy can authenticate anyone.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AccessPolicy authenticates callers of the lease API and authorises them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=apol,categories=kobe
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AccessPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the policy.
	// +required
	Spec AccessPolicySpec `json:"spec"`

	// status is the observed policy.
	// +optional
	Status AccessPolicyStatus `json:"status,omitempty"`
}

// AccessPolicyList is a list of AccessPolicies.
// +kubebuilder:object:root=true
type AccessPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AccessPolicy `json:"items"`
}

func init() {
	register(&AccessPolicy{}, &AccessPolicyList{})
}
