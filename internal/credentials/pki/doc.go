// Package pki mints the certificate authorities, serving and client
// certificates and kubeconfigs that kobe's backends and lease handling need.
// It is pure in-memory crypto (ECDSA P-256, no disk IO) so that minting a
// per-lease client certificate is cheap; it must not know about backends,
// members or the Kubernetes API.
package pki
