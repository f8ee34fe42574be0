package connect

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// echoServer answers an upgrade request with 101 and echoes the upgraded
// stream; other requests get "echo". It listens on addr.
type echoServer struct {
	ln     net.Listener
	closed chan struct{} // closed when an upgraded connection ends
}

func startEcho(t *testing.T, ip string) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, closed: make(chan struct{})}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "kobe-echo") {
			_, _ = io.WriteString(w, "echo")
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close(); close(e.closed) }()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: kobe-echo\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// hostIP is an address of this machine that is not loopback: a member's
// API server proxies to services only at such addresses.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("this machine has no non-loopback IPv4 address for the member to proxy to: %v", addrs)
	return ""
}

// TestUpgradeClosedWithLease: an upgraded connection (the kind exec,
// attach and port-forward use) passes through the proxy to the member,
// which passes it on to a service, and is closed within a second of the
// lease's release, on the caller's side and the far end's.
func TestUpgradeClosedWithLease(t *testing.T) {
	ip := hostIP(t)
	echo := startEcho(t, ip)
	port := echo.ln.Addr().(*net.TCPAddr).Port
	l, kc := lease(t, "10m")
	cert := leaseCert(t, l)

	// A pod that no node runs, whose status names the echo server as its
	// address: the member's API server proxies pods/<name>:<port>/proxy
	// there, upgrades included.
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"echo","namespace":"default"},"spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.10"}]}}`
	manifest := filepath.Join(t.TempDir(), "echo.json")
	if err := os.WriteFile(manifest, []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(t, kc, "apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply of the echo pod through the proxy: %v\n%s", err, out)
	}
	status := fmt.Sprintf(`{"status":{"phase":"Running","podIP":%[1]q,"podIPs":[{"ip":%[1]q}]}}`, ip)
	if out, err := testenv.Kubectl(t, kc, "patch", "pod", "echo", "--subresource=status", "--type=merge", "-p", status); err != nil {
		t.Fatalf("kubectl patch of the echo pod's status through the proxy: %v\n%s", err, out)
	}
	path := fmt.Sprintf("/connect/%s/api/v1/namespaces/default/pods/echo:%d/proxy/", l.ID, port)
	testenv.Eventually(t, 30*time.Second, "the member to proxy to the echo server", func() error {
		code, b := call(t, &cert, http.MethodGet, path, nil, nil)
		if code != http.StatusOK || string(b) != "echo" {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})

	host := strings.TrimPrefix(s.APIURL, "https://")
	conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: s.Roots, Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: kobe-echo\r\n\r\n", path, host)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade through the proxy: %d %s", resp.StatusCode, b)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the upgraded connection: %q %v", line, err)
	}

	// It stays open while the lease lasts.
	time.Sleep(2 * time.Second)
	if _, err := io.WriteString(conn, "still\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "still\n" {
		t.Fatalf("echo through the upgraded connection 2 s later: %q %v", line, err)
	}

	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	released := time.Now()
	release(t, l.ID)
	n, err := br.Read(make([]byte, 1))
	closedAfter := time.Since(released)
	if n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the upgraded connection after release: read %d bytes, %v (after %s)", n, err, closedAfter)
	}
	select {
	case <-echo.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the member's side of the upgraded connection is still open 5 s after the release")
	}
	farAfter := time.Since(released)
	t.Logf("from the release request: upgraded connection closed within %s (caller) and %s (far end); member %s still running: %v",
		closedAfter.Round(time.Millisecond), farAfter.Round(time.Millisecond), l.ClusterName, memberRuns(t, l.ClusterName))
	if closedAfter > time.Second {
		t.Errorf("the upgraded connection closed %s after the release, want within 1 s", closedAfter)
	}
}
