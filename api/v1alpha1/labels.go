package v1alpha1

// Labels, annotations and finalizers kobe puts on the objects it creates.
// They are part of the API: clients select on them and other replicas of the
// operator read them, so they live here rather than beside the code that
// writes them.
const (
	// LabelPool names the pool of a ClusterInstance or ClusterLease.
	LabelPool = "kobe.kunobi.ninja/pool"
	// LabelInstance names the ClusterInstance a Secret belongs to.
	LabelInstance = "kobe.kunobi.ninja/instance"
	// LabelLease names the ClusterLease bound to a ClusterInstance.
	LabelLease = "kobe.kunobi.ninja/lease"
	// LabelRequesterHash carries a hash of a lease's requester (policy and
	// identity), so that a caller's leases can be listed from the API server
	// with a label selector: identities do not fit label values.
	LabelRequesterHash = "kobe.kunobi.ninja/requester-hash"
	// LabelAlias carries a caller's own name for a lease (the `alias` of
	// POST /v1/leases), unique among one requester's active leases.
	LabelAlias = "kobe.kunobi.ninja/alias"
	// LabelMemberUID carries the UID of the ClusterInstance a host-cluster
	// object (pod, Service, Secret, NetworkPolicy, PodDisruptionBudget) was
	// made for: teardown and the leak sweep find a member's objects by it.
	LabelMemberUID = "kobe.kunobi.ninja/member-uid"

	// LabelBootstrap names the BootstrapConfig a bootstrap Job (and its
	// kubeconfig Secret) runs; with LabelMemberUID it finds a member's Jobs.
	LabelBootstrap = "kobe.kunobi.ninja/bootstrap"
	// LabelBootstrapFor, on a bootstrap Job's pods, is the UID of the
	// member they bootstrap: the member's NetworkPolicy (kubernetes
	// backend) admits them to its API port.
	LabelBootstrapFor = "kobe.kunobi.ninja/bootstrap-for"

	// AnnotationFastPath marks a lease the HTTP API is binding on the
	// request path; the lease controller leaves it alone for a short grace.
	AnnotationFastPath = "kobe.kunobi.ninja/fast-path"
	// AnnotationQueuedAt records when a lease was requested, in RFC 3339
	// with nanoseconds (UTC). Queue order and queue timeout use it; a lease
	// without it (made with kubectl) falls back to its creationTimestamp,
	// which has one-second resolution.
	AnnotationQueuedAt = "kobe.kunobi.ninja/queued-at"
	// AnnotationHost records, on a member of a backend tied to one host
	// (local), the host and boot it was started on ("<hostname>/<boot id>"),
	// before anything of it is started. An operator elsewhere neither
	// observes nor destroys it.
	AnnotationHost = "kobe.kunobi.ninja/host"

	// AnnotationRetryCleanup, set on a Quarantined ClusterInstance to any
	// new value (kobe admin retry-cleanup writes the time), makes the
	// operator retry its verified teardown at once instead of at the next
	// backoff step. The value last acted on is status.cleanup.retryRequest.
	AnnotationRetryCleanup = "kobe.kunobi.ninja/retry-cleanup"
	// LabelCleanupReceipt marks the ConfigMaps holding cleanup receipts
	// (value "true"); the operator deletes them after their retention.
	LabelCleanupReceipt = "kobe.kunobi.ninja/cleanup-receipt"
	// AnnotationKeepUntil, on a cleanup receipt, is when it may be deleted
	// (RFC 3339).
	AnnotationKeepUntil = "kobe.kunobi.ninja/keep-until"

	// FinalizerInstance holds a ClusterInstance until its backend reports it gone.
	FinalizerInstance = "kobe.kunobi.ninja/destroy-member"
	// FinalizerPool holds a ClusterPool until its unbound members are gone.
	FinalizerPool = "kobe.kunobi.ninja/pool-cleanup"
)
