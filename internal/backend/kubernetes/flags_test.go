package kubernetes_test

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kunobi-ninja/kobe/internal/backend"
	kubebackend "github.com/kunobi-ninja/kobe/internal/backend/kubernetes"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

func TestFlagDefaults(t *testing.T) {
	f := flagtest.Parse[kubebackend.Flags](t)
	want := kubebackend.Flags{OperatorSelector: "app.kubernetes.io/name=kobe", RequireNetworkPolicyEnforcement: true,
		DefaultNodes: backend.NodesDefault{Auto: true}, HostCIDRs: "auto"}
	if f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	o, err := f.Options(nil, "kobe-system", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if o.Namespace != "kobe-system" || o.DefaultNodes != f.DefaultNodes || !reflect.DeepEqual(o.OperatorSelector, map[string]string{"app.kubernetes.io/name": "kobe"}) {
		t.Errorf("options %+v", o)
	}
	if o.HostRanges == nil || len(o.HostRanges.Static) != 0 {
		t.Errorf("host ranges %+v, want none given and the host cluster read", o.HostRanges)
	}
}

// TestHostCIDRs: --kubernetes-host-cidrs gives its CIDRs, masked, and reads
// the host cluster only with auto.
func TestHostCIDRs(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	for _, tc := range []struct {
		arg    string
		static []netip.Prefix
		read   bool
	}{
		{"auto", nil, true},
		{"10.244.0.0/16, auto,10.96.0.1/12", []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")}, true},
		{"fd00:10::/56", []netip.Prefix{netip.MustParsePrefix("fd00:10::/56")}, false},
		{"", nil, false},
	} {
		f, err := flagtest.Validate[kubebackend.Flags](t, "--kubernetes-host-cidrs="+tc.arg)
		if err != nil {
			t.Fatalf("%q: %v", tc.arg, err)
		}
		o, err := f.Options(c, "ns", logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o.HostRanges.Static, tc.static) || (o.HostRanges.Reader != nil) != tc.read {
			t.Errorf("%q: static %v, reads the host cluster %v; want %v, %v", tc.arg, o.HostRanges.Static, o.HostRanges.Reader != nil, tc.static, tc.read)
		}
	}
}

// TestNodePreload: the archives of --kubernetes-node-preload reach the
// backend's Options (and so every node's kobe-node configuration), in order,
// without the blanks around the commas.
func TestNodePreload(t *testing.T) {
	f, err := flagtest.Validate[kubebackend.Flags](t, "--kubernetes-node-preload=/usr/local/share/kobe-node/images/a.tar, /b.tar,")
	if err != nil {
		t.Fatal(err)
	}
	o, err := f.Options(nil, "ns", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/local/share/kobe-node/images/a.tar", "/b.tar"}; !reflect.DeepEqual(o.NodePreload, want) {
		t.Errorf("NodePreload %q, want %q", o.NodePreload, want)
	}
}

func TestFlagRefusals(t *testing.T) {
	cases := []struct {
		name string
		args []string
		// refused is the refusal; empty: accepted.
		refused string
	}{
		{"several labels", []string{"--member-network-policy-operator-selector=app.kubernetes.io/instance=kobe,app.kubernetes.io/name=kobe"}, ""},
		{"not k=v", []string{"--member-network-policy-operator-selector=kobe"}, "--member-network-policy-operator-selector:"},
		{"not k=v, backend disabled", []string{"--member-network-policy-operator-selector=kobe", "--disable-kubernetes-backend"}, ""},
		{"default nodes a number", []string{"--kubernetes-default-nodes=2"}, ""},
		{"preload archives", []string{"--kubernetes-node-preload=/usr/local/share/kobe-node/images/a.tar, /b.tar"}, ""},
		{"preload a relative path", []string{"--kubernetes-node-preload=/a.tar,images/b.tar"}, `--kubernetes-node-preload: "images/b.tar" is not an absolute`},
		{"host CIDRs", []string{"--kubernetes-host-cidrs=auto,10.244.0.0/16"}, ""},
		{"a host CIDR that is not one", []string{"--kubernetes-host-cidrs=auto,10.244.0.0"}, `--kubernetes-host-cidrs: "10.244.0.0" is neither a CIDR nor auto`},
		{"preload an unclean path", []string{"--kubernetes-node-preload=/images/../a.tar"}, `--kubernetes-node-preload: "/images/../a.tar" is not an absolute`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := flagtest.Validate[kubebackend.Flags](t, tc.args...)
			flagtest.Refused(t, err, tc.refused)
			if _, err := f.Options(nil, "ns", logr.Discard()); tc.refused != "" && err == nil {
				t.Error("Options accepted the selector Validate refused")
			}
		})
	}
}
