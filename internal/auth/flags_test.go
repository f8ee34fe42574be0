package auth_test

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

func TestFlagDefaults(t *testing.T) {
	f := flagtest.Parse[auth.Flags](t)
	want := auth.Flags{DefaultMaxTTL: 24 * time.Hour, DefaultMaxConcurrentLeases: 10}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	f = flagtest.Parse[auth.Flags](t, "--service-account-issuer=https://a", "--service-account-issuer=https://b")
	if want := []string{"https://a", "https://b"}; !reflect.DeepEqual(f.ServiceAccountIssuers, want) {
		t.Errorf("issuers %q, want %q", f.ServiceAccountIssuers, want)
	}
}

func TestFlagRefusals(t *testing.T) {
	cases := []struct {
		name string
		args []string
		// refused is the refusal; empty: accepted.
		refused string
	}{
		{"no lease cap", []string{"--default-max-concurrent-leases=0"}, ""},
		{"an audience", []string{"--api-audience=kobe:test"}, ""},
		{"zero TTL", []string{"--default-max-ttl=0"}, "--default-max-ttl must be greater than zero"},
		{"negative TTL", []string{"--default-max-ttl=-1h"}, "--default-max-ttl must be greater than zero"},
		{"negative lease cap", []string{"--default-max-concurrent-leases=-1"}, "--default-max-concurrent-leases must be 0 (no cap) or a positive number"},
		{"lease cap beyond int32", []string{"--default-max-concurrent-leases=" + strconv.Itoa(math.MaxInt32+1)}, "--default-max-concurrent-leases must be 0 (no cap) or a positive number"},
		{"audience with a control character", []string{"--api-audience=kobe\ttest"}, "--api-audience must be 1 to 256 printable ASCII characters"},
		{"audience too long", []string{"--api-audience=" + strings.Repeat("a", 257)}, "--api-audience must be 1 to 256 printable ASCII characters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := flagtest.Validate[auth.Flags](t, tc.args...)
			flagtest.Refused(t, err, tc.refused)
		})
	}
}

func TestFlagSSHAudience(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kobe-system", UID: "1234"}}
	r := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(ns).Build()
	for _, tc := range []struct{ flag, want string }{
		{"", "kobe:kobe-system:1234"},
		{"kobe:test", "kobe:test"},
	} {
		got, err := auth.Flags{Audience: tc.flag}.SSHAudience(t.Context(), r, "kobe-system")
		if err != nil || got != tc.want {
			t.Errorf("--api-audience %q: got %q, %v; want %q", tc.flag, got, err, tc.want)
		}
	}
	if _, err := (auth.Flags{}).SSHAudience(t.Context(), r, "elsewhere"); err == nil {
		t.Error("derived an audience from a namespace that does not exist")
	}
}
