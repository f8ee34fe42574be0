// Package incluster is the machinery shared by backends whose member is a set
// of host-cluster objects (kubernetes today; k3s and k0s next): a Service, a
// PKI Secret, a NetworkPolicy, a PodDisruptionBudget and bare control-plane
// pods (with nodes, node pods and the Service of their egress proxies too),
// all labelled and owned by the ClusterInstance. It creates them step
// by step and idempotently, observes them, deletes them by owner and label
// with UID preconditions, and sweeps those nobody owns.
//
// What runs in the pods is a Template's business (the only thing that
// differs between backends); this package must not know any component's
// flags, and must not import controllers or the HTTP API.
package incluster
