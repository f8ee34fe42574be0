package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

var errTokenRefused = errors.New("bearer token not accepted")

// SecretKey is the key of a token policy's Secret that holds the token.
func SecretKey(ref kobev1.SecretKeyRef) string {
	if ref.Key == "" {
		return defaultSecretKey
	}
	return ref.Key
}

// tokenClaims compares the bearer token with the policy's Secret, read on
// every request so a rotated Secret applies at once. Leading and trailing
// white space of the stored value is ignored (files often end in a newline).
// Claims: sub (the policy name).
func (a *Authenticator) tokenClaims(ctx context.Context, pol *kobev1.AccessPolicy, cred *credential) (Claims, error) {
	ref := pol.Spec.Auth.Token.SecretRef
	var s corev1.Secret
	if err := a.reader.Get(ctx, types.NamespacedName{Namespace: a.namespace, Name: ref.Name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			a.log.V(1).Info("Token Secret of policy missing", "policy", pol.Name, "secret", ref.Name)
		} else {
			a.log.Error(err, "Reading token Secret failed", "policy", pol.Name, "secret", ref.Name)
		}
		return nil, errTokenRefused
	}
	want := bytes.TrimSpace(s.Data[SecretKey(ref)])
	if len(want) == 0 {
		a.log.V(1).Info("Token Secret of policy has no token", "policy", pol.Name, "secret", ref.Name, "key", SecretKey(ref))
		return nil, errTokenRefused
	}
	// Hashing first makes the comparison constant-time in the length too.
	got, exp := sha256.Sum256([]byte(cred.bearer)), sha256.Sum256(want)
	if subtle.ConstantTimeCompare(got[:], exp[:]) != 1 {
		return nil, errTokenRefused
	}
	return Claims{"sub": pol.Name}, nil
}
