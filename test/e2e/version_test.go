//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/version"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestUnavailableVersionRefused: a pool asking for a Kubernetes version the
// operator has no binaries for builds no member (not one of another
// version), says which versions it has on the pool, and a hand-out is
// refused with 503 saying the same, through the API and the CLI.
func TestUnavailableVersionRefused(t *testing.T) {
	p := newPool("old-version", 1)
	p.Spec.Cluster.Version = "v1.30.0"
	if err := s.env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.env.Client.Delete(t.Context(), p) })
	// The list starts with the default version; a machine that built
	// others (make controlplane-versions) lists them after it.
	want := fmt.Sprintf(`cluster.version "v1.30.0" is not a Kubernetes version the local backend of this operator builds (it has %s`, version.Kubernetes)
	testenv.Eventually(t, 30*time.Second, "Capacity=False VersionUnavailable", func() error {
		c := meta.FindStatusCondition(getPool(t, p.Name).Status.Conditions, kobev1.ConditionCapacity)
		if c == nil || c.Status != "False" || c.Reason != kobev1.ReasonVersionUnavailable || !strings.Contains(c.Message, want) {
			return fmt.Errorf("Capacity %+v", c)
		}
		return nil
	})

	code, body, _ := api(t, http.MethodPost, "/v1/leases", s.token, strings.NewReader(`{"pool":"old-version","ttl":"5m"}`))
	var e wire.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(e.Detail, want) {
		t.Errorf("POST /v1/leases: %d %s; want 503 naming the versions", code, body)
	}
	_, errOut, err := kobe(t, "lease", "old-version", "--ttl", "5m", "--kubeconfig", t.TempDir()+"/kc")
	if err == nil || !strings.Contains(errOut, version.Kubernetes) {
		t.Errorf("kobe lease: err %v, stderr %q; want a refusal naming %s", err, errOut, version.Kubernetes)
	}

	testenv.Consistently(t, 3*time.Second, "no member built", func() error {
		var members kobev1.ClusterInstanceList
		if err := s.env.Client.List(t.Context(), &members, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelPool: p.Name}); err != nil {
			return err
		}
		if len(members.Items) > 0 {
			return fmt.Errorf("member %s built", members.Items[0].Name)
		}
		return nil
	})
}
