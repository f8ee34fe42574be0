//go:build integration

package leaseservice_test

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/tools/clientcmd"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
)

// auditLog keeps the "Lease audit" lines a service logs, decoded.
type auditLog struct {
	mu    sync.Mutex
	lines []map[string]any
	raw   []string
}

func (a *auditLog) add(line string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.raw = append(a.raw, line)
	var kv map[string]any
	if json.Unmarshal([]byte(line), &kv) == nil && kv["msg"] == "Lease audit" {
		a.lines = append(a.lines, kv)
	}
}

// serialOf is the hex serial of the client certificate in kubeconfig.
func serialOf(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		block, _ := pem.Decode(u.ClientCertificateData)
		if block == nil {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return cert.SerialNumber.Text(16)
	}
	t.Fatal("kubeconfig has no client certificate")
	return ""
}

// TestEveryMintIsAudited: each kubeconfig handed out (the create's, every
// GET's, the extension's) is a "Lease audit" line naming the lease, the
// identity, the member and the certificate's serial, and no line carries
// key material.
func TestEveryMintIsAudited(t *testing.T) {
	makePool(t, "audited", 1)
	log := &auditLog{}
	s := newService(func(o *leaseservice.Options) { o.Log = funcr.NewJSON(log.add, funcr.Options{}) })
	p := caller("auditor", kobev1.AccessRule{Pools: []string{"audited"}})
	ctx := t.Context()

	l, err := s.Create(ctx, p, leaseservice.CreateRequest{Pool: "audited", TTL: 10 * time.Minute})
	if err != nil || !l.Bound() {
		t.Fatalf("Create: %v", err)
	}
	id, member := l.Object.Name, l.Object.Status.InstanceRef.Name
	waitRecorded(t, id)
	serials := []string{serialOf(t, l.Kubeconfig)}
	for range 3 {
		got, err := s.Get(ctx, p, id)
		if err != nil || len(got.Kubeconfig) == 0 {
			t.Fatalf("Get: %v", err)
		}
		serials = append(serials, serialOf(t, got.Kubeconfig))
	}
	ext, err := s.Extend(ctx, p, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	serials = append(serials, serialOf(t, ext.Kubeconfig))

	log.mu.Lock()
	lines := slices.Clone(log.lines)
	log.mu.Unlock()
	var ops []string
	for _, line := range lines {
		ops = append(ops, line["op"].(string))
	}
	if want := []string{"create", "get", "get", "get", "extend"}; !slices.Equal(ops, want) {
		t.Fatalf("audit lines of ops %v, want %v: %v", ops, want, log.raw)
	}
	for i, line := range lines {
		for k, want := range map[string]string{"lease": id, "identity": p.Identity, "policy": p.Policy, "member": member, "pool": "audited"} {
			if line[k] != want {
				t.Errorf("%s audit line: %s = %v, want %q (%v)", ops[i], k, line[k], want, line)
			}
		}
		if line["serial"] != serials[i] || serials[i] == "" {
			t.Errorf("%s audit line names serial %v, the kubeconfig handed out has %q", ops[i], line["serial"], serials[i])
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(serials)))) != len(serials) {
		t.Errorf("serials %v are not all different: each mint is a new certificate", serials)
	}
	for _, raw := range log.raw {
		if strings.Contains(raw, "PRIVATE KEY") || strings.Contains(raw, "client-key-data") || strings.Contains(raw, "BEGIN CERTIFICATE") {
			t.Fatalf("a log line carries credentials: %s", raw)
		}
	}
}
