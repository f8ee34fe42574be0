package connect

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// adminToken is the member's admin credential in its access material.
const adminToken = "admin-token-never-logged"

// memberServer stands in for a member's API server: it records the
// headers and escaped path of every request by its X-Test-Case header and
// answers
//   - an upgrade with 101, then echoes;
//   - a path under /apis/hung.example.com/ never (until the caller leaves);
//   - a watch with 200 after watchDelay, then holds it open;
//   - anything else with 201 and respBody.
type memberServer struct {
	*httptest.Server
	watchDelay time.Duration
	respBody   string

	mu    sync.Mutex
	seen  map[string]http.Header
	paths map[string]string
}

func newMemberServer(t *testing.T) *memberServer {
	m := &memberServer{seen: map[string]http.Header{}, paths: map[string]string{}, respBody: `{"kind":"SelfSubjectReview"}`}
	m.Server = httptest.NewTLSServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.Close)
	return m
}

func (m *memberServer) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.seen[r.Header.Get("X-Test-Case")] = r.Header.Clone()
	m.paths[r.Header.Get("X-Test-Case")] = r.URL.EscapedPath()
	m.mu.Unlock()
	switch {
	case r.Header.Get("Upgrade") != "":
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(c, rw)
	case strings.HasPrefix(r.URL.Path, "/apis/hung.example.com/"):
		<-r.Context().Done()
	case r.URL.Query().Get("watch") != "":
		select {
		case <-time.After(m.watchDelay):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	default:
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, m.respBody)
	}
}

func (m *memberServer) headers(t *testing.T, testCase string) http.Header {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.seen[testCase]
	if !ok {
		t.Fatalf("the member saw no request of case %q", testCase)
	}
	return h
}

// saw reports whether the member saw a request of case testCase.
func (m *memberServer) saw(testCase string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.seen[testCase]
	return ok
}

// path is the escaped path of the member's request of case testCase.
func (m *memberServer) path(testCase string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paths[testCase]
}

// harness is a Proxy over TLS, with leases bound to members, each its own
// memberServer.
type harness struct {
	proxy *Proxy
	front *httptest.Server
	// member is the first lease's member; members are all, by lease name.
	member  *memberServer
	members map[string]*memberServer
	leases  map[string]*kobev1.ClusterLease
	certs   map[string]tls.Certificate
	// cas are the members' client CAs, by lease name.
	cas     map[string]*pki.CA
	objects client.Client

	logMu sync.Mutex
	logs  []string
}

// newHarness binds lease-<x> to member m-<x> for each x in names.
func newHarness(t *testing.T, opts Options, names ...string) *harness {
	h := &harness{
		members: map[string]*memberServer{}, leases: map[string]*kobev1.ClusterLease{},
		certs: map[string]tls.Certificate{}, cas: map[string]*pki.CA{},
	}
	var objs []client.Object
	for _, x := range names {
		ms := newMemberServer(t)
		if h.member == nil {
			h.member = ms
		}
		servingCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ms.Certificate().Raw})
		admin, err := clientcmd.Write(clientcmdapi.Config{
			Clusters:       map[string]*clientcmdapi.Cluster{"m": {Server: ms.URL, CertificateAuthorityData: servingCA}},
			AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {Token: adminToken}},
			Contexts:       map[string]*clientcmdapi.Context{"m": {Cluster: "m", AuthInfo: "admin"}},
			CurrentContext: "m",
		})
		if err != nil {
			t.Fatal(err)
		}
		l, inst := bound()
		l.Name, l.UID = "lease-"+x, types.UID("lease-uid-"+x)
		l.Spec.Requester = kobev1.Requester{Identity: "ci-" + x, Policy: "policy-" + x, Method: "token"}
		inst.Name, inst.UID = "m-"+x, types.UID("member-uid-"+x)
		l.Status.InstanceRef = &kobev1.ObjectRef{Name: inst.Name, UID: inst.UID}
		inst.Spec.LeaseRef.Name, inst.Spec.LeaseRef.UID = l.Name, l.UID
		ca, err := pki.NewCA("client-ca-"+x, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		h.members[l.Name], h.cas[l.Name] = ms, ca
		accesstest.Publish(t, inst, &backend.Access{
			Endpoint: ms.URL, CACert: servingCA, ClientCACert: ca.CertPEM, ClientCAKey: ca.KeyPEM, AdminKubeconfig: admin,
		})
		certPEM, keyPEM, err := ca.IssueClient(leasecreds.CommonName(l), []string{leasecreds.AdminGroup}, now.Add(-9*time.Minute), now.Add(20*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if h.certs[l.Name], err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
		h.leases[l.Name] = l
		objs = append(objs, l, inst)
	}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objs...).Build()
	h.objects = c
	opts.Namespace, opts.Reader, opts.APIReader, opts.Access = "ns", c, c, accesstest.Sealer()
	opts.Log = funcr.NewJSON(func(line string) {
		h.logMu.Lock()
		h.logs = append(h.logs, line)
		h.logMu.Unlock()
	}, funcr.Options{Verbosity: 1})
	h.proxy = New(opts)
	h.front = httptest.NewUnstartedServer(h.proxy)
	h.front.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	h.front.StartTLS()
	t.Cleanup(h.front.Close)
	return h
}

// client is an HTTP/1.1 client (HTTP/2 forbids Connection headers) that
// presents lease's certificate.
func (h *harness) client(lease string) *http.Client {
	tr := h.front.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = []tls.Certificate{h.certs[lease]}
	return &http.Client{Transport: tr}
}

// do sends a request for lease's member path with extra headers.
func (h *harness) do(t *testing.T, ctx context.Context, lease, method, path string, header http.Header, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, h.front.URL+"/connect/"+lease+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return h.client(lease).Do(req)
}

// logLines returns the captured log lines whose message is msg.
func (h *harness) logLines(msg string) []map[string]any {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	var out []map[string]any
	for _, l := range h.logs {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestImpersonationSurvivesConnectionHeader: whatever the caller's
// Connection header names, the member sees the request as the lease, with
// kobe's admin credential and none of the caller's impersonation; upgrades
// (exec, attach, port-forward) still upgrade.
func TestImpersonationSurvivesConnectionHeader(t *testing.T) {
	h := newHarness(t, Options{}, "a")
	l := h.leases["lease-a"]
	want := leasecreds.CommonName(l)
	check := func(t *testing.T, testCase string) {
		t.Helper()
		seen := h.member.headers(t, testCase)
		if got := seen.Values("Impersonate-User"); len(got) != 1 || got[0] != want {
			t.Errorf("the member saw Impersonate-User %q, want %q", got, want)
		}
		if got := seen.Values("Impersonate-Group"); len(got) != 1 || got[0] != leasecreds.AdminGroup {
			t.Errorf("the member saw Impersonate-Group %q, want only %q", got, leasecreds.AdminGroup)
		}
		if got := seen.Get("Authorization"); got != "Bearer "+adminToken {
			t.Errorf("the member saw Authorization %q, want the admin kubeconfig's token", got)
		}
		for k := range seen {
			if strings.HasPrefix(k, "Impersonate-") && k != "Impersonate-User" && k != "Impersonate-Group" {
				t.Errorf("the caller's %s reached the member", k)
			}
		}
	}

	for _, c := range []struct {
		name   string
		header http.Header
	}{
		{"Connection: Impersonate-User", http.Header{"Connection": {"Impersonate-User"}}},
		{"Connection: impersonate-user, Impersonate-Group", http.Header{"Connection": {"impersonate-user, Impersonate-Group"}}},
		{"Connection: Impersonate-User, Impersonate-Group, as two fields", http.Header{"Connection": {"Impersonate-User", "Impersonate-Group"}}},
		{"Connection: keep-alive, IMPERSONATE-USER, Authorization", http.Header{"Connection": {"keep-alive, IMPERSONATE-USER, Authorization"}}},
		{"the caller's own Impersonate-*", http.Header{
			"Impersonate-User": {"system:admin"}, "Impersonate-Group": {"evil"}, "Impersonate-Uid": {"forged"},
			"Impersonate-Extra-Scopes": {"forged"}, "Authorization": {"Bearer caller"},
		}},
		{"the caller's Impersonate-User, and Connection naming it", http.Header{
			"Impersonate-User": {"system:admin"}, "Connection": {"Impersonate-User, Impersonate-Uid"}, "Impersonate-Uid": {"forged"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.header.Set("X-Test-Case", c.name)
			c.header.Set("Content-Type", "application/json")
			resp, err := h.do(t, t.Context(), l.Name, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", c.header, `{"kind":"SelfSubjectReview"}`)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("got %d %s, want the member's 201", resp.StatusCode, b)
			}
			check(t, c.name)
		})
	}

	t.Run("Connection: Upgrade, Impersonate-User on an upgrade", func(t *testing.T) {
		name := t.Name()
		hdr := http.Header{"Connection": {"Upgrade, Impersonate-User"}, "Upgrade": {"SPDY/3.1"}, "X-Test-Case": {name}}
		resp, err := h.do(t, t.Context(), l.Name, http.MethodPost, "/api/v1/namespaces/default/pods/p/exec", hdr, "")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusSwitchingProtocols {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("got %d %s, want 101", resp.StatusCode, b)
		}
		conn := resp.Body.(io.ReadWriteCloser)
		if _, err := io.WriteString(conn, "ping\n"); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || line != "ping\n" {
			t.Fatalf("the upgraded stream echoed %q, %v", line, err)
		}
		check(t, name)
		seen := h.member.headers(t, name)
		if got := seen.Get("Connection"); !strings.EqualFold(got, "Upgrade") {
			t.Errorf("the member saw Connection %q, want Upgrade", got)
		}
	})
}

// openWatch starts a watch for lease and returns its status, its body
// (refusals) and a cancel that ends it.
func (h *harness) openWatch(t *testing.T, lease string) (int, string, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := h.do(t, ctx, lease, http.MethodGet, "/api/v1/namespaces/default/configmaps?watch=1", nil, "")
	if err != nil {
		cancel()
		t.Fatalf("watch of %s: %v", lease, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(b), cancel
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	t.Cleanup(cancel)
	return resp.StatusCode, "", cancel
}

// TestStreamsPerLease: one lease holds at most MaxStreamsPerLease open
// requests (429 beyond, naming the cap); another lease still gets
// through; a stream that ends gives its place back.
func TestStreamsPerLease(t *testing.T) {
	const limit = 3
	h := newHarness(t, Options{MaxStreamsPerLease: limit}, "a", "b")
	var open []context.CancelFunc
	for i := range limit {
		code, body, cancel := h.openWatch(t, "lease-a")
		if code != http.StatusOK {
			t.Fatalf("watch %d of lease-a: %d %s", i+1, code, body)
		}
		open = append(open, cancel)
	}
	code, body, _ := h.openWatch(t, "lease-a")
	var e wire.ErrorBody
	if code != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &e) != nil || e.Reason != wire.ReasonTooManyRequests ||
		!strings.Contains(e.Detail, fmt.Sprintf("%d connect requests", limit)) {
		t.Fatalf("watch %d of lease-a: %d %s, want 429 naming the cap of %d", limit+1, code, body, limit)
	}
	if code, body, _ := h.openWatch(t, "lease-b"); code != http.StatusOK {
		t.Fatalf("lease-b's watch while lease-a is at its cap: %d %s", code, body)
	}
	open[0]()
	testenv.Eventually(t, 10*time.Second, "lease-a's place to be given back", func() error {
		if code, body, _ := h.openWatch(t, "lease-a"); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// TestResponseHeaderTimeout: a member that never answers a plain request
// gets 504 after the header timeout and gives its slot back; a watch whose
// headers come later than that is not cut.
func TestResponseHeaderTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := newHarness(t, Options{ResponseHeaderTimeout: timeout}, "a")
	h.member.watchDelay = 3 * timeout

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := h.do(t, ctx, "lease-a", http.MethodGet, "/apis/hung.example.com/v1/things", nil, "")
	if err != nil {
		t.Fatalf("a request to a hung member: %v after %s", err, time.Since(start))
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e wire.ErrorBody
	if resp.StatusCode != http.StatusGatewayTimeout || json.Unmarshal(b, &e) != nil || e.Reason == "" {
		t.Fatalf("a request to a hung member: %d %s, want 504 with a JSON error", resp.StatusCode, b)
	}
	t.Logf("refused %s after the request", time.Since(start).Round(time.Millisecond))
	testenv.Eventually(t, 5*time.Second, "the slot to be given back", func() error {
		if n, m := h.proxy.InFlight(), h.proxy.OpenStreams(); n != 0 || m != 0 {
			return fmt.Errorf("%d slots, %d streams", n, m)
		}
		return nil
	})

	if code, body, _ := h.openWatch(t, "lease-a"); code != http.StatusOK {
		t.Fatalf("a watch whose headers come after %s: %d %s", h.member.watchDelay, code, body)
	}
}

// TestConnectAudit: every forwarded request and upgraded session is one
// log line naming the lease, its requester and the member, with its
// bytes and duration, and no credential.
func TestConnectAudit(t *testing.T) {
	h := newHarness(t, Options{}, "a")
	l := h.leases["lease-a"]
	reqBody := strings.Repeat("x", 123)
	resp, err := h.do(t, t.Context(), l.Name, http.MethodPost, "/api/v1/namespaces/default/configmaps?dryRun=secret-ish", nil, reqBody)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	up, err := h.do(t, t.Context(), l.Name, http.MethodPost, "/api/v1/namespaces/default/pods/p/exec",
		http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, "")
	if err != nil || up.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", up, err)
	}
	conn := up.Body.(io.ReadWriteCloser)
	_, _ = io.WriteString(conn, "ping\n")
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	var lines []map[string]any
	testenv.Eventually(t, 5*time.Second, "two Connect audit lines", func() error {
		if lines = h.logLines("Connect audit"); len(lines) != 2 {
			return fmt.Errorf("%d lines", len(lines))
		}
		return nil
	})
	byKind := map[string]map[string]any{}
	for _, m := range lines {
		for k, v := range map[string]any{"lease": l.Name, "identity": "ci-a", "policy": "policy-a", "method": "token", "member": "m-a", "memberUID": "member-uid-a"} {
			if m[k] != v {
				t.Errorf("audit line %v: %s = %v, want %v", m, k, m[k], v)
			}
		}
		for _, k := range []string{"start", "end", "duration", "bytesIn", "bytesOut"} {
			if _, ok := m[k]; !ok {
				t.Errorf("audit line %v has no %s", m, k)
			}
		}
		byKind[fmt.Sprint(m["kind"])] = m
	}
	if m := byKind["request"]; m == nil || m["verb"] != "POST" || m["path"] != "/api/v1/namespaces/default/configmaps" ||
		m["code"] != float64(http.StatusCreated) || m["bytesIn"] != float64(len(reqBody)) || m["bytesOut"] != float64(len(h.member.respBody)) {
		t.Errorf("the request's audit line: %v", m)
	}
	if m := byKind["upgrade"]; m == nil || m["upgraded"] != true || m["bytesIn"] != float64(len("ping\n")) || m["bytesOut"].(float64) <= float64(len("ping\n")) {
		t.Errorf("the upgrade's audit line: %v", m)
	}
	if n := len(h.logLines("Connect stream opened")); n != 1 {
		t.Errorf("%d Connect stream opened lines, want 1 (the upgrade)", n)
	}
	h.logMu.Lock()
	defer h.logMu.Unlock()
	for _, line := range h.logs {
		if strings.Contains(line, adminToken) || strings.Contains(line, "secret-ish") || strings.Contains(line, "PRIVATE KEY") {
			t.Errorf("a log line carries a credential or the query: %s", line)
		}
	}
}

func TestStreaming(t *testing.T) {
	for _, tt := range []struct {
		url  string
		want bool
	}{
		{"/connect/lease-a/api/v1/namespaces/default/configmaps?watch=1", true},
		{"/connect/lease-a/api/v1/namespaces/default/configmaps?watch=true", true},
		{"/connect/lease-a/api/v1/namespaces/default/configmaps?watch=TRUE&resourceVersion=5", true},
		{"/connect/lease-a/api/v1/namespaces/default/configmaps?watch=0", false},
		{"/connect/lease-a/api/v1/namespaces/default/configmaps?watch=false", false},
		{"/connect/lease-a/api/v1/watch/namespaces/default/configmaps", true},
		{"/connect/lease-a/apis/apps/v1/watch/deployments", true},
		{"/connect/lease-a/api/v1/namespaces/default/pods/p/log?follow=true", true},
		{"/connect/lease-a/api/v1/namespaces/default/pods/p/log", false},
		{"/connect/lease-a/api/v1/namespaces/default/configmaps", false},
		{"/connect/lease-a/apis/hung.example.com/v1/things", false},
		// "watch" as a name is not the watch prefix.
		{"/connect/lease-a/api/v1/namespaces/watch/services/watch/proxy", false},
		{"/connect/lease-a/apis/apps/watch", false},
		// At the root, the path is the member's.
		{"/api/v1/watch/namespaces/default/configmaps", true},
		{"/apis/apps/v1/watch/deployments", true},
		{"/api/v1/namespaces/default/configmaps?watch=1", true},
		{"/api/v1/namespaces/default/pods/p/log?follow=1", true},
		{"/api/v1/namespaces/default/configmaps", false},
		{"/apis/apps/watch", false},
	} {
		r := httptest.NewRequest(http.MethodGet, tt.url, nil)
		_, rest, refusal := SplitPath(r.URL.EscapedPath())
		if !IsConnectPath(r) {
			rest, refusal = RootPath(r.URL.EscapedPath())
		}
		if refusal != nil {
			t.Fatalf("%s: %v", tt.url, refusal)
		}
		if got := streaming(r, rest); got != tt.want {
			t.Errorf("streaming(%s) = %v, want %v", tt.url, got, tt.want)
		}
	}
}
