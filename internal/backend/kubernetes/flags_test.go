package kubernetes_test

import (
	"reflect"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/backend"
	kubebackend "github.com/kunobi-ninja/kobe/internal/backend/kubernetes"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

func TestFlagDefaults(t *testing.T) {
	f := flagtest.Parse[kubebackend.Flags](t)
	want := kubebackend.Flags{OperatorSelector: "app.kubernetes.io/name=kobe", RequireNetworkPolicyEnforcement: true,
		DefaultNodes: backend.NodesDefault{Auto: true}}
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
