//go:build root

package incluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// startRelay applies crossNode's relay, pinned to node: it starts while
// the test checks other things.
func (f *fixture) startRelay(t *testing.T, kc, node string) {
	manifest := filepath.Join(f.work, "relay.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(relay, node)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(t, kc, "apply", "-f", manifest); err != nil {
		t.Fatal(out, err)
	}
}

// crossNode checks, with the lease's kubeconfig, that pods on the two node
// pods of one member reach each other through the pod overlay
// (internal/node, overlay.go): the DNS relay of startRelay on nodes[0]
// answers pods pinned to nodes[1] by its pod IP and through a Service
// (kube-proxy on nodes[1] sends the packets to nodes[0]'s pod range). Only
// images that every node image carries are used (CoreDNS: the relay
// forwards to the member's cluster DNS, the client is its probe).
func (f *fixture) crossNode(t *testing.T, kc string, nodes []string) {
	began := time.Now()
	if out, err := testenv.Kubectl(t, kc, "wait", "--for=condition=Ready", "--timeout=30s", "pod/relay"); err != nil {
		desc, _ := testenv.Kubectl(t, kc, "describe", "pod/relay")
		t.Fatal(out, err, desc)
	}
	podIP := testenv.MustKubectl(t, kc, "get", "pod", "relay", "-o", "jsonpath={.status.podIP}")
	svcIP := testenv.MustKubectl(t, kc, "get", "service", "relay", "-o", "jsonpath={.spec.clusterIP}")
	f.startProbe(t, kc, "by-pod-ip", nodes[1], podIP)
	f.probeFrom(t, kc, "by-service", nodes[1], svcIP)
	f.probeFrom(t, kc, "by-pod-ip", nodes[1], podIP)
	t.Logf("a pod on %s reached one on %s by pod IP (%s) and through a Service (%s) in %v", nodes[1], nodes[0], podIP, svcIP, time.Since(began).Round(time.Millisecond))
}

// probeFrom runs a Job on nodeName that resolves the member's API Service
// name through the DNS servers at servers (port 53, comma-separated),
// unless it runs already, and waits for it to complete.
func (f *fixture) probeFrom(t *testing.T, kc, name, nodeName, servers string) {
	t.Helper()
	f.startProbe(t, kc, name, nodeName, servers)
	if out, err := testenv.Kubectl(t, kc, "wait", "--for=condition=Complete", "--timeout=60s", "job/"+name); err != nil {
		logs, _ := testenv.Kubectl(t, kc, "logs", "job/"+name)
		t.Fatalf("job %s on %s asking %s: %v %s\n%s", name, nodeName, servers, err, out, logs)
	}
}

// startProbe creates probeFrom's Job and does not wait.
func (f *fixture) startProbe(t *testing.T, kc, name, nodeName, servers string) {
	t.Helper()
	manifest := filepath.Join(f.work, name+".yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(probeJob, name, nodeName, servers)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(t, kc, "apply", "-f", manifest); err != nil {
		t.Fatal(out, err)
	}
}

// overlayHostile is the lease holder trying to point the overlay of
// nodes[0] at an address that is not one of its member's node pods: the
// host machine's address (where the host cluster's API server listens),
// where the test listens on the overlay's UDP port. It alters node 1's
// statement to name that address, creates a Node with a forged statement
// for a third node's range there, and replays node 1's genuine statement
// on a Node of another name; both forged Nodes have that address as their
// InternalIP. (Rewriting a real node's addresses is no attack on the
// overlay, which never reads them: kube-proxy exits when its Node's
// addresses change, so the node, and with it the member, fails.) Then a
// pod on nodes[0] sends to the forged range and to nodes[1]'s pods. Every
// statement must be refused (kobe-node's log says so), nodes[1] must stay
// nodes[0]'s one peer at its own address, and not one packet may reach
// the listener, while a control from the same pod to the same address on
// another port arrives (the address is reachable: a silent listener
// proves something). Last, the spoofer pod of startSpoofer on nodes[0]
// (spoofer waits for it) sends to the listener's overlay port with forged
// sources (spoofed).
func (f *fixture) overlayHostile(t *testing.T, kc string, nodes []string, spoofer func()) {
	began := time.Now()
	target := f.hc.NodeIP
	var overlayPackets, controlPackets atomic.Int32
	spoofs := &spoofLog{}
	// listen counts what arrives at target:port; with spoofLog set, testapp
	// spoof's datagrams go there instead. It returns the port.
	listen := func(port int, n *atomic.Int32, log *spoofLog) int {
		conn, err := net.ListenPacket("udp4", net.JoinHostPort(target, fmt.Sprint(port)))
		if err != nil {
			t.Fatalf("listening on %s:%d: %v", target, port, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				k, from, err := conn.ReadFrom(buf)
				if err != nil {
					return
				}
				if claimed, ok := bytes.CutPrefix(buf[:k], []byte(spoofMarker)); ok && log != nil {
					log.add(string(claimed), from.(*net.UDPAddr).IP.String())
					continue
				}
				n.Add(1)
			}
		}()
		return conn.LocalAddr().(*net.UDPAddr).Port
	}
	listen(node.OverlayPort, &overlayPackets, spoofs)
	control := net.JoinHostPort(target, fmt.Sprint(listen(0, &controlPackets, nil)))

	genuine := testenv.MustKubectl(t, kc, "get", "node", nodes[1], "-o", `jsonpath={.metadata.annotations.kobe\.kunobi\.ninja/overlay}`)
	g := strings.Fields(genuine)
	if len(g) != 4 {
		t.Fatalf("node %s's overlay statement %q", nodes[1], genuine)
	}
	third := strings.TrimSuffix(nodes[1], "1") + "2"
	forged := filepath.Join(f.work, "forged-nodes.yaml")
	if err := os.WriteFile(forged, []byte(
		forgedNode(third, strings.Join([]string{g[0], target, "198.19.246.0/24", g[3]}, " "), target)+"---\n"+
			forgedNode("replayed", genuine, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	for what, args := range map[string][]string{
		"altering node 1's statement": {"annotate", "node", nodes[1], "--overwrite", node.OverlayAnnotation + "=" + strings.Join([]string{g[0], target, g[2], g[3]}, " ")},
		"creating forged Nodes":       {"create", "-f", forged},
	} {
		if out, err := testenv.Kubectl(t, kc, args...); err != nil {
			t.Fatalf("%s (a lease holder may): %v %s", what, err, out)
		}
	}
	// The spoofer pod on node 0 sends UDP datagrams with its true source
	// to an address of the forged range and to node 1's bridge (packets
	// that the altered statement would send elsewhere), then to the
	// control: the address on another port (node 0's pods reach it,
	// masqueraded to their node pod). Once the control's are in, the
	// others sent before them on the same node have had their chance.
	spoofer()
	if out, err := testenv.Kubectl(t, kc, "wait", "--for=condition=Ready", "--timeout=30s", "pod/spoofer"); err != nil {
		desc, _ := testenv.Kubectl(t, kc, "describe", "pod/spoofer")
		t.Fatal(out, err, desc)
	}
	self := testenv.MustKubectl(t, kc, "get", "pod", "spoofer", "-o", "jsonpath={.status.podIP}")
	testenv.Eventually(t, 45*time.Second, "the control's datagrams at "+control, func() error {
		for _, dst := range []string{"198.19.246.5:9", strings.TrimSuffix(g[2], "0/24") + "1:9", control} {
			if out, err := testenv.Kubectl(t, kc, "exec", "spoofer", "--", "/testapp", "spoof", self, dst); err != nil {
				return fmt.Errorf("testapp spoof %s %s: %w %s", self, dst, err, out)
			}
		}
		if n := controlPackets.Load(); n < spoofCount {
			return fmt.Errorf("%d so far: the silence of the overlay's port would prove nothing", n)
		}
		return nil
	})

	log := hostLog(t, f.hc.Kubeconfig, nodes[0])
	for _, n := range []string{nodes[1], third, "replayed"} {
		if !strings.Contains(log, "refused the overlay statement on Node "+n+":") {
			t.Errorf("node %s's kobe-node did not refuse the statement on Node %s; its log:\n%s", nodes[0], n, log)
		}
	}
	if peers := strings.Count(log, "overlay peer "); peers != 1 || !strings.Contains(log, "overlay peer "+nodes[1]+": pods "+g[2]+" at "+g[1]) {
		t.Errorf("node %s's overlay peers (want %s alone, at %s):\n%s", nodes[0], nodes[1], g[1], log)
	}
	if n := overlayPackets.Load(); n != 0 {
		t.Errorf("%d packets reached %s:%d, the overlay's port at an address of the lease holder's choosing", n, target, node.OverlayPort)
	}
	t.Logf("forged, altered and replayed overlay statements refused, %d control datagrams and no overlay packet at %s, in %v", controlPackets.Load(), target, time.Since(began).Round(time.Millisecond))
	f.spoofed(t, kc, target, g[1], spoofs)
}

// spoofMarker begins the payload of testapp spoof's datagrams, followed by
// the source they claim (images/testapp, spoof.go).
const spoofMarker = "kobe-spoof "

// spoofLog is what a listener received from testapp spoof: per claimed
// source, the source address each datagram arrived from.
type spoofLog struct {
	mu sync.Mutex
	by map[string][]string
}

func (l *spoofLog) add(claimed, from string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string][]string{}
	}
	l.by[claimed] = append(l.by[claimed], from)
}

func (l *spoofLog) get(claimed string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.by[claimed]...)
}

func (l *spoofLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for c, from := range l.by {
		out = append(out, fmt.Sprintf("%d claiming %s (from %s)", len(from), c, strings.Join(from, " ")))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// spoofCount is how many datagrams testapp spoof sends per source.
const spoofCount = 3

// startSpoofer makes testapp's image, which node images do not carry,
// available on node (imported into its containerd from the host, as a
// registry pull would), and runs the spoofer pod there: testapp as root,
// which Pod Security baseline admits, with the runtime's default
// capabilities, NET_RAW among them (baseline refuses adding it, not
// keeping it). It works while the test goes on; the function it returns
// waits for it and fails the test if it failed.
func (f *fixture) startSpoofer(t *testing.T, kc, nodeName string) (wait func()) {
	t.Helper()
	manifest := filepath.Join(f.work, "spoofer.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(spooferPod, nodeName)), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := testenv.KubectlPath(t)
	done := make(chan error, 1)
	var took time.Duration // written before done is sent on
	began := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := f.importTestapp(ctx, kubectl, nodeName); err != nil {
			done <- err
			return
		}
		if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "apply", "-f", manifest).CombinedOutput(); err != nil {
			done <- fmt.Errorf("a root pod (baseline admits it): %w %s", err, out)
			return
		}
		took = time.Since(began)
		done <- nil
	}()
	return func() {
		t.Helper()
		w := time.Now()
		err := <-done
		waited := time.Since(w)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("testapp's image imported into %s and the spoofer pod applied in the background in %v, waited for %v", nodeName, took.Round(time.Millisecond), waited.Round(time.Millisecond))
	}
}

// importTestapp imports testapp's image into node pod nodeName's
// containerd from the host, as a registry pull would.
func (f *fixture) importTestapp(ctx context.Context, kubectl, nodeName string) error {
	in, err := os.Open(testappArchive())
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	imp := exec.CommandContext(ctx, kubectl, "--kubeconfig", f.hc.Kubeconfig, "-n", namespace, "exec", "-i", nodeName, "--",
		"/usr/local/bin/ctr", "--address", "/run/kobe-node/containerd.sock", "-n", "k8s.io", "images", "import", "-")
	imp.Stdin = in
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("importing testapp's image into node pod %s: %w\n%s", nodeName, err, out)
	}
	return nil
}

// testappArchive is make image-testapp's archive, where inputs finds it.
func testappArchive() string {
	if d := os.Getenv("CONTROLPLANE_IMAGE_DIR"); d != "" {
		return filepath.Join(d, "testapp.tar")
	}
	return filepath.Join(testenv.RepoRoot(), "bin", "images", "testapp.tar")
}

// spoofed is a member's pod forging its source address (a raw socket:
// baseline leaves a root container the runtime's NET_RAW): the spoofer pod sends to the listener at
// target's overlay port claiming peer, a node pod of its own member (which
// that node's overlay chain admits; another member's node pod is no
// different to the host network), and the address beside target's, then
// the same datagrams with its true source. Its node pod must drop the
// forged ones (the FORWARD rule of internal/node's overlay): none may
// arrive, while the true source's arrive (masqueraded to the node pod), so
// that the path, the port and testapp's packets are known good.
func (f *fixture) spoofed(t *testing.T, kc, target, peer string, got *spoofLog) {
	began := time.Now()
	if out, err := testenv.Kubectl(t, kc, "wait", "--for=condition=Ready", "--timeout=30s", "pod/spoofer"); err != nil {
		desc, _ := testenv.Kubectl(t, kc, "describe", "pod/spoofer")
		t.Fatal(out, err, desc)
	}
	self := testenv.MustKubectl(t, kc, "get", "pod", "spoofer", "-o", "jsonpath={.status.podIP}")
	t4 := net.ParseIP(target).To4()
	neighbour := net.IPv4(t4[0], t4[1], t4[2], t4[3]^1).String()
	dst := net.JoinHostPort(target, fmt.Sprint(node.OverlayPort))
	// The true source last in each round: once its datagrams are in, the
	// forged ones sent before them on the same path would be too.
	if out, err := testenv.Kubectl(t, kc, "exec", "spoofer", "--", "/testapp", "spoof", peer+","+neighbour+","+self, dst); err != nil {
		t.Fatalf("testapp spoof as root in a baseline pod: %v\n%s", err, out)
	}
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("the spoofer's %d datagrams with its true source %s at %s", spoofCount, self, dst), func() error {
		if n := len(got.get(self)); n < spoofCount {
			return fmt.Errorf("%d so far (all received: %s): the forged ones' absence would prove nothing", n, got)
		}
		return nil
	})
	for _, forged := range []string{peer, neighbour} {
		if from := got.get(forged); len(from) != 0 {
			t.Errorf("%d of %d datagrams forged by a pod as from %s reached %s (from %s): its node pod forwarded a forged source", len(from), spoofCount, forged, dst, strings.Join(from, " "))
		}
	}
	t.Logf("datagrams at %s from the spoofer pod (%s): %s; in %v", dst, self, got, time.Since(began).Round(time.Millisecond))
}

// spooferPod runs testapp (its HTTP server, to exec into) as root, with
// the runtime's default capabilities (NET_RAW among them).
var spooferPod = `apiVersion: v1
kind: Pod
metadata:
  name: spoofer
spec:
  nodeName: %s
  containers:
  - name: c
    image: kobe.local/testapp:v1
    imagePullPolicy: Never
    securityContext: {runAsUser: 0}
`

// hostLog is a node pod's log in the host cluster (kobe-node writes there).
func hostLog(t *testing.T, hostKubeconfig, pod string) string {
	t.Helper()
	out, err := testenv.Kubectl(t, hostKubeconfig, "-n", namespace, "logs", pod)
	if err != nil {
		t.Fatalf("host logs of %s: %v %s", pod, err, out)
	}
	return out
}

// forgedNode is a Node a lease holder makes: its statement and its
// InternalIP name address.
func forgedNode(name, statement, address string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %s
  annotations:
    %s: %q
status:
  addresses:
  - {type: InternalIP, address: %q}
`, name, node.OverlayAnnotation, statement, address)
}

// relay is a DNS server pinned to a node: CoreDNS on port 53 (the sysctl,
// safe and allowed by Pod Security baseline, lets it bind there without
// root), forwarding to the member's cluster DNS; and a Service for it.
var relay = `apiVersion: v1
kind: ConfigMap
metadata:
  name: relay
data:
  Corefile: |
    .:53 {
        forward . 198.19.240.10
    }
---
apiVersion: v1
kind: Pod
metadata:
  name: relay
  labels: {app: relay}
spec:
  nodeName: %s
  securityContext:
    sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "53"}]
  containers:
  - name: dns
    image: ` + clusterdns.Image + `
    imagePullPolicy: Never
    args: [-conf, /etc/relay/Corefile]
    volumeMounts: [{name: conf, mountPath: /etc/relay}]
  volumes:
  - name: conf
    configMap: {name: relay}
---
apiVersion: v1
kind: Service
metadata:
  name: relay
spec:
  selector: {app: relay}
  ports:
  - {name: dns, protocol: UDP, port: 53, targetPort: 53}
`

// probeJob resolves the member's API Service through one DNS server,
// on one node.
var probeJob = `apiVersion: batch/v1
kind: Job
metadata:
  name: %s
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeName: %s
      dnsPolicy: None
      dnsConfig:
        nameservers: [%s]
        options: [{name: timeout, value: "1"}, {name: attempts, value: "1"}]
      containers:
      - name: c
        image: ` + clusterdns.Image + `
        imagePullPolicy: Never
        command: [/coredns, probe, kubernetes.default.svc.cluster.local]
`
