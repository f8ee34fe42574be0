// Package flagtest is the scaffolding every component's flags test shares:
// a fresh FlagSet, the component's Bind, Parse, and the refusal its
// Validate gives. Components own their flags (a Flags type with Bind and
// Validate); their tests say only which arguments give which result.
package flagtest

import (
	"flag"
	"strings"
	"testing"
)

// Flags is a component's flags type, used through its pointer: Bind
// registers the flags with their defaults, Validate refuses values the
// operator must not start with.
type Flags[T any] interface {
	*T
	Bind(fs *flag.FlagSet)
	Validate() error
}

// Parse returns T's flags as args set them on a fresh FlagSet (defaults
// for the rest). An argument the FlagSet does not accept fails the test.
func Parse[T any, PT Flags[T]](t testing.TB, args ...string) T {
	t.Helper()
	var f T
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(discard{})
	PT(&f).Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return f
}

// Validate parses args as Parse does and returns the flags with Validate's
// verdict.
func Validate[T any, PT Flags[T]](t testing.TB, args ...string) (T, error) {
	t.Helper()
	f := Parse[T, PT](t, args...)
	return f, PT(&f).Validate()
}

// Refused fails the test unless err is the refusal named by want: nil when
// want is empty, else an error whose message begins with want (a refusal
// that wraps a parse error ends with that error's text).
func Refused(t testing.TB, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && err == nil:
		t.Fatalf("accepted, want the refusal %q", want)
	case want != "" && !strings.HasPrefix(err.Error(), want):
		t.Fatalf("refused with %q, want %q", err, want)
	}
}

// discard keeps the FlagSet's usage text out of the test's output: the
// test reports the parse error itself.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
