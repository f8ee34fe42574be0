//go:build heavy

package connect

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"

	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// kubectlProxy starts `kubectl proxy --port 0` with kubeconfig kc, as the
// upstream conformance spec "[sig-cli] Kubectl client Proxy server should
// support proxy with --port 0" does, and returns the local URL it serves.
func kubectlProxy(t *testing.T, kc string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, testenv.KubectlPath(t), "--kubeconfig", kc, "proxy", "--port", "0", "--disable-filter")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() { cancel(); <-exited })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Starting to serve on "); ok {
				addr <- a
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-exited:
		t.Fatalf("kubectl proxy exited: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl proxy printed no address in 30 s: %s", stderr.String())
	}
	return ""
}

// get sends method path to url with body (JSON) and returns the status
// and body.
func get(t *testing.T, method, url string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestKubectlProxyWithoutServerPath: kubectl proxy drops the path of a
// kubeconfig's server (https://<kobe>/connect/<lease>) unless given
// --append-server-path, so it asks kobe for /api/ at the root: the connect
// proxy serves it from the member of the lease whose certificate kubectl
// presents, as that lease, and refuses it once the lease ends.
func TestKubectlProxyWithoutServerPath(t *testing.T) {
	l, kc := lease(t, "10m")
	base := kubectlProxy(t, kc)

	// What the conformance spec checks.
	code, b := get(t, http.MethodGet, base+"/api/", "")
	var versions metav1.APIVersions
	if code != http.StatusOK || json.Unmarshal(b, &versions) != nil || len(versions.Versions) == 0 {
		t.Fatalf("GET /api/ through kubectl proxy: %d %s, want at least one supported API version", code, b)
	}
	code, b = get(t, http.MethodGet, base+"/apis/", "")
	var groups metav1.APIGroupList
	if code != http.StatusOK || json.Unmarshal(b, &groups) != nil || len(groups.Groups) == 0 {
		t.Fatalf("GET /apis/ through kubectl proxy: %d %.300s, want the member's API groups", code, b)
	}
	code, b = get(t, http.MethodGet, base+"/version", "")
	var v version.Info
	if code != http.StatusOK || json.Unmarshal(b, &v) != nil || v.GitVersion == "" {
		t.Fatalf("GET /version through kubectl proxy: %d %s", code, b)
	}
	// The member sees the lease.
	code, b = get(t, http.MethodPost, base+"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	var review authnv1.SelfSubjectReview
	want := leasecreds.CommonName(getLease(t, l.ID))
	if code != http.StatusCreated || json.Unmarshal(b, &review) != nil || review.Status.UserInfo.Username != want {
		t.Fatalf("whoami through kubectl proxy: %d %s, want %s", code, b, want)
	}
	// kubectl itself, pointed at kubectl proxy.
	local := testenv.KubeconfigFile(t, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: proxy, cluster: {server: %q}}]
contexts: [{name: proxy, context: {cluster: proxy}}]
current-context: proxy
`, base))
	if out, err := testenv.KubectlStdout(t, local, "get", "ns", "kube-system", "-o", "name"); err != nil || out != "namespace/kube-system" {
		t.Fatalf("kubectl get ns through kubectl proxy: %v\n%s", err, out)
	}
	t.Logf("kubectl proxy --port 0 with lease %s's kubeconfig: /api/ lists %v, the member is %s", l.ID, versions.Versions, v.GitVersion)

	release(t, l.ID)
	testenv.Eventually(t, 5*time.Second, "kubectl proxy's /api/ to be refused after the release", func() error {
		code, b := get(t, http.MethodGet, base+"/api/", "")
		if code != http.StatusGone || !strings.Contains(string(b), "LeaseEnded") {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
}
