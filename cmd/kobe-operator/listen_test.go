package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/apiserver"
)

func TestResolveListenAddress(t *testing.T) {
	api := listener{flag: "api-bind-address", defaultPort: "8090"}
	metrics := listener{flag: "metrics-bind-address", defaultPort: "8080", disableWith: "0"}
	with := func(l listener, addr string, tls bool) listener { l.addr, l.tls = addr, tls; return l }
	cases := []struct {
		name    string
		l       listener
		bindAll bool
		want    string
		// refused holds words the refusal must contain; empty: accepted.
		refused []string
	}{
		{"default is loopback", with(api, "", false), false, "127.0.0.1:8090", nil},
		{"default with TLS is every interface", with(api, "", true), false, ":8090", nil},
		{"default with the flag is every interface", with(metrics, "", false), true, ":8080", nil},
		{"explicit loopback IPv4", with(api, "127.0.0.1:9000", false), false, "127.0.0.1:9000", nil},
		{"explicit loopback 127.0.0.2", with(api, "127.0.0.2:9000", false), false, "127.0.0.2:9000", nil},
		{"explicit loopback IPv6", with(api, "[::1]:9000", false), false, "[::1]:9000", nil},
		{"localhost", with(metrics, "localhost:0", false), false, "localhost:0", nil},
		{"disabled", with(metrics, "0", false), false, "0", nil},
		{"every interface without TLS or flag", with(api, ":8090", false), false, "", []string{"--api-bind-address", "every interface", "--api-tls-cert-file", "--bind-all-interfaces"}},
		{"0.0.0.0 without TLS or flag", with(metrics, "0.0.0.0:8080", false), false, "", []string{"--metrics-bind-address", "beyond loopback", "127.0.0.1:8080", "--bind-all-interfaces"}},
		{"IPv6 any without TLS or flag", with(metrics, "[::]:8080", false), false, "", []string{"beyond loopback"}},
		{"a LAN address without TLS or flag", with(api, "192.168.1.5:8090", false), false, "", []string{"plain HTTP"}},
		{"a host name that may not be loopback", with(api, "kobe.internal:8090", false), false, "", []string{"beyond loopback"}},
		{"a name that starts like localhost", with(api, "localhost.evil.example:8090", false), false, "", []string{"beyond loopback"}},
		{"every interface with TLS", with(api, ":8443", true), false, ":8443", nil},
		{"every interface with the flag", with(metrics, ":8080", false), true, ":8080", nil},
		{"metrics never count as TLS", with(metrics, "0.0.0.0:8080", false), false, "", []string{"--bind-all-interfaces"}},
		{"not host:port", with(api, "8090", false), false, "", []string{"not host:port"}},
		{"0 does not disable the API", with(api, "0", false), false, "", []string{"not host:port"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveListenAddress(tc.l, tc.bindAll)
			if len(tc.refused) == 0 {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q accepted", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q accepted; want it refused", got)
			}
			for _, w := range tc.refused {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestResolveListeners(t *testing.T) {
	t.Run("defaults are all loopback", func(t *testing.T) {
		o := options{}
		if err := o.resolveListeners(); err != nil {
			t.Fatal(err)
		}
		if o.api.BindAddress != "127.0.0.1:8090" || o.metricsAddr != "127.0.0.1:8080" || o.probeAddr != "127.0.0.1:8081" || o.pprofAddr != "" {
			t.Fatalf("got api %q metrics %q probes %q pprof %q", o.api.BindAddress, o.metricsAddr, o.probeAddr, o.pprofAddr)
		}
	})
	t.Run("TLS opens the API only", func(t *testing.T) {
		o := options{api: apiserver.Flags{TLSCertFile: "c.pem", TLSKeyFile: "k.pem"}}
		if err := o.resolveListeners(); err != nil {
			t.Fatal(err)
		}
		if o.api.BindAddress != ":8090" || o.metricsAddr != "127.0.0.1:8080" || o.probeAddr != "127.0.0.1:8081" {
			t.Fatalf("got api %q metrics %q probes %q", o.api.BindAddress, o.metricsAddr, o.probeAddr)
		}
	})
	t.Run("pprof beyond loopback is refused", func(t *testing.T) {
		o := options{pprofAddr: ":6060"}
		if err := o.resolveListeners(); err == nil || !strings.Contains(err.Error(), "--pprof-bind-address") {
			t.Fatalf("got %v, want a refusal naming --pprof-bind-address", err)
		}
	})
	t.Run("make run's addresses keep working", func(t *testing.T) {
		o := options{api: apiserver.Flags{BindAddress: "127.0.0.1:8090"}, metricsAddr: "127.0.0.1:0", probeAddr: "127.0.0.1:0"}
		if err := o.resolveListeners(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the flag opens everything", func(t *testing.T) {
		o := options{bindAllInterfaces: true, pprofAddr: ":6060"}
		if err := o.resolveListeners(); err != nil {
			t.Fatal(err)
		}
		if o.api.BindAddress != ":8090" || o.metricsAddr != ":8080" || o.probeAddr != ":8081" || o.pprofAddr != ":6060" {
			t.Fatalf("got api %q metrics %q probes %q pprof %q", o.api.BindAddress, o.metricsAddr, o.probeAddr, o.pprofAddr)
		}
	})
}

// TestRefusesPlainHTTPBeyondLoopbackAtStartUp runs the operator's main (in a
// child process of this test binary) with an API address on every
// interface, no TLS and no --bind-all-interfaces: it must exit at once,
// before touching any cluster, saying what to do.
func TestRefusesPlainHTTPBeyondLoopbackAtStartUp(t *testing.T) {
	if args := os.Getenv("KOBE_OPERATOR_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"kobe-operator"}, strings.Fields(args)...)
		main()
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRefusesPlainHTTPBeyondLoopbackAtStartUp$")
	// No kubeconfig anywhere: had it got past the check it would fail
	// differently (and with exit code 1).
	cmd.Env = append(os.Environ(), "KOBE_OPERATOR_MAIN_ARGS=--api-bind-address :18090", "KUBECONFIG=/nonexistent")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("got %v, want exit code 2; output:\n%s", err, out)
	}
	for _, w := range []string{"refusing to start", "--api-bind-address", "--api-tls-cert-file", "--bind-all-interfaces"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("output does not mention %q:\n%s", w, out)
		}
	}
}
