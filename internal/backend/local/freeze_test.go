//go:build heavy

package local

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// TestFreezeThaw freezes a Ready member with the cgroup v2 freezer, checks
// that it answers nothing and uses no CPU while Observe still reports it
// (without waiting for a probe), thaws it and checks it as a hand-out
// would (Observe, the default gates, kubectl with a lease kubeconfig), and
// destroys it while frozen: its processes and cgroup are gone.
func TestFreezeThaw(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("freezing a member needs root (cgroups): run the heavy layer as root, as CI does")
	}
	b := newBackend(t)
	m := newMember("freeze")
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	obs := waitFor(t, b, m, backend.StateReady, 3*time.Minute)
	cg, err := node.UnifiedCgroup(NodeCgroup(string(m.UID)))
	if err != nil {
		t.Fatal(err)
	}
	fm := frozenMember{m: m, cg: cg, access: obs.Access}

	if err := b.Freeze(t.Context(), m); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if err := b.Freeze(t.Context(), m); err != nil {
		t.Fatalf("Freeze again (idempotent): %v", err)
	}
	if f, err := b.Frozen(m); err != nil || !f {
		t.Fatalf("Frozen = %v, %v after Freeze", f, err)
	}
	// Only root may freeze or thaw: the member's cgroup is root's, 0755.
	for _, dir := range []string{cg, filepath.Join(cg, "cp")} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s: mode %s owner %v: want root's, writable by root only", dir, fi.Mode(), fi.Sys())
		}
	}
	for _, pr := range memberProcs(t, b, m) {
		if s := procState(t, pr.pid); s != "S" && s != "D" {
			t.Errorf("%s (pid %d) is in state %q while frozen", pr.name, pr.pid, s)
		}
	}
	cpu := cgroupCPUSeconds(t, cg)
	if err := readyz(t, fm, time.Second); err == nil {
		t.Error("/readyz answered while the member is frozen")
	}
	start := time.Now()
	o, err := b.Observe(t.Context(), m)
	if err != nil || o.State != backend.StateReady || o.Message == "" {
		t.Errorf("Observe of a frozen member = %s %q %v: want Ready saying it is frozen", o.State, o.Message, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Observe of a frozen member took %s: it must not wait for a probe", took)
	}
	if used := cgroupCPUSeconds(t, cg) - cpu; used != 0 {
		t.Errorf("a frozen member used %.6f s of CPU", used)
	}

	if err := b.Thaw(t.Context(), m); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	if f, err := b.Frozen(m); err != nil || f {
		t.Fatalf("Frozen = %v, %v after Thaw", f, err)
	}
	if err := readyz(t, fm, 10*time.Second); err != nil {
		t.Fatalf("/readyz after the thaw: %v", err)
	}
	if got := checkThawed(t, b, fm); got != "ok" {
		t.Fatalf("thawed member: %s", got)
	}

	// A frozen member is destroyed like any other.
	if err := b.Freeze(t.Context(), m); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		gone, err := b.Delete(t.Context(), m)
		if err != nil {
			t.Fatalf("Delete of a frozen member: %v", err)
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a frozen member was not destroyed within a minute")
		}
		time.Sleep(200 * time.Millisecond) // the operator retries Delete too
	}
	if _, err := os.Stat(cg); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cgroup %s left after Delete: %v", cg, err)
	}
	if left := runningUnder(t, b.opts.DataRoot); len(left) > 0 {
		t.Errorf("processes left after Delete: %v", left)
	}
}

// readyz polls the member's /readyz until it answers ok or within passes.
func readyz(t *testing.T, fm frozenMember, within time.Duration) error {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(fm.access.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = within
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cfg.Host+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // polling for the first answer
	}
}

// procState is the state letter of /proc/<pid>/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ')' && i+2 < len(s) {
			return s[i+2 : i+3]
		}
	}
	return ""
}
