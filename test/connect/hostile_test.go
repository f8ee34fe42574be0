//go:build heavy

package connect

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// memberCA is the client CA of a member, opened from its sealed access
// material with the operator's key.
func memberCA(t *testing.T, member string) *pki.CA {
	t.Helper()
	a := accesstest.FromOperator(t, s.Env.Client, namespace, member)
	ca, err := pki.LoadCA(a.ClientCACert, a.ClientCAKey)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func keyPair(t *testing.T, certPEM, keyPEM []byte) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// selfSigned is a client certificate signed by its own key.
func selfSigned(t *testing.T, cn string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
}

// whoami asks the member, through the proxy, who the request is.
func whoami(t *testing.T, cert *tls.Certificate, id string, header http.Header) (int, authnv1.UserInfo, []byte) {
	t.Helper()
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", "application/json")
	code, b := call(t, cert, http.MethodPost, "/connect/"+id+"/apis/authentication.k8s.io/v1/selfsubjectreviews", header, strings.NewReader(body))
	var r authnv1.SelfSubjectReview
	_ = json.Unmarshal(b, &r)
	return code, r.Status.UserInfo, b
}

// whoamiHTTP11 is whoami over HTTP/1.1, where a Connection header may name
// other headers (HTTP/2 refuses it).
func whoamiHTTP11(t *testing.T, cert *tls.Certificate, id string, header http.Header) (int, authnv1.UserInfo, []byte) {
	t.Helper()
	tr := s.client(cert).Transport.(*http.Transport)
	tr.ForceAttemptHTTP2, tr.TLSNextProto = false, map[string]func(string, *tls.Conn) http.RoundTripper{}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.APIURL+"/connect/"+id+"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("whoami over HTTP/1.1: %v", err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Fatalf("whoami went over %s, want HTTP/1.1", resp.Proto)
	}
	b, _ := io.ReadAll(resp.Body)
	var r authnv1.SelfSubjectReview
	_ = json.Unmarshal(b, &r)
	return resp.StatusCode, r.Status.UserInfo, b
}

// TestHostileCallers: the proxy forwards only the lease's own certificate,
// on its own path, as the lease, and only while the lease holds its
// member: every other attempt is refused with a JSON error.
func TestHostileCallers(t *testing.T) {
	waitPoolReady(t, 2)
	a, _ := lease(t, "60s")
	b, _ := lease(t, "10m")
	certA, certB := leaseCert(t, a), leaseCert(t, b)
	objA := getLease(t, a.ID)
	pathA, pathB := "/connect/"+a.ID+"/api", "/connect/"+b.ID+"/api"

	// The baseline: each lease's own certificate on its own path.
	for _, c := range []struct {
		cert *tls.Certificate
		path string
	}{{&certA, pathA}, {&certB, pathB}} {
		if code, body := call(t, c.cert, http.MethodGet, c.path, nil, nil); code != http.StatusOK {
			t.Fatalf("GET %s with its lease's certificate: %d %s", c.path, code, body)
		}
	}

	t.Run("certificates", func(t *testing.T) {
		caB := memberCA(t, b.ClusterName)
		forgedPEM, forgedKey, err := caB.IssueClient(leasecreds.CommonName(objA), []string{"system:masters"}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		caA := memberCA(t, a.ClusterName)
		wrongCN, wrongCNKey, err := caA.IssueClient("kobe-lease:"+a.ID, []string{"system:masters"}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			cert *tls.Certificate
			path string
			want int
		}{
			{"no client certificate", nil, pathA, http.StatusUnauthorized},
			{"lease A's certificate on lease B's path", &certA, pathB, http.StatusForbidden},
			{"lease B's certificate on lease A's path", &certB, pathA, http.StatusForbidden},
			{"lease A's name signed by lease B's member CA", keyPair(t, forgedPEM, forgedKey), pathA, http.StatusForbidden},
			{"self-signed with lease A's name", selfSigned(t, leasecreds.CommonName(objA)), pathA, http.StatusForbidden},
			{"signed by lease A's member CA, another name", keyPair(t, wrongCN, wrongCNKey), pathA, http.StatusForbidden},
			{"a lease that does not exist", &certA, "/connect/lease-000000000000/api", http.StatusNotFound},
		} {
			code, body := call(t, c.cert, http.MethodGet, c.path, nil, nil)
			refusedWith(t, c.name, code, body, c.want)
		}
	})

	t.Run("paths", func(t *testing.T) {
		for _, p := range []string{
			"/connect/" + a.ID + "/../" + b.ID + "/api",
			"/connect/" + a.ID + "/api/../../" + b.ID + "/api",
			"/connect/" + a.ID + "%2F..%2F" + b.ID + "/api",
			"/connect/" + a.ID + "/api%2F..%2F..%2F" + b.ID + "%2Fapi",
			"/connect/" + a.ID + "/api/%2e%2e/%2e%2e/" + b.ID + "/api",
			"/connect/" + a.ID + "//api",
			"/connect/" + a.ID + ":" + b.ID + "/api",
			"/connect/" + a.ID + "%2Fapi",
			"/connect/" + strings.ToUpper(a.ID) + "/api",
		} {
			code, body := call(t, &certA, http.MethodGet, p, nil, nil)
			refusedWith(t, p, code, body, http.StatusBadRequest)
		}
		// Through kobe's own routes, the lease API's mux does not clean a
		// connect path into another lease's either.
		code, body := call(t, &certA, http.MethodGet, "/v1/../connect/"+b.ID+"/api", nil, nil)
		if code == http.StatusOK {
			t.Errorf("/v1/../connect/<b>/api with lease A's certificate: %d %s", code, body)
		}
	})

	t.Run("headers", func(t *testing.T) {
		want := leasecreds.CommonName(objA)
		code, u, body := whoami(t, &certA, a.ID, nil)
		if code != http.StatusCreated || u.Username != want {
			t.Fatalf("whoami through the proxy: %d %s, want %s", code, body, want)
		}
		h := http.Header{}
		h.Set("Authorization", "Bearer not-a-token")
		h.Set("Impersonate-User", "system:admin")
		h.Add("Impersonate-Group", "evil")
		h.Set("Impersonate-Uid", "forged-uid")
		h.Set("Impersonate-Extra-Scopes", "forged")
		code, u, body = whoami(t, &certA, a.ID, h)
		if code != http.StatusCreated || u.Username != want || u.UID != "" || len(u.Extra) != 0 {
			t.Fatalf("whoami with the caller's Authorization and Impersonate-* headers: %d %s, want %s and no uid or extra", code, body, want)
		}
		for _, g := range u.Groups {
			if g == "evil" {
				t.Errorf("the caller's Impersonate-Group reached the member: %v", u.Groups)
			}
		}
		// A Connection header naming kobe's impersonation headers does not
		// make the request kobe's own admin's.
		for _, conn := range []string{"Impersonate-User, Impersonate-Group", "impersonate-user", "keep-alive, IMPERSONATE-GROUP"} {
			code, u, body = whoamiHTTP11(t, &certA, a.ID, http.Header{"Connection": {conn}, "Impersonate-User": {"system:admin"}})
			if code != http.StatusCreated || u.Username != want || !slices.Contains(u.Groups, leasecreds.AdminGroup) {
				t.Errorf("whoami with Connection: %s: %d %s, want %s in %s", conn, code, body, want, leasecreds.AdminGroup)
			}
		}
	})

	// At the root (clients that drop the kubeconfig server's path), the
	// certificate names the lease: each reaches its own member, as itself,
	// and nothing else does.
	t.Run("root", func(t *testing.T) {
		body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
		for _, c := range []struct {
			cert *tls.Certificate
			id   string
		}{{&certA, a.ID}, {&certB, b.ID}} {
			want := leasecreds.CommonName(getLease(t, c.id))
			code, raw := call(t, c.cert, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
				http.Header{"Content-Type": {"application/json"}, "Impersonate-User": {"system:admin"}}, strings.NewReader(body))
			var r authnv1.SelfSubjectReview
			if code != http.StatusCreated || json.Unmarshal(raw, &r) != nil || r.Status.UserInfo.Username != want {
				t.Errorf("whoami at the root with %s's certificate: %d %s, want %s", c.id, code, raw, want)
			}
		}
		caB := memberCA(t, b.ClusterName)
		forgedPEM, forgedKey, err := caB.IssueClient(leasecreds.CommonName(objA), []string{"system:masters"}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			cert *tls.Certificate
			want int
		}{
			{"no client certificate", nil, http.StatusUnauthorized},
			{"lease A's name signed by lease B's member CA", keyPair(t, forgedPEM, forgedKey), http.StatusForbidden},
			{"self-signed with lease A's name", selfSigned(t, leasecreds.CommonName(objA)), http.StatusForbidden},
			{"self-signed, not a lease's", selfSigned(t, "kubernetes-admin"), http.StatusForbidden},
		} {
			for _, p := range []string{"/api", "/apis", "/version"} {
				code, body := call(t, c.cert, http.MethodGet, p, nil, nil)
				refusedWith(t, c.name+" at "+p, code, body, c.want)
			}
		}
	})

	t.Run("forged later expiry", func(t *testing.T) {
		l := getLease(t, a.ID)
		inst := &kobev1.ClusterInstance{}
		if err := s.Env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: a.ClusterName}, inst); err != nil {
			t.Fatal(err)
		}
		end := leasecreds.NotAfter(l, inst, nil)
		if end.After(time.Now().Add(time.Minute)) {
			t.Fatalf("lease %s ends at %s, want within its 60 s TTL", a.ID, end)
		}
		forged := metav1.NewTime(time.Now().Add(10 * time.Hour))
		l.Status.ExpiresAt = &forged
		l.Status.Extensions = 5
		if err := s.Env.Client.Status().Update(t.Context(), l); err != nil {
			t.Fatalf("forging lease %s's expiry: %v", a.ID, err)
		}
		lines, exited := kubectlWatch(t, testenv.KubeconfigFile(t, []byte(a.Kubeconfig)))
		waitLine(t, lines, "NAME")
		if code, body := call(t, &certA, http.MethodGet, pathA, nil, nil); code != http.StatusOK {
			t.Fatalf("before its real expiry (%s): %d %s", end, code, body)
		}
		time.Sleep(time.Until(end))
		var refusedAfter, closedAfter time.Duration
		testenv.Eventually(t, 5*time.Second, "the proxy to refuse the lease past its real expiry", func() error {
			code, body := call(t, &certA, http.MethodGet, pathA, nil, nil)
			if code == http.StatusOK {
				return errorf("%d %s", code, body)
			}
			refusedAfter = time.Since(end)
			refusedWith(t, "past its expiry", code, body, http.StatusGone)
			return nil
		})
		select {
		case <-exited:
			closedAfter = time.Since(end)
		case <-time.After(5 * time.Second):
			t.Fatal("kubectl get -w still runs 5 s after the lease's real expiry")
		}
		t.Logf("forged expiresAt %s; real end %s: refused %s and watch closed %s after it", forged.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339),
			refusedAfter.Round(time.Millisecond), closedAfter.Round(time.Millisecond))
		if closedAfter > 2*time.Second {
			t.Errorf("the watch closed %s after the lease's end", closedAfter)
		}
	})

	t.Run("member deleted", func(t *testing.T) {
		lines, exited := kubectlWatch(t, testenv.KubeconfigFile(t, []byte(b.Kubeconfig)))
		waitLine(t, lines, "NAME")
		inst := &kobev1.ClusterInstance{}
		if err := s.Env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: b.ClusterName}, inst); err != nil {
			t.Fatal(err)
		}
		if err := s.Env.Client.Delete(t.Context(), inst); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		testenv.Eventually(t, 5*time.Second, "the proxy to refuse the lease whose member is deleted", func() error {
			code, body := call(t, &certB, http.MethodGet, pathB, nil, nil)
			if code == http.StatusOK {
				return errorf("%d %s", code, body)
			}
			var e wire.ErrorBody
			if json.Unmarshal(body, &e) != nil || e.Reason == "" {
				t.Errorf("refusal without a JSON error: %d %s", code, body)
			}
			return nil
		})
		select {
		case <-exited:
			t.Logf("member deleted: watch closed %s after the delete", time.Since(deleted).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatal("kubectl get -w still runs 5 s after its member was deleted")
		}
	})
}
