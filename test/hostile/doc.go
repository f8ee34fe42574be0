// Package hostile is the hostile-holder suite: what a lease holder
// (system:masters of their member) tries, with the lease's own kubeconfig
// and nothing else, to get beyond the member. Each attack is written once
// here, black-box, and run against a member of each backend by the suites
// that build members with real nodes, on the members they already run (so
// that the attacks cost seconds, not members):
//
//   - test/localnodes (local backend, a node of processes on the operator's
//     host): TestLeasedMembersRunPods;
//   - test/incluster (kubernetes backend, node pods in the host cluster):
//     TestLeasedMemberWithANode.
//
// What each attack must find refused, and which fix it proves, is in the
// function's comment; docs/security.md maps guarantees to attacks. Attacks
// that depend on how a backend builds its network (the local nodes'
// nftables egress, the node pods' overlay and DNS guard) stay beside the
// harness that knows those addresses, and call Listener for their targets.
//
// Root only: the suites that call it run members with real nodes.
package hostile
