//go:build e2e && heavy

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auditrecord"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestInstanceLost: a leased member whose kube-apiserver is
// killed ends its lease with reason InstanceLost within about a health
// interval (the dev pool's is 5 s), instead of pointing at a dead cluster
// until it expires; the API and the CLI say so, the member is destroyed,
// and the audit record tells who held it and how it ended.
func TestInstanceLost(t *testing.T) {
	waitPoolReady(t, devPool, 1)
	l, _ := leaseCLI(t, devPool, "--ttl", "20m")
	inst := &kobev1.ClusterInstance{}
	if err := s.env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: l.ClusterName}, inst); err != nil {
		t.Fatal(err)
	}
	if got := inst.Annotations[kobev1.AnnotationHost]; got == "" || !strings.Contains(got, "/") {
		t.Errorf("the local member records no host: %q", got)
	}
	procs, err := memberproc.Running(string(inst.UID))
	if err != nil {
		t.Fatal(err)
	}
	var apiserver []memberproc.Process
	for _, p := range procs {
		if strings.Contains(p.Cmdline, "kube-apiserver") {
			apiserver = append(apiserver, p)
		}
	}
	if len(apiserver) != 1 {
		t.Fatalf("want the member's one kube-apiserver, found %v", procs)
	}
	killed := time.Now()
	memberproc.Kill(apiserver)

	var ended wire.Lease
	testenv.Eventually(t, 2*time.Minute, "the lease to end with InstanceLost", func() error {
		code, body, _ := api(t, http.MethodGet, "/v1/leases/"+l.ID, s.token, nil)
		if code != http.StatusOK {
			return fmt.Errorf("GET answered %d: %s", code, body)
		}
		ended = decodeLease(t, body)
		if ended.Phase != wire.PhaseExpired || ended.Reason != kobev1.ReasonInstanceLost {
			return fmt.Errorf("phase %s reason %q", ended.Phase, ended.Reason)
		}
		return nil
	})
	t.Logf("lease ended InstanceLost %s after the member's kube-apiserver was killed", time.Since(killed).Round(100*time.Millisecond))
	if ended.Kubeconfig != "" || ended.ClusterName != l.ClusterName {
		t.Errorf("ended lease: cluster %q, kubeconfig given %v", ended.ClusterName, ended.Kubeconfig != "")
	}
	_, errOut, err := kobe(t, "kubeconfig", l.ID)
	if err == nil || !strings.Contains(errOut, "InstanceLost") || !strings.Contains(errOut, l.ClusterName+" died or was deleted while leased") {
		t.Errorf("kobe kubeconfig on the lost lease: err %v, stderr %s", err, errOut)
	}
	testenv.Eventually(t, memberDeadline, "the lost member to be destroyed", func() error { return instanceGone(t, l.ClusterName) })

	lease := getLease(t, l.ID)
	if lease == nil {
		t.Fatal("the ended lease is gone already")
	}
	// As an administrator finds it: kobe admin audit with the lease's name.
	var rec map[string]string
	testenv.Eventually(t, 30*time.Second, "the audit record", func() error {
		out, errOut, err := kobe(t, "admin", "audit", l.ID, "-n", namespace, "--host-kubeconfig", s.env.Kubeconfig)
		if err != nil {
			return fmt.Errorf("kobe admin audit: %w: %s", err, errOut)
		}
		var recs []map[string]string
		if err := json.Unmarshal([]byte(out), &recs); err != nil || len(recs) != 1 || recs[0][auditrecord.KeyLeaseUID] != string(lease.UID) {
			t.Fatalf("kobe admin audit %s printed %q (%v): want the lease's one record", l.ID, out, err)
		}
		rec = recs[0]
		return nil
	})
	for k, want := range map[string]string{auditrecord.KeyIdentity: "e2e-ci", auditrecord.KeyPolicy: "e2e", auditrecord.KeyMethod: "token",
		auditrecord.KeyMember: l.ClusterName, auditrecord.KeyMemberUID: string(inst.UID), auditrecord.KeyEndReason: kobev1.ReasonInstanceLost} {
		if rec[k] != want {
			t.Errorf("audit %s = %q, want %q", k, rec[k], want)
		}
	}
	waitPoolReady(t, devPool, 2) // refilled, for the tests after this one
}

// eventReasons lists the reasons of the Events about one object.
func eventReasons(t *testing.T, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := s.env.Client.List(t.Context(), &list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// TestMemberRecordedOnAnotherHost: the real operator, with the
// real local backend (which finds no data directory for the member here and
// would call it gone), neither builds, observes nor destroys a member
// recorded on another host: it says why (HostMismatch), never reports it
// Destroyed, and its finalizer holds it until a person lets it go.
func TestMemberRecordedOnAnotherHost(t *testing.T) {
	ctx := t.Context()
	c := s.env.Client
	p := newPool("moved", 0)
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, p) })
	m := pool.NewMember(p, 0, pool.TemplateHash(&p.Spec))
	m.Annotations = map[string]string{kobev1.AnnotationHost: "another-runner/00000000-0000-0000-0000-000000000000"}
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(m)
	testenv.Eventually(t, time.Minute, "the member to be held for HostMismatch", func() error {
		cur := &kobev1.ClusterInstance{}
		if err := c.Get(ctx, key, cur); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, kobev1.ConditionProvisioned)
		if cond == nil || cond.Reason != kobev1.ReasonHostMismatch || cur.DeletionTimestamp == nil {
			return fmt.Errorf("Provisioned %+v, deleting %v", cond, cur.DeletionTimestamp != nil)
		}
		return nil
	})
	// Many of the operator's poll intervals (500 ms): a wrong destroy
	// would remove the finalizer meanwhile.
	cur := &kobev1.ClusterInstance{}
	testenv.Consistently(t, 6*time.Second, "the member recorded on another host to be held, untouched", func() error {
		if err := c.Get(ctx, key, cur); err != nil {
			return fmt.Errorf("reading the member: %w", err)
		}
		if len(cur.Finalizers) != 1 {
			return fmt.Errorf("the member was let go: finalizers %v", cur.Finalizers)
		}
		dirs, err := memberproc.Dirs(s.dataRoot)
		if err != nil {
			return err
		}
		for _, d := range dirs {
			if strings.Contains(d, string(cur.UID)) {
				return fmt.Errorf("the operator built something of it: %s", d)
			}
		}
		return nil
	})
	if reasons := eventReasons(t, m.Name); !strings.Contains(strings.Join(reasons, ","), kobev1.ReasonHostMismatch) {
		t.Errorf("events %v: want HostMismatch", reasons)
	}
	cur.Finalizers = nil
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the member to go once let go", func() error { return instanceGone(t, m.Name) })
}
