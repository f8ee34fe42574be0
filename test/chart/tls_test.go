package chart

import (
	"crypto/tls"
	"crypto/x509"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// selfSigned is the Secret of the chart's own CA and certificate in r,
// decoded: it fails the test unless it is a kubernetes.io/tls Secret named
// name with tls.crt, tls.key, ca.crt and ca.key, whose key pair matches.
type selfSigned struct {
	cert, ca *x509.Certificate
	caPEM    []byte
}

func tlsSecret(t *testing.T, r *rendered, name string) selfSigned {
	t.Helper()
	var s corev1.Secret
	r.typed(t, "Secret", &s)
	if s.Name != name || s.Type != corev1.SecretTypeTLS {
		t.Fatalf("Secret %s of type %s, want %s of type %s", s.Name, s.Type, name, corev1.SecretTypeTLS)
	}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt", "ca.key"} {
		if len(s.Data[k]) == 0 {
			t.Fatalf("Secret %s has no %s (keys: %v)", s.Name, k, keys(s.Data))
		}
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("tls.crt and tls.key: %v", err)
	}
	caPair, err := tls.X509KeyPair(s.Data["ca.crt"], s.Data["ca.key"])
	if err != nil {
		t.Fatalf("ca.crt and ca.key: %v", err)
	}
	out := selfSigned{cert: pair.Leaf, ca: caPair.Leaf, caPEM: s.Data["ca.crt"]}
	if !out.ca.IsCA || out.cert.IsCA {
		t.Errorf("ca.crt IsCA %v, tls.crt IsCA %v: want a CA and a leaf", out.ca.IsCA, out.cert.IsCA)
	}
	return out
}

// verifies fails the test unless the certificate is valid for every one of
// names (DNS names or IPs) under the CA, as a TLS client checks it, and
// invalid for every one of not.
func (s selfSigned) verifies(t *testing.T, names, not []string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(s.ca)
	for _, n := range names {
		if _, err := s.cert.Verify(x509.VerifyOptions{DNSName: n, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the certificate does not verify for %s: %v (DNS %v, IP %v)", n, err, s.cert.DNSNames, s.cert.IPAddresses)
		}
	}
	for _, n := range not {
		if _, err := s.cert.Verify(x509.VerifyOptions{DNSName: n, Roots: roots}); err == nil {
			t.Errorf("the certificate verifies for %s (DNS %v, IP %v)", n, s.cert.DNSNames, s.cert.IPAddresses)
		}
	}
}

// TestSelfSignedTLSByDefault: the defaults serve HTTPS with a CA and a
// certificate the chart makes, for the Service's names, localhost and
// 127.0.0.1; the pod mounts them without the CA's key and passes the CA to
// the operator; the notes tell how to take the CA.
func TestSelfSignedTLSByDefault(t *testing.T) {
	r := mustRender(t, nil)
	s := tlsSecret(t, r, "kobe-api-tls")
	s.verifies(t, []string{"kobe", "kobe.kobe-system", "kobe.kobe-system.svc", "kobe.kobe-system.svc.cluster.local", "localhost", "127.0.0.1"},
		[]string{"kobe.example.com", "kobe.other-ns.svc", "10.0.0.1", "::1"})

	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	c := operator(t, &d)
	for _, want := range []string{"--api-tls-cert-file=/etc/kobe/tls/tls.crt", "--api-tls-key-file=/etc/kobe/tls/tls.key", "--api-tls-ca-file=/etc/kobe/tls/ca.crt"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	i := slices.IndexFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "api-tls" })
	if i < 0 || d.Spec.Template.Spec.Volumes[i].Secret == nil || d.Spec.Template.Spec.Volumes[i].Secret.SecretName != "kobe-api-tls" {
		t.Fatalf("no volume api-tls of the Secret kobe-api-tls: %+v", d.Spec.Template.Spec.Volumes)
	}
	var mounted []string
	for _, it := range d.Spec.Template.Spec.Volumes[i].Secret.Items {
		if it.Key != it.Path {
			t.Errorf("key %s mounted as %s", it.Key, it.Path)
		}
		mounted = append(mounted, it.Key)
	}
	if !slices.Equal(mounted, []string{"tls.crt", "tls.key", "ca.crt"}) {
		t.Errorf("the pod mounts %v of the Secret, want tls.crt, tls.key and ca.crt (not ca.key)", mounted)
	}
	for _, want := range []string{
		`kubectl -n kobe-system get secret kobe-api-tls -o jsonpath='{.data.ca\.crt}' | base64 -d > kobe-ca.crt`,
		"kobe config set kobe --endpoint https://127.0.0.1:8090 --ca-file kobe-ca.crt",
		"From inside the cluster the endpoint is https://kobe.kobe-system.svc:8090.",
	} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("notes lack %q:\n%s", want, r.notes)
		}
	}
	if strings.Contains(r.notes, "ProxyNotConfigured") {
		t.Errorf("notes warn of the connect proxy being off while TLS is on:\n%s", r.notes)
	}

	// Without a cluster (helm template, this render) nothing is looked up:
	// every render makes a new CA, as the chart README says.
	if again := tlsSecret(t, mustRender(t, nil), "kobe-api-tls"); again.ca.Equal(s.ca) {
		t.Error("two renders without a cluster made the same CA")
	}
}

// TestSelfSignedTLSNames: the host of api.connect.url (a name or an IP)
// and selfSigned.extraDnsNames are in the certificate, the Service's names
// follow fullnameOverride, and validityDays bounds both certificates.
func TestSelfSignedTLSNames(t *testing.T) {
	for _, tc := range []struct {
		url       string
		names     []string
		fullname  string
		validDays int
	}{
		{"https://kobe.example.com", []string{"kobe.example.com", "kb.kobe-system.svc", "extra.example.org"}, "kb", 30},
		{"https://kobe.example.com:8443/base", []string{"kobe.example.com", "kb.kobe-system.svc"}, "kb", 30},
		{"https://198.18.7.7:8443", []string{"198.18.7.7", "127.0.0.1", "localhost"}, "kb", 400},
		{"https://[fd00::7]:8443", []string{"fd00::7", "127.0.0.1"}, "kb", 400},
	} {
		t.Run(tc.url, func(t *testing.T) {
			r := mustRender(t, map[string]any{
				"fullnameOverride": tc.fullname,
				"api": map[string]any{"connect": map[string]any{"url": tc.url}, "tls": map[string]any{"selfSigned": map[string]any{
					"validityDays": tc.validDays, "extraDnsNames": []any{"extra.example.org"}}}},
			})
			s := tlsSecret(t, r, tc.fullname+"-api-tls")
			s.verifies(t, append(tc.names, "extra.example.org"), []string{"kobe.kobe-system.svc", "example.com"})
			for what, c := range map[string]*x509.Certificate{"tls.crt": s.cert, "ca.crt": s.ca} {
				if days := c.NotAfter.Sub(c.NotBefore).Hours() / 24; days < float64(tc.validDays)-1 || days > float64(tc.validDays)+1 {
					t.Errorf("%s valid %.1f days, want %d", what, days, tc.validDays)
				}
			}
		})
	}
}

// TestTLSOff: api.tls.enabled false serves plain HTTP: no Secret, no TLS
// flags or volume, an http Service port, and notes that say Proxy-mode
// pools refuse leases.
func TestTLSOff(t *testing.T) {
	r := mustRender(t, map[string]any{"api": map[string]any{"tls": map[string]any{"enabled": false}}})
	r.find(t, "Secret", 0)
	r.find(t, "Certificate", 0)
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	if args := operator(t, &d).Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--api-tls-") }) {
		t.Errorf("args %q have TLS flags", args)
	}
	if slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "api-tls" }) {
		t.Error("a TLS volume without TLS")
	}
	for _, o := range r.find(t, "Service", 2) {
		var svc corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
			t.Fatal(err)
		}
		if svc.Name == "kobe" && svc.Spec.Ports[0].Name != "http" {
			t.Errorf("API Service port %q, want http", svc.Spec.Ports[0].Name)
		}
	}
	for _, want := range []string{"503 ProxyNotConfigured", "--endpoint http://127.0.0.1:8090", "plain HTTP"} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("notes lack %q:\n%s", want, r.notes)
		}
	}
	if strings.Contains(r.notes, "ca.crt") {
		t.Errorf("notes tell to take a CA that does not exist:\n%s", r.notes)
	}
}

// TestOperatorSelector: the operator is told its own pods' labels (for
// member NetworkPolicies) as the Deployment selects them, whatever
// nameOverride and fullnameOverride say.
func TestOperatorSelector(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults":         nil,
		"nameOverride":     {"nameOverride": "pools"},
		"fullnameOverride": {"fullnameOverride": "kb", "nameOverride": "other"},
		"podLabels":        {"podLabels": map[string]any{"team": "platform"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, vals)
			var d appsv1.Deployment
			r.typed(t, "Deployment", &d)
			var sel string
			for _, a := range operator(t, &d).Args {
				if v, ok := strings.CutPrefix(a, "--member-network-policy-operator-selector="); ok {
					if sel != "" {
						t.Fatalf("the flag twice: %q and %q", sel, v)
					}
					sel = v
				}
			}
			set, err := labels.ConvertSelectorToLabelsMap(sel)
			if err != nil {
				t.Fatalf("--member-network-policy-operator-selector=%q: %v", sel, err)
			}
			if !labels.Equals(set, d.Spec.Selector.MatchLabels) {
				t.Errorf("operator selector %v, the Deployment selects %v", set, d.Spec.Selector.MatchLabels)
			}
			if !set.AsSelector().Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("operator selector %v does not match the pods' labels %v", set, d.Spec.Template.Labels)
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestCACertOffWithOwnSecret: a Secret of the user's whose certificate
// callers already trust may go without ca.crt (caCert false): no
// --api-tls-ca-file; the self-signed mode refuses that (TestRefused).
func TestCACertOffWithOwnSecret(t *testing.T) {
	r := mustRender(t, map[string]any{"api": map[string]any{"tls": map[string]any{"secretName": "public-cert", "caCert": false}}})
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	args := operator(t, &d).Args
	if !slices.Contains(args, "--api-tls-cert-file=/etc/kobe/tls/tls.crt") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--api-tls-ca-file") }) {
		t.Errorf("args %q: want the certificate and no CA file", args)
	}
	r.find(t, "Secret", 0)
}
