package auth

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const testNS = "kobe-system"

// testAudience is the SSH audience of the authenticators in these tests.
const testAudience = "kobe:ns:kobe-system:test"

func newPolicy(name, identity string, auth kobev1.AuthSpec, rules ...kobev1.AccessRule) *kobev1.AccessPolicy {
	return &kobev1.AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec:       kobev1.AccessPolicySpec{Auth: auth, Identity: identity, Rules: rules},
	}
}

func allow(pools ...string) kobev1.AccessRule { return kobev1.AccessRule{Pools: pools} }

func allowIf(claim, value string, pools ...string) kobev1.AccessRule {
	return kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: claim, Value: value}, Pools: pools}
}

// storeReader is a Reader over a fixed set of objects: the tests here are
// about authentication logic, not about reading the API server (the
// apiserver_test.go tests do that against a real one).
func storeReader(t testing.TB, objs ...client.Object) client.Reader {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objs...).Build()
}

// authServer serves every request through a.Authenticate like the API
// server will, answering the status code and the error or identity.
func authServer(t testing.TB, a *Authenticator) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p, err := a.Authenticate(r.Context(), r, body)
		switch {
		case errors.Is(err, ErrNoMatchingRule):
			http.Error(w, err.Error(), http.StatusForbidden)
		case err != nil:
			http.Error(w, err.Error(), http.StatusUnauthorized)
		default:
			_ = json.NewEncoder(w).Encode(p)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func authenticate(t testing.TB, a *Authenticator, header string) (*Principal, error) {
	t.Helper()
	r := httptest.NewRequest("GET", "/v1/leases", nil)
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	return a.Authenticate(context.Background(), r, nil)
}
