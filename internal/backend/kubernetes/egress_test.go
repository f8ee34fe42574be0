package kubernetes

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// TestEgress: a member with nodes has its API server's "cluster" and
// "controlplane" egress go through its node pods' egress proxies (a configuration kube-apiserver's
// v1beta1 format, naming the PKI files the machinery makes), with
// aggregator routing, and each node pod runs a proxy accepting only the API
// server's certificate; a member without nodes has neither.
func TestEgress(t *testing.T) {
	m := member("", &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](2)})
	tpl := Template{}
	set, err := tpl.Settings(m)
	if err != nil {
		t.Fatal(err)
	}
	if !set.PKI.Egress {
		t.Error("a member with nodes has no egress PKI")
	}
	// kube-apiserver's v1beta1 EgressSelectorConfiguration (its loader is
	// not among kobe's modules; the real-node tests run it).
	var cfg struct {
		APIVersion       string `json:"apiVersion"`
		Kind             string `json:"kind"`
		EgressSelections []struct {
			Name       string `json:"name"`
			Connection struct {
				ProxyProtocol string `json:"proxyProtocol"`
				Transport     struct {
					TCP *struct {
						URL       string `json:"url"`
						TLSConfig struct {
							CABundle   string `json:"caBundle"`
							ClientCert string `json:"clientCert"`
							ClientKey  string `json:"clientKey"`
						} `json:"tlsConfig"`
					} `json:"tcp"`
				} `json:"transport"`
			} `json:"connection"`
		} `json:"egressSelections"`
	}
	if err := yaml.UnmarshalStrict(set.Files[egressSelectorFile], &cfg); err != nil {
		t.Fatalf("%s:\n%s\n%v", egressSelectorFile, set.Files[egressSelectorFile], err)
	}
	if cfg.APIVersion != "apiserver.k8s.io/v1beta1" || cfg.Kind != "EgressSelectorConfiguration" || len(cfg.EgressSelections) != 2 ||
		cfg.EgressSelections[0].Name != "cluster" || cfg.EgressSelections[1].Name != "controlplane" {
		t.Fatalf("egress selector configuration %+v", cfg)
	}
	for _, sel := range cfg.EgressSelections {
		c := sel.Connection
		tcp := c.Transport.TCP
		if c.ProxyProtocol != "HTTPConnect" || tcp == nil || tcp.URL != "https://egress-proxy.kobe.invalid:10261" ||
			tcp.TLSConfig.CABundle != "/etc/kobe/pki/egress-ca.crt" || tcp.TLSConfig.ClientCert != "/etc/kobe/pki/egress-client.crt" || tcp.TLSConfig.ClientKey != "/etc/kobe/pki/egress-client.key" {
			t.Errorf("%s egress %+v", sel.Name, c)
		}
	}

	pods, err := tpl.Pods(incluster.RenderInput{Member: m, ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: incluster.PKIDir})
	if err != nil {
		t.Fatal(err)
	}
	args := pods[0].Spec.Containers[1].Args
	for _, want := range []string{"--egress-selector-config-file=/etc/kobe/pki/egress-selector.yaml", "--enable-aggregator-routing=true"} {
		if !slices.Contains(args, want) {
			t.Errorf("kube-apiserver lacks %s: %v", want, args)
		}
	}
	for _, p := range pods[1:] {
		if ports := p.Spec.Containers[0].Ports; len(ports) != 1 || ports[0].ContainerPort != node.EgressProxyPort {
			t.Errorf("node pod %s ports %+v", p.Name, ports)
		}
	}
	var nc node.Config
	if err := json.Unmarshal(set.NodeConfigs[0], &nc); err != nil {
		t.Fatal(err)
	}
	if e := nc.EgressProxy; e == nil || e.Port != node.EgressProxyPort || e.ClientName != membercerts.EgressClientName ||
		e.CertFile != "/etc/kobe/node/egress-proxy.crt" || e.KeyFile != "/etc/kobe/node/egress-proxy.key" || e.ClientCAFile != "/etc/kobe/node/egress-ca.crt" {
		t.Errorf("node egress proxy %+v", e)
	}

	bare := member("", nil)
	set, err = tpl.Settings(bare)
	if err != nil {
		t.Fatal(err)
	}
	pods, err = tpl.Pods(incluster.RenderInput{Member: bare, ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: incluster.PKIDir})
	if err != nil {
		t.Fatal(err)
	}
	if set.PKI.Egress || set.Files[egressSelectorFile] != nil || slices.ContainsFunc(pods[0].Spec.Containers[1].Args, func(a string) bool {
		return strings.HasPrefix(a, "--egress-selector") || strings.HasPrefix(a, "--enable-aggregator-routing")
	}) {
		t.Errorf("a member without nodes has an egress (nothing to reach): %+v", set.PKI)
	}
}
