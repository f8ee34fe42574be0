package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
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
		{"no pool worker", []string{"--pool-workers=0"}, "--pool-workers 0: must be between 1 and 256"},
		{"too many lease workers", []string{"--lease-workers=257"}, "--lease-workers 257: must be between 1 and 256"},
		{"too many member workers", []string{"--member-workers=1000"}, "--member-workers 1000: must be between 1 and 256"},
		{"host API qps zero", []string{"--kube-api-qps=0"}, "--kube-api-qps 0: must be positive, or -1"},
		{"host API qps negative", []string{"--kube-api-qps=-5"}, "--kube-api-qps -5: must be positive, or -1"},
		{"host API burst", []string{"--kube-api-burst=0"}, "--kube-api-burst 0: must be at least 1"},
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

// TestHostAPILimits: the operator's client to the host cluster gets the
// flags' limits instead of client-go's 20 a second, and -1 leaves it
// unlimited on the client side.
func TestHostAPILimits(t *testing.T) {
	cases := []struct {
		args      []string
		qps       float32
		burst     int
		unlimited bool
	}{
		{nil, defaultKubeAPIQPS, defaultKubeAPIBurst, false},
		{[]string{"--kube-api-qps=50", "--kube-api-burst=70"}, 50, 70, false},
		{[]string{"--kube-api-qps=-1"}, -1, defaultKubeAPIBurst, true},
	}
	for _, tc := range cases {
		o := parse(t, tc.args...)
		if err := o.validate(); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		cfg := &rest.Config{Host: "https://127.0.0.1:1", QPS: 20, Burst: 30}
		o.hostAPI.apply(cfg)
		if cfg.QPS != tc.qps || cfg.Burst != tc.burst {
			t.Errorf("%q: QPS %v burst %d, want %v and %d", tc.args, cfg.QPS, cfg.Burst, tc.qps, tc.burst)
		}
		c, err := rest.RESTClientFor(&rest.Config{Host: cfg.Host, QPS: cfg.QPS, Burst: cfg.Burst,
			ContentConfig: rest.ContentConfig{GroupVersion: &schema.GroupVersion{Version: "v1"}, NegotiatedSerializer: scheme.Codecs}})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.GetRateLimiter() == nil; got != tc.unlimited {
			t.Errorf("%q: client without a rate limiter %v, want %v", tc.args, got, tc.unlimited)
		}
	}
}
