package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/crypto/ssh"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

// AuthorizedKey is one usable authorizedKeys entry of an ssh policy.
type AuthorizedKey struct {
	Key     ssh.PublicKey
	Comment string
}

// ParseAuthorizedKeys parses a policy's authorizedKeys. Entries that do not
// parse, carry options (from=, command=, cert-authority: restrictions kobe
// would not enforce) or hold certificates are left out and reported in err;
// the usable ones are still returned.
func ParseAuthorizedKeys(lines []string) ([]AuthorizedKey, error) {
	var keys []AuthorizedKey
	var errs []error
	for i, line := range lines {
		pub, comment, options, _, err := ssh.ParseAuthorizedKey([]byte(line))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("authorizedKeys[%d] is not an authorized_keys line", i))
		case len(options) > 0:
			errs = append(errs, fmt.Errorf("authorizedKeys[%d] has options, which kobe does not support", i))
		case isCertificate(pub):
			errs = append(errs, fmt.Errorf("authorizedKeys[%d] is a certificate, which kobe does not support", i))
		default:
			keys = append(keys, AuthorizedKey{Key: pub, Comment: comment})
		}
	}
	return keys, errors.Join(errs...)
}

func isCertificate(k ssh.PublicKey) bool {
	_, ok := k.(*ssh.Certificate)
	return ok
}

// sshClaims authenticates an SSH-signed request: the signing key must be in
// the policy's authorizedKeys, then the signature, window and nonce are
// checked once per request. Claims: key (fingerprint), comment, sub
// (comment, or the fingerprint when the comment is empty).
func (a *Authenticator) sshClaims(ctx context.Context, pol *kobev1.AccessPolicy, cred *credential, r *http.Request, bodySum [sha256.Size]byte) (Claims, error) {
	if a.ssh == nil {
		return nil, errors.New("SSH signatures are not configured on this server (it has no audience)")
	}
	fp := cred.ssh.Fingerprint()
	keys, _ := ParseAuthorizedKeys(pol.Spec.Auth.SSH.AuthorizedKeys)
	want := cred.ssh.Key.Marshal()
	var found *AuthorizedKey
	for i := range keys {
		if bytes.Equal(keys[i].Key.Marshal(), want) {
			found = &keys[i]
			break
		}
	}
	if found == nil {
		return nil, fmt.Errorf("SSH key %s is not authorised", fp)
	}
	if !cred.sshChecked {
		cred.sshChecked = true
		cred.sshErr = a.ssh.VerifySum(ctx, r, bodySum, cred.ssh)
		if errors.Is(cred.sshErr, sshsig.ErrNonceStore) {
			// The cause is the API server's error: logged, not shown.
			a.log.Error(cred.sshErr, "Recording an SSH nonce failed; the request is refused", "policy", pol.Name)
			cred.sshErr = sshsig.ErrNonceStore
		}
	}
	if cred.sshErr != nil {
		return nil, fmt.Errorf("SSH signature refused: %w", cred.sshErr)
	}
	sub := found.Comment
	if sub == "" {
		sub = fp
	}
	return Claims{"key": fp, "comment": found.Comment, "sub": sub}, nil
}
