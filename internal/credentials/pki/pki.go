package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// clockSkew backdates NotBefore of certificates whose start the caller does
// not choose, so that a peer whose clock is slightly behind accepts them.
const clockSkew = 5 * time.Minute

// CA is a certificate authority held in memory.
type CA struct {
	// Cert is the parsed CA certificate.
	Cert *x509.Certificate
	// Key is the CA's private key.
	Key crypto.Signer
	// CertPEM and KeyPEM are Cert and Key encoded as PEM ("CERTIFICATE" and
	// "PRIVATE KEY" in PKCS #8).
	CertPEM, KeyPEM []byte
}

// NewCA creates a self-signed ECDSA P-256 CA valid from now (less a few
// minutes of clock skew) for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("creating CA: common name is empty")
	}
	if validity <= 0 {
		return nil, fmt.Errorf("creating CA %q: validity %s is not positive", commonName, validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("creating CA %q: generating key: %w", commonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("creating CA %q: %w", commonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %q: signing: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("creating CA %q: parsing: %w", commonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %q: %w", commonName, err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// LoadCA parses a CA from PEM. The key may be PKCS #8, SEC 1 (EC) or PKCS #1
// (RSA); it must match the certificate, and the certificate must be a CA.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, key, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading CA: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("loading CA %q: certificate is not a CA", cert.Subject.CommonName)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("loading CA %q: private key does not match certificate", cert.Subject.CommonName)
	}
	return &CA{
		Cert:    cert,
		Key:     key,
		CertPEM: append([]byte(nil), certPEM...),
		KeyPEM:  append([]byte(nil), keyPEM...),
	}, nil
}

// IssueServing signs a TLS server certificate for the given DNS names and IP
// addresses, valid from now (less clock skew) for validity, capped at the
// CA's own expiry.
func (ca *CA) IssueServing(commonName string, dnsNames []string, ips []net.IP, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 && len(ips) == 0 {
		return nil, nil, fmt.Errorf("issuing serving certificate %q: no DNS names or IP addresses", commonName)
	}
	if validity <= 0 {
		return nil, nil, fmt.Errorf("issuing serving certificate %q: validity %s is not positive", commonName, validity)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	certPEM, keyPEM, err = ca.issue(tmpl)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing serving certificate %q: %w", commonName, err)
	}
	return certPEM, keyPEM, nil
}

// IssueClient signs a TLS client certificate. Kubernetes reads the user name
// from commonName and the groups from organizations. notAfter is kept exactly
// (a lease's client certificate expires with the lease); it must lie after
// notBefore and within the CA's validity.
func (ca *CA) IssueClient(commonName string, organizations []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	if commonName == "" {
		return nil, nil, errors.New("issuing client certificate: common name is empty")
	}
	if !notAfter.After(notBefore) {
		return nil, nil, fmt.Errorf("issuing client certificate %q: notAfter %s is not after notBefore %s",
			commonName, notAfter.UTC().Format(time.RFC3339), notBefore.UTC().Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName, Organization: organizations},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	certPEM, keyPEM, err = ca.issue(tmpl)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing client certificate %q: %w", commonName, err)
	}
	return certPEM, keyPEM, nil
}

// issue fills in serial and key for tmpl and signs it with the CA.
func (ca *CA) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, nil, errors.New("CA is not initialised")
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("notAfter %s is past the CA's expiry %s",
			tmpl.NotAfter.UTC().Format(time.RFC3339), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// serialLimit is 2^128: serials are random 128-bit numbers.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

func newSerial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return nil, fmt.Errorf("generating serial number: %w", err)
		}
		// RFC 5280 wants serials to be positive.
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCA parses the first certificate in certPEM and the private key in
// keyPEM (PKCS #8, SEC 1 EC or PKCS #1 RSA) with client-go's helpers.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing certificate: %w", err)
	}
	k, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing private key: %w", err)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("private key of type %T cannot sign", k)
	}
	return certs[0], key, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}
