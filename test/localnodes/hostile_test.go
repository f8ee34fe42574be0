//go:build root

package localnodes

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/test/hostile"
	"github.com/kunobi-ninja/kobe/test/outside"
)

// The hostile-holder attacks on local members with a node: each is what a
// lease holder (system:masters of the member) tries with the lease's own
// kubeconfig to reach beyond the member. They share the suite's two
// members, so they cost seconds, not members.

// hostileHolder runs the attacks against w's member. publicEgress says whether
// w's pool lets its pods reach public addresses.
func hostileHolder(t *testing.T, w *workload, out *outside.Outside, publicEgress bool) {
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
				hostile.Listener{Addr: out.Host, Conns: out.HostConns.Load})
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
		for _, target := range []string{outside.PrivateIP, outside.PublicIP, w.member.Status.Endpoint} {
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
		if got, err := execIn(t, w, "dial", out.Private); err == nil {
			t.Errorf("a pod of %s reached the private listener %s: %s", w.pool, out.Private, got)
		}
		if got, err := execIn(t, w, "dial", out.Host); err == nil {
			t.Errorf("a pod of %s reached a listener on the host's own address %s: %s", w.pool, out.Host, got)
		}
		got, err := execIn(t, w, "dial", out.Public)
		switch {
		case publicEgress && err != nil:
			t.Errorf("a pod of %s (egress Public) cannot reach the public listener %s: %v", w.pool, out.Public, err)
		case !publicEgress && err == nil:
			t.Errorf("a pod of %s (no egress) reached the public listener %s: %s", w.pool, out.Public, got)
		}
	})
}
