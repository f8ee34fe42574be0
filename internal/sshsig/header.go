package sshsig

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Scheme is the Authorization scheme of signed requests.
const Scheme = "KobeSSH"

// Version is the only header version this package writes and accepts.
// Version 2 added the audience; version 1 signatures are refused.
const Version = 2

// MaxHeaderLen bounds the Authorization header value: enough for a 16384-bit
// RSA key and its signature, small enough to refuse junk before decoding.
const MaxHeaderLen = 16 << 10

// MaxAudienceLen bounds an audience, in bytes.
const MaxAudienceLen = 256

const (
	minNonceBytes = 16
	maxNonceBytes = 64
	// domain starts every signed message; see doc.go.
	domain = "kobe-ssh-request-v2"
)

// ErrMalformed is returned for a header that does not follow the format.
var ErrMalformed = errors.New("malformed KobeSSH authorization header")

// allowedFormats are the signature formats a Verifier accepts, by key type.
var allowedFormats = map[string]string{
	ssh.KeyAlgoED25519:   ssh.KeyAlgoED25519,
	ssh.KeyAlgoECDSA256:  ssh.KeyAlgoECDSA256,
	ssh.KeyAlgoECDSA384:  ssh.KeyAlgoECDSA384,
	ssh.KeyAlgoECDSA521:  ssh.KeyAlgoECDSA521,
	ssh.KeyAlgoRSASHA256: ssh.KeyAlgoRSA,
	ssh.KeyAlgoRSASHA512: ssh.KeyAlgoRSA,
}

// Header is a parsed KobeSSH Authorization header. Nothing in it is trusted
// until a Verifier accepted it.
type Header struct {
	// Key is the public key the caller claims to hold.
	Key ssh.PublicKey
	// KeyText is the key as sent (base64url of its wire format); it is signed.
	KeyText string
	// Timestamp is the signing time in Unix seconds.
	Timestamp int64
	// Nonce is the random nonce as sent (base64url text).
	Nonce string
	// Audience is the server the caller signed for (decoded from aud).
	Audience string
	// Signature is the decoded signature.
	Signature *ssh.Signature
}

// HasScheme reports whether an Authorization header value uses the KobeSSH
// scheme (case-insensitively, like every HTTP auth scheme).
func HasScheme(authorization string) bool {
	scheme, _, _ := strings.Cut(strings.TrimSpace(authorization), " ")
	return strings.EqualFold(scheme, Scheme)
}

// ParseHeader parses an Authorization header value ("KobeSSH v=2,...").
// It checks the syntax, decodes the key and signature and refuses signature
// formats that do not fit the key or are not accepted; it does not verify.
func ParseHeader(value string) (*Header, error) {
	if len(value) > MaxHeaderLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxHeaderLen)
	}
	scheme, params, ok := strings.Cut(strings.TrimSpace(value), " ")
	if !ok || !strings.EqualFold(scheme, Scheme) {
		return nil, fmt.Errorf("%w: scheme is not %s", ErrMalformed, Scheme)
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(params, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%w: parameters must be name=value", ErrMalformed)
		}
		switch k {
		case "v", "key", "ts", "nonce", "aud", "sig":
		default:
			return nil, fmt.Errorf("%w: unknown parameter %q", ErrMalformed, truncate(k, 16))
		}
		if _, dup := fields[k]; dup {
			return nil, fmt.Errorf("%w: parameter %q repeated", ErrMalformed, k)
		}
		fields[k] = v
	}
	for _, k := range []string{"v", "key", "ts", "nonce", "aud", "sig"} {
		if _, ok := fields[k]; !ok {
			return nil, fmt.Errorf("%w: parameter %q missing", ErrMalformed, k)
		}
	}
	if fields["v"] != strconv.Itoa(Version) {
		return nil, fmt.Errorf("%w: unsupported version", ErrMalformed)
	}
	h := &Header{KeyText: fields["key"], Nonce: fields["nonce"]}

	ts, err := strconv.ParseInt(fields["ts"], 10, 64)
	if err != nil || ts <= 0 || fields["ts"] != strconv.FormatInt(ts, 10) {
		return nil, fmt.Errorf("%w: ts must be positive Unix seconds", ErrMalformed)
	}
	h.Timestamp = ts

	nonce, err := decode(h.Nonce)
	if err != nil || len(nonce) < minNonceBytes || len(nonce) > maxNonceBytes {
		return nil, fmt.Errorf("%w: nonce must be %d to %d base64url bytes", ErrMalformed, minNonceBytes, maxNonceBytes)
	}

	aud, err := decode(fields["aud"])
	if err != nil || len(aud) > MaxAudienceLen || !ValidAudience(string(aud)) {
		return nil, fmt.Errorf("%w: aud must be base64url of 1 to %d printable ASCII bytes", ErrMalformed, MaxAudienceLen)
	}
	h.Audience = string(aud)

	keyBytes, err := decode(h.KeyText)
	if err != nil {
		return nil, fmt.Errorf("%w: key is not base64url", ErrMalformed)
	}
	if h.Key, err = ssh.ParsePublicKey(keyBytes); err != nil {
		return nil, fmt.Errorf("%w: key is not an SSH public key", ErrMalformed)
	}

	sigBytes, err := decode(fields["sig"])
	if err != nil {
		return nil, fmt.Errorf("%w: sig is not base64url", ErrMalformed)
	}
	sig := new(ssh.Signature)
	if err := ssh.Unmarshal(sigBytes, sig); err != nil {
		return nil, fmt.Errorf("%w: sig is not an SSH signature", ErrMalformed)
	}
	if len(sig.Rest) != 0 || len(sig.Blob) == 0 {
		return nil, fmt.Errorf("%w: sig is not an SSH signature", ErrMalformed)
	}
	keyType, ok := allowedFormats[sig.Format]
	if !ok {
		return nil, fmt.Errorf("%w: signature format %q is not accepted", ErrMalformed, truncate(sig.Format, 40))
	}
	if keyType != h.Key.Type() {
		return nil, fmt.Errorf("%w: signature format %q does not fit a %s key", ErrMalformed, sig.Format, truncate(h.Key.Type(), 40))
	}
	h.Signature = sig
	return h, nil
}

// String renders the header value; ParseHeader(h.String()) gives h back.
func (h *Header) String() string {
	return fmt.Sprintf("%s v=%d,key=%s,ts=%d,nonce=%s,aud=%s,sig=%s",
		Scheme, Version, h.KeyText, h.Timestamp, h.Nonce, encode([]byte(h.Audience)), encode(ssh.Marshal(h.Signature)))
}

// ValidAudience reports whether aud can be an audience: 1 to MaxAudienceLen
// bytes of printable ASCII (space to tilde), so that it shows as typed in
// messages and config files.
func ValidAudience(aud string) bool {
	if aud == "" || len(aud) > MaxAudienceLen {
		return false
	}
	for i := range len(aud) {
		if aud[i] < ' ' || aud[i] > '~' {
			return false
		}
	}
	return true
}

// Target is the signed request target of u: its escaped path ("/" when empty)
// followed by "?" and the raw query when there is one.
func Target(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if u.RawQuery != "" || u.ForceQuery {
		p += "?" + u.RawQuery
	}
	return p
}

// SignedData is the exact byte string a request's signature covers.
func SignedData(method, target string, ts int64, nonce string, body []byte, keyText, audience string) []byte {
	return SignedDataSum(method, target, ts, nonce, sha256.Sum256(body), keyText, audience)
}

// SignedDataSum is SignedData for a body known by its SHA-256 (a streamed
// body, which the signer hashed before sending it).
func SignedDataSum(method, target string, ts int64, nonce string, sum [sha256.Size]byte, keyText, audience string) []byte {
	var b bytes.Buffer
	for _, line := range []string{domain, method, target, strconv.FormatInt(ts, 10), nonce, hex.EncodeToString(sum[:]), keyText, encode([]byte(audience))} {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Fingerprint is the OpenSSH SHA256 fingerprint of the header's key.
func (h *Header) Fingerprint() string { return ssh.FingerprintSHA256(h.Key) }

func encode(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func decode(s string) ([]byte, error) { return base64.RawURLEncoding.Strict().DecodeString(s) }

func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
