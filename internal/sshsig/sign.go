package sshsig

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/crypto/ssh"
)

// SignRequest signs req with signer for the server whose audience is
// audience (what it publishes in GET /v1/status) and sets its Authorization
// header. body must be the exact bytes req will send (nil for none); now is
// the signing time. RSA keys are signed with rsa-sha2-256, so signer must be an
// ssh.AlgorithmSigner for them (agent signers are).
func SignRequest(req *http.Request, body []byte, signer ssh.Signer, audience string, now time.Time) error {
	return SignRequestSum(req, sha256.Sum256(body), signer, audience, now)
}

// SignRequestSum is SignRequest for a body known by its SHA-256: a body
// streamed from a file, which the signer hashed before sending it.
func SignRequestSum(req *http.Request, bodySum [sha256.Size]byte, signer ssh.Signer, audience string, now time.Time) error {
	if req == nil || req.URL == nil {
		return errors.New("signing request: no request URL")
	}
	if signer == nil {
		return errors.New("signing request: no signer")
	}
	if !ValidAudience(audience) {
		return fmt.Errorf("signing request: audience must be 1 to %d printable ASCII bytes", MaxAudienceLen)
	}
	pub := signer.PublicKey()
	var nonce [minNonceBytes]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("signing request: reading nonce: %w", err)
	}
	h := &Header{
		Key:       pub,
		KeyText:   encode(pub.Marshal()),
		Timestamp: now.Unix(),
		Nonce:     encode(nonce[:]),
		Audience:  audience,
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	data := SignedDataSum(method, Target(req.URL), h.Timestamp, h.Nonce, bodySum, h.KeyText, h.Audience)

	var sig *ssh.Signature
	var err error
	switch pub.Type() {
	case ssh.KeyAlgoRSA:
		as, ok := signer.(ssh.AlgorithmSigner)
		if !ok {
			return errors.New("signing request: RSA keys need a signer that supports rsa-sha2-256")
		}
		sig, err = as.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSASHA256)
	case ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
		sig, err = signer.Sign(rand.Reader, data)
	default:
		return fmt.Errorf("signing request: %s keys are not supported (use ed25519, ecdsa or rsa)", pub.Type())
	}
	if err != nil {
		return fmt.Errorf("signing request with %s: %w", ssh.FingerprintSHA256(pub), err)
	}
	if _, ok := allowedFormats[sig.Format]; !ok {
		return fmt.Errorf("signing request: signer produced unsupported format %q", sig.Format)
	}
	h.Signature = sig
	req.Header.Set("Authorization", h.String())
	return nil
}
