package local

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"sigs.k8s.io/yaml"

	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

const (
	// serviceCIDR is each member's (virtual) Service network; serviceIP is
	// the "kubernetes" Service's address in it.
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"

	// saIssuer is the issuer of the member's ServiceAccount tokens.
	saIssuer = "https://kubernetes.default.svc.cluster.local"
)

// writeAssets writes a member's certificates and keys (membercerts.Set):
// the server CA and the API server's serving certificate, the client CA
// (whose key the operator signs lease certificates with) and the admin
// certificate, and the ServiceAccount key pair. The server CA's key is not
// kept: nothing signs with it again. extraIPs (a member's gateway and its
// "kubernetes" Service IP, with nodes) and advertiseHost are added to the
// serving certificate.
func writeAssets(p paths, advertiseHost string, extraIPs ...net.IP) error {
	if err := os.MkdirAll(filepath.Dir(p.pki("x")), 0o700); err != nil {
		return err
	}
	req := membercerts.Request{ServiceIP: net.ParseIP(serviceIP), IPs: slices.Clone(extraIPs)}
	if ip := net.ParseIP(advertiseHost); ip != nil {
		req.IPs = append(req.IPs, ip)
	} else {
		req.DNSNames = append(req.DNSNames, advertiseHost)
	}
	certs, err := membercerts.New(req)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{serverCACert, certs.ServerCA.CertPEM, 0o644},
		{apiserverCert, certs.ServingCert, 0o644},
		{apiserverKey, certs.ServingKey, 0o600},
		{clientCACert, certs.ClientCA.CertPEM, 0o644},
		{clientCAKey, certs.ClientCA.KeyPEM, 0o600},
		{adminCert, certs.AdminCert, 0o644},
		{adminKey, certs.AdminKey, 0o600},
		{serviceAccountKey, certs.SAKey, 0o600},
		{serviceAccountPub, certs.SAPub, 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(p.pki(f.name), f.data, f.perm); err != nil {
			return err
		}
	}
	return nil
}

// componentUsers are the identities the member's own components
// authenticate as, with certificates from the member's client CA.
var componentUsers = map[string]membercerts.Identity{
	compKCM:       membercerts.ControllerManager,
	compScheduler: membercerts.Scheduler,
	compKwok:      {User: "kobe-kwok", Groups: []string{"system:masters"}},
}

// writeComponentKubeconfig writes the kubeconfig component c uses to reach
// the member's API server on its local port.
func writeComponentKubeconfig(p paths, c, host string, apiPort int) error {
	u, ok := componentUsers[c]
	if !ok {
		return fmt.Errorf("no identity for component %s", c)
	}
	ca, err := loadClientCA(p)
	if err != nil {
		return err
	}
	serverCA, err := os.ReadFile(p.pki(serverCACert))
	if err != nil {
		return err
	}
	kc, err := membercerts.Kubeconfig(ca, serverCA, "member", localURL(host, apiPort), u)
	if err != nil {
		return err
	}
	return writeFileAtomic(p.kubeconfig(c), kc, 0o600)
}

func loadClientCA(p paths) (*pki.CA, error) {
	certPEM, err := os.ReadFile(p.pki(clientCACert))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(p.pki(clientCAKey))
	if err != nil {
		return nil, err
	}
	return pki.LoadCA(certPEM, keyPEM)
}

// access reads what the operator needs to use the member from its files.
func access(p paths, endpoint string) (*accessFiles, error) {
	var a accessFiles
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{
		{serverCACert, &a.serverCA},
		{clientCACert, &a.clientCACert},
		{clientCAKey, &a.clientCAKey},
		{adminCert, &a.adminCert},
		{adminKey, &a.adminKey},
	} {
		data, err := os.ReadFile(p.pki(f.name))
		if err != nil {
			return nil, err
		}
		*f.dst = data
	}
	kc, err := membercerts.AdminKubeconfig(a.serverCA, a.adminCert, a.adminKey, "kobe-member", endpoint)
	if err != nil {
		return nil, err
	}
	a.adminKubeconfig = kc
	return &a, nil
}

type accessFiles struct {
	serverCA, clientCACert, clientCAKey, adminCert, adminKey, adminKubeconfig []byte
}

// localURL is the API server URL the member's own components use: host
// is state.LocalHost (empty means 127.0.0.1).
func localURL(host string, port int) string {
	if host == "" {
		host = "127.0.0.1"
	}
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(port))}).String()
}

// endpointURL is the API server URL handed to lease holders.
func endpointURL(host string, port int) string {
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(port))}).String()
}

// schedulerBackoff caps how long kube-scheduler waits before it tries an
// unschedulable pod again (upstream: 1 s, doubling to 10 s). A member's
// first pods (CoreDNS, the readiness probes) are created before its node
// registers, so they fail to schedule at first; with the upstream cap they
// could wait seconds after the node arrived (measured: 4 s), which a
// member's time to hand-out pays. A test cluster's scheduler has few pods
// to retry, so one second costs nothing.
const schedulerBackoff = 1

// writeSchedulerConfig writes kube-scheduler's configuration: the
// component kubeconfig, no leader election (one scheduler per member), and
// the short backoff.
func writeSchedulerConfig(p paths) error {
	cfg := map[string]any{
		"apiVersion":               "kubescheduler.config.k8s.io/v1",
		"kind":                     "KubeSchedulerConfiguration",
		"clientConnection":         map[string]any{"kubeconfig": p.kubeconfig(compScheduler)},
		"leaderElection":           map[string]any{"leaderElect": false},
		"podInitialBackoffSeconds": schedulerBackoff,
		"podMaxBackoffSeconds":     schedulerBackoff,
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding kube-scheduler's configuration: %w", err)
	}
	return writeFileAtomic(p.schedulerConfig(), data, 0o600)
}
