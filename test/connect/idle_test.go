//go:build heavy

package connect

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	kobelease "github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// idleTimeout is the idle timeout of the idle policy's leases: the
// shortest the API takes.
const idleTimeout = 10 * time.Second

// TestIdleRelease: under a policy whose rule sets idleTimeout, a Proxy
// lease that nobody uses ends (Expired, reason Idle, a Warning Event)
// between the timeout and the timeout plus a grain after its bind, while
// one used through the connect proxy every 2 s outlives three timeouts.
// Both show idle_timeout and idle_ends_at.
func TestIdleRelease(t *testing.T) {
	ctx := t.Context()
	token := fmt.Sprintf("connect-idle-%d", time.Now().UnixNano())
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "connect-idle-token", Namespace: namespace}, StringData: map[string]string{"token": token}},
		&kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "connect-idle", Namespace: namespace}, Spec: kobev1.AccessPolicySpec{
			Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "connect-idle-token"}}},
			Identity: "connect-idle",
			Rules:    []kobev1.AccessRule{{Pools: []string{"*"}, IdleTimeout: &metav1.Duration{Duration: idleTimeout}}},
		}},
	} {
		if err := s.Env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Env.Client.Delete(context.Background(), o) })
	}
	testenv.Eventually(t, time.Minute, "the idle policy's token to be accepted", func() error {
		if code, b := apiAs(t, token, http.MethodGet, "/v1/leases", nil); code != http.StatusOK {
			return fmt.Errorf("GET /v1/leases: %d %s", code, b)
		}
		return nil
	})
	waitPoolReady(t, 2)
	take := func() wire.Lease {
		code, b := apiAs(t, token, http.MethodPost, "/v1/leases", strings.NewReader(fmt.Sprintf(`{"pool":%q,"ttl":"30m"}`, pool)))
		var l wire.Lease
		if err := json.Unmarshal(b, &l); err != nil || code != http.StatusCreated || l.Kubeconfig == "" {
			t.Fatalf("POST /v1/leases under the idle policy: %d %s", code, b)
		}
		if l.IdleTimeout != idleTimeout.String() || l.IdleEndsAt == nil {
			t.Fatalf("lease %s: idle_timeout %q, idle_ends_at %v; want %s and a time", l.ID, l.IdleTimeout, l.IdleEndsAt, idleTimeout)
		}
		return l
	}
	idle, busy := take(), take()
	busyKC := testenv.KubeconfigFile(t, []byte(busy.Kubeconfig))
	start := time.Now()

	// The busy lease: kubectl through the proxy every 2 s, for three
	// timeouts; the idle one ends meanwhile.
	var idleEnded *kobev1.ClusterLease
	for time.Since(start) < 3*idleTimeout || idleEnded == nil {
		if time.Since(start) > 3*idleTimeout+30*time.Second {
			t.Fatalf("idle lease %s still %s %s after its bind (timeout %s)", idle.ID, getLease(t, idle.ID).Status.Phase, time.Since(start), idleTimeout)
		}
		if out, err := testenv.Kubectl(t, busyKC, "get", "ns", "kube-system"); err != nil {
			t.Fatalf("kubectl through the proxy with the busy lease after %s: %v\n%s", time.Since(start), err, out)
		}
		if l := getLease(t, idle.ID); idleEnded == nil && kobelease.IsEnded(l.Status.Phase) {
			idleEnded = l
		}
		time.Sleep(2 * time.Second)
	}
	if got := getLease(t, busy.ID); got.Status.Phase != kobev1.LeaseBound || got.Status.IdleDeadline == nil {
		t.Fatalf("busy lease after %s: phase %s, idleDeadline %v; want Bound with its activity recorded", time.Since(start), got.Status.Phase, got.Status.IdleDeadline)
	}
	c := meta.FindStatusCondition(idleEnded.Status.Conditions, kobev1.ConditionEnded)
	if idleEnded.Status.Phase != kobev1.LeaseExpired || c == nil || c.Reason != kobev1.ReasonIdle {
		t.Fatalf("idle lease ended %s (%+v), want Expired with reason Idle", idleEnded.Status.Phase, c)
	}
	after := idleEnded.Status.EndedAt.Sub(idleEnded.Status.BoundAt.Time)
	t.Logf("idle lease %s ended %s after its bind (timeout %s, grain %s)", idle.ID, after, idleTimeout, kobelease.HeartbeatGrain(idleTimeout))
	if after < idleTimeout {
		t.Errorf("idle lease ended %s after its bind, before its idle timeout %s", after, idleTimeout)
	}
	if code, b := apiAs(t, token, http.MethodDelete, "/v1/leases/"+busy.ID, nil); code != http.StatusNoContent {
		t.Fatalf("releasing the busy lease: %d %s", code, b)
	}
	testenv.Eventually(t, 30*time.Second, "a Warning Event Idle on the idle lease", func() error {
		var evs eventsv1.EventList
		if err := s.Env.Client.List(ctx, &evs, client.InNamespace(namespace)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == idle.ID && e.Reason == kobev1.ReasonIdle && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event with reason %s for lease %s", kobev1.ReasonIdle, idle.ID)
	})
}
