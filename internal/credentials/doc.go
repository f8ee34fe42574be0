// Package credentials groups who can reach a member and with what: pki mints
// certificate authorities, certificates and kubeconfigs, membercerts composes
// a member's certificate set from them for every backend, memberaccess keeps a
// member's endpoint, CAs and admin kubeconfig, sealed in its status, and
// leasecreds mints the per-lease kubeconfig a lease holder receives.
// Nothing here reconciles objects or serves HTTP; controllers and the API
// call these packages, never the other way round.
package credentials
