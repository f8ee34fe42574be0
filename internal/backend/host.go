package backend

import (
	"fmt"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// HostBound is implemented by backends whose members live on the
// operator's own host (the local backend): processes of this boot, files on
// this disk. Another host's operator sees nothing of them, and would take a
// running member for a dead one and report destroyed one it never touched.
type HostBound interface {
	// Host names this host and boot, e.g. "<hostname>/<boot id>".
	Host() string
}

// HostCheck is what CheckHost found.
type HostCheck int

const (
	// HostHere: the member is this host's (or its backend is not host-bound).
	HostHere HostCheck = iota
	// HostUnrecorded: a member of a host-bound backend with no host recorded.
	HostUnrecorded
	// HostElsewhere: the member was started on another host.
	HostElsewhere
)

// CheckHost decides whether this operator may act on inst through b, a
// backend: never on a member another host's operator started. why, for
// HostElsewhere, names both hosts and the way out.
func CheckHost(inst *kobev1.ClusterInstance, b any) (check HostCheck, why string) {
	hb, ok := b.(HostBound)
	if !ok {
		return HostHere, ""
	}
	switch recorded := inst.Annotations[kobev1.AnnotationHost]; recorded {
	case hb.Host():
		return HostHere, ""
	case "":
		return HostUnrecorded, ""
	default:
		return HostElsewhere, fmt.Sprintf("the member was started on host %q; this operator runs on %q and can neither observe nor destroy it: "+
			"run the operator there, or, once its processes and data there are gone, remove the finalizer %s", recorded, hb.Host(), kobev1.FinalizerInstance)
	}
}
