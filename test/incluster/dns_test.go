//go:build root

package incluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// dnsStaysInside checks that a member pod's DNS reaches only the member's
// own resolver. A node pod's NetworkPolicy opens port 53 to the host
// cluster's kube-dns (the node's containerd resolves registries through
// it) and the node forwards its pods' packets, so a pod that names an
// outside resolver would query the host cluster's DNS. The test listens
// on port 53 (TCP and UDP) of the host's node address, where such a
// resolver would be, and on other ports of it (the controls: this host's
// bridge CNI enforces no NetworkPolicy, so the node's own rule is all
// that stands between). The spoofer pod (on nodes[0]) tries TCP and UDP
// directly, and TCP through a Service without selector whose EndpointSlice
// names the listener: at its ClusterIP, and at its NodePort, which
// kube-proxy marks for masquerading (its filter FORWARD rule accepts
// that before any other). Each control arrives; nothing arrives at port 53.
func (f *fixture) dnsStaysInside(t *testing.T, kc string, nodes []string) {
	began := time.Now()
	target := f.hc.NodeIP
	tcp := func(port string) (string, *atomic.Int32) {
		t.Helper()
		ln, err := net.Listen("tcp4", net.JoinHostPort(target, port))
		if err != nil {
			t.Fatalf("listening where an outside resolver would be: %v", err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		n := new(atomic.Int32)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				_ = c.Close()
			}
		}()
		return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), n
	}
	udp := func(port string) (string, *atomic.Int32) {
		t.Helper()
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(target, port))
		if err != nil {
			t.Fatalf("listening where an outside resolver would be: %v", err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		n := new(atomic.Int32)
		go func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				n.Add(1)
			}
		}()
		return strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port), n
	}
	_, tcpDNS := tcp("53")
	_, udpDNS := udp("53")
	tcpCtlPort, tcpCtl := tcp("0")
	udpCtlPort, udpCtl := udp("0")

	podIP := testenv.MustKubectl(t, kc, "get", "pod", "spoofer", "-o", "jsonpath={.status.podIP}")
	nodeIP := testenv.MustKubectl(t, kc, "get", "node", nodes[0], "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
	if podIP == "" || nodeIP == "" {
		t.Fatalf("spoofer's pod IP %q, node %s's InternalIP %q", podIP, nodes[0], nodeIP)
	}
	run := func(args ...string) error {
		out, err := testenv.Kubectl(t, kc, append([]string{"exec", "spoofer", "--", "/testapp"}, args...)...)
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
		}
		return nil
	}
	arrives := func(what string, n *atomic.Int32, send func() error) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, what+" to arrive", func() error {
			if err := send(); err != nil {
				return err
			}
			if n.Load() == 0 {
				return errors.New("nothing arrived: the silence at port 53 would prove nothing")
			}
			return nil
		})
	}

	manifest := filepath.Join(f.work, "dns-out.yaml")
	if err := os.WriteFile(manifest, []byte(strings.NewReplacer("TARGET", target, "CTL", tcpCtlPort).Replace(dnsOutService)), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.MustKubectl(t, kc, "apply", "-f", manifest)
	clusterIP := testenv.MustKubectl(t, kc, "get", "service", "dns-out", "-o", "jsonpath={.spec.clusterIP}")
	nodePorts := strings.Fields(testenv.MustKubectl(t, kc, "get", "service", "dns-out", "-o", `jsonpath={range .spec.ports[*]}{.name}={.nodePort} {end}`))
	ports := map[string]string{}
	for _, p := range nodePorts {
		name, port, _ := strings.Cut(p, "=")
		ports[name] = port
	}
	if clusterIP == "" || ports["dns"] == "" || ports["ctl"] == "" {
		t.Fatalf("Service dns-out: clusterIP %q, node ports %v", clusterIP, ports)
	}

	arrives("TCP from the pod", tcpCtl, func() error { return run("dial", net.JoinHostPort(target, tcpCtlPort)) })
	arrives("UDP from the pod", udpCtl, func() error { return run("spoof", podIP, net.JoinHostPort(target, udpCtlPort)) })
	before := tcpCtl.Load()
	// kube-proxy programs the Service within a moment of its creation.
	arrives("TCP through the Service's NodePort", tcpCtl, func() error {
		if err := run("dial", net.JoinHostPort(nodeIP, ports["ctl"])); err != nil {
			return err
		}
		if tcpCtl.Load() == before {
			return errors.New("not through the NodePort yet")
		}
		return nil
	})

	for what, args := range map[string][]string{
		"TCP to port 53":                        {"dial", net.JoinHostPort(target, "53")},
		"TCP to port 53 through a ClusterIP":    {"dial", net.JoinHostPort(clusterIP, "53")},
		"TCP to port 53 through a NodePort":     {"dial", net.JoinHostPort(nodeIP, ports["dns"])},
		"UDP to port 53 (the pod's own source)": {"spoof", podIP, net.JoinHostPort(target, "53")},
	} {
		err := run(args...)
		if args[0] == "dial" && err == nil {
			t.Errorf("%s: connected", what)
		}
		if args[0] == "spoof" && err != nil {
			t.Fatalf("%s: not even sent: %v", what, err)
		}
	}
	time.Sleep(time.Second) // a packet on its way would be in by now
	if n, m := tcpDNS.Load(), udpDNS.Load(); n != 0 || m != 0 {
		t.Errorf("a member pod reached port 53 outside its member: %d TCP connections, %d UDP datagrams", n, m)
	}
	testenv.MustKubectl(t, kc, "delete", "-f", manifest)
	if t.Failed() {
		return
	}
	t.Logf("controls arrived; nothing at %s:53 over TCP (direct, ClusterIP, NodePort) or UDP, in %v", target, time.Since(began).Round(time.Millisecond))
}

// dnsOutService is a Service without selector whose EndpointSlice names
// TARGET: port dns at 53, port ctl (the control) at CTL, each a NodePort.
const dnsOutService = `apiVersion: v1
kind: Service
metadata:
  name: dns-out
  namespace: default
spec:
  type: NodePort
  ports:
  - {name: dns, port: 53, targetPort: 53, protocol: TCP}
  - {name: ctl, port: CTL, targetPort: CTL, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dns-out-1
  namespace: default
  labels: {kubernetes.io/service-name: dns-out}
addressType: IPv4
ports:
- {name: dns, port: 53, protocol: TCP}
- {name: ctl, port: CTL, protocol: TCP}
endpoints:
- addresses: [TARGET]
  conditions: {ready: true}
`
