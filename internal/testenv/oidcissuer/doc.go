// Package oidcissuer is a fake OpenID Connect provider for tests: a
// discovery document and a JWKS served over httptest, and helpers that sign
// (or fail to sign) ID tokens; and Login, which also logs people in with
// the device, authorization code + PKCE, refresh and revocation endpoints
// that `kobe login` uses. It must only be imported from tests and knows
// nothing of kobe's policies.
package oidcissuer
