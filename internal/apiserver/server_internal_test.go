package apiserver

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
)

// newIdleServer is New with a lease service and a connect proxy that have
// nothing to read, for tests of middleware and routes that never call them.
func newIdleServer(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Leases = leaseservice.New(leaseservice.Options{Namespace: opts.Namespace})
	opts.Connect = connect.New(connect.Options{Namespace: opts.Namespace})
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNewNeedsServices: a server without its lease service or connect
// proxy is refused when it is built, naming what is missing, instead of
// failing its first request.
func TestNewNeedsServices(t *testing.T) {
	leases := leaseservice.New(leaseservice.Options{})
	proxy := connect.New(connect.Options{})
	for _, tt := range []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"both", Options{Leases: leases, Connect: proxy}, ""},
		{"no lease service", Options{Connect: proxy}, "Options.Leases"},
		{"no connect proxy", Options{Leases: leases}, "Options.Connect"},
		{"neither", Options{}, "Options.Leases"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Log = logr.Discard()
			s, err := New(tt.opts)
			if tt.wantErr == "" {
				if err != nil || s == nil {
					t.Fatalf("New: %v, want a server", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || s != nil {
				t.Fatalf("New: %v, %v; want no server and an error naming %s", s, err, tt.wantErr)
			}
		})
	}
}
