package deps

import (
	"errors"
	"testing"
)

func TestRequire(t *testing.T) {
	cases := []struct {
		name   string
		absent map[string]bool
		want   string
	}{
		{"nothing missing", map[string]bool{"Client": false, "Clock": false}, ""},
		{"no dependencies", nil, ""},
		{"one missing", map[string]bool{"Client": false, "Clock": true}, "x: missing dependency: missing Clock"},
		{"several, sorted", map[string]bool{"Recorder": true, "Client": true, "Clock": false, "Backends": true}, "x: missing dependency: missing Backends, Client, Recorder"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Require("x", tc.absent)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Require = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrMissing) {
				t.Fatalf("Require = %v, want %q wrapping ErrMissing", err, tc.want)
			}
		})
	}
}
