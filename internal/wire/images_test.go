package wire

import (
	"crypto/sha256"
	"strings"
	"testing"
)

func TestContentDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("an archive"))
	h := FormatContentDigest(sum)
	got, err := ParseContentDigest(h)
	if err != nil || got != sum {
		t.Fatalf("ParseContentDigest(%q) = %x, %v; want %x", h, got, err, sum)
	}
	if got, err := ParseContentDigest("sha-512=:AAAA:, " + h); err != nil || got != sum {
		t.Errorf("beside another algorithm: %x, %v", got, err)
	}
	for _, bad := range []string{"", "sha-512=:AAAA:", "sha-256=" + strings.Trim(h[len("sha-256="):], ":"), "sha-256=:AAAA:", "sha-256=:!!!:", "sha-256"} {
		if _, err := ParseContentDigest(bad); err == nil {
			t.Errorf("ParseContentDigest(%q) accepted", bad)
		}
	}
}
