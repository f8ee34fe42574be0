package kubernetes

import (
	"fmt"
	"path"
	"strconv"

	"sigs.k8s.io/yaml"

	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// The API server of a member with nodes runs in a pod of the host cluster,
// outside its member's network: its pods' addresses exist only inside the
// node pods and their overlay. Its egress selector sends everything of the
// "cluster" egress (pods/proxy, services/proxy, kubelets, webhooks,
// aggregated APIs) and of the "controlplane" one (webhooks given by URL)
// as HTTP CONNECT over mutual TLS to the egress proxy of one of its node
// pods (internal/node, egressproxy.go), at incluster.EgressHost: the egress
// Service's address. The proxy connects only to the member's pods and its
// node pods' kubelets, by address.
//
// With aggregator routing, a Service named by a webhook, a conversion
// webhook or an APIService is reached at one of its endpoints, as
// services/proxy always does, never at its cluster IP (which kube-proxy in
// the node pod would translate to whatever the lease holder's
// EndpointSlices say) nor, for an ExternalName Service, at a name: so the
// proxy needs no more than pod addresses, and a member with nodes behaves
// as a local one does (internal/addressguard's flags).
const (
	// egressSelectorFile is the API server's egress selector configuration
	// in the PKI Secret.
	egressSelectorFile = "egress-selector.yaml"
)

// egressFlags are the API server's flags of a member with nodes.
func egressFlags(pkiDir string) []string {
	return []string{
		"--egress-selector-config-file=" + path.Join(pkiDir, egressSelectorFile),
		"--enable-aggregator-routing=true",
	}
}

// egressSelectorConfig is the EgressSelectorConfiguration: the "cluster"
// egress through the node pods' proxies, with the member's egress CA and
// the API server's certificate for them (incluster.PKINeeds.Egress) in
// pkiDir; and the "controlplane" egress the same way, which is what
// webhooks given by URL use (and webhook authenticators, authorizers and
// audit backends, which a member has none of): a URL can name a host
// address as well as a forged object can, and the proxies refuse it unless
// it is one of the member's pods. etcd is reached directly (loopback).
func egressSelectorConfig(pkiDir string) ([]byte, error) {
	connection := map[string]any{
		"proxyProtocol": "HTTPConnect",
		"transport": map[string]any{"tcp": map[string]any{
			"url": "https://" + incluster.EgressHost + ":" + strconv.Itoa(node.EgressProxyPort),
			"tlsConfig": map[string]any{
				"caBundle":   path.Join(pkiDir, incluster.KeyEgressCACert),
				"clientCert": path.Join(pkiDir, incluster.KeyEgressClientCert),
				"clientKey":  path.Join(pkiDir, incluster.KeyEgressClientKey),
			},
		}},
	}
	cfg := map[string]any{
		"apiVersion": "apiserver.k8s.io/v1beta1",
		"kind":       "EgressSelectorConfiguration",
		"egressSelections": []any{
			map[string]any{"name": "cluster", "connection": connection},
			map[string]any{"name": "controlplane", "connection": connection},
		},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering the egress selector configuration: %w", err)
	}
	return b, nil
}
