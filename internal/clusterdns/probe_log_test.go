package clusterdns

import "testing"

func TestProbeResolved(t *testing.T) {
	both := "kubernetes.default: [198.19.128.1]\nkube-dns.kube-system.svc.cluster.local.: [198.19.128.10]\n"
	for _, tc := range []struct {
		name, log string
		want      bool
	}{
		{"every name resolved", both, true},
		{"every name, no trailing newline", both[:len(both)-1], true},
		{"one name only", "kubernetes.default: [198.19.128.1]\n", false},
		{"an error for the other", "kubernetes.default: [198.19.128.1]\nkube-dns.kube-system.svc.cluster.local.: lookup ...: i/o timeout\n", false},
		{"an empty address list", "kubernetes.default: []\nkube-dns.kube-system.svc.cluster.local.: [198.19.128.10]\n", false},
		{"nothing yet", "", false},
		{"another name does not count", "kubernetes: [1.2.3.4]\nkube-dns.kube-system.svc.cluster.local.: [198.19.128.10]\n", false},
	} {
		if got := ProbeResolved(tc.log); got != tc.want {
			t.Errorf("%s: ProbeResolved = %v, want %v", tc.name, got, tc.want)
		}
	}
}
