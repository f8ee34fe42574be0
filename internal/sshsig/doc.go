// Package sshsig signs and verifies kobe API requests with SSH keys: the CLI
// signs with a key from the caller's SSH agent, the API server checks the
// signature against an AccessPolicy's authorizedKeys. It must not depend on
// the API server or the CLI.
package sshsig
