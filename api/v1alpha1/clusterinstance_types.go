package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// InstancePhase is where a member is in its life.
// +kubebuilder:validation:Enum=Creating;Ready;Leased;Recycling;Quarantined
type InstancePhase string

const (
	// InstanceCreating: the backend is building the member.
	InstanceCreating InstancePhase = "Creating"
	// InstanceReady: warm, healthy and waiting to be leased.
	InstanceReady InstancePhase = "Ready"
	// InstanceLeased: bound to a ClusterLease.
	InstanceLeased InstancePhase = "Leased"
	// InstanceRecycling: being destroyed; a member is never reused.
	InstanceRecycling InstancePhase = "Recycling"
	// InstanceQuarantined: cleanup could not be proven; kept for inspection.
	InstanceQuarantined InstancePhase = "Quarantined"
)

// ClusterInstanceSpec is one member of a pool, frozen at creation from the
// pool's template.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.leaseRef) || has(self.leaseRef)",message="leaseRef cannot be removed once set: a member is never rebound"
// +kubebuilder:validation:XValidation:rule="!has(self.leaseRef) || !has(self.frozen) || !self.frozen",message="a bound member is never frozen: clear frozen before (or instead of) binding it"
// +kubebuilder:validation:XValidation:rule="self.poolRef == oldSelf.poolRef && self.backend == oldSelf.backend && (has(self.cluster) == has(oldSelf.cluster)) && (!has(self.cluster) || self.cluster == oldSelf.cluster) && (has(self.templateHash) == has(oldSelf.templateHash)) && (!has(self.templateHash) || self.templateHash == oldSelf.templateHash)",message="a member's poolRef, backend, cluster and templateHash are frozen at creation"
type ClusterInstanceSpec struct {
	// poolRef is the pool this member was built for.
	// +required
	PoolRef ObjectRef `json:"poolRef"`

	// ordinal is the member's number within its pool (pool-<pool>-<ordinal>).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Ordinal int32 `json:"ordinal,omitempty"`

	// backend the member is built with (copied from the pool).
	// +required
	Backend BackendSpec `json:"backend"`

	// access is how lease holders reach the member (resolved from the pool
	// when the member is created: never empty on members created since).
	// +optional
	Access *AccessSpec `json:"access,omitempty"`

	// cluster describes the member (copied from the pool).
	// +optional
	Cluster ClusterTemplate `json:"cluster,omitempty"`

	// templateHash is the hash of the pool template the member was built from.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TemplateHash string `json:"templateHash,omitempty"`

	// leaseRef is the lease the member is bound to. It is set once, by the
	// bind, fenced by the member's resourceVersion; it never changes
	// afterwards. It is the binding's record: a lease's status is a copy.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="leaseRef is immutable once set: a member is never rebound"
	LeaseRef *LeaseBinding `json:"leaseRef,omitempty"`

	// frozen asks the backend to freeze the member's processes while it
	// waits for a lease (the pool's warm.running); the pool controller sets
	// and clears it. The Frozen condition says what the instance controller
	// did about it. A member whose spec says frozen, or whose Frozen
	// condition is True, is never handed out; a bound member is never
	// frozen.
	// +optional
	Frozen bool `json:"frozen,omitempty"`
}

// LeaseBinding is the member's side of a bind: the lease (pinned by UID) and
// the moment the bind took effect, from which the lease's expiry is counted.
type LeaseBinding struct {
	// name of the lease.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid of the lease.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid,omitempty"`

	// boundAt is when the bind took effect: the lease expires at boundAt
	// plus its ttl (plus extensions, recorded on the lease).
	// +optional
	BoundAt *metav1.Time `json:"boundAt,omitempty"`

	// cleanupMode is the lease's cleanup mode, copied by the bind: a
	// VerifiedDestroy member is torn down with proof (status.cleanup), and
	// Quarantined when the proof fails, whatever becomes of its lease.
	// +optional
	CleanupMode CleanupMode `json:"cleanupMode,omitempty"`
}

// CreationManifest is every resource a backend made for a member, recorded
// once when the member was built. A VerifiedDestroy teardown proves each
// one absent.
type CreationManifest struct {
	// recordedAt is when the manifest was recorded.
	// +required
	RecordedAt metav1.Time `json:"recordedAt"`

	// resources the backend made for the member.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Resources []ManifestResource `json:"resources"`
}

// ManifestResource is one resource of a creation manifest. What name and id
// hold depends on kind: for the local backend a Process (name: component,
// id: "<pid>@<start time in clock ticks after boot>"), a Port (name:
// component, id: "<host>:<port>") or a Path (name: the path); for host
// cluster objects the object's kind (name: "<namespace>/<name>", id: its UID).
type ManifestResource struct {
	// kind of the resource.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`

	// name of the resource.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// id pins the exact resource (a UID, a process ID with its start time).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id,omitempty"`
}

// CleanupStatus is how a VerifiedDestroy teardown went.
type CleanupStatus struct {
	// verified is true once every recorded resource was proven absent.
	// +optional
	Verified bool `json:"verified,omitempty"`

	// attempts counts teardown attempts whose proof failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Attempts int32 `json:"attempts,omitempty"`

	// lastAttempt is when the teardown was last attempted.
	// +optional
	LastAttempt *metav1.Time `json:"lastAttempt,omitempty"`

	// nextAttempt is when a Quarantined member's teardown is retried.
	// +optional
	NextAttempt *metav1.Time `json:"nextAttempt,omitempty"`

	// receipt names the ConfigMap (in the member's namespace) holding the
	// cleanup receipt: every check and its result.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Receipt string `json:"receipt,omitempty"`

	// message says what survived the last attempt.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// retryRequest is the value of the kobe.kunobi.ninja/retry-cleanup
	// annotation last acted on.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RetryRequest string `json:"retryRequest,omitempty"`
}

// ClusterInstanceStatus is what the member looks like now.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.creationManifest) || (has(self.creationManifest) && self.creationManifest == oldSelf.creationManifest)",message="creationManifest is immutable once recorded"
type ClusterInstanceStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase of the member.
	// +optional
	Phase InstancePhase `json:"phase,omitempty"`

	// leaseRef mirrors spec.leaseRef once the bind has been observed.
	// +optional
	LeaseRef *ObjectRef `json:"leaseRef,omitempty"`

	// endpoint is the member's API server URL.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint,omitempty"`

	// accessSecretRef names the Secret that held the member's access material
	// before kobe kept it in status.access: set only on members built by an
	// older operator, whose material the controller moves into status.access
	// (and then deletes the Secret).
	// +optional
	AccessSecretRef *LocalRef `json:"accessSecretRef,omitempty"`

	// access is what the operator needs to reach the member and to mint
	// lease credentials, written once with the move to Provisioned and
	// deleted with the member. The private parts are sealed (AES-256-GCM)
	// with the operator's key (Secret kobe-member-access-key) and bound to
	// this member's UID: reading this object does not give them.
	// +optional
	Access *MemberAccess `json:"access,omitempty"`

	// healthFailures counts consecutive failed health probes.
	// +optional
	HealthFailures int32 `json:"healthFailures,omitempty"`

	// lastHealthCheck is when the member was last probed.
	// +optional
	LastHealthCheck *metav1.Time `json:"lastHealthCheck,omitempty"`

	// lastPhaseChange is when phase last changed.
	// +optional
	LastPhaseChange *metav1.Time `json:"lastPhaseChange,omitempty"`

	// timeToReady is how long the member took from creation to Ready; the
	// pool's demand measurement reads it.
	// +optional
	TimeToReady *metav1.Duration `json:"timeToReady,omitempty"`

	// creationManifest is what the backend made for the member, recorded
	// once when it was built (backends that can prove a teardown only).
	// +optional
	CreationManifest *CreationManifest `json:"creationManifest,omitempty"`

	// cleanup is the state of the member's VerifiedDestroy teardown.
	// +optional
	Cleanup *CleanupStatus `json:"cleanup,omitempty"`

	// conditions: Provisioned, Ready, Healthy, one per readiness gate.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MemberAccess is a member's access material: the certificates in the
// clear, the private parts sealed.
type MemberAccess struct {
	// caCert is the PEM CA bundle that verifies the member's API server.
	// +kubebuilder:validation:MaxLength=16384
	CACert string `json:"caCert"`

	// clientCACert is the PEM certificate of the member's client CA, which
	// signs each lease's client certificate.
	// +kubebuilder:validation:MaxLength=16384
	ClientCACert string `json:"clientCACert"`

	// keyID names the operator key that sealed the fields below: the first
	// 16 hex digits of its SHA-256.
	// +kubebuilder:validation:MaxLength=64
	KeyID string `json:"keyID"`

	// sealedClientCAKey is the client CA's private key, sealed.
	// +kubebuilder:validation:MaxLength=16384
	SealedClientCAKey []byte `json:"sealedClientCAKey"`

	// sealedAdminKubeconfig is the operator's admin kubeconfig of the
	// member, sealed whole: for an admin kubeconfig that sealedAdminCredential
	// cannot hold, and members sealed by an operator before it. The
	// operator's cache drops it; it is read live.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	SealedAdminKubeconfig []byte `json:"sealedAdminKubeconfig,omitempty"`

	// sealedAdminCredential is the operator's admin kubeconfig of the member
	// in a third of the space, sealed: its server, names, client certificate
	// and key, the rest rebuilt from caCert. Every member write carries
	// status.access, so its size is paid on each. At most one of the two
	// sealed admin fields is set. The operator's cache drops it; it is read
	// live.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	SealedAdminCredential []byte `json:"sealedAdminCredential,omitempty"`
}

// ClusterInstance is one member of a ClusterPool: a real cluster that is
// built, handed out once, and destroyed.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cinst,categories=kobe
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Lease",type=string,JSONPath=`.spec.leaseRef.name`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend.type`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Health-Failures",type=integer,JSONPath=`.status.healthFailures`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the member's template.
	// +required
	Spec ClusterInstanceSpec `json:"spec"`

	// status is the observed member.
	// +optional
	Status ClusterInstanceStatus `json:"status,omitempty"`
}

// ClusterInstanceList is a list of ClusterInstances.
// +kubebuilder:object:root=true
type ClusterInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterInstance `json:"items"`
}

func init() {
	register(&ClusterInstance{}, &ClusterInstanceList{})
}
