package backend_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

func TestNodesDefaultFlag(t *testing.T) {
	cases := []struct {
		arg     string
		want    backend.NodesDefault
		refused bool
	}{
		{"auto", backend.NodesDefault{Auto: true}, false},
		{"0", backend.NodesDefault{}, false},
		{"4", backend.NodesDefault{Count: 4}, false},
		{"5", backend.NodesDefault{}, true},
		{"-1", backend.NodesDefault{}, true},
		{"", backend.NodesDefault{}, true},
		{"Auto", backend.NodesDefault{}, true},
		{"1.5", backend.NodesDefault{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.arg, func(t *testing.T) {
			d := backend.NodesDefault{Auto: true}
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			fs.Var(&d, "default-nodes", "")
			err := fs.Parse([]string{"--default-nodes=" + tc.arg})
			if tc.refused {
				if err == nil || !strings.Contains(err.Error(), "want auto or a number of nodes from 0 to 4") {
					t.Fatalf("accepted or unclear: %v (now %+v)", err, d)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("got %+v, %v; want %+v", d, err, tc.want)
			}
			if d.String() != tc.arg {
				t.Errorf("String() = %q, want %q", d.String(), tc.arg)
			}
		})
	}
}
