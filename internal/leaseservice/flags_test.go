package leaseservice_test

import (
	"flag"
	"math"
	"strconv"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/leaseservice"
)

func TestFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want int
		// refused is the refusal; empty: accepted.
		refused string
	}{
		{"default", nil, leaseservice.DefaultMaxQueuedPerOwner, ""},
		{"one", []string{"--max-queued-per-owner=1"}, 1, ""},
		{"zero", []string{"--max-queued-per-owner=0"}, 0, "--max-queued-per-owner must be a positive number"},
		{"negative", []string{"--max-queued-per-owner=-3"}, -3, "--max-queued-per-owner must be a positive number"},
		{"beyond int32", []string{"--max-queued-per-owner=" + strconv.Itoa(math.MaxInt32+1)}, math.MaxInt32 + 1, "--max-queued-per-owner must be a positive number"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f leaseservice.Flags
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			f.Bind(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if f.MaxQueuedPerOwner != tc.want {
				t.Errorf("parsed %d, want %d", f.MaxQueuedPerOwner, tc.want)
			}
			err := f.Validate()
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || err.Error() != tc.refused):
				t.Fatalf("got %v, want %q", err, tc.refused)
			}
		})
	}
}
