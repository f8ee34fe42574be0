package soak

import (
	"strings"
	"testing"
	"time"
)

func TestReplaceSection(t *testing.T) {
	section := BeginMarker + "\nnew\n" + EndMarker + "\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"appended when missing", "# B\n\nbench\n", "# B\n\nbench\n\n" + section},
		{"replaced, the rest kept", "# B\n" + BeginMarker + "\nold\n" + EndMarker + "\n\n## after\n", "# B\n" + section + "\n## after\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(replaceSection([]byte(tc.doc), section)); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestMarkdownListsViolations(t *testing.T) {
	r := Result{Violations: []Violation{{At: t0, Kind: DoubleBind, Lease: "l1", Detail: "named by 2 members"}}, Took: time.Minute}
	md := r.markdown()
	for _, want := range []string{BeginMarker, EndMarker, "| **violations** | **1** |", "double bind: lease l1"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestLatency(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	l := NewLatency(d)
	if l.N != 100 || l.P50 != 51*time.Millisecond || l.P99 != 100*time.Millisecond || l.Max != 100*time.Millisecond {
		t.Errorf("%+v", l)
	}
	if (NewLatency(nil) != Latency{}) {
		t.Error("no samples")
	}
}
