package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CleanupMode says how a leased member's destruction is proven.
// +kubebuilder:validation:Enum=Standard;VerifiedDestroy
type CleanupMode string

const (
	// CleanupStandard destroys the member through its backend.
	CleanupStandard CleanupMode = "Standard"
	// CleanupVerifiedDestroy proves every resource of the member is gone and
	// keeps a receipt; a member whose cleanup cannot be proven is Quarantined.
	CleanupVerifiedDestroy CleanupMode = "VerifiedDestroy"
)

// LeasePhase is where a lease is in its life.
// +kubebuilder:validation:Enum=Pending;Bound;Released;Expired;Recycling;Quarantined
type LeasePhase string

const (
	// LeasePending: waiting in the pool's queue for a Ready member.
	LeasePending LeasePhase = "Pending"
	// LeaseBound: holds a member until expiresAt.
	LeaseBound LeasePhase = "Bound"
	// LeaseReleased: ended by its holder (or refused while queued).
	LeaseReleased LeasePhase = "Released"
	// LeaseExpired: ended by the operator at expiresAt, or after waiting
	// longer than the pool's queueTimeout.
	LeaseExpired LeasePhase = "Expired"
	// LeaseRecycling: ended; its member is being destroyed.
	LeaseRecycling LeasePhase = "Recycling"
	// LeaseQuarantined: ended; its member's cleanup could not be proven.
	LeaseQuarantined LeasePhase = "Quarantined"
)

// Requester is who asked for a lease and under which policy.
type Requester struct {
	// identity is the caller's identity as rendered by the AccessPolicy.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Identity string `json:"identity,omitempty"`

	// policy is the AccessPolicy that authorised the request.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Policy string `json:"policy,omitempty"`

	// method is the authentication method used (oidc, ssh, token, serviceAccount).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Method string `json:"method,omitempty"`
}

// ClusterLeaseSpec is a request to borrow one member of a pool.
// +kubebuilder:validation:XValidation:rule="has(self.cleanupMode) == has(oldSelf.cleanupMode)",message="cleanupMode is write-once: it cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="has(self.maxTtl) == has(oldSelf.maxTtl)",message="maxTtl is write-once: it cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="has(self.ttl) == has(oldSelf.ttl)",message="ttl is write-once: it cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="has(self.maxExtensions) == has(oldSelf.maxExtensions)",message="maxExtensions is write-once: it cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="has(self.heartbeatTimeout) == has(oldSelf.heartbeatTimeout)",message="heartbeatTimeout is write-once: it cannot be added or removed after creation"
// +kubebuilder:validation:XValidation:rule="has(self.idleTimeout) == has(oldSelf.idleTimeout)",message="idleTimeout is write-once: it cannot be added or removed after creation"
type ClusterLeaseSpec struct {
	// pool to lease from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="pool is immutable"
	Pool string `json:"pool"`

	// ttl is how long the lease lasts once bound; the pool's ttl when empty.
	// Write-once: the lease's limit is counted from it.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="ttl must be greater than zero"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ttl is write-once and cannot be changed after creation"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// requester is who asked for the lease.
	// +optional
	Requester Requester `json:"requester,omitempty"`

	// maxExtensions caps how many times the lease may be extended (default 2).
	// Write-once: the lease's limit is counted from it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="maxExtensions is write-once and cannot be changed after creation"
	MaxExtensions *int32 `json:"maxExtensions,omitempty"`

	// maxTtl is the longest single extension, recorded from the caller's
	// rule (its maxTtl, else the operator's default) when the API creates
	// the lease. It bounds how long the lease can last: boundAt + ttl +
	// status.extensions (at most maxExtensions) x maxTtl, whatever its
	// status says. Write-once. Without it each extension counts at most ttl.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="maxTtl must be greater than zero"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="maxTtl is write-once and cannot be changed after creation"
	MaxTTL *metav1.Duration `json:"maxTtl,omitempty"`

	// heartbeatTimeout, when set, ends the lease (reason HeartbeatMissed)
	// once its holder has sent no heartbeat for that long (POST
	// /v1/leases/{id}/heartbeat), whatever its ttl: a holder that died
	// without releasing frees its member within the timeout, not at expiry.
	// 10s to 24h. Write-once.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="heartbeatTimeout must be between 10s and 24h"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="heartbeatTimeout is write-once and cannot be changed after creation"
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`

	// idleTimeout, when set, ends a bound lease (reason Idle) once no
	// request went through the connect proxy to its member for that long,
	// whatever its ttl. Set at creation from the pool's and the policy's
	// idleTimeout, for Proxy-access leases only. 10s to 24h. Write-once.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="idleTimeout must be between 10s and 24h"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="idleTimeout is write-once and cannot be changed after creation"
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// cleanupMode says how the member's destruction is proven. Write-once.
	// +optional
	// +kubebuilder:default=Standard
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cleanupMode is write-once and cannot be changed after creation"
	CleanupMode CleanupMode `json:"cleanupMode,omitempty"`
}

// ClusterLeaseStatus is what the lease looks like now.
type ClusterLeaseStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase of the lease.
	// +optional
	Phase LeasePhase `json:"phase,omitempty"`

	// instanceRef is the member the lease is bound to.
	// +optional
	InstanceRef *ObjectRef `json:"instanceRef,omitempty"`

	// boundAt is when the lease was bound.
	// +optional
	BoundAt *metav1.Time `json:"boundAt,omitempty"`

	// expiresAt is when the operator ends the lease: boundAt + ttl + extensions.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// endedAt is when the lease ended.
	// +optional
	EndedAt *metav1.Time `json:"endedAt,omitempty"`

	// heartbeatDeadline is the last heartbeat recorded plus
	// spec.heartbeatTimeout. Heartbeats are recorded at a coarse grain (a
	// quarter of the timeout), not one write each; the lease ends once this
	// deadline plus that grain has passed (lease.HeartbeatEndsAt).
	// +optional
	HeartbeatDeadline *metav1.Time `json:"heartbeatDeadline,omitempty"`

	// idleDeadline is the last request through the connect proxy recorded
	// plus spec.idleTimeout. Recorded at a coarse grain (a quarter of the
	// timeout); the lease ends once this deadline plus that grain has
	// passed (lease.IdleEndsAt).
	// +optional
	IdleDeadline *metav1.Time `json:"idleDeadline,omitempty"`

	// extensions counts granted extensions.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Extensions int32 `json:"extensions,omitempty"`

	// queuePosition is the 1-based place in the pool's queue while Pending.
	// The queue is first come, first served by the time each lease was
	// queued: its kobe.kunobi.ninja/queued-at annotation (set by the HTTP
	// API, to the nanosecond), else its creationTimestamp; ties by name.
	// Written when the lease joins the queue, then at most every 5 s while
	// only the position moves (each hand-out ahead moves it); the HTTP API
	// tells callers their position afresh.
	// +optional
	// +kubebuilder:validation:Minimum=0
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// cleanupReceipt names the ConfigMap holding the receipt of the
	// member's VerifiedDestroy teardown, once there is one.
	// +optional
	CleanupReceipt *LocalRef `json:"cleanupReceipt,omitempty"`

	// conditions: Bound, Ended (with the reason the lease ended).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterLease binds a caller to one Ready member of a pool for a TTL that
// the operator enforces.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=clease,categories=kobe
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.status.instanceRef.name`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Identity",type=string,JSONPath=`.spec.requester.identity`,priority=1
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.status.phase`
type ClusterLease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the lease request.
	// +required
	Spec ClusterLeaseSpec `json:"spec"`

	// status is the observed lease.
	// +optional
	Status ClusterLeaseStatus `json:"status,omitempty"`
}

// ClusterLeaseList is a list of ClusterLeases.
// +kubebuilder:object:root=true
type ClusterLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterLease `json:"items"`
}

func init() {
	register(&ClusterLease{}, &ClusterLeaseList{})
}
