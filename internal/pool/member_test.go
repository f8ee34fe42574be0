package pool

import "testing"

func TestIsMemberName(t *testing.T) {
	for _, tc := range []struct {
		pool, name string
		want       bool
	}{
		{"dev", MemberName("dev", 0), true},
		{"dev", MemberName("dev", 17), true},
		{"dev", MemberName("dev-x", 3), false},
		{"dev-x", MemberName("dev-x", 3), true},
		{"dev", "pool-dev-", false},
		{"dev", "pool-dev-3a", false},
		{"dev", "dev-3", false},
	} {
		if got := IsMemberName(tc.pool, tc.name); got != tc.want {
			t.Errorf("IsMemberName(%q, %q) = %v, want %v", tc.pool, tc.name, got, tc.want)
		}
	}
}
