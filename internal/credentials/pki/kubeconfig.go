package pki

import (
	"errors"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigInput describes a single-cluster, single-user kubeconfig.
// Authenticate with a client certificate (ClientCertPEM and ClientKeyPEM), a
// bearer Token, or both.
type KubeconfigInput struct {
	// ClusterName names the cluster, the user's context and the current context.
	ClusterName string
	// Server is the API server URL.
	Server string
	// CAData is the PEM CA bundle that verifies the API server.
	CAData []byte
	// UserName names the user entry; ClusterName is used when empty.
	UserName string
	// ClientCertPEM and ClientKeyPEM are the user's client certificate.
	ClientCertPEM, ClientKeyPEM []byte
	// Token is a bearer token.
	Token string
}

// Kubeconfig renders in as kubeconfig YAML with one cluster, one user and one
// context, which is current.
func Kubeconfig(in KubeconfigInput) ([]byte, error) {
	if in.ClusterName == "" {
		return nil, errors.New("building kubeconfig: cluster name is empty")
	}
	if in.Server == "" {
		return nil, fmt.Errorf("building kubeconfig for %s: server is empty", in.ClusterName)
	}
	if (len(in.ClientCertPEM) == 0) != (len(in.ClientKeyPEM) == 0) {
		return nil, fmt.Errorf("building kubeconfig for %s: client certificate and key must be given together", in.ClusterName)
	}
	if len(in.ClientCertPEM) == 0 && in.Token == "" {
		return nil, fmt.Errorf("building kubeconfig for %s: no credential (client certificate or token)", in.ClusterName)
	}
	user := in.UserName
	if user == "" {
		user = in.ClusterName
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = in.Server
	cluster.CertificateAuthorityData = in.CAData
	cfg.Clusters[in.ClusterName] = cluster

	auth := clientcmdapi.NewAuthInfo()
	auth.ClientCertificateData = in.ClientCertPEM
	auth.ClientKeyData = in.ClientKeyPEM
	auth.Token = in.Token
	cfg.AuthInfos[user] = auth

	kctx := clientcmdapi.NewContext()
	kctx.Cluster = in.ClusterName
	kctx.AuthInfo = user
	cfg.Contexts[in.ClusterName] = kctx
	cfg.CurrentContext = in.ClusterName

	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("building kubeconfig for %s: %w", in.ClusterName, err)
	}
	return out, nil
}
