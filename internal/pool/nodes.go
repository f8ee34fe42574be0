package pool

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// NodeDefault is what a backend gives a member whose pool leaves its nodes
// field unset (backend.NodeDefaulter): Count real nodes, and when that is
// 0, Why a member gets none.
type NodeDefault struct {
	Count int32
	Why   string
}

// WithDefaultNodes is the backend spec a new member of a pool with this
// spec is built with: the pool's own, with an unset nodes field resolved
// to def.Count (local members with scheduling, a kwok node, get none). A
// resolved 0 stays unset, so that a pool written before nodes had a
// default keeps its template hash where nodes cannot run.
func WithDefaultNodes(b kobev1.BackendSpec, def NodeDefault) kobev1.BackendSpec {
	out := *b.DeepCopy()
	if def.Count <= 0 || nodesField(b) != nil {
		return out
	}
	switch b.Type {
	case kobev1.BackendLocal:
		if out.Local == nil {
			out.Local = &kobev1.LocalBackendSpec{}
		}
		if !out.Local.Scheduling {
			out.Local.Nodes = ptr.To(def.Count)
		}
	case kobev1.BackendKubernetes:
		if out.Kubernetes == nil {
			out.Kubernetes = &kobev1.KubernetesBackendSpec{}
		}
		out.Kubernetes.Nodes = ptr.To(def.Count)
	}
	return out
}

// hasNodesField reports whether members of this backend type can have real
// nodes at all (the Nodes condition is about nothing else).
func hasNodesField(t kobev1.BackendType) bool {
	return t == kobev1.BackendLocal || t == kobev1.BackendKubernetes
}

// nodesCondition says whether the pool's members run pods, and why not: a
// pool that leaves nodes unset on an operator that cannot run nodes gets
// API-only members, which a person must be told (a chart's pods would stay
// Pending in them). nil for backends without nodes.
func nodesCondition(spec *kobev1.ClusterPoolSpec, def NodeDefault) *metav1.Condition {
	if !hasNodesField(spec.Backend.Type) {
		return nil
	}
	field := "backend." + string(spec.Backend.Type) + ".nodes"
	set := nodesField(spec.Backend)
	n := RealNodes(WithDefaultNodes(spec.Backend, def))
	c := &metav1.Condition{Type: kobev1.ConditionNodes, Status: metav1.ConditionTrue, Reason: kobev1.ReasonNodesRun}
	switch {
	case n > 0 && set != nil:
		c.Message = fmt.Sprintf("each member has %d node(s) (%s)", n, field)
	case n > 0:
		c.Message = fmt.Sprintf("each member has %d node(s): %s is unset, this operator's default", n, field)
	case set != nil:
		c.Status, c.Reason = metav1.ConditionFalse, kobev1.ReasonNodesNotRequested
		c.Message = fmt.Sprintf("API-only members (%s: 0): pods are never run", field)
	case spec.Backend.Local != nil && spec.Backend.Local.Scheduling:
		c.Status, c.Reason = metav1.ConditionFalse, kobev1.ReasonNodesNotRequested
		c.Message = "members have a simulated node (backend.local.scheduling): pods are scheduled and reported Running, never run"
	default:
		c.Status, c.Reason = metav1.ConditionFalse, kobev1.ReasonNodesUnavailable
		c.Message = fmt.Sprintf("members have no node, so their pods never run: %s; set %s: 0 to ask for API-only members", def.Why, field)
	}
	return c
}
