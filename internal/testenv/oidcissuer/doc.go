// Package oidcissuer is a fake OpenID Connect provider for tests: a
// discovery document and a JWKS served over httptest, and helpers that sign
// (or fail to sign) ID tokens. It must only be imported from tests and
// knows nothing of kobe's policies.
package oidcissuer
