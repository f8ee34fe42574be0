package pool

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// NotImplemented names every field set on the pool that kobe accepts but
// does not act on yet, each with what happens instead. Backend-specific
// fields are judged only when the backend is wired.
func NotImplemented(spec *kobev1.ClusterPoolSpec, wired bool, b Capabilities) []string {
	var out []string
	if spec.Snapshot != nil {
		out = append(out, "snapshot (members are not restored from Velero backups)")
	}
	if !wired {
		return out
	}
	if s := spec.Cluster.Servers; s != nil && b.MaxServers > 0 && *s > b.MaxServers {
		out = append(out, fmt.Sprintf("cluster.servers %d (the %s backend runs %d server per member)", *s, spec.Backend.Type, b.MaxServers))
	}
	if l := spec.Backend.Local; l != nil && l.Scheduling && !b.Scheduling {
		out = append(out, "backend.local.scheduling (this local backend runs no kube-scheduler or nodes)")
	}
	if spec.Warm != nil && spec.Warm.Running != nil && !b.Freezing {
		why := b.FreezingRefusal
		if why == "" {
			why = "the " + string(spec.Backend.Type) + " backend does not freeze members"
		}
		out = append(out, "warm.running (every warm member runs: "+why+")")
	}
	return out
}

// VersionRefusal says why the pool's cluster.version cannot be built by its
// backend in this operator, naming the versions it can build; "" when it can
// (or the backend honours any version, or none is asked for). A refused
// version is never replaced by another: the pool builds and hands out
// nothing.
func VersionRefusal(spec *kobev1.ClusterPoolSpec, b Capabilities) string {
	v := spec.Cluster.Version
	if v == "" || len(b.KubernetesVersions) == 0 || slices.Contains(b.KubernetesVersions, strings.TrimPrefix(v, "v")) {
		return ""
	}
	return fmt.Sprintf("cluster.version %q is not a Kubernetes version the %s backend of this operator builds (it has %s)",
		v, spec.Backend.Type, strings.Join(b.KubernetesVersions, ", "))
}

// notImplementedCondition names the fields NotImplemented finds, if any.
func notImplementedCondition(spec *kobev1.ClusterPoolSpec, wired bool, b Capabilities) metav1.Condition {
	c := metav1.Condition{Type: kobev1.ConditionNotImplemented, Status: metav1.ConditionFalse,
		Reason: kobev1.ReasonAllImplemented, Message: "every field set on the pool is acted on"}
	if fields := NotImplemented(spec, wired, b); len(fields) > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, kobev1.ReasonFieldNotImplemented
		c.Message = "set but not acted on: " + strings.Join(fields, "; ")
	}
	return c
}
