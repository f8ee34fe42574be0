package truncate

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestUTF8: a status message stays within its CRD bound and valid UTF-8
// whatever a backend said.
func TestUTF8(t *testing.T) {
	cases := []struct {
		name, in string
		n        int
		want     string
	}{
		{"short stays", "boom", 8, "boom"},
		{"exactly the bound", "abcd", 4, "abcd"},
		{"cut between runes", "abcdef", 4, "abcd"},
		{"a rune cut in two is dropped", "aéé", 4, "aé"},
		{"an invalid byte is dropped", "a\xffb", 8, "ab"},
		{"empty", "", 4, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := UTF8(tc.in, tc.n)
			if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
				t.Errorf("UTF8(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}

// TestLog: a log value keeps at most n bytes of what a caller sent, says
// that it was cut and how long it was, and is left alone when short.
func TestLog(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	cases := []struct {
		name, in string
		n        int
		want     string
	}{
		{"short stays", "/v1/leases", 256, "/v1/leases"},
		{"exactly the bound", "abcd", 4, "abcd"},
		{"cut with its length", "abcdef", 4, "abcd...(cut: 6 bytes)"},
		{"a rune cut in two is dropped", "aéé", 4, "aé...(cut: 5 bytes)"},
		{"a megabyte", long, 8, "aaaaaaaa...(cut: 1048576 bytes)"},
		{"empty", "", 4, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Log(tc.in, tc.n)
			if got != tc.want || len(got) > tc.n+32 || !utf8.ValidString(got) {
				t.Errorf("Log(%.20q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}
