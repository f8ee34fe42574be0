// Package sshsig signs and verifies kobe API requests with SSH keys: the CLI
// signs with a key from the caller's SSH agent, the API server checks the
// signature against an AccessPolicy's authorizedKeys. It must not depend on
// the API server or the CLI.
//
// # Header
//
// A signed request carries one header:
//
//	Authorization: KobeSSH v=2,key=<K>,ts=<T>,nonce=<N>,aud=<A>,sig=<S>
//
// Parameters are separated by commas (optional spaces around them), each
// appears exactly once, unknown ones are refused, and the whole header is at
// most MaxHeaderLen bytes. Binary values use unpadded base64url (RFC 4648 §5).
//
//   - v: the scheme version, "2" (version 1, without aud, is refused).
//   - key: the public key in SSH wire format (what an authorized_keys line
//     holds between the key type and the comment, re-encoded as base64url).
//   - ts: the signing time, Unix seconds in decimal.
//   - nonce: 16 to 64 random bytes (SignRequest uses 16).
//   - aud: the audience of the server the request is for, 1 to 256 bytes of
//     printable ASCII; the server publishes it in GET /v1/status and the
//     CLI pins it on first use.
//   - sig: the signature in SSH wire format (RFC 4253 §6.6: string format,
//     string blob), as an SSH agent returns it. Accepted formats: ssh-ed25519,
//     ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521,
//     rsa-sha2-256 and rsa-sha2-512. "ssh-rsa" (RSA with SHA-1), security-key
//     (sk-*) formats and certificates are refused.
//
// # Signed data
//
// The signature covers these lines, each ended by "\n":
//
//	kobe-ssh-request-v2
//	<METHOD>                 e.g. POST
//	<target>                 escaped path, "?" and raw query when there is one; "/" for an empty path
//	<ts>                     as in the header
//	<nonce>                  as in the header (base64url text)
//	<hex sha256 of body>     of the exact body bytes; the empty body's hash when there is none
//	<key>                    as in the header (base64url text)
//	<aud>                    as in the header (base64url text)
//
// The first line separates these signatures from every other use of the key
// (SSH user authentication signs a length-prefixed session id; SSHSIG files
// start with "SSHSIG"). The host is not signed, so a reverse proxy that keeps
// the path may sit in front of the server; the audience names the server
// instead, so a server that receives a signed request cannot relay it to
// another kobe installation that trusts the same key.
//
// # Verification
//
// A Verifier accepts a request when the header parses, |now - ts| is within
// the window (30s by default), aud is the server's own audience, the
// signature verifies over the request's own method, target and body, and the
// NonceStore records the (key, nonce) pair for the first time. Replicas of
// one server share a NonceStore (package replay keeps it in the API
// server), so a request is accepted once by all of them together; a nonce
// is kept until its timestamp has left the window of a replica whose clock
// lags the forgetting replica's by up to the window again (NonceExpiry). Whether
// the key is authorised is the caller's decision: it is given the key before
// the signature is checked, so unknown keys cost no verification and record
// no nonce.
package sshsig
