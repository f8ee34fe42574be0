package wire

import (
	"strings"
	"testing"
)

func TestValidateAlias(t *testing.T) {
	tests := []struct {
		alias string
		ok    bool
	}{
		{"build-42", true},
		{"a", true},
		{"my_job.v2", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"Build", false},
		{"-build", false},
		{"build-", false},
		{"build_", false},
		{"build 42", false},
		{"build/42", false},
		{"lease-a1b2c3d4e5f6", false},
		{"lease-a1b2c3d4e5f", true},
		{"lease-a1b2c3d4e5f6a", true},
	}
	for _, tt := range tests {
		if err := ValidateAlias(tt.alias); (err == nil) != tt.ok {
			t.Errorf("ValidateAlias(%q) = %v, want ok=%v", tt.alias, err, tt.ok)
		}
	}
}

func TestValidateLeaseRef(t *testing.T) {
	tests := []struct {
		ref string
		ok  bool
	}{
		{"lease-a1b2c3d4e5f6", true},
		{"build-42", true},
		{"LEASE-A1B2C3D4E5F6", false},
		{"lease-a1b2c3d4e5fg", true}, // not an id, but a valid alias
		{"..", false},
		{"a%2Fb", false},
		{"", false},
		{strings.Repeat("x", 64), false},
	}
	for _, tt := range tests {
		if err := ValidateLeaseRef(tt.ref); (err == nil) != tt.ok {
			t.Errorf("ValidateLeaseRef(%q) = %v, want ok=%v", tt.ref, err, tt.ok)
		}
	}
	if !IsLeaseID("lease-0123456789ab") || IsLeaseID("lease-0123456789AB") {
		t.Error("IsLeaseID")
	}
}

func FuzzValidateLeaseRef(f *testing.F) {
	for _, s := range []string{"lease-a1b2c3d4e5f6", "build-42", "", "..", "a.b_c-d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateLeaseRef(s)
		if err != nil {
			return
		}
		if len(s) == 0 || len(s) > MaxAliasLength {
			t.Fatalf("accepted %q of length %d", s, len(s))
		}
		if strings.ContainsAny(s, "/%?# ") {
			t.Fatalf("accepted %q", s)
		}
	})
}
