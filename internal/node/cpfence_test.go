package node

import (
	"strings"
	"testing"
)

func TestFenceScript(t *testing.T) {
	got := fenceScript("kobe-cp-u", "unified/kobe/u/cp", 3, 6443, "kbm3")
	for _, want := range []string{
		`socket cgroupv2 level 3 "unified/kobe/u/cp" jump member`,
		"ct state established,related accept",
		`oifname "lo" tcp dport 6443 accept`,
		`oifname "kbm3" accept`,
		"meta l4proto tcp reject with tcp reset",
		"reject with icmpx admin-prohibited",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the fence lacks %q:\n%s", want, got)
		}
	}
	// Answers come before the refusal, the refusal last.
	if strings.Index(got, "established") > strings.Index(got, "reject") || !strings.HasSuffix(strings.TrimSpace(got), "admin-prohibited\n  }\n}") {
		t.Errorf("rules out of order:\n%s", got)
	}
	if noNodes := fenceScript("kobe-cp-u", "kobe/u/cp", 3, 6443, ""); strings.Contains(noNodes, "oifname \"\"") || strings.Contains(noNodes, "kbm") {
		t.Errorf("a member without nodes is let out of a bridge:\n%s", noNodes)
	}
}
