package auth

import (
	"net/http"
	"testing"
)

func TestSourceLimiter(t *testing.T) {
	l := newSourceLimiter(0.001, 3)
	for i := range 3 {
		if !l.allow("10.0.0.1") {
			t.Fatalf("review %d of the burst refused", i)
		}
	}
	if l.allow("10.0.0.1") {
		t.Fatal("a fourth new token from one source at once was allowed")
	}
	if !l.allow("10.0.0.2") {
		t.Fatal("another source was refused because of the first one's flood")
	}
	// Memory stays bounded whatever the number of sources.
	for i := range 3 * reviewSources {
		l.allow(string(rune(i)))
	}
	if n := l.recent.Len(); n > reviewSources {
		t.Fatalf("%d sources remembered, want at most %d", n, reviewSources)
	}
}

func TestSourceOf(t *testing.T) {
	for addr, want := range map[string]string{"192.0.2.7:4431": "192.0.2.7", "[2001:db8::1]:80": "2001:db8::1", "pipe": "pipe"} {
		if got := sourceOf(&http.Request{RemoteAddr: addr}); got != want {
			t.Errorf("sourceOf(%q) = %q, want %q", addr, got, want)
		}
	}
}
