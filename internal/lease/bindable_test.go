package lease

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestBindable(t *testing.T) {
	member := func(phase kobev1.InstancePhase, mutate ...func(*kobev1.ClusterInstance)) *kobev1.ClusterInstance {
		m := &kobev1.ClusterInstance{Status: kobev1.ClusterInstanceStatus{Phase: phase}}
		for _, f := range mutate {
			f(m)
		}
		return m
	}
	bound := func(m *kobev1.ClusterInstance) { m.Spec.LeaseRef = &kobev1.LeaseBinding{Name: "l", UID: "l-uid"} }
	deleting := func(m *kobev1.ClusterInstance) { m.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }
	askedToFreeze := func(m *kobev1.ClusterInstance) { m.Spec.Frozen = true }
	frozenCond := func(status metav1.ConditionStatus, reason string) func(*kobev1.ClusterInstance) {
		return func(m *kobev1.ClusterInstance) {
			m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: kobev1.ConditionFrozen, Status: status, Reason: reason})
		}
	}
	for _, tc := range []struct {
		name string
		inst *kobev1.ClusterInstance
		want bool
	}{
		{"Ready and free", member(kobev1.InstanceReady), true},
		{"Ready but bound", member(kobev1.InstanceReady, bound), false},
		{"Ready but being deleted", member(kobev1.InstanceReady, deleting), false},
		{"Creating", member(kobev1.InstanceCreating), false},
		{"Leased", member(kobev1.InstanceLeased, bound), false},
		{"Recycling", member(kobev1.InstanceRecycling), false},
		{"Quarantined", member(kobev1.InstanceQuarantined), false},
		{"Ready, asked to freeze", member(kobev1.InstanceReady, askedToFreeze), false},
		{"Ready, frozen", member(kobev1.InstanceReady, frozenCond(metav1.ConditionTrue, kobev1.ReasonFrozen)), false},
		{"Ready, thawing (health not checked yet)", member(kobev1.InstanceReady, frozenCond(metav1.ConditionFalse, kobev1.ReasonThawing)), false},
		{"Ready, thawed and checked", member(kobev1.InstanceReady, frozenCond(metav1.ConditionFalse, kobev1.ReasonThawed)), true},
		{"Ready, thawed, asked to freeze again", member(kobev1.InstanceReady, frozenCond(metav1.ConditionFalse, kobev1.ReasonThawed), askedToFreeze), false},
		{"Ready, Frozen condition with an unknown reason", member(kobev1.InstanceReady, frozenCond(metav1.ConditionFalse, "Other")), false},
	} {
		if got := Bindable(tc.inst); got != tc.want {
			t.Errorf("%s: Bindable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCheckCleanupMode(t *testing.T) {
	onlyLocal := func(b kobev1.BackendType) bool { return b == kobev1.BackendLocal }
	pool := func(b kobev1.BackendType) *kobev1.ClusterPool {
		return &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: b}}}
	}
	for _, tc := range []struct {
		name       string
		mode       kobev1.CleanupMode
		pool       *kobev1.ClusterPool
		verifiable func(kobev1.BackendType) bool
		refusal    string // "" when allowed
	}{
		{"Standard, nothing verifiable", kobev1.CleanupStandard, pool(kobev1.BackendSim), nil, ""},
		{"no mode is Standard", "", pool(kobev1.BackendSim), nil, ""},
		{"VerifiedDestroy on a verifiable backend", kobev1.CleanupVerifiedDestroy, pool(kobev1.BackendLocal), onlyLocal, ""},
		{"VerifiedDestroy, pool not known yet", kobev1.CleanupVerifiedDestroy, nil, onlyLocal, ""},
		{"VerifiedDestroy on a backend that cannot prove it", kobev1.CleanupVerifiedDestroy, pool(kobev1.BackendSim), onlyLocal, `pool p uses backend "sim"`},
		{"VerifiedDestroy, no verifiable backend wired", kobev1.CleanupVerifiedDestroy, pool(kobev1.BackendLocal), nil, "no backend wired"},
		{"VerifiedDestroy, no verifiable backend, pool not known", kobev1.CleanupVerifiedDestroy, nil, nil, "no backend wired"},
	} {
		err := CheckCleanupMode(tc.mode, tc.pool, tc.verifiable)
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refusal != "" && (!errors.Is(err, ErrCleanupModeUnsupported) || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%s: %v, want ErrCleanupModeUnsupported saying %q", tc.name, err, tc.refusal)
		}
	}
}

func TestServesCleanup(t *testing.T) {
	onlyLocal := func(b kobev1.BackendType) bool { return b == kobev1.BackendLocal }
	member := func(b kobev1.BackendType, manifest bool) *kobev1.ClusterInstance {
		m := &kobev1.ClusterInstance{Spec: kobev1.ClusterInstanceSpec{Backend: kobev1.BackendSpec{Type: b}}}
		if manifest {
			m.Status.CreationManifest = &kobev1.CreationManifest{Resources: []kobev1.ManifestResource{{Kind: "Process", Name: "kube-apiserver"}}}
		}
		return m
	}
	for _, tc := range []struct {
		name       string
		inst       *kobev1.ClusterInstance
		mode       kobev1.CleanupMode
		verifiable func(kobev1.BackendType) bool
		want       bool
	}{
		{"Standard takes any member", member(kobev1.BackendSim, false), kobev1.CleanupStandard, nil, true},
		{"VerifiedDestroy: verifiable backend with its manifest", member(kobev1.BackendLocal, true), kobev1.CleanupVerifiedDestroy, onlyLocal, true},
		{"VerifiedDestroy: no manifest recorded", member(kobev1.BackendLocal, false), kobev1.CleanupVerifiedDestroy, onlyLocal, false},
		{"VerifiedDestroy: backend cannot prove it", member(kobev1.BackendSim, true), kobev1.CleanupVerifiedDestroy, onlyLocal, false},
		{"VerifiedDestroy: nothing verifiable wired", member(kobev1.BackendLocal, true), kobev1.CleanupVerifiedDestroy, nil, false},
	} {
		if got := ServesCleanup(tc.inst, tc.mode, tc.verifiable); got != tc.want {
			t.Errorf("%s: ServesCleanup = %v, want %v", tc.name, got, tc.want)
		}
	}
}
