package memberaccess

import (
	"bytes"
	"encoding/asn1"
	"encoding/pem"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

// adminCredential is an admin kubeconfig reduced to what pki.Kubeconfig
// needs besides the CA that status.access.caCert already holds: the
// certificate and key in DER rather than base64 of PEM inside YAML, and no
// second copy of the CA. Sealed, it is about a third of the kubeconfig.
type adminCredential struct {
	Server  string `asn1:"utf8"`
	Cluster string `asn1:"utf8"`
	User    string `asn1:"utf8"`
	CertDER []byte
	// KeyType is the PEM block type of the key ("EC PRIVATE KEY", "PRIVATE
	// KEY", ...), kept so that the rebuilt kubeconfig is byte for byte the
	// one the backend wrote.
	KeyType string `asn1:"utf8"`
	KeyDER  []byte
}

// compactAdmin returns the encoded adminCredential of kubeconfig, or false
// when the credential cannot rebuild it byte for byte (several clusters,
// another CA, a token, a certificate chain, fields pki.Kubeconfig does not
// write): such a kubeconfig is sealed whole.
func compactAdmin(kubeconfig, caCert []byte) ([]byte, bool) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil || len(cfg.Contexts) != 1 || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 {
		return nil, false
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.Clusters[kctx.Cluster] == nil || cfg.AuthInfos[kctx.AuthInfo] == nil {
		return nil, false
	}
	cert, rest := pem.Decode(cfg.AuthInfos[kctx.AuthInfo].ClientCertificateData)
	if cert == nil || cert.Type != "CERTIFICATE" || len(rest) != 0 {
		return nil, false
	}
	key, rest := pem.Decode(cfg.AuthInfos[kctx.AuthInfo].ClientKeyData)
	if key == nil || len(rest) != 0 {
		return nil, false
	}
	c := adminCredential{
		Server: cfg.Clusters[kctx.Cluster].Server, Cluster: kctx.Cluster, User: kctx.AuthInfo,
		CertDER: cert.Bytes, KeyType: key.Type, KeyDER: key.Bytes,
	}
	// Only what comes back identical is kept in this form: the check makes
	// every field the encoding leaves out (headers, extensions, another
	// context name) a reason to seal the kubeconfig whole.
	if rebuilt, err := c.kubeconfig(caCert); err != nil || !bytes.Equal(rebuilt, kubeconfig) {
		return nil, false
	}
	out, err := asn1.Marshal(c)
	if err != nil {
		return nil, false
	}
	return out, true
}

// openAdminCredential rebuilds the admin kubeconfig from an encoded
// adminCredential and the member's CA.
func openAdminCredential(encoded, caCert []byte) ([]byte, error) {
	var c adminCredential
	rest, err := asn1.Unmarshal(encoded, &c)
	if err != nil {
		return nil, fmt.Errorf("decoding the admin credential: %w", err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("decoding the admin credential: %d bytes after it", len(rest))
	}
	return c.kubeconfig(caCert)
}

func (c *adminCredential) kubeconfig(caCert []byte) ([]byte, error) {
	return pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName: c.Cluster, Server: c.Server, CAData: caCert, UserName: c.User,
		ClientCertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.CertDER}),
		ClientKeyPEM:  pem.EncodeToMemory(&pem.Block{Type: c.KeyType, Bytes: c.KeyDER}),
	})
}
