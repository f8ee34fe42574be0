package wire

// ErrorBody is the body of every non-2xx answer:
// {"error": "short text", "detail": "what to do", "reason": "PoolNotFound"}.
type ErrorBody struct {
	// Message is short text, e.g. "extension limit reached".
	Message string `json:"error"`
	// Detail says what to do about it.
	Detail string `json:"detail,omitempty"`
	// Reason is one of the Reason* constants, for programs to branch on.
	Reason string `json:"reason,omitempty"`
}

// Reasons of ErrorBody.Reason, one per way a request fails. The HTTP status
// each goes with is in its comment.
const (
	// ReasonBadRequest (400): a malformed body, name, TTL, lease id or alias.
	ReasonBadRequest = "BadRequest"
	// ReasonUnauthorized (401): no credentials, or credentials that do not verify.
	ReasonUnauthorized = "Unauthorized"
	// ReasonPoolNotAllowed (403): the caller's policy does not allow the
	// pool, whether or not it exists.
	ReasonPoolNotAllowed = "PoolNotAllowed"
	// ReasonPoolNotFound (404): no such pool, among those the caller may use.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonLeaseNotFound (404): the caller holds no lease with that id or alias.
	ReasonLeaseNotFound = "LeaseNotFound"
	// ReasonNotFound (404): no such route.
	ReasonNotFound = "NotFound"
	// ReasonMethodNotAllowed (405): the route exists, the method does not.
	ReasonMethodNotAllowed = "MethodNotAllowed"
	// ReasonExtensionLimitReached (409): the lease used all its extensions.
	ReasonExtensionLimitReached = "ExtensionLimitReached"
	// ReasonExtensionRefused (409): the lease cannot be extended now (not
	// Bound, or past its maximum TTL).
	ReasonExtensionRefused = "ExtensionRefused"
	// ReasonAliasInUse (409): another active lease of the caller has the alias.
	ReasonAliasInUse = "AliasInUse"
	// ReasonBodyTooLarge (413): the request body exceeds the server's limit.
	ReasonBodyTooLarge = "BodyTooLarge"
	// ReasonConcurrentLeaseLimit (429, Retry-After): the caller holds as many
	// active leases as its policy allows.
	ReasonConcurrentLeaseLimit = "ConcurrentLeaseLimit"
	// ReasonQueuedLeaseLimit (429, Retry-After): the caller, whose policy
	// sets no maxConcurrentLeases, has as many leases waiting for a member
	// as the server allows (--max-queued-per-owner, default 10).
	ReasonQueuedLeaseLimit = "QueuedLeaseLimit"
	// ReasonTooManyRequests (429, Retry-After): the server's in-flight limit.
	ReasonTooManyRequests = "TooManyRequests"
	// ReasonPoolBeingDeleted (503, Retry-After): the pool is being deleted.
	ReasonPoolBeingDeleted = "PoolBeingDeleted"
	// ReasonBackendUnavailable (503, Retry-After): the pool's backend cannot
	// create members (its Capacity condition is False, BackendUnavailable).
	ReasonBackendUnavailable = "BackendUnavailable"
	// ReasonCleanupModeUnsupported (422): the lease asks for cleanupMode
	// VerifiedDestroy and the pool's backend cannot prove a teardown.
	ReasonCleanupModeUnsupported = "CleanupModeUnsupported"
	// ReasonPoolQuarantined (503, Retry-After): the pool is at its cap with
	// every member Quarantined.
	ReasonPoolQuarantined = "PoolQuarantined"
	// ReasonInternalError (500): the server failed; it logged why.
	ReasonInternalError = "InternalError"
	// ReasonProxyNotConfigured (503): the lease's member is reached through
	// kobe's connect proxy, which needs the API served over TLS.
	ReasonProxyNotConfigured = "ProxyNotConfigured"
	// ReasonForbidden (403): a connect request's client certificate is not
	// the lease's (wrong lease, wrong member, or not signed by it).
	ReasonForbidden = "Forbidden"
	// ReasonLeaseNotBound (409): the lease holds no member that names it.
	ReasonLeaseNotBound = "LeaseNotBound"
	// ReasonLeaseEnded (410): the lease was released, expired or is past its
	// expiry.
	ReasonLeaseEnded = "LeaseEnded"
	// ReasonHeartbeatNotEnabled (409): a heartbeat for a lease created
	// without heartbeat_timeout.
	ReasonHeartbeatNotEnabled = "HeartbeatNotEnabled"
	// ReasonMemberUnavailable (503, Retry-After): the lease's member is being
	// deleted or cannot be reached now.
	ReasonMemberUnavailable = "MemberUnavailable"
	// ReasonHostAPIUnavailable (503, Retry-After): the host cluster's API
	// server, where kobe keeps leases and members, did not answer in time or
	// asked kobe to slow down. Nothing was handed out by this request
	// (GET /v1/leases shows whether its lease was recorded).
	ReasonHostAPIUnavailable = "HostAPIUnavailable"
	// ReasonNotAnImageArchive (400): a body loaded into a member is not an
	// image archive kobe reads (docker-archive or OCI, plain or gzip), or
	// names no image.
	ReasonNotAnImageArchive = "NotAnImageArchive"
	// ReasonDigestMismatch (400): the body is not what its Content-Digest
	// header (and the signature over it) says.
	ReasonDigestMismatch = "DigestMismatch"
	// ReasonImagesUnsupported (409): the lease's member has no nodes to load
	// images into (a sim member, or a local or kubernetes member without
	// nodes).
	ReasonImagesUnsupported = "ImagesUnsupported"
	// ReasonImportFailed (422): a node of the member refused the archive
	// (its disk full, or content containerd cannot unpack); the detail says
	// what the node answered.
	ReasonImportFailed = "ImportFailed"
)

// UnavailableRetryAfter is the Retry-After header, in seconds, of a 503
// answered because a pool cannot serve now.
const UnavailableRetryAfter = "30"
