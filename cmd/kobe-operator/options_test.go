package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// parse binds every flag set on a fresh FlagSet (a flag bound twice
// panics) and parses args.
func parse(t *testing.T, args ...string) *options {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("kobe-operator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return &o
}

func TestDefaultsStart(t *testing.T) {
	o := parse(t)
	if err := o.validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	if o.api.BindAddress != "127.0.0.1:8090" || o.metricsAddr != "127.0.0.1:8080" || o.probeAddr != "127.0.0.1:8081" {
		t.Errorf("validate resolved api %q metrics %q probes %q, want loopback", o.api.BindAddress, o.metricsAddr, o.probeAddr)
	}
}

// TestValidateRefuses checks that each flag set's refusals reach
// validate, so that main refuses to start with them.
func TestValidateRefuses(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"auth", []string{"--default-max-ttl=0"}, "--default-max-ttl must be greater than zero"},
		{"auth audience", []string{"--api-audience=a\tb"}, "--api-audience must be 1 to 256 printable ASCII characters"},
		{"local backend", []string{"--local-max-members=-1"}, "--local-max-members must be 0 (no cap) or a positive number"},
		{"lease service", []string{"--max-queued-per-owner=0"}, "--max-queued-per-owner must be a positive number"},
		{"cleanup", []string{"--cleanup-receipt-retention=24h"}, "--cleanup-receipt-retention must be at least 720h"},
		{"leak sweep", []string{"--leak-sweep-interval=-1s"}, "--leak-sweep-interval must be 0 (at start only) or positive"},
		{"member poll too fast", []string{"--member-poll-interval=1ms"}, "--member-poll-interval 1ms: must be between 50ms and 1m"},
		{"member poll too slow", []string{"--member-poll-interval=2m"}, "--member-poll-interval 2m0s: must be between 50ms and 1m"},
		{"leader election", []string{"--leader-elect-renew-deadline=20s"}, "--leader-elect-renew-deadline (20s) must be less than"},
		{"kubernetes backend", []string{"--member-network-policy-operator-selector=kobe"}, "--member-network-policy-operator-selector:"},
		{"listeners", []string{"--metrics-bind-address=:8080"}, "--metrics-bind-address"},
		{"the first refusal wins", []string{"--default-max-ttl=0", "--max-queued-per-owner=0"}, "--default-max-ttl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := parse(t, tc.args...).validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%q: got %v, want a refusal saying %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestDisabledKubernetesBackendIgnoresItsSelector(t *testing.T) {
	o := parse(t, "--disable-kubernetes-backend", "--member-network-policy-operator-selector=kobe")
	if err := o.validate(); err != nil {
		t.Fatalf("refused: %v", err)
	}
}
