package leaseservice_test

import (
	"math"
	"strconv"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
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
			f, err := flagtest.Validate[leaseservice.Flags](t, tc.args...)
			if f.MaxQueuedPerOwner != tc.want {
				t.Errorf("parsed %d, want %d", f.MaxQueuedPerOwner, tc.want)
			}
			flagtest.Refused(t, err, tc.refused)
		})
	}
}
