//go:build e2e

package e2e

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func clientCertNotAfter(t *testing.T, kubeconfig string) time.Time {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		block, _ := pem.Decode(ai.ClientCertificateData)
		if block == nil {
			t.Fatal("kubeconfig has no client certificate")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return cert.NotAfter
	}
	t.Fatal("kubeconfig has no user")
	return time.Time{}
}

// TestLeaseUseExtendRelease: a lease's kubeconfig works with kubectl, its
// certificate expires with the lease, extensions are capped, and release
// destroys the member and refills the pool.
func TestLeaseUseExtendRelease(t *testing.T) {
	waitPoolReady(t, devPool, 2)
	l, kc := leaseCLI(t, devPool, "--ttl", "10m")
	if l.Phase != wire.PhaseBound || l.ClusterName == "" || l.ExpiresAt == nil {
		t.Fatalf("lease = %+v, want Bound with a cluster and an expiry", l)
	}
	if out, err := testenv.Kubectl(t, kc, "get", "ns"); err != nil || !strings.Contains(out, "kube-system") {
		t.Fatalf("kubectl get ns with the lease's kubeconfig: %v\n%s", err, out)
	}
	if out, err := testenv.Kubectl(t, kc, "create", "namespace", "from-lease"); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	if got := clientCertNotAfter(t, kc); !got.Equal(*l.ExpiresAt) {
		t.Errorf("client certificate NotAfter %s, want the lease's expires_at %s", got, l.ExpiresAt)
	}
	obj := getLease(t, l.ID)
	if !obj.Status.ExpiresAt.Time.Equal(*l.ExpiresAt) {
		t.Errorf("ClusterLease status.expiresAt %s != API expires_at %s", obj.Status.ExpiresAt, l.ExpiresAt)
	}

	t.Run("extend up to maxExtensions", func(t *testing.T) {
		prev := *l.ExpiresAt
		for i := 1; i <= 2; i++ {
			out, errOut, err := kobe(t, "extend", l.ID, "--ttl", "5m", "--kubeconfig", kc, "-o", "json")
			if err != nil {
				t.Fatalf("extension %d: %v\n%s%s", i, err, out, errOut)
			}
			var r wire.ExtendLeaseResponse
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("extend -o json printed %q: %v", out, err)
			}
			if r.ExpiresAt == nil || !r.ExpiresAt.Equal(prev.Add(5*time.Minute)) || r.Extensions != i {
				t.Fatalf("extension %d: %+v, want expiry %s", i, r, prev.Add(5*time.Minute))
			}
			prev = *r.ExpiresAt
			if got := clientCertNotAfter(t, kc); !got.Equal(prev) {
				t.Errorf("re-minted certificate NotAfter %s, want %s", got, prev)
			}
		}
		out, errOut, err := kobe(t, "extend", l.ID, "--ttl", "5m")
		if err == nil {
			t.Fatalf("third extension succeeded: %s", out)
		}
		if !strings.Contains(errOut, "extension limit reached") || !strings.Contains(errOut, "2 of 2") {
			t.Errorf("refusal does not say why: %q", errOut)
		}
	})

	t.Run("release cuts the lease's credentials within 2s, also if the operator dies right after answering, destroys the member and refills the pool", func(t *testing.T) {
		creds := testenv.KeepCredentials(t, kc)
		start := time.Now()
		if code, body, _ := api(t, http.MethodDelete, "/v1/leases/"+l.ID, s.token, nil); code != http.StatusNoContent {
			t.Fatalf("DELETE /v1/leases/%s: %d %s", l.ID, code, body)
		}
		t.Logf("DELETE answered in %s", time.Since(start).Round(time.Millisecond))
		waitCutOperatorKilled(t, creds, time.Now(), "DELETE's answer")
		testenv.Eventually(t, 60*time.Second, "the member to be destroyed", func() error { return instanceGone(t, l.ClusterName) })
		if got := getLease(t, l.ID); got == nil || got.Status.Phase != kobev1.LeaseReleased {
			t.Errorf("lease after release: %+v, want phase Released", got)
		}
		waitPoolReady(t, devPool, 2)
	})
}

// TestLeaseExpiresServerSide: a 20 s lease ends by itself, and a token
// minted inside its member stops working within 2 s of its expiry; a lease
// whose operator was killed and restarted while it was bound still ends on
// time, and the restart leaves no member process or directory orphaned.
func TestLeaseExpiresServerSide(t *testing.T) {
	waitPoolReady(t, devPool, 2)
	short, kc := leaseCLI(t, devPool, "--ttl", "20s")
	if !strings.HasPrefix(short.EffectiveTTL, "20s") {
		t.Errorf("effective_ttl = %q, want 20s", short.EffectiveTTL)
	}
	shortCreds := testenv.KeepCredentials(t, kc)
	waitPoolReady(t, devPool, 2)
	survivor, _ := leaseCLI(t, devPool, "--ttl", "40s")

	// Crash the operator while both leases are bound, then start it again.
	s.killOperator()
	time.Sleep(2 * time.Second) // the operator is down; the clock keeps running
	if err := s.startOperator(); err != nil {
		t.Fatal(err)
	}
	// The certificate ends with the lease by itself (NotAfter); the token
	// minted inside only with the member's API server.
	shortCreds.WaitCut(t, *short.ExpiresAt, "the lease's expiry", s.tail)

	for _, l := range []wire.Lease{short, survivor} {
		testenv.Eventually(t, time.Until(*l.ExpiresAt)+15*time.Second, "lease "+l.ID+" to expire", func() error {
			got := getLease(t, l.ID)
			if got == nil {
				return errors.New("lease object gone")
			}
			if got.Status.Phase != kobev1.LeaseExpired {
				return fmt.Errorf("status %+v", got.Status)
			}
			return nil
		})
		got := getLease(t, l.ID)
		late := got.Status.EndedAt.Sub(*l.ExpiresAt)
		if late < 0 || late > 10*time.Second {
			t.Errorf("lease %s ended %s after its expiry, want within 10s", l.ID, late)
		}
		testenv.Eventually(t, 60*time.Second, "member "+l.ClusterName+" to be destroyed", func() error { return instanceGone(t, l.ClusterName) })
	}
	if out, err := testenv.Kubectl(t, kc, "get", "ns"); err == nil {
		t.Errorf("expired lease's kubeconfig still works:\n%s", out)
	}

	// After the restart every process and directory belongs to a member.
	waitPoolReady(t, devPool, 2)
	var insts kobev1.ClusterInstanceList
	if err := s.env.Client.List(t.Context(), &insts); err != nil {
		t.Fatal(err)
	}
	owned := map[string]bool{}
	for _, i := range insts.Items {
		owned[string(i.UID)] = true
	}
	ownedBy := func(s string) bool {
		for uid := range owned {
			if strings.Contains(s, uid) {
				return true
			}
		}
		return false
	}
	dirs, err := memberproc.Dirs(s.dataRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !ownedBy(d) {
			t.Errorf("data directory %s belongs to no ClusterInstance", d)
		}
	}
	procs, err := memberProcesses(s.dataRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if !ownedBy(p.Cmdline) {
			t.Errorf("process %s belongs to no ClusterInstance", p)
		}
	}
	t.Logf("after the restart: %d instances, %d member directories, %d member processes, none orphaned", len(insts.Items), len(dirs), len(procs))
}

// TestKobeRun: `kobe run` leases, runs the command with KUBECONFIG, passes
// its exit status through and releases on every exit path.
func TestKobeRun(t *testing.T) {
	waitPoolReady(t, devPool, 2)
	activeLeases := func() int {
		out, _, err := kobe(t, "leases", "-o", "json")
		if err != nil {
			t.Fatalf("kobe leases: %v", err)
		}
		var ls []wire.Lease
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			t.Fatalf("kobe leases -o json printed %q", out)
		}
		return len(ls)
	}

	t.Run("success", func(t *testing.T) {
		out, errOut, err := kobe(t, "run", devPool, "--ttl", "5m", "--", "kubectl", "get", "ns")
		if err != nil || !strings.Contains(out, "kube-system") {
			t.Fatalf("kobe run -- kubectl get ns: %v\n%s\n%s", err, out, errOut)
		}
		if n := activeLeases(); n != 0 {
			t.Errorf("%d leases left behind", n)
		}
	})
	t.Run("failing command passes its status through", func(t *testing.T) {
		waitPoolReady(t, devPool, 1)
		_, errOut, err := kobe(t, "run", devPool, "--ttl", "5m", "--", "sh", "-c", "kubectl get ns >/dev/null && exit 7")
		var ee *exec.ExitError
		if !asExit(err, &ee) || ee.ExitCode() != 7 {
			t.Fatalf("exit = %v, want status 7\n%s", err, errOut)
		}
		if n := activeLeases(); n != 0 {
			t.Errorf("%d leases left behind", n)
		}
	})
	t.Run("SIGTERM releases", func(t *testing.T) {
		waitPoolReady(t, devPool, 1)
		marker := filepath.Join(t.TempDir(), "started")
		cmd := exec.Command(filepath.Join(s.bin, "kobe"), "run", devPool, "--ttl", "5m", "--", "sh", "-c", "touch "+marker+"; sleep 300")
		cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+s.apiURL, "KOBE_TOKEN="+s.token, "KOBE_CONFIG="+filepath.Join(t.TempDir(), "c.yaml"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, memberDeadline, "the command to start", func() error {
			_, err := os.Stat(marker)
			return err
		})
		if n := activeLeases(); n != 1 {
			t.Errorf("%d active leases while running, want 1", n)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !asExit(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("kobe run exited %v after SIGTERM, want a non-zero status", err)
		}
		if n := activeLeases(); n != 0 {
			t.Errorf("%d leases left behind after SIGTERM", n)
		}
	})
}

func asExit(err error, target **exec.ExitError) bool {
	return errors.As(err, target)
}
