package flagtest_test

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

// sample is a component's flags as the operator's components write them.
type sample struct {
	Limit int
}

func (s *sample) Bind(fs *flag.FlagSet) { fs.IntVar(&s.Limit, "limit", 3, "a limit") }

func (s sample) Validate() error {
	if s.Limit <= 0 {
		return fmt.Errorf("--limit must be positive, got %d", s.Limit)
	}
	return nil
}

// recorder is a testing.TB that records a failure instead of ending the
// test, so that the kit's own failures can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r)
}

// run calls f with a recorder and returns the failure it recorded.
func run(t *testing.T, f func(testing.TB)) (failed string) {
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		failed = r.failed
	}()
	f(r)
	return ""
}

func TestParse(t *testing.T) {
	if got := flagtest.Parse[sample](t); got.Limit != 3 {
		t.Errorf("default %d, want 3", got.Limit)
	}
	if got := flagtest.Parse[sample](t, "--limit=7"); got.Limit != 7 {
		t.Errorf("parsed %d, want 7", got.Limit)
	}
	if failed := run(t, func(tb testing.TB) { flagtest.Parse[sample](tb, "--no-such-flag") }); !strings.Contains(failed, "no-such-flag") {
		t.Errorf("an unknown flag failed with %q, want it named", failed)
	}
}

func TestValidateAndRefused(t *testing.T) {
	f, err := flagtest.Validate[sample](t, "--limit=0")
	if f.Limit != 0 || err == nil {
		t.Fatalf("got %+v, %v; want limit 0 refused", f, err)
	}
	flagtest.Refused(t, err, "--limit must be positive")
	for _, tc := range []struct {
		name string
		err  error
		want string
		// fails: Refused fails the test.
		fails bool
	}{
		{"accepted as wanted", nil, "", false},
		{"refused as wanted", errors.New("--x must be set"), "--x must be set", false},
		{"refused with more text after", errors.New("--x: bad value"), "--x:", false},
		{"refused, want accepted", errors.New("--x must be set"), "", true},
		{"accepted, want refused", nil, "--x must be set", true},
		{"refused for another reason", errors.New("--y must be set"), "--x must be set", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed := run(t, func(tb testing.TB) { flagtest.Refused(tb, tc.err, tc.want) })
			if (failed != "") != tc.fails {
				t.Errorf("failure %q, want failing %v", failed, tc.fails)
			}
		})
	}
}
