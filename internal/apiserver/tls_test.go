//go:build integration

package apiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestServerServesARenewedCertificate starts the API over TLS with
// certificate A in real files, replaces them with certificate B (issued by
// the same CA, as cert-manager renews), and expects new connections to be
// served B without a restart: once as the kubelet updates a Secret volume
// (an atomic swap of the ..data symlink, the old files deleted), once as a
// plain rewrite of the files in place.
func TestServerServesARenewedCertificate(t *testing.T) {
	ca, err := pki.NewCA("kobe-api-test-ca", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(t *testing.T, cn string) ([]byte, []byte) {
		t.Helper()
		certPEM, keyPEM, err := ca.IssueServing(cn, []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return certPEM, keyPEM
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)

	for _, tc := range []struct {
		name string
		// install writes the pair where the server reads it (dir/tls.crt,
		// dir/tls.key); called for A, then for B.
		install func(t *testing.T, dir, version string, certPEM, keyPEM []byte)
	}{
		{"a Secret volume updated by the kubelet", installAsKubelet},
		{"files rewritten in place", func(t *testing.T, dir, _ string, certPEM, keyPEM []byte) {
			writeFile(t, filepath.Join(dir, "tls.crt"), certPEM)
			writeFile(t, filepath.Join(dir, "tls.key"), keyPEM)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			certA, keyA := issue(t, "kobe-api-A")
			tc.install(t, dir, "a", certA, keyA)
			addr := startTLSServer(t, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
			if cn, err := servedCommonName(t.Context(), addr, roots); err != nil || cn != "kobe-api-A" {
				t.Fatalf("before the renewal the API serves %q (%v), want kobe-api-A", cn, err)
			}

			certB, keyB := issue(t, "kobe-api-B")
			renewed := time.Now()
			tc.install(t, dir, "b", certB, keyB)
			testenv.Eventually(t, 30*time.Second, "a new connection to be served certificate B", func() error {
				cn, err := servedCommonName(t.Context(), addr, roots)
				if err != nil {
					return err
				}
				if cn != "kobe-api-B" {
					return fmt.Errorf("served %q", cn)
				}
				return nil
			})
			t.Logf("certificate B served %s after the files changed", time.Since(renewed).Round(time.Millisecond))
		})
	}
}

// installAsKubelet lays the pair out as the kubelet does for a Secret
// volume: the files are symlinks through ..data to a directory of this
// version, and an update swaps ..data with a rename and deletes the old
// directory.
func installAsKubelet(t *testing.T, dir, version string, certPEM, keyPEM []byte) {
	t.Helper()
	versionDir := "..v_" + version
	if err := os.Mkdir(filepath.Join(dir, versionDir), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, versionDir, "tls.crt"), certPEM)
	writeFile(t, filepath.Join(dir, versionDir, "tls.key"), keyPEM)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(versionDir, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f))
		if err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTLSServer runs an API server with the certificate files on a
// loopback port until the test ends, and returns its address.
func startTLSServer(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	srv, err := newServer(fx.mgr, apiserver.Options{Addr: "127.0.0.1:0", TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("API server: %v", err)
		}
	})
	var addr string
	testenv.Eventually(t, 10*time.Second, "the API server to listen", func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("API server stopped: %w", err)
		default:
		}
		if addr = srv.Addr(); addr == "" {
			return errors.New("not listening yet")
		}
		return nil
	})
	return addr
}

// servedCommonName makes a GET /healthz on a new connection, verifying the
// server against roots, and returns the common name of the certificate it
// was served.
func servedCommonName(ctx context.Context, addr string, roots *x509.CertPool) (string, error) {
	c := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/healthz", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return "", fmt.Errorf("GET /healthz: %s, TLS %v", resp.Status, resp.TLS != nil)
	}
	return resp.TLS.PeerCertificates[0].Subject.CommonName, nil
}
