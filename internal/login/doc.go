// Package login is the client side of `kobe login`: OIDC discovery of the
// issuer the kobe API names, the device authorization and authorization
// code + PKCE (loopback redirect) flows, refreshing the ID token and
// revoking the refresh token. It keeps no files and knows nothing of kobe's
// config, API or policies: the CLI stores what it returns.
package login
