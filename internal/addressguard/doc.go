// Package addressguard renders the static admission policy that keeps every
// address a member's API server connects to inside that member.
//
// A lease holder is system:masters of the member's API server, and that API
// server dials addresses written in objects: a pod's status.podIP (pods/proxy,
// and the Service proxy through EndpointSlices), a node's InternalIP (nodes/
// proxy, logs, exec), Endpoints and EndpointSlices, webhook and conversion
// URLs. Without this policy a forged status turns the API server into a
// proxy to anything its host reaches. The policy is range-based, never
// user-based: a holder may impersonate any user, system:nodes and
// system:apiserver included. It imports nothing of kobe.
//
// The policy holds only together with APIServerFlags: they make the API
// server reach a Service (webhooks, conversion webhooks, aggregated APIs)
// through its endpoints, which the policy checks, instead of its cluster IP
// or, for an ExternalName Service, any name at all.
package addressguard
