package apiserver_test

import (
	"testing"

	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

func TestFlagDefaults(t *testing.T) {
	f, err := flagtest.Validate[apiserver.Flags](t)
	want := apiserver.Flags{MaxInFlight: apiserver.DefaultMaxInFlight,
		ConnectMaxInFlight: connect.DefaultMaxInFlight, ConnectMaxStreamsPerLease: connect.DefaultMaxStreamsPerLease}
	if f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	flagtest.Refused(t, err, "")
	f = flagtest.Parse[apiserver.Flags](t, "--api-bind-address=:8443", "--api-tls-cert-file=c", "--api-tls-key-file=k", "--api-tls-ca-file=ca",
		"--connect-url=https://kobe.example", "--api-max-in-flight=5", "--connect-max-in-flight=6", "--connect-max-streams-per-lease=7")
	want = apiserver.Flags{BindAddress: ":8443", TLSCertFile: "c", TLSKeyFile: "k", TLSCAFile: "ca",
		ConnectURL: "https://kobe.example", MaxInFlight: 5, ConnectMaxInFlight: 6, ConnectMaxStreamsPerLease: 7}
	if f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
}
