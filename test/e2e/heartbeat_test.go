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
func startKobe(t *testing.T, args ...string) (*exec.Cmd, *testenv.Output) {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "kobe"), args...)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+s.apiURL, "KOBE_TOKEN="+s.token, "KOBE_CONFIG="+filepath.Join(t.TempDir(), "c.yaml"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &testenv.Output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd, out
}

// activeLeases are the caller's active leases once there are n, all Bound.
func activeLeases(t *testing.T, n int) []wire.Lease {
	t.Helper()
	var ls []wire.Lease
	testenv.Eventually(t, memberDeadline, fmt.Sprintf("%d active leases", n), func() error {
		out, _, err := kobe(t, "leases", "-o", "json")
		if err != nil {
			return err
		}
		ls = nil
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			return err
		}
		for _, l := range ls {
			if l.Phase != wire.PhaseBound {
				return fmt.Errorf("lease %s is %s", l.ID, l.Phase)
			}
		}
		if len(ls) != n {
			return fmt.Errorf("active leases %+v, want %d", ls, n)
		}
		return nil
	})
	return ls
}

// TestHeartbeats runs two holders side by side, each with a heartbeat
// timeout of 10 s:
//   - `kobe run`, killed hard (SIGKILL: no release, no signal forwarded)
//     after it outlived a timeout: the operator ends its lease
//     (HeartbeatMissed) within the timeout plus a grain of the last beat,
//     long before its 30m TTL, and destroys the member;
//   - `kobe lease --keepalive`, which meanwhile outlives three timeouts with
//     a working kubeconfig, and releases its lease on SIGTERM.
func TestHeartbeats(t *testing.T) {
	waitPoolReady(t, devPool, 2)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	keeper, keeperOut := startKobe(t, "lease", devPool, "--keepalive", "--alias", "keeper", "--heartbeat-timeout", heartbeatTimeout.String(), "--kubeconfig", kc)
	marker := filepath.Join(t.TempDir(), "started")
	runner, runnerOut := startKobe(t, "run", devPool, "--ttl", "30m", "--heartbeat-timeout", heartbeatTimeout.String(), "--",
		"sh", "-c", "kubectl get ns >/dev/null && touch "+marker+"; sleep 600")
	testenv.Eventually(t, memberDeadline, "the command to reach its cluster", func() error {
		if _, err := os.Stat(marker); err != nil {
			return fmt.Errorf("%w\n%s", err, runnerOut)
		}
		return nil
	})
	var kept, run wire.Lease
	for _, l := range activeLeases(t, 2) {
		if l.HeartbeatTimeout != heartbeatTimeout.String() {
			t.Fatalf("lease %s has heartbeat_timeout %q, want %s", l.ID, l.HeartbeatTimeout, heartbeatTimeout)
		}
		if l.Alias == "keeper" {
			kept = l
		} else {
			run = l
		}
	}
	keptSince := time.Now()

	// Outlive a timeout while kobe run runs: its beats keep the lease.
	time.Sleep(heartbeatTimeout + lease.HeartbeatGrain(heartbeatTimeout) + 2*time.Second)
	if got := getLease(t, run.ID); got == nil || got.Status.Phase != kobev1.LeaseBound {
		t.Fatalf("lease %s of a running, beating kobe run ended: %+v\n%s", run.ID, got, runnerOut)
	}

	killed := time.Now()
	if err := syscall.Kill(-runner.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = runner.Wait()
	var ended *kobev1.ClusterLease
	testenv.Eventually(t, heartbeatTimeout+lease.HeartbeatGrain(heartbeatTimeout)+30*time.Second, "lease "+run.ID+" to end by HeartbeatMissed", func() error {
		ended = getLease(t, run.ID)
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
	t.Logf("lease %s ended %s after kobe run was SIGKILLed (timeout %s, grain %s)", run.ID, after.Round(100*time.Millisecond), heartbeatTimeout, lease.HeartbeatGrain(heartbeatTimeout))
	if after < heartbeatTimeout-heartbeatTimeout/6-time.Second {
		t.Errorf("lease ended %s after the kill: before its heartbeat timeout %s", after, heartbeatTimeout)
	}
	testenv.Eventually(t, 60*time.Second, "member "+run.ClusterName+" to be destroyed", func() error { return instanceGone(t, run.ClusterName) })

	// Meanwhile --keepalive kept its lease through three timeouts or more.
	if d := time.Since(keptSince); d < 3*heartbeatTimeout {
		time.Sleep(3*heartbeatTimeout - d)
	}
	if got := getLease(t, kept.ID); got == nil || got.Status.Phase != kobev1.LeaseBound {
		t.Fatalf("after %s of --keepalive, lease %s is %+v\n%s", time.Since(keptSince), kept.ID, got, keeperOut)
	}
	if o, err := testenv.Kubectl(t, kc, "get", "ns", "kube-system"); err != nil {
		t.Fatalf("kubectl with the kept lease's kubeconfig: %v\n%s", err, o)
	}
	if err := keeper.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := keeper.Wait(); err != nil {
		t.Fatalf("kobe lease --keepalive after SIGTERM: %v, want exit 0 after releasing\n%s", err, keeperOut)
	}
	if got := getLease(t, kept.ID); got == nil || got.Status.Phase != kobev1.LeaseReleased {
		t.Fatalf("lease %s after --keepalive exited: %+v, want Released", kept.ID, got)
	}
	if !strings.Contains(keeperOut.String(), "Released lease "+kept.ID) {
		t.Errorf("output: %s", keeperOut)
	}
}

// reasonOf is the reason the lease's Ended condition records.
func reasonOf(l *kobev1.ClusterLease) string {
	if c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded); c != nil {
		return c.Reason
	}
	return ""
}
