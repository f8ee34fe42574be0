package apiserver_test

import (
	"flag"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/connect"
)

func TestFlagDefaults(t *testing.T) {
	var f apiserver.Flags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f.Bind(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := apiserver.Flags{MaxInFlight: apiserver.DefaultMaxInFlight,
		ConnectMaxInFlight: connect.DefaultMaxInFlight, ConnectMaxStreamsPerLease: connect.DefaultMaxStreamsPerLease}
	if f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	if err := fs.Parse([]string{"--api-bind-address=:8443", "--api-tls-cert-file=c", "--api-tls-key-file=k", "--api-tls-ca-file=ca",
		"--connect-url=https://kobe.example", "--api-max-in-flight=5", "--connect-max-in-flight=6", "--connect-max-streams-per-lease=7"}); err != nil {
		t.Fatal(err)
	}
	want = apiserver.Flags{BindAddress: ":8443", TLSCertFile: "c", TLSKeyFile: "k", TLSCAFile: "ca",
		ConnectURL: "https://kobe.example", MaxInFlight: 5, ConnectMaxInFlight: 6, ConnectMaxStreamsPerLease: 7}
	if f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
}
