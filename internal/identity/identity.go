// Package identity renders a caller's identity from its claims with a
// policy's template ("{repository}:{ref}", "{org.team}") and looks claims up
// by name or dot-path. It depends on the standard library only, so that its
// fuzz target builds quickly; policy evaluation lives in package auth.
package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Claims are what a method learnt about the caller: decoded JWT claims for
// oidc (numbers as json.Number), fixed keys for the others.
type Claims map[string]any

// MaxIdentityLen is the longest identity a lease can record.
const MaxIdentityLen = 512

// defaultTemplate is the identity of a policy that sets none.
const defaultTemplate = "{sub}"

// ErrInvalidTemplate is returned for an identity template that does not parse.
var ErrInvalidTemplate = errors.New("invalid identity template")

// MissingClaimError says which claim an identity template needed and the
// credential did not carry. It names the claim, never a value.
type MissingClaimError struct{ Claim string }

func (e *MissingClaimError) Error() string {
	return fmt.Sprintf("identity needs claim %q, which the credential does not carry", e.Claim)
}

type segment struct {
	text  string
	claim bool // text is a claim path, not literal text
}

// parseTemplate splits "{repository}:{ref}" into literal and claim segments.
// "{" and "}" only delimit claims; an unbalanced or empty one is an error.
func parseTemplate(tmpl string) ([]segment, error) {
	if tmpl == "" {
		tmpl = defaultTemplate
	}
	var segs []segment
	rest := tmpl
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			segs = append(segs, segment{text: rest})
			break
		}
		if rest[open] == '}' {
			return nil, fmt.Errorf("%w: unmatched '}'", ErrInvalidTemplate)
		}
		if open > 0 {
			segs = append(segs, segment{text: rest[:open]})
		}
		end := strings.IndexAny(rest[open+1:], "{}")
		if end < 0 || rest[open+1+end] == '{' {
			return nil, fmt.Errorf("%w: unclosed '{'", ErrInvalidTemplate)
		}
		path := rest[open+1 : open+1+end]
		if err := validPath(path); err != nil {
			return nil, err
		}
		segs = append(segs, segment{text: path, claim: true})
		rest = rest[open+1+end+1:]
	}
	return segs, nil
}

func validPath(path string) error {
	if strings.TrimSpace(path) == "" {
		return fmt.Errorf("%w: empty claim name in {}", ErrInvalidTemplate)
	}
	if len(path) > 256 {
		return fmt.Errorf("%w: claim name longer than 256 bytes", ErrInvalidTemplate)
	}
	return nil
}

// ValidateTemplate reports whether tmpl is a usable identity template.
func ValidateTemplate(tmpl string) error {
	_, err := parseTemplate(tmpl)
	return err
}

// Render fills tmpl ("{repository}:{ref}", "{org.team}", literal
// text; "" means "{sub}") from claims. A claim that is missing or null is a
// *MissingClaimError; a non-string claim renders as its JSON. The result
// must be non-empty valid UTF-8 without control characters, at most
// MaxIdentityLen bytes.
func Render(tmpl string, claims Claims) (string, error) {
	segs, err := parseTemplate(tmpl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		if !s.claim {
			b.WriteString(s.text)
			continue
		}
		v, ok := Lookup(claims, s.text)
		if !ok {
			return "", &MissingClaimError{Claim: s.text}
		}
		b.WriteString(String(v))
		if b.Len() > MaxIdentityLen {
			break
		}
	}
	id := b.String()
	switch {
	case id == "":
		return "", errors.New("identity renders empty")
	case len(id) > MaxIdentityLen:
		return "", fmt.Errorf("identity is longer than %d bytes", MaxIdentityLen)
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		return "", errors.New("identity contains invalid UTF-8 or control characters")
	}
	return id, nil
}

// Lookup finds a claim by its full name first (OIDC claims may be URLs
// with dots), then as a dot-path into nested objects. Null counts as missing.
func Lookup(claims Claims, path string) (any, bool) {
	if v, ok := claims[path]; ok {
		return v, v != nil
	}
	var cur any = map[string]any(claims)
	for seg := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[seg]; !ok || cur == nil {
			return nil, false
		}
	}
	return cur, true
}

// String is the text a claim value is compared and rendered as:
// strings as they are, everything else as compact JSON.
func String(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Decode decodes a JSON object keeping numbers exact.
func Decode(raw []byte) (Claims, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var c map[string]any
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("claims are not a JSON object")
	}
	return c, nil
}
