package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestLeaderElectTimings(t *testing.T) {
	var defaults leaderElectTimings
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	defaults.bind(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (leaderElectTimings{15 * time.Second, 10 * time.Second, 2 * time.Second}); defaults != want {
		t.Errorf("defaults are %+v, want controller-runtime's %+v", defaults, want)
	}
	cases := []struct {
		name string
		l    leaderElectTimings
		// refused holds words the refusal must contain; empty: accepted.
		refused []string
	}{
		{"defaults", defaults, nil},
		{"short, as tests use", leaderElectTimings{6 * time.Second, 4 * time.Second, time.Second}, nil},
		{"zero retry period", leaderElectTimings{6 * time.Second, 4 * time.Second, 0}, []string{"--leader-elect-retry-period", "greater than zero"}},
		{"negative lease", leaderElectTimings{-time.Second, 4 * time.Second, time.Second}, []string{"--leader-elect-lease-duration", "greater than zero"}},
		{"renew equals lease", leaderElectTimings{4 * time.Second, 4 * time.Second, time.Second}, []string{"--leader-elect-renew-deadline (4s) must be less than --leader-elect-lease-duration (4s)"}},
		{"renew beyond lease", leaderElectTimings{4 * time.Second, 5 * time.Second, time.Second}, []string{"must be less than"}},
		{"renew within a jittered retry", leaderElectTimings{6 * time.Second, 1200 * time.Millisecond, time.Second}, []string{"--leader-elect-retry-period (1s)", "1.2 times"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.validate()
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %+v", tc.l)
			}
			for _, w := range tc.refused {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		})
	}
}
