// Package identity renders a caller's identity from its claims with a
// policy's template ("{repository}:{ref}", "{org.team}") and looks claims up
// by name or dot-path. A rendered identity is unambiguous: under one
// template, two different tuples of claim values never render the same
// identity (see Render). It depends on the standard library only, so that its
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

// template is a parsed identity template.
type template struct {
	segs []segment
	// escaped lists the characters percent-encoded in claim values: '%' and
	// every character of the literal text. Empty for a template with at
	// most one claim, whose rendering is injective as it is.
	escaped string
}

// parse parses tmpl and checks that its rendering is unambiguous: two
// claims must be separated by literal text, and that text must not contain
// '%', the escape character.
func parse(tmpl string) (*template, error) {
	segs, err := parseTemplate(tmpl)
	if err != nil {
		return nil, err
	}
	t := &template{segs: segs}
	claims := 0
	var literal strings.Builder
	for i, s := range segs {
		if !s.claim {
			literal.WriteString(s.text)
			continue
		}
		claims++
		if i > 0 && segs[i-1].claim {
			return nil, fmt.Errorf("%w: claims {%s} and {%s} must be separated by literal text (e.g. {%s}:{%s}), else two callers could render the same identity",
				ErrInvalidTemplate, segs[i-1].text, s.text, segs[i-1].text, s.text)
		}
	}
	if claims < 2 {
		return t, nil
	}
	if strings.Contains(literal.String(), "%") {
		return nil, fmt.Errorf("%w: a template with two or more claims may not contain '%%' in its literal text: claim values are escaped with it", ErrInvalidTemplate)
	}
	t.escaped = "%" + literal.String()
	return t, nil
}

// ValidateTemplate reports whether tmpl is a usable identity template.
func ValidateTemplate(tmpl string) error {
	_, err := parse(tmpl)
	return err
}

// Render fills tmpl ("{repository}:{ref}", "{org.team}", literal
// text; "" means "{sub}") from claims. A claim that is missing or null is a
// *MissingClaimError; a non-string claim renders as its JSON. The result
// must be non-empty valid UTF-8 without control characters, at most
// MaxIdentityLen bytes.
//
// Two different claim tuples never render the same identity under one
// template. A template with one claim renders its value as it is ("{sub}"
// of GitHub is "repo:org/repo:ref:refs/heads/main"). In a template with
// two or more claims, which must be separated by literal text without
// '%', claim values are percent-encoded (%XX per UTF-8 byte) for '%' and
// every character of the template's literal text: "{repository}:{ref}"
// renders repository "a:b" and ref "c" as "a%3Ab:c", never "a:b:c".
func Render(tmpl string, claims Claims) (string, error) {
	t, err := parse(tmpl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range t.segs {
		if !s.claim {
			b.WriteString(s.text)
			continue
		}
		v, ok := Lookup(claims, s.text)
		if !ok {
			return "", &MissingClaimError{Claim: s.text}
		}
		writeEscaped(&b, String(v), t.escaped)
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

// writeEscaped writes v to b with every character of escaped
// percent-encoded, one %XX per byte of its UTF-8 encoding.
func writeEscaped(b *strings.Builder, v, escaped string) {
	if escaped == "" || !strings.ContainsAny(v, escaped) {
		b.WriteString(v)
		return
	}
	for v != "" {
		r, size := utf8.DecodeRuneInString(v)
		// An invalid byte is copied as it is; Render then refuses the
		// identity, so it never maps two values to one.
		if (r == utf8.RuneError && size == 1) || !strings.ContainsRune(escaped, r) {
			b.WriteString(v[:size])
		} else {
			for i := range size {
				fmt.Fprintf(b, "%%%02X", v[i])
			}
		}
		v = v[size:]
	}
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
