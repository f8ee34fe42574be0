package pool

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// LimitPolicy is the operator's word on member limits (issue 42): what a
// member gets when its pool's cluster.limits leaves a field unset
// (Default), and the most it gets whatever the pool asks (Ceiling). A zero
// field of either is no default, no ceiling.
type LimitPolicy struct {
	Default kobev1.MemberLimits
	Ceiling kobev1.MemberLimits
}

// limitedBackend reports whether members of backend type t run on a host
// they could exhaust: the others (sim) get no limits, so that their
// template hash and status say nothing that is not enforced.
func limitedBackend(t kobev1.BackendType) bool {
	return t == kobev1.BackendLocal || t == kobev1.BackendKubernetes
}

// Resolve is the limits a member of a pool asking for asked gets: each
// field the pool's or else the default, at most the ceiling. capped says,
// for people, which asks the ceiling cut.
func (lp LimitPolicy) Resolve(asked *kobev1.MemberLimits) (out kobev1.MemberLimits, capped []string) {
	if asked == nil {
		asked = &kobev1.MemberLimits{}
	}
	quantity := func(name string, ask, def, ceil *resource.Quantity) *resource.Quantity {
		v := ask
		if v == nil {
			v = def
		}
		if v == nil || v.IsZero() {
			if ceil == nil || ceil.IsZero() {
				return nil
			}
			v = ceil
		}
		if ceil != nil && !ceil.IsZero() && v.Cmp(*ceil) > 0 {
			if ask != nil {
				capped = append(capped, fmt.Sprintf("%s %s capped at the operator's %s", name, ask.String(), ceil.String()))
			}
			v = ceil
		}
		return ptr.To(v.DeepCopy())
	}
	count := func(name string, ask, def, ceil *int64) *int64 {
		v := ask
		if v == nil {
			v = def
		}
		if v == nil || *v == 0 {
			if ceil == nil || *ceil == 0 {
				return nil
			}
			v = ceil
		}
		if ceil != nil && *ceil > 0 && *v > *ceil {
			if ask != nil {
				capped = append(capped, fmt.Sprintf("%s %d capped at the operator's %d", name, *ask, *ceil))
			}
			v = ceil
		}
		return ptr.To(*v)
	}
	d, c := lp.Default, lp.Ceiling
	out.Memory = quantity("memory", asked.Memory, d.Memory, c.Memory)
	out.Processes = count("processes", asked.Processes, d.Processes, c.Processes)
	out.PodProcesses = count("podProcesses", asked.PodProcesses, d.PodProcesses, c.PodProcesses)
	out.Disk = quantity("disk", asked.Disk, d.Disk, c.Disk)
	// A pod cannot run more than its member.
	if out.Processes != nil && out.PodProcesses != nil && *out.PodProcesses > *out.Processes {
		out.PodProcesses = ptr.To(*out.Processes)
	}
	return out, capped
}

// memberLimits is what new members of the pool are built with and the
// condition that says so; nil for a backend that runs nothing on a host
// (sim), and when neither the pool nor the operator sets any limit.
// refusal, when not empty, is why the wired backend cannot enforce them.
func memberLimits(spec *kobev1.ClusterPoolSpec, lp LimitPolicy, refusal string) (*kobev1.MemberLimits, *metav1.Condition) {
	if !limitedBackend(spec.Backend.Type) {
		return nil, nil
	}
	out, capped := lp.Resolve(spec.Cluster.Limits)
	if out == (kobev1.MemberLimits{}) {
		// No limit anywhere: members as before limits existed, and their
		// template hash with them.
		return nil, nil
	}
	if refusal != "" {
		// Members are built, unbounded, and the pool says so: a limit
		// written on a member that nothing enforces would be a lie.
		return nil, &metav1.Condition{Type: kobev1.ConditionMemberLimits, Status: metav1.ConditionFalse, Reason: kobev1.ReasonLimitsNotEnforced,
			Message: "members run without limits: " + refusal + " (asked: " + DescribeLimits(out) + ")"}
	}
	c := &metav1.Condition{Type: kobev1.ConditionMemberLimits, Status: metav1.ConditionTrue, Reason: kobev1.ReasonLimitsApplied,
		Message: "each member: " + DescribeLimits(out)}
	if len(capped) > 0 {
		c.Reason = kobev1.ReasonLimitsCapped
		c.Message += " (" + strings.Join(capped, "; ") + ")"
	}
	return &out, c
}

// DescribeLimits says limits in a line, for conditions and logs.
func DescribeLimits(l kobev1.MemberLimits) string {
	var parts []string
	if l.Memory != nil {
		parts = append(parts, "memory "+l.Memory.String())
	}
	if l.Processes != nil {
		parts = append(parts, fmt.Sprintf("%d processes", *l.Processes))
	}
	if l.PodProcesses != nil {
		parts = append(parts, fmt.Sprintf("%d per pod", *l.PodProcesses))
	}
	if l.Disk != nil {
		parts = append(parts, "disk "+l.Disk.String())
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}
