// Package auth authenticates callers of kobe's HTTP API against the
// AccessPolicies of one namespace (OIDC ID tokens, SSH agent signatures,
// bearer tokens from Secrets, ServiceAccount tokens) and authorises them
// with the policy's first matching rule, giving the server a Principal.
// It must not import the API server, and it never logs or returns a
// credential: errors carry a detail that is safe to show the caller.
package auth
