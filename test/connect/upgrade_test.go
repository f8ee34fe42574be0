//go:build heavy

package connect

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUpgradeClosedWithLease: an upgraded connection (the kind exec,
// attach and port-forward use) passes through the proxy to the member and
// is closed within a second of the lease's release. The far end is the
// member's own API server: a watch served over a WebSocket. (A member
// without nodes has nothing else inside it; a pod whose forged status
// names a listener outside the member is what the address guard refuses.)
func TestUpgradeClosedWithLease(t *testing.T) {
	l, _ := lease(t, "10m")
	cert := leaseCert(t, l)

	path := fmt.Sprintf("/connect/%s/api/v1/namespaces?watch=1", l.ID)
	host := strings.TrimPrefix(s.APIURL, "https://")
	conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: s.Roots, Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: a29iZS11cGdyYWRlLXRlc3Q=\r\nOrigin: https://%[2]s\r\n\r\n", path, host)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade through the proxy: %d %s", resp.StatusCode, b)
	}
	// The watch's first events name the member's namespaces.
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if got := readUntil(t, br, `"kube-system"`); got != nil {
		t.Fatalf("the WebSocket watch through the proxy: %v", got)
	}

	// It stays open while the lease lasts: a namespace created 2 s later
	// arrives on it.
	time.Sleep(2 * time.Second)
	if code, b := call(t, &cert, http.MethodPost, "/connect/"+l.ID+"/api/v1/namespaces", http.Header{"Content-Type": {"application/json"}},
		strings.NewReader(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"upgrade-later"}}`)); code != http.StatusCreated {
		t.Fatalf("creating a namespace through the proxy: %d %s", code, b)
	}
	if got := readUntil(t, br, `"upgrade-later"`); got != nil {
		t.Fatalf("the WebSocket watch 2 s later: %v", got)
	}

	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	released := time.Now()
	release(t, l.ID)
	var err2 error
	for err2 == nil {
		_, err2 = br.ReadByte()
	}
	closedAfter := time.Since(released)
	if strings.Contains(err2.Error(), "timeout") {
		t.Fatalf("the upgraded connection is still open %s after the release: %v", closedAfter, err2)
	}
	t.Logf("from the release request: upgraded connection closed within %s; member %s still running: %v",
		closedAfter.Round(time.Millisecond), l.ClusterName, memberRuns(t, l.ClusterName))
	if closedAfter > time.Second {
		t.Errorf("the upgraded connection closed %s after the release, want within 1 s", closedAfter)
	}
}

// readUntil reads the upgraded stream until want has been seen.
func readUntil(t *testing.T, br *bufio.Reader, want string) error {
	t.Helper()
	var seen bytes.Buffer
	buf := make([]byte, 4096)
	for !bytes.Contains(seen.Bytes(), []byte(want)) {
		n, err := br.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			return fmt.Errorf("%w after %d bytes without %s", err, seen.Len(), want)
		}
	}
	return nil
}
