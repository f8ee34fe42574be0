package auth

import (
	"strings"
	"testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestValidateIssuer(t *testing.T) {
	cases := []struct {
		issuer string
		want   string // "" when accepted, else a part of the error
	}{
		{"https://token.actions.githubusercontent.com", ""},
		{"https://dex.kobe-system.svc:5556/dex", ""},
		{"https://10.0.0.7/", ""},
		{"http://127.0.0.1:8080", ""},
		{"http://127.8.9.10/issuer", ""},
		{"http://[::1]:5556/dex", ""},
		{"http://localhost:5556", ""},
		{"http://LOCALHOST", ""},
		{"http://[::ffff:127.0.0.1]/", ""},
		{"http://dex.kobe-system.svc:5556/dex", "must use https (plain http only to a loopback host: 127.0.0.0/8, ::1 or localhost), not http://dex.kobe-system.svc:5556"},
		{"http://169.254.169.254/latest/meta-data", "must use https"},
		{"http://10.0.0.1", "must use https"},
		{"http://[::2]/", "must use https"},
		{"http://localhost.example.com", "must use https"},
		{"http://127.0.0.1.nip.io", "must use https"},
		{"http://0.0.0.0", "must use https"},
		{"ftp://127.0.0.1", "must use https"},
		{"https://", "must be an absolute URL with a host"},
		{"https:///path", "must be an absolute URL with a host"},
		{"https://issuer.example.com/?x=", "no user info, query or fragment"},
		{"https://issuer.example.com/?", "no user info, query or fragment"},
		{"https://issuer.example.com/#frag", "no user info, query or fragment"},
		{"https://user:pass@issuer.example.com", "no user info, query or fragment"},
		{"https://issuer.example.com/%zz", "is not a URL"},
	}
	for _, tc := range cases {
		err := ValidateIssuer(tc.issuer)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ValidateIssuer(%q) = %v, want nil", tc.issuer, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ValidateIssuer(%q) = %v, want an error with %q", tc.issuer, err, tc.want)
		}
	}
}

// An http issuer on another host makes the policy invalid, with the field
// named; other methods are not concerned.
func TestValidatePolicyRefusesPlainHTTPIssuer(t *testing.T) {
	pol := &kobev1.AccessPolicy{Spec: kobev1.AccessPolicySpec{
		Auth:  kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: "http://dex.kobe-system.svc:5556/dex", Audience: []string{"kobe"}}},
		Rules: []kobev1.AccessRule{{Pools: []string{"*"}, MatchAny: true}},
	}}
	if err := ValidatePolicy(pol); err == nil || !strings.Contains(err.Error(), "oidc.issuer must use https") {
		t.Fatalf("ValidatePolicy = %v, want the http issuer refused", err)
	}
	pol.Spec.Auth.OIDC.Issuer = "https://dex.kobe-system.svc:5556/dex"
	if err := ValidatePolicy(pol); err != nil {
		t.Fatalf("ValidatePolicy with an https issuer = %v", err)
	}
}
