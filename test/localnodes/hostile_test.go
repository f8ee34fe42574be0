//go:build root

package localnodes

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/test/hostile"
)

// The hostile-holder attacks on local members with a node: each is what a
// lease holder (system:masters of the member) tries with the lease's own
// kubeconfig to reach beyond the member. They share the suite's two
// members, so they cost seconds, not members.

// outside is a listener beyond every member: a network namespace of the
// test's own, joined to the host by a veth, serving testapp on :8080 at a
// private address and at a public-looking one routed to it, so no packet
// ever leaves the machine.
type outside struct {
	private, public string // host:port
	// registry is an image registry (testapp registry, plain HTTP) at the
	// public address: the "remote" registry of pulls.
	registry string
	// host is a listener of the test process on the host's own address;
	// hostConns counts the connections it accepted.
	host      string
	hostConns *atomic.Int64
	stop      func()
}

const (
	outsideNetns   = "kobe-hostile"
	outsideHostIf  = "kbhost0"
	outsideHostIP  = "10.254.254.1"
	outsidePrivate = "10.254.254.2"
	// outsidePublic is a public unicast address routed to the namespace
	// for the test's duration: what "the Internet" is to a pool that
	// allows Public egress.
	outsidePublic = "1.2.3.4"
)

func startOutside(t *testing.T) *outside {
	t.Helper()
	bin := filepath.Join(imageDir, "rootfs", "testapp")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("testapp binary %s missing: run `make image-testapp`", bin)
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	// `ip netns add` makes /run/netns (a bind mount of itself) when the
	// machine has none; the suite requires the machine as it was, so the
	// cleanup removes it again in that case.
	_, statErr := os.Stat("/run/netns")
	hadNetnsDir := statErr == nil
	removeNetns := func() {
		_ = exec.Command("ip", "route", "del", outsidePublic+"/32").Run()
		_ = exec.Command("ip", "link", "del", outsideHostIf).Run()
		_ = exec.Command("ip", "netns", "del", outsideNetns).Run()
	}
	cleanup := func() {
		removeNetns()
		if !hadNetnsDir {
			_ = syscall.Unmount("/run/netns", syscall.MNT_DETACH)
			_ = os.Remove("/run/netns")
		}
	}
	removeNetns()
	ip("netns", "add", outsideNetns)
	ip("link", "add", outsideHostIf, "type", "veth", "peer", "name", "eth0", "netns", outsideNetns)
	ip("addr", "add", outsideHostIP+"/30", "dev", outsideHostIf)
	ip("link", "set", outsideHostIf, "up")
	ip("-n", outsideNetns, "addr", "add", outsidePrivate+"/30", "dev", "eth0")
	ip("-n", outsideNetns, "addr", "add", outsidePublic+"/32", "dev", "eth0")
	ip("-n", outsideNetns, "link", "set", "eth0", "up")
	ip("-n", outsideNetns, "link", "set", "lo", "up")
	ip("-n", outsideNetns, "route", "add", "default", "via", outsideHostIP)
	ip("route", "add", outsidePublic+"/32", "via", outsidePrivate, "dev", outsideHostIf)

	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, "ip", "netns", "exec", outsideNetns, bin)
	if err := srv.Start(); err != nil {
		cancel()
		cleanup()
		t.Fatal(err)
	}
	reg := exec.CommandContext(ctx, "ip", "netns", "exec", outsideNetns, bin, "registry", ":5000")
	if err := reg.Start(); err != nil {
		cancel()
		_ = srv.Wait()
		cleanup()
		t.Fatal(err)
	}
	hostLn, err := net.Listen("tcp", outsideHostIP+":0")
	if err != nil {
		cancel()
		_ = srv.Wait()
		_ = reg.Wait()
		cleanup()
		t.Fatal(err)
	}
	hostConns := new(atomic.Int64)
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			hostConns.Add(1)
			_ = c.Close()
		}
	}()
	o := &outside{
		private:   outsidePrivate + ":8080",
		public:    outsidePublic + ":8080",
		registry:  outsidePublic + ":5000",
		host:      hostLn.Addr().String(),
		hostConns: hostConns,
		stop: func() {
			hostLn.Close()
			cancel()
			_ = srv.Wait()
			_ = reg.Wait()
			cleanup()
		},
	}
	// Control: the host reaches both, so a refusal from a pod is the
	// member's firewall and not a dead listener.
	testenv.Eventually(t, 10*time.Second, "the outside listener to answer the host", func() error {
		c, err := net.DialTimeout("tcp", o.host, time.Second)
		if err != nil {
			return err
		}
		_ = c.Close()
		for _, u := range []string{"http://" + o.private + "/", "http://" + o.public + "/", "http://" + o.registry + "/v2/"} {
			c := http.Client{Timeout: time.Second}
			resp, err := c.Get(u)
			if err != nil {
				return err
			}
			resp.Body.Close()
		}
		return nil
	})
	return o
}

// hostileHolder runs the attacks against w's member. publicEgress says whether
// w's pool lets its pods reach public addresses.
func hostileHolder(t *testing.T, w *workload, out *outside, publicEgress bool) {
	t.Run("member pods run under seccomp", func(t *testing.T) {
		status, err := execIn(t, w, "read", "/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		hostile.Seccomp(t, status)
	})

	t.Run("the API server cannot be pointed outside the member", func(t *testing.T) {
		// The suite's forgeries aimed at a listener on the operator host's
		// own address, where a local member's API server runs; once (the
		// Direct member): both members' API servers have the same guard.
		if !publicEgress {
			hostile.APIServerStaysInside(t, hostile.Target{Kubeconfig: w.kubeconfig, Image: testappImage},
				hostile.Listener{Addr: out.host, Conns: out.hostConns.Load})
		}
		// The address guard refuses every address outside the member's
		// link: also private and public ones and the API server's own.
		pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"ssrf"},"spec":{"nodeSelector":{"nowhere":"true"},"containers":[{"name":"c","image":"` + testappImage + `"}]}}`
		if got, err := testenv.Kubectl(t, w.kubeconfig, "create", "-f", writeFile(t, pod)); err != nil {
			t.Fatalf("creating a pending pod: %v %s", err, got)
		}
		defer func() {
			_, _ = testenv.Kubectl(t, w.kubeconfig, "delete", "pod", "ssrf", "--grace-period=0", "--force")
		}()
		for _, target := range []string{outsidePrivate, outsidePublic, w.member.Status.Endpoint} {
			target = strings.TrimPrefix(target, "https://")
			if h, _, ok := strings.Cut(target, ":"); ok {
				target = h
			}
			patch := fmt.Sprintf(`{"status":{"podIP":%q,"podIPs":[{"ip":%q}]}}`, target, target)
			if got, err := testenv.Kubectl(t, w.kubeconfig, "patch", "pod", "ssrf", "--subresource=status", "--type=merge", "-p", patch); err == nil {
				t.Errorf("a pod's status was forged to %s: %s", target, got)
			}
		}
	})

	t.Run("egress reaches only what the pool allows", func(t *testing.T) {
		if got, err := execIn(t, w, "dial", out.private); err == nil {
			t.Errorf("a pod of %s reached the private listener %s: %s", w.pool, out.private, got)
		}
		if got, err := execIn(t, w, "dial", out.host); err == nil {
			t.Errorf("a pod of %s reached a listener on the host's own address %s: %s", w.pool, out.host, got)
		}
		got, err := execIn(t, w, "dial", out.public)
		switch {
		case publicEgress && err != nil:
			t.Errorf("a pod of %s (egress Public) cannot reach the public listener %s: %v", w.pool, out.public, err)
		case !publicEgress && err == nil:
			t.Errorf("a pod of %s (no egress) reached the public listener %s: %s", w.pool, out.public, got)
		}
	})
}
