//go:build heavy

package connect

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestWatchOutlivesServerTimeouts: kobe's API server cuts requests at 30 s
// (read) and 60 s (write); proxied watches are not cut, over HTTP/2
// (kubectl) nor HTTP/1.1, and still deliver events after 60 s.
func TestWatchOutlivesServerTimeouts(t *testing.T) {
	l, kc := lease(t, "10m")
	defer release(t, l.ID)
	lines, exited := kubectlWatch(t, kc)
	waitLine(t, lines, "NAME")

	cert := leaseCert(t, l)
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: s.Roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"},
	}}}
	resp, err := h1.Get(s.APIURL + "/connect/" + l.ID + "/api/v1/namespaces/default/configmaps?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
		t.Fatalf("HTTP/1.1 watch: %s %d", resp.Proto, resp.StatusCode)
	}
	h1Events := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			h1Events <- sc.Text()
		}
		close(h1Events)
	}()

	testenv.Consistently(t, 65*time.Second, "kubectl get -w to stay open past the server's timeouts", func() error {
		select {
		case <-exited:
			return errors.New("kubectl get -w ended")
		default:
			return nil
		}
	})
	if out, err := testenv.Kubectl(t, kc, "create", "configmap", "late"); err != nil {
		t.Fatalf("kubectl create configmap: %v\n%s", err, out)
	}
	waitLine(t, lines, "late")
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-h1Events:
			if !ok {
				t.Fatal("the HTTP/1.1 watch ended before its event")
			}
			if strings.Contains(e, `"name":"late"`) {
				t.Logf("both watches delivered an event after 65 s")
				return
			}
		case <-deadline:
			t.Fatal("the HTTP/1.1 watch delivered no event for configmap late")
		}
	}
}
