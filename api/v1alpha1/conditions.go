package v1alpha1

// Condition types. Event reasons equal condition reasons.
const (
	// ConditionReady is the summary condition of every kind.
	ConditionReady = "Ready"

	// ConditionWarm (pool): the warm target is met.
	ConditionWarm = "Warm"
	// ConditionCapacity (pool): the pool may create the members it wants.
	ConditionCapacity = "Capacity"
	// ConditionProvisioning (pool): members the pool creates become Ready;
	// False while members fail in a row (CreateFailures) or are reaped by
	// creatingTimeout again and again (MembersChurn).
	ConditionProvisioning = "Provisioning"
	// ConditionDemandCovered (pool): the warm target covers the measured
	// demand (status.demand.warmTarget); False: ShallowerThanDemand.
	ConditionDemandCovered = "DemandCovered"
	// ConditionNotImplemented (pool): a field is accepted but not acted on yet.
	ConditionNotImplemented = "FieldNotImplemented"
	// ConditionNetworkPolicyEnforced (kubernetes backend pool): a probe
	// connection under a deny-all NetworkPolicy failed while one without
	// succeeded, so the host cluster's CNI enforces the policy that
	// isolates each member.
	ConditionNetworkPolicyEnforced = "NetworkPolicyEnforced"
	// ConditionNodes (local and kubernetes backend pool): the pool's
	// members have real nodes, so their pods run; False says why not
	// (NodesNotRequested: the pool asks for none; NodesUnavailable: nodes
	// is unset and this operator cannot give members a node).
	ConditionNodes = "Nodes"
	// ConditionMemberLimits (local and kubernetes backend pool): the
	// limits each new member gets (status.memberLimits).
	ConditionMemberLimits = "MemberLimits"

	// ConditionProvisioned (instance): the backend reports the member built.
	ConditionProvisioned = "Provisioned"
	// ConditionHealthy (instance): the latest health probe passed.
	ConditionHealthy = "Healthy"
	// ConditionBootstrapsComplete (instance): every BootstrapConfig the pool
	// names is applied to the member (the BootstrapsComplete gate).
	ConditionBootstrapsComplete = "BootstrapsComplete"
	// ConditionFenced (instance): the bound member's API server was stopped
	// at the start of its teardown, so no credential of its lease works.
	ConditionFenced = "Fenced"
	// ConditionFrozen (instance): True while the member's processes are
	// frozen, or being frozen (spec.frozen); False, reason Thawed, once a
	// thawed member passed its health check and may be handed out again.
	// Absent on members never frozen.
	ConditionFrozen = "Frozen"

	// ConditionBound (lease): the lease holds a member.
	ConditionBound = "Bound"
	// ConditionEnded (lease): the lease is over; the reason says why.
	ConditionEnded = "Ended"
)

// Condition reasons.
const (
	// ReasonWarm: ready >= the warm target.
	ReasonWarm = "Warm"
	// ReasonFilling: not warm yet, members are coming up.
	ReasonFilling = "Filling"
	// ReasonReadinessSignalAbsent: no member ever passed a readiness gate, so
	// the pool will never warm; the message names the gate.
	ReasonReadinessSignalAbsent = "ReadinessSignalAbsent"
	// ReasonBackendFailing: the backend could not create members.
	ReasonBackendFailing = "BackendFailing"
	// ReasonBackendUnavailable: the pool's backend is not wired in this operator.
	ReasonBackendUnavailable = "BackendUnavailable"
	// ReasonCapacityAvailable: the pool may create what it wants.
	ReasonCapacityAvailable = "CapacityAvailable"
	// ReasonMaxClustersReached: wanted to create members, maxClusters forbade it.
	ReasonMaxClustersReached = "MaxClustersReached"
	// ReasonHostCapacityReached: the pool wanted to create members, and the
	// host's cap on its backend's members (--local-max-members) forbade it.
	ReasonHostCapacityReached = "HostCapacityReached"
	// ReasonCreateBackoff: members failed in a row, so the pool waits
	// before it creates the next (exponential, capped).
	ReasonCreateBackoff = "CreateBackoff"
	// ReasonMembersSucceeding: no member has failed since the last one
	// became Ready.
	ReasonMembersSucceeding = "MembersSucceeding"
	// ReasonCreateFailures: members failed to become Ready in a row.
	ReasonCreateFailures = "CreateFailures"
	// ReasonMembersChurn: members were reaped by creatingTimeout before
	// becoming Ready, again and again: creatingTimeout is shorter than a
	// member takes to build.
	ReasonMembersChurn = "MembersChurn"
	// ReasonDemandCovered: the warm target is at least what the measured
	// demand asks for (or nothing was measured yet).
	ReasonDemandCovered = "DemandCovered"
	// ReasonShallowerThanDemand: the warm target is below the measured
	// demand's; users will wait during a burst like the measured peak.
	ReasonShallowerThanDemand = "ShallowerThanDemand"
	// ReasonFieldNotImplemented: a spec field is accepted but not acted on.
	ReasonFieldNotImplemented = "FieldNotImplemented"
	// ReasonAllImplemented: every field set on the pool is acted on.
	ReasonAllImplemented = "AllImplemented"
	// ReasonNodesRun (pool Nodes True): members have real nodes.
	ReasonNodesRun = "NodesRun"
	// ReasonNodesNotRequested (pool Nodes False): the pool asks for
	// API-only members (nodes: 0, or a simulated node).
	ReasonNodesNotRequested = "NodesNotRequested"
	// ReasonNodesUnavailable (pool Nodes False): nodes is unset and the
	// operator cannot give members a node (the message says why).
	ReasonNodesUnavailable = "NodesUnavailable"
	// ReasonLimitsApplied (pool MemberLimits True): members get what the
	// pool asks, with the operator's defaults.
	ReasonLimitsApplied = "LimitsApplied"
	// ReasonLimitsCapped (pool MemberLimits True): the pool asks for more
	// than the operator's ceiling; members get the ceiling.
	ReasonLimitsCapped = "LimitsCapped"
	// ReasonLimitsNotEnforced (pool MemberLimits False): the wired backend
	// cannot enforce limits on this operator; members run without.
	ReasonLimitsNotEnforced = "LimitsNotEnforced"

	// ReasonCreating: the backend is building the member.
	ReasonCreating = "Creating"
	// ReasonProvisioned: the backend built the member.
	ReasonProvisioned = "Provisioned"
	// ReasonProvisionFailed: the backend reports the member failed.
	ReasonProvisionFailed = "ProvisionFailed"
	// ReasonBootstrapFailed: a BootstrapConfig can never be applied to the
	// member as it is; the member is destroyed and replaced.
	ReasonBootstrapFailed = "BootstrapFailed"
	// ReasonBootstrapJobsUnsupported (pool Capacity): a BootstrapConfig the
	// pool names runs a Job, which this operator cannot run; no member is
	// built, and lease requests are refused as for an unavailable backend.
	ReasonBootstrapJobsUnsupported = "BootstrapJobsUnsupported"
	// ReasonVersionUnavailable (pool Capacity): cluster.version names a
	// Kubernetes version the pool's backend cannot build in this operator;
	// no member is built or handed out (never one of another version), and
	// lease requests are refused as for an unavailable backend.
	ReasonVersionUnavailable = "VersionUnavailable"
	// ReasonNetworkPolicyEnforced (NetworkPolicyEnforced True): the probe
	// connection under a deny-all policy failed, the control one did not.
	ReasonNetworkPolicyEnforced = "NetworkPolicyEnforced"
	// ReasonNetworkPolicyNotEnforced: the probe connection under a deny-all
	// policy got through (NetworkPolicyEnforced False); as a Capacity
	// reason, the pool builds and hands out nothing because enforcement is
	// required and not proven (Unknown included).
	ReasonNetworkPolicyNotEnforced = "NetworkPolicyNotEnforced"
	// ReasonNetworkPolicyProbePending (NetworkPolicyEnforced Unknown): no
	// probe has finished yet for the pool's etcd image.
	ReasonNetworkPolicyProbePending = "NetworkPolicyProbePending"
	// ReasonNetworkPolicyUnproven (NetworkPolicyEnforced Unknown): the
	// probe proved nothing (its pods did not run, or the control connection
	// failed too); the message says why.
	ReasonNetworkPolicyUnproven = "NetworkPolicyUnproven"
	// ReasonBootstrapsApplying: the pool's BootstrapConfigs are being
	// applied (or one is missing, or a CRD of theirs is not served yet).
	ReasonBootstrapsApplying = "BootstrapsApplying"
	// ReasonBootstrapsApplied: every BootstrapConfig of the pool is applied.
	ReasonBootstrapsApplied = "BootstrapsApplied"
	// ReasonCreatingTimeout: the member stayed Creating past creatingTimeout.
	ReasonCreatingTimeout = "CreatingTimeout"
	// ReasonGatePassed / ReasonGatePending: a readiness gate's state.
	ReasonGatePassed  = "GatePassed"
	ReasonGatePending = "GatePending"
	// ReasonProbeSucceeded / ReasonProbeFailed: a health probe's outcome.
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
	// ReasonFrozen / ReasonThawing / ReasonThawed: the Frozen condition's
	// states (True; False while the thawed member's health is checked;
	// False once it passed).
	ReasonFrozen  = "Frozen"
	ReasonThawing = "Thawing"
	ReasonThawed  = "Thawed"
	// ReasonUnhealthy: the member failed failureThreshold probes in a row.
	ReasonUnhealthy = "Unhealthy"
	// ReasonAccessUnreadable: the member's sealed access material does not
	// open with the operator's key (Secret kobe-member-access-key was
	// replaced): no lease credential can be minted for it.
	ReasonAccessUnreadable = "AccessUnreadable"
	// ReasonLeaseEnded: the member's lease ended, so the member is destroyed.
	ReasonLeaseEnded = "LeaseEnded"
	// ReasonScaledDown: the pool no longer wants the member.
	ReasonScaledDown = "ScaledDown"
	// ReasonOutdated: the member was built from an older template and the
	// pool replaced it (rollout.onTemplateChange Recreate).
	ReasonOutdated = "Outdated"
	// ReasonIdleExpired: the member sat Ready longer than maxIdle and the
	// pool replaced it.
	ReasonIdleExpired = "IdleExpired"
	// ReasonPoolDeleted: the member's pool is gone.
	ReasonPoolDeleted = "PoolDeleted"
	// ReasonNotAdoptable: after a restart the member could not be verified.
	ReasonNotAdoptable = "NotAdoptable"
	// ReasonAdopted: after a restart the member was verified and kept.
	ReasonAdopted = "Adopted"
	// ReasonFenced: the member's API server is stopped (condition Fenced).
	ReasonFenced = "Fenced"
	// ReasonFenceFailed: stopping the member's API server failed; it is
	// tried again before each Delete, which cuts access too.
	ReasonFenceFailed = "FenceFailed"
	// ReasonCleanupVerified: a VerifiedDestroy teardown proved every
	// resource of the member absent; the receipt says which.
	ReasonCleanupVerified = "CleanupVerified"
	// ReasonCleanupUnproven: a VerifiedDestroy teardown could not prove
	// every resource absent; the member is Quarantined and retried on a
	// backoff (or at once with the kobe.kunobi.ninja/retry-cleanup
	// annotation).
	ReasonCleanupUnproven = "CleanupUnproven"
	// ReasonHostMismatch: the member was started on another host than this
	// operator's (its kobe.kunobi.ninja/host annotation); this operator can
	// neither observe nor destroy it.
	ReasonHostMismatch = "HostMismatch"

	// ReasonBound: the lease was bound to a member.
	ReasonBound = "Bound"
	// ReasonQueued: the lease waits for a member.
	ReasonQueued = "Queued"
	// ReasonReleased: the holder released the lease.
	ReasonReleased = "Released"
	// ReasonExpired: the lease reached expiresAt.
	ReasonExpired = "Expired"
	// ReasonHeartbeatMissed: the lease's holder sent no heartbeat within
	// spec.heartbeatTimeout.
	ReasonHeartbeatMissed = "HeartbeatMissed"
	// ReasonIdle: nothing went through the connect proxy to the lease's
	// member within spec.idleTimeout.
	ReasonIdle = "Idle"
	// ReasonQueueTimeout: the lease waited longer than the pool's queueTimeout.
	ReasonQueueTimeout = "QueueTimeout"
	// ReasonPoolNotFound: the lease names a pool that does not exist.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonInstanceLost: the bound member disappeared or failed.
	ReasonInstanceLost = "InstanceLost"
	// ReasonCleanupModeUnsupported: the lease asks for a cleanup mode no
	// wired backend can prove; it is refused before binding.
	ReasonCleanupModeUnsupported = "CleanupModeUnsupported"
	// ReasonKubeconfigFailed: the lease was bound but no kubeconfig could be
	// minted for it, so it was released at once.
	ReasonKubeconfigFailed = "KubeconfigFailed"

	// ReasonPolicyReady / ReasonPolicyInvalid (policy).
	ReasonPolicyReady   = "PolicyReady"
	ReasonPolicyInvalid = "PolicyInvalid"
	// ReasonSecretNotFound: the token Secret is missing.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonIssuerUnreachable: OIDC discovery failed.
	ReasonIssuerUnreachable = "IssuerUnreachable"
	// ReasonRuleMatchesEveryToken: an oidc or serviceAccount rule has no
	// match and no matchAny: true, so it would admit every token the issuer
	// signs; the rule authenticates nobody and the message names it.
	ReasonRuleMatchesEveryToken = "RuleMatchesEveryToken"
)

// Event reasons that are not condition reasons: actions a controller took.
const ()
