package apiserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestTricklingBodiesHoldNoSlot: more unauthenticated callers than there
// are in-flight slots send their headers and then trickle a body byte by
// byte. An authenticated request meanwhile is served at once (not 429 or
// 503), the tricklers hold no slot, and each trickler is cut off with a 400
// once BodyReadTimeout has passed. Real TCP connections, the real
// authenticator (token policy).
func TestTricklingBodiesHoldNoSlot(t *testing.T) {
	const (
		maxInFlight = 2
		tricklers   = maxInFlight + 3
		token       = "good-token"
	)
	ns := "kobe-system"
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ci-token", Namespace: ns}, Data: map[string][]byte{"token": []byte(token)}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: ns},
			Spec: kobev1.AccessPolicySpec{
				Auth:  kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "ci-token"}}},
				Rules: []kobev1.AccessRule{{Pools: []string{"*"}}},
			},
		},
	).Build()
	s := newIdleServer(t, Options{
		Namespace: ns, MaxInFlight: maxInFlight, BodyReadTimeout: 3 * time.Second, Log: logr.Discard(),
		Auth: auth.NewAuthenticator(auth.Options{Reader: reader, Namespace: ns}),
	})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	// Each trickler declares a 4 KiB body and sends one byte of it every
	// 100ms, far slower than the body could be sent.
	results := make(chan string, tricklers)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	for i := range tricklers {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if _, err := fmt.Fprintf(conn, "POST /v1/leases HTTP/1.1\r\nHost: kobe\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		go func() {
			_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				results <- fmt.Sprintf("trickler %d: %v", i, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			results <- fmt.Sprintf("%d %s", resp.StatusCode, body)
		}()
	}
	testenv.Eventually(t, 20*time.Second, "every trickler to be reading its body", func() error {
		if n := s.readingBodies.Load(); n != tricklers {
			return fmt.Errorf("%d of %d tricklers are reading their body", n, tricklers)
		}
		return nil
	})
	if n := len(s.inFlight); n != 0 {
		t.Fatalf("%d in-flight slots held by callers still sending their body", n)
	}

	// An authenticated caller is served now, several times over.
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range maxInFlight + 1 {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/whoami", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("authenticated request %d while %d callers trickle: %v", i, tricklers, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"policy":"ci"`) {
			t.Fatalf("authenticated request %d while %d callers trickle: %d %s", i, tricklers, resp.StatusCode, body)
		}
	}
	if n := s.readingBodies.Load(); n != tricklers {
		t.Fatalf("the tricklers were cut off early (%d still reading): the test proved nothing", n)
	}

	// Each trickler is answered 400 once the body read deadline passes,
	// although it keeps sending.
	for range tricklers {
		select {
		case got := <-results:
			if !strings.HasPrefix(got, "400 ") || !strings.Contains(got, "not received within 3s") {
				t.Fatalf("trickler answered %q, want 400 saying the body was not received in time", got)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a trickler was not cut off within 30s")
		}
	}
}
