//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// heartbeatTimeout is the shortest the API takes: these tests wait for it
// several times over.
const heartbeatTimeout = 10 * time.Second

// startKobe starts the kobe CLI in a process group of its own (so that a
// SIGKILL reaches what it runs too) with the suite's endpoint and token.
func startKobe(t *testing.T, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "kobe"), args...)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+s.apiURL, "KOBE_TOKEN="+s.token, "KOBE_CONFIG="+filepath.Join(t.TempDir(), "c.yaml"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd, &out
}

// onlyActiveLease is the caller's one active lease.
func onlyActiveLease(t *testing.T) wire.Lease {
	t.Helper()
	var l wire.Lease
	testenv.Eventually(t, memberDeadline, "one active lease", func() error {
		out, _, err := kobe(t, "leases", "-o", "json")
		if err != nil {
			return err
		}
		var ls []wire.Lease
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			return err
		}
		if len(ls) != 1 || ls[0].Phase != wire.PhaseBound {
			return fmt.Errorf("active leases %+v, want one Bound", ls)
		}
		l = ls[0]
		return nil
	})
	return l
}

// TestKilledKobeRunEndsByHeartbeat: `kobe run` killed hard (SIGKILL: no
// release, no signal forwarded) stops sending heartbeats, and the operator
// ends its lease (HeartbeatMissed) within the timeout plus a grain of the
// last beat, long before its 30m TTL, and destroys the member.
func TestKilledKobeRunEndsByHeartbeat(t *testing.T) {
	waitPoolReady(t, devPool, 1)
	marker := filepath.Join(t.TempDir(), "started")
	cmd, out := startKobe(t, "run", devPool, "--ttl", "30m", "--heartbeat-timeout", heartbeatTimeout.String(), "--",
		"sh", "-c", "kubectl get ns >/dev/null && touch "+marker+"; sleep 600")
	testenv.Eventually(t, memberDeadline, "the command to reach its cluster", func() error {
		if _, err := os.Stat(marker); err != nil {
			return fmt.Errorf("%w\n%s", err, out)
		}
		return nil
	})
	l := onlyActiveLease(t)
	if l.HeartbeatTimeout != heartbeatTimeout.String() {
		t.Fatalf("lease %s has heartbeat_timeout %q, want %s", l.ID, l.HeartbeatTimeout, heartbeatTimeout)
	}
	// Outlive a timeout while kobe runs: its beats keep the lease.
	time.Sleep(heartbeatTimeout + lease.HeartbeatGrain(heartbeatTimeout) + 2*time.Second)
	if got := getLease(t, l.ID); got == nil || got.Status.Phase != kobev1.LeaseBound {
		t.Fatalf("lease %s of a running, beating kobe run ended: %+v\n%s", l.ID, got, out)
	}

	killed := time.Now()
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	var ended *kobev1.ClusterLease
	testenv.Eventually(t, heartbeatTimeout+lease.HeartbeatGrain(heartbeatTimeout)+30*time.Second, "lease "+l.ID+" to end by HeartbeatMissed", func() error {
		ended = getLease(t, l.ID)
		if ended == nil || ended.Status.Phase != kobev1.LeaseExpired || ended.Status.EndedAt == nil {
			return fmt.Errorf("lease %+v", ended)
		}
		return nil
	})
	if r := reasonOf(ended); r != kobev1.ReasonHeartbeatMissed {
		t.Errorf("lease ended with reason %q, want %s", r, kobev1.ReasonHeartbeatMissed)
	}
	// The last beat came at most an interval (timeout/6) before the kill.
	after := ended.Status.EndedAt.Sub(killed.Truncate(time.Second))
	t.Logf("lease %s ended %s after kobe run was SIGKILLed (timeout %s, grain %s)", l.ID, after.Round(100*time.Millisecond), heartbeatTimeout, lease.HeartbeatGrain(heartbeatTimeout))
	if after < heartbeatTimeout-heartbeatTimeout/6-time.Second {
		t.Errorf("lease ended %s after the kill: before its heartbeat timeout %s", after, heartbeatTimeout)
	}
	testenv.Eventually(t, 60*time.Second, "member "+l.ClusterName+" to be destroyed", func() error { return instanceGone(t, l.ClusterName) })
}

// TestKeepAliveOutlivesTimeouts: `kobe lease --keepalive` keeps its lease
// through several heartbeat timeouts, its kubeconfig works all along, and
// SIGTERM releases it.
func TestKeepAliveOutlivesTimeouts(t *testing.T) {
	waitPoolReady(t, devPool, 1)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cmd, out := startKobe(t, "lease", devPool, "--keepalive", "--heartbeat-timeout", heartbeatTimeout.String(), "--kubeconfig", kc)
	l := onlyActiveLease(t)
	for i := range 4 {
		time.Sleep(heartbeatTimeout)
		got := getLease(t, l.ID)
		if got == nil || got.Status.Phase != kobev1.LeaseBound {
			t.Fatalf("after %s of --keepalive, lease %s is %+v\n%s", time.Duration(i+1)*heartbeatTimeout, l.ID, got, out)
		}
		if o, err := testenv.Kubectl(t, kc, "get", "ns", "kube-system"); err != nil {
			t.Fatalf("kubectl with the kept lease's kubeconfig: %v\n%s", err, o)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kobe lease --keepalive after SIGTERM: %v, want exit 0 after releasing\n%s", err, out)
	}
	if got := getLease(t, l.ID); got == nil || got.Status.Phase != kobev1.LeaseReleased {
		t.Fatalf("lease %s after --keepalive exited: %+v, want Released", l.ID, got)
	}
	if !strings.Contains(out.String(), "Released lease "+l.ID) {
		t.Errorf("output: %s", out)
	}
}

// reasonOf is the reason the lease's Ended condition records.
func reasonOf(l *kobev1.ClusterLease) string {
	if c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded); c != nil {
		return c.Reason
	}
	return ""
}
