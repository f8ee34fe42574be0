// Package podsecurity renders a member API server's admission configuration
// for its Pod Security level: the PodSecurity plugin's defaults and the
// static ValidatingAdmissionPolicies (loaded from files, so a lease holder
// who is system:masters can neither see nor remove them) that keep the level
// from being lowered, keep PersistentVolumes from naming the node's files,
// and refuse network volumes unless the pool allows them.
// It is pure rendering, shared by the backends; writing the files and
// starting the API server belong to them.
package podsecurity
