//go:build heavy

package scaling

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestMaxIdleRebuildsReadyMembers: a member Ready for maxIdle is replaced
// surge-style: its successor is Ready before it goes, so the pool of one
// never shows 0 Ready (a watch sees every status the operator wrote).
func TestMaxIdleRebuildsReadyMembers(t *testing.T) {
	t.Parallel()
	const (
		name    = "idle"
		maxIdle = 10 * time.Second
	)
	start := time.Now()
	pools := watchPool(t, namespace, name)
	members := watchMembers(t, namespace, name)
	p := simPool(namespace, name, kobev1.SimBackendSpec{ReadyAfter: dur(2 * time.Second)})
	p.Spec.Size = ptr.To[int32](1)
	p.Spec.MaxIdle = dur(maxIdle)
	createPool(t, p)

	waitPool(t, namespace, name, time.Minute, "1 Ready", func(p *kobev1.ClusterPool) error {
		if p.Status.Ready != 1 {
			return errors.New("not Ready")
		}
		return nil
	})
	ms, err := listMembers(t.Context(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("%d members, want 1", len(ms))
	}
	first := ms[0].Name
	t.Logf("%s: %s Ready", since(start), first)

	testenv.Eventually(t, time.Minute, fmt.Sprintf("%s replaced by a new Ready member", first), func() error {
		ms, err := listMembers(t.Context(), namespace, name)
		if err != nil {
			return err
		}
		var ready []string
		for _, m := range ms {
			if m.Name == first {
				return fmt.Errorf("%s still there (%s)", first, m.Status.Phase)
			}
			if m.Status.Phase == kobev1.InstanceReady {
				ready = append(ready, m.Name)
			}
		}
		if len(ready) == 0 {
			return errors.New("no Ready member")
		}
		return nil
	})
	t.Logf("%s: %s replaced", since(start), first)

	// The old member went only after it had been Ready for maxIdle, and
	// only once its successor was Ready.
	var readyAt *kobev1.ClusterInstance
	successorReady := false
	retired := false
	for _, e := range members.snapshot(t) {
		m := e.obj
		switch {
		case m.Name != first:
			if m.Status.Phase == kobev1.InstanceReady && m.DeletionTimestamp == nil {
				successorReady = true
			}
		case m.DeletionTimestamp == nil && m.Status.Phase == kobev1.InstanceReady:
			readyAt = m
		case !retired && readyAt != nil:
			retired = true
			if !successorReady {
				t.Errorf("%s was retired (%s, deleted %v) before another member was Ready", first, m.Status.Phase, m.DeletionTimestamp)
			}
			// The deletion timestamp is truncated to the second, as is
			// lastPhaseChange, so it is never early by truncation.
			when := e.at
			if m.DeletionTimestamp != nil {
				when = m.DeletionTimestamp.Time
			}
			if lpc := readyAt.Status.LastPhaseChange; lpc == nil || when.Before(lpc.Add(maxIdle)) {
				t.Errorf("%s Ready since %v was retired at %s, before maxIdle %s", first, lpc, when.UTC(), maxIdle)
			}
		}
	}
	if !retired {
		t.Errorf("the watch never saw %s Ready then retired", first)
	}
	everReady, outdated := false, int32(0)
	for _, e := range pools.snapshot(t) {
		st := e.obj.Status
		if st.Ready > 0 {
			everReady = true
		} else if everReady && e.typ != watch.Deleted {
			t.Errorf("the pool showed 0 Ready at %s while rebuilding (%s)", e.at.UTC(), brief(e.obj))
		}
		outdated = max(outdated, st.Outdated)
	}
	if outdated < 1 {
		t.Error("status.outdated never counted the idle member")
	}
	waitPool(t, namespace, name, 30*time.Second, "nothing outdated", func(p *kobev1.ClusterPool) error {
		if p.Status.Outdated != 0 {
			return errors.New("outdated members left")
		}
		return nil
	})
}

// TestTemplateChangeReplacesMembersSurgeStyle: on a local pool of 2,
// changing a template field replaces both members with members of the new
// template, one at a time beyond the target (maxSurge 1), while the pool
// never shows fewer than 2 Ready; a lease then gets a new member, whose
// kubeconfig works with kubectl and whose API server enforces the new
// Pod Security level.
func TestTemplateChangeReplacesMembersSurgeStyle(t *testing.T) {
	t.Parallel()
	const name = "rollout"
	start := time.Now()
	pools := watchPool(t, namespace, name)
	members := watchMembers(t, namespace, name)
	p := &kobev1.ClusterPool{}
	p.Name, p.Namespace = name, namespace
	p.Spec.Size = ptr.To[int32](2)
	p.Spec.TTL = dur(30 * time.Minute)
	p.Spec.Backend.Type = kobev1.BackendLocal
	// Both run: the lease after the rollout expects a bind at once.
	p.Spec.Warm = &kobev1.WarmSpec{Running: ptr.To[int32](2)}
	createPool(t, p)

	before := waitPool(t, namespace, name, memberDeadline, "Healthy with 2 Ready", func(p *kobev1.ClusterPool) error {
		if p.Status.Phase != kobev1.PoolHealthy || p.Status.Ready != 2 || p.Status.TemplateRevision < 1 {
			return errors.New("not there yet")
		}
		return nil
	})
	old, err := listMembers(t.Context(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	var oldNames []string
	for _, m := range old {
		oldNames = append(oldNames, m.Name)
	}
	t.Logf("%s: Healthy with %v (revision %d, template %s)", since(start), oldNames, before.Status.TemplateRevision, before.Status.TemplateHash)

	patch := client.MergeFrom(before.DeepCopy())
	before.Spec.Cluster.PodSecurity = kobev1.PodSecurityRestricted
	if err := s.Env.Client.Patch(t.Context(), before, patch); err != nil {
		t.Fatalf("patching podSecurity: %v", err)
	}
	changed := time.Now()
	// The operator's hash covers what it resolves too (nodes, limits):
	// the new one is what the pool says once it saw the change.
	var wantHash string
	after := waitPool(t, namespace, name, 2*memberDeadline, "both members rebuilt from the new template", func(p *kobev1.ClusterPool) error {
		if p.Status.ObservedGeneration < before.Generation || p.Status.TemplateRevision <= before.Status.TemplateRevision {
			return errors.New("template change not observed")
		}
		wantHash = p.Status.TemplateHash
		if p.Status.Ready != 2 || p.Status.Outdated != 0 || p.Status.Creating != 0 {
			return errors.New("rollout not finished")
		}
		ms, err := listMembers(t.Context(), namespace, name)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if slices.Contains(oldNames, m.Name) || m.Spec.TemplateHash != wantHash {
				return fmt.Errorf("member %s (%s, template %s) is still there", m.Name, m.Status.Phase, m.Spec.TemplateHash)
			}
		}
		return nil
	})
	t.Logf("%s: rolled out in %s (revision %d)", since(start), time.Since(changed).Round(time.Second), after.Status.TemplateRevision)
	if after.Status.TemplateRevision != before.Status.TemplateRevision+1 {
		t.Errorf("templateRevision %d after one change from %d", after.Status.TemplateRevision, before.Status.TemplateRevision)
	}

	// Every status the operator wrote once the pool was warm shows 2
	// Ready, and the outdated members were counted.
	warm, outdated := false, int32(0)
	for _, e := range pools.snapshot(t) {
		st := e.obj.Status
		if st.Ready >= 2 {
			warm = true
		} else if warm {
			t.Errorf("the pool showed %d Ready at %s during the rollout (%s)", st.Ready, e.at.UTC(), brief(e.obj))
		}
		outdated = max(outdated, st.Outdated)
	}
	if outdated < 1 {
		t.Error("status.outdated never counted the outdated members")
	}
	// maxSurge 1: at most one member of the new template builds at a time.
	phase := map[string]kobev1.InstancePhase{}
	for _, e := range members.snapshot(t) {
		if e.typ == watch.Deleted || e.obj.DeletionTimestamp != nil {
			delete(phase, e.obj.Name)
		} else {
			phase[e.obj.Name] = e.obj.Status.Phase
		}
		if e.at.Before(changed) {
			continue
		}
		creating := 0
		for _, ph := range phase {
			if ph == kobev1.InstanceCreating || ph == "" {
				creating++
			}
		}
		if creating > 1 {
			t.Errorf("%d members building at once at %s during the rollout, maxSurge is 1: %v", creating, e.at.UTC(), phase)
		}
	}

	// A lease gets a member of the new template, and it works.
	l := suiteAPI().lease(t, name)
	if l.Phase != wire.PhaseBound || l.Kubeconfig == "" {
		t.Fatalf("lease %+v is not Bound with a kubeconfig", l)
	}
	m := &kobev1.ClusterInstance{}
	if err := s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: l.ClusterName}, m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.TemplateHash != wantHash || m.Spec.Cluster.PodSecurity != kobev1.PodSecurityRestricted {
		t.Errorf("lease bound %s of template %s (podSecurity %q), want the new template %s", m.Name, m.Spec.TemplateHash, m.Spec.Cluster.PodSecurity, wantHash)
	}
	kc := testenv.KubeconfigFile(t, []byte(l.Kubeconfig))
	if out, err := testenv.Kubectl(t, kc, "get", "ns"); err != nil || !strings.Contains(out, "kube-system") {
		t.Fatalf("kubectl get ns with the lease's kubeconfig: %v\n%s", err, out)
	}
	// A pod baseline admits and restricted refuses.
	testenv.Eventually(t, 30*time.Second, "the new member to refuse a pod that is not restricted", func() error {
		out, err := testenv.Kubectl(t, kc, "run", "plain", "--image=registry.k8s.io/pause:3.10", "--restart=Never", "--dry-run=server")
		if err == nil {
			return fmt.Errorf("kubectl run admitted the pod: %s", out)
		}
		if !strings.Contains(out, `violates PodSecurity "restricted`) {
			return fmt.Errorf("kubectl run: %w: %s", err, out)
		}
		return nil
	})
	suiteAPI().release(t, l.ID)
}
