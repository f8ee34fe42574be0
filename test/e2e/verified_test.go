//go:build e2e && heavy

package e2e

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/cleanup"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestVerifiedDestroy, against the real operator and local members: a
// VerifiedDestroy lease's member is torn down with a receipt proving every
// recorded resource absent; a member whose directory an immutable file
// (chattr +i) keeps alive is Quarantined, as are its lease and its pool,
// and once the obstacle is removed `kobe admin retry-cleanup` frees it with
// a proof.
func TestVerifiedDestroy(t *testing.T) {
	const pool = "verified"
	createPoolWith(t, pool, nil)
	waitPoolReady(t, pool, 1)

	t.Run("proven", func(t *testing.T) {
		lease, kc := leaseCLI(t, pool, "--ttl", "10m", "--cleanup-mode", "VerifiedDestroy")
		if out, err := testenv.Kubectl(t, kc, "get", "namespace", "default"); err != nil {
			t.Fatalf("kubectl with the lease's kubeconfig: %v\n%s", err, out)
		}
		if l := getLease(t, lease.ID); l.Spec.CleanupMode != kobev1.CleanupVerifiedDestroy {
			t.Fatalf("lease %s: cleanupMode %q", lease.ID, l.Spec.CleanupMode)
		}
		member := memberOfLease(t, lease.ID)
		manifest := member.Status.CreationManifest
		if member.Spec.LeaseRef.CleanupMode != kobev1.CleanupVerifiedDestroy || manifest == nil || len(manifest.Resources) < 4 {
			t.Fatalf("member %s: leaseRef %+v manifest %+v", member.Name, member.Spec.LeaseRef, manifest)
		}
		if out, errOut, err := kobe(t, "release", lease.ID); err != nil {
			t.Fatalf("kobe release: %v\n%s\n%s", err, out, errOut)
		}
		testenv.Eventually(t, time.Minute, member.Name+" destroyed", func() error { return instanceGone(t, member.Name) })
		rec := adminReceipt(t, member.Name)
		if !rec.Verified || rec.Lease != lease.ID {
			t.Fatalf("receipt %+v: want verified, naming lease %s", rec, lease.ID)
		}
		for _, r := range manifest.Resources {
			i := slices.IndexFunc(rec.Checks, func(c backend.Check) bool { return c.Kind == r.Kind && c.Name == r.Name && c.ID == r.ID })
			if i < 0 || !rec.Checks[i].Absent {
				t.Errorf("recorded %s %s %s not proven absent in the receipt: %+v", r.Kind, r.Name, r.ID, rec.Checks)
			}
		}
		testenv.Eventually(t, 10*time.Second, "the lease names its receipt", func() error {
			if l := getLease(t, lease.ID); l.Status.CleanupReceipt == nil {
				return errors.New("no receipt on the lease yet")
			}
			return nil
		})
	})

	t.Run("quarantined until the obstacle is gone", func(t *testing.T) {
		waitPoolReady(t, pool, 1)
		lease, _ := leaseCLI(t, pool, "--ttl", "10m", "--cleanup-mode", "VerifiedDestroy")
		member := memberOfLease(t, lease.ID)
		// The obstacle: a file of the member's directory the operator
		// cannot remove, or, when the member has a file system of its own
		// (run as root), its image (unmounted, the directory would go).
		dir, image := "", ""
		for _, r := range member.Status.CreationManifest.Resources {
			switch {
			case r.Kind != "Path":
			case strings.HasSuffix(r.Name, ".disk"):
				image = r.Name
			default:
				dir = r.Name
			}
		}
		stuck := cmp.Or(image, filepath.Join(dir, "admission.yaml"))
		chattr(t, "+i", stuck)
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", stuck).Run() })

		if out, errOut, err := kobe(t, "release", lease.ID); err != nil {
			t.Fatalf("kobe release: %v\n%s\n%s", err, out, errOut)
		}
		testenv.Eventually(t, time.Minute, member.Name+" Quarantined", func() error {
			m := memberOf(t, member.Name)
			if m.Status.Phase != kobev1.InstanceQuarantined {
				return fmt.Errorf("phase %s", m.Status.Phase)
			}
			return nil
		})
		testenv.Eventually(t, 30*time.Second, "pool and lease Quarantined", func() error {
			p := getPool(t, pool)
			l := getLease(t, lease.ID)
			if p.Status.Phase != kobev1.PoolQuarantined || p.Status.Quarantined != 1 || l.Status.Phase != kobev1.LeaseQuarantined {
				return fmt.Errorf("pool %s (quarantined %d), lease %s", p.Status.Phase, p.Status.Quarantined, l.Status.Phase)
			}
			return nil
		})
		rec := adminReceipt(t, member.Name)
		i := slices.IndexFunc(rec.Checks, func(c backend.Check) bool { return c.Kind == "Path" && c.Name == dir })
		if rec.Verified || i < 0 || rec.Checks[i].Absent {
			t.Fatalf("receipt of the stuck member %+v: want unverified, the directory present", rec)
		}

		// Retrying with the obstacle still there proves nothing.
		out, errOut, err := kobe(t, "admin", "retry-cleanup", member.Name, "-n", namespace, "--host-kubeconfig", s.env.Kubeconfig, "--wait", "1m")
		if err == nil || !strings.Contains(errOut, "still Quarantined after attempt 2") {
			t.Fatalf("retry-cleanup with the obstacle in place: %v\nstdout: %s\nstderr: %s", err, out, errOut)
		}

		chattr(t, "-i", stuck)
		out, errOut, err = kobe(t, "admin", "retry-cleanup", member.Name, "-n", namespace, "--host-kubeconfig", s.env.Kubeconfig, "--wait", "1m")
		if err != nil || !strings.Contains(out, "cleanup proven") {
			t.Fatalf("retry-cleanup after the obstacle was removed: %v\nstdout: %s\nstderr: %s\noperator:\n%s", err, out, errOut, s.tail())
		}
		if err := instanceGone(t, member.Name); err != nil {
			t.Fatal(err)
		}
		rec = adminReceipt(t, member.Name)
		if !rec.Verified || rec.Attempt != 3 {
			t.Errorf("receipt after the retry: verified %v attempt %d, want a proof at attempt 3", rec.Verified, rec.Attempt)
		}
		testenv.Eventually(t, 30*time.Second, "the pool's capacity freed", func() error {
			if p := getPool(t, pool); p.Status.Quarantined != 0 || p.Status.Phase == kobev1.PoolQuarantined {
				return fmt.Errorf("pool %s, quarantined %d", p.Status.Phase, p.Status.Quarantined)
			}
			return nil
		})
	})
}

// adminReceipt reads a member's receipt with `kobe admin receipt`.
func adminReceipt(t *testing.T, member string) cleanup.Receipt {
	t.Helper()
	out, errOut, err := kobe(t, "admin", "receipt", member, "-n", namespace, "--host-kubeconfig", s.env.Kubeconfig)
	if err != nil {
		t.Fatalf("kobe admin receipt %s: %v\n%s", member, err, errOut)
	}
	var recs []cleanup.Receipt
	if err := json.Unmarshal([]byte(out), &recs); err != nil || len(recs) != 1 {
		t.Fatalf("kobe admin receipt printed %q (%v): want one receipt", out, err)
	}
	return recs[0]
}

func memberOfLease(t *testing.T, id string) *kobev1.ClusterInstance {
	t.Helper()
	m, err := testenv.MemberOfLease(t.Context(), s.env.Client, namespace, id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func memberOf(t *testing.T, name string) *kobev1.ClusterInstance {
	t.Helper()
	m := &kobev1.ClusterInstance{}
	if err := s.env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, m); err != nil {
		t.Fatalf("reading member %s: %v", name, err)
	}
	return m
}

func chattr(t *testing.T, flag, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", flag, path).CombinedOutput(); err != nil {
		t.Fatalf("chattr %s %s: %v: %s", flag, path, err, out)
	}
}
