package v1alpha1

import (
	"strings"
	"testing"
)

func TestEffectiveGates(t *testing.T) {
	cases := []struct {
		name string
		spec []ReadinessGate
		want string
	}{
		{"no gates: the always-on ones", nil, "APIServerReachable,InClusterToken"},
		{"pool gates follow, duplicates dropped, order kept",
			[]ReadinessGate{{Type: "NodesReady"}, {Type: "APIServerReachable"}, {Type: "ExternalSignal"}, {Type: "NodesReady"}},
			"APIServerReachable,InClusterToken,NodesReady,ExternalSignal"},
		{"gates of one type are kept apart by their names",
			[]ReadinessGate{{Type: "CRDExists", Name: "Widgets", CRD: &CRDGate{Name: "widgets.example.com"}}, {Type: "CRDExists", Name: "Gadgets", CRD: &CRDGate{Name: "gadgets.example.com"}}},
			"APIServerReachable,InClusterToken,Widgets,Gadgets"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(GateKeys(EffectiveGates(tc.spec)), ","); got != tc.want {
				t.Errorf("EffectiveGates(%v) = %s, want %s", tc.spec, got, tc.want)
			}
		})
	}
}

func TestIsBuiltinGate(t *testing.T) {
	for _, g := range BuiltinGates() {
		if !IsBuiltinGate(g) {
			t.Errorf("IsBuiltinGate(%q) = false", g)
		}
	}
	for _, g := range []string{"ExternalSignal", "", "apiserverreachable"} {
		if IsBuiltinGate(g) {
			t.Errorf("IsBuiltinGate(%q) = true, want false", g)
		}
	}
	// The result is a fresh slice: a caller cannot change what is built in.
	AlwaysGates()[0] = "Mutated"
	if AlwaysGates()[0] != GateAPIServerReachable {
		t.Error("AlwaysGates shares its backing array")
	}
}
