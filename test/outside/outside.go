//go:build root

// Package outside is the world beyond the machine for the tests of members
// with nodes: a network namespace of the test's own, where a pool's egress
// leads, so that no packet ever leaves the machine.
package outside

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Outside is a listener beyond every member: a network namespace of the
// test's own, joined to the host by a veth, serving testapp on :8080 at a
// private address and at a public-looking one routed to it, so no packet
// ever leaves the machine.
type Outside struct {
	Private, Public string // host:port
	// Registry is an image registry (testapp registry, plain HTTP) at the
	// public address: the "remote" registry of pulls.
	Registry string
	// Host is a listener of the test process on the host's own address;
	// HostConns counts the connections it accepted.
	Host      string
	HostConns *atomic.Int64
	Stop      func()
}

const (
	outsideHostIf = "kbhost0"
	outsideHostIP = "10.254.254.1"
	// PrivateIP is the namespace's address on its link to the host: a
	// private address no pool's egress reaches.
	PrivateIP = "10.254.254.2"
	// PublicIP is a public unicast address routed to the namespace
	// for the test's duration: what "the Internet" is to a pool that
	// allows Public egress.
	PublicIP = "1.2.3.4"
)

// Start makes the namespace, starts testapp (the binary at bin) in it as
// the listener and as the registry, and waits until the host reaches them;
// Stop removes it all.
func Start(t *testing.T, bin string) *Outside {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("testapp binary %s missing: run `make image-testapp`", bin)
	}
	// The namespace is the listener's own (a new network namespace at
	// its start), reached through its pid: never a name under /run/netns,
	// where `ip netns add` would bind-mount the directory over itself and
	// hide the host cluster's CNI namespaces, so that nothing could remove
	// them any more.
	removeLink := func() {
		_ = exec.Command("ip", "route", "del", PublicIP+"/32").Run()
		_ = exec.Command("ip", "link", "del", outsideHostIf).Run()
	}
	removeLink()
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, bin)
	srv.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := srv.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	var reg *exec.Cmd
	stop := func() {
		cancel()
		_ = srv.Wait()
		if reg != nil {
			_ = reg.Wait()
		}
		removeLink()
	}
	ns := strconv.Itoa(srv.Process.Pid)
	for _, args := range [][]string{
		{"ip", "link", "add", outsideHostIf, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "addr", "add", outsideHostIP + "/30", "dev", outsideHostIf},
		{"ip", "link", "set", outsideHostIf, "up"},
		{"nsenter", "-t", ns, "-n", "ip", "addr", "add", PrivateIP + "/30", "dev", "eth0"},
		{"nsenter", "-t", ns, "-n", "ip", "addr", "add", PublicIP + "/32", "dev", "eth0"},
		{"nsenter", "-t", ns, "-n", "ip", "link", "set", "eth0", "up"},
		{"nsenter", "-t", ns, "-n", "ip", "link", "set", "lo", "up"},
		{"nsenter", "-t", ns, "-n", "ip", "route", "add", "default", "via", outsideHostIP},
		{"ip", "route", "add", PublicIP + "/32", "via", PrivateIP, "dev", outsideHostIf},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			stop()
			t.Fatalf("%s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	reg = exec.CommandContext(ctx, "nsenter", "-t", ns, "-n", bin, "registry", ":5000")
	if err := reg.Start(); err != nil {
		reg = nil
		stop()
		t.Fatal(err)
	}
	hostLn, err := net.Listen("tcp", outsideHostIP+":0")
	if err != nil {
		stop()
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
	o := &Outside{
		Private:   PrivateIP + ":8080",
		Public:    PublicIP + ":8080",
		Registry:  PublicIP + ":5000",
		Host:      hostLn.Addr().String(),
		HostConns: hostConns,
		Stop: func() {
			_ = hostLn.Close()
			stop()
		},
	}
	// Control: the host reaches both, so a refusal from a pod is the
	// member's firewall and not a dead listener.
	testenv.Eventually(t, 10*time.Second, "the outside listener to answer the host", func() error {
		c, err := net.DialTimeout("tcp", o.Host, time.Second)
		if err != nil {
			return err
		}
		_ = c.Close()
		for _, u := range []string{"http://" + o.Private + "/", "http://" + o.Public + "/", "http://" + o.Registry + "/v2/"} {
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
