package backend_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

const (
	thisHost  = "runner-a/11111111-2222-3333-4444-555555555555"
	otherHost = "runner-b/99999999-8888-7777-6666-555555555555"
)

// fencer is a backend that records what it was asked to fence.
type fencer struct {
	typ    kobev1.BackendType
	err    error
	fenced []backend.Member
}

func (f *fencer) Type() kobev1.BackendType                     { return f.typ }
func (f *fencer) Capabilities() backend.Capabilities           { return backend.Capabilities{} }
func (f *fencer) Create(context.Context, backend.Member) error { return nil }
func (f *fencer) Observe(context.Context, backend.Member) (backend.Observation, error) {
	return backend.Observation{State: backend.StateReady}, nil
}
func (f *fencer) Delete(context.Context, backend.Member) (bool, error) { return true, nil }
func (f *fencer) Fence(_ context.Context, m backend.Member) error {
	f.fenced = append(f.fenced, m)
	return f.err
}

// hostFencer is a fencer tied to one host, as the local backend is.
type hostFencer struct {
	*fencer
	host string
}

func (h hostFencer) Host() string { return h.host }

// plain is a backend that cannot fence (as sim).
type plain struct{ *fencer }

func (plain) Fence() {} // hides fencer.Fence: plain is no backend.Fencer

func withRecord(host string) *kobev1.ClusterInstance {
	inst := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-1", UID: "uid-1"}}
	inst.Spec.PoolRef.Name = "p"
	inst.Spec.Backend.Type = kobev1.BackendLocal
	if host != "" {
		inst.Annotations = map[string]string{kobev1.AnnotationHost: host}
	}
	return inst
}

func TestCheckHost(t *testing.T) {
	bound := hostFencer{fencer: &fencer{}, host: thisHost}
	cases := []struct {
		name string
		inst *kobev1.ClusterInstance
		b    any
		want backend.HostCheck
	}{
		{"recorded here", withRecord(thisHost), bound, backend.HostHere},
		{"not recorded", withRecord(""), bound, backend.HostUnrecorded},
		{"recorded on another host", withRecord(otherHost), bound, backend.HostElsewhere},
		{"same host name, another boot", withRecord("runner-a/00000000-2222-3333-4444-555555555555"), bound, backend.HostElsewhere},
		{"a prefix of this host", withRecord("runner-a"), bound, backend.HostElsewhere},
		{"a backend not tied to a host", withRecord(otherHost), &fencer{}, backend.HostHere},
	}
	for _, tc := range cases {
		got, why := backend.CheckHost(tc.inst, tc.b)
		if got != tc.want || (got == backend.HostElsewhere) != (why != "") {
			t.Errorf("%s: got %v %q, want %v", tc.name, got, why, tc.want)
		}
		if got == backend.HostElsewhere && (!strings.Contains(why, otherHost) && !strings.Contains(why, "runner-a/0") && !strings.Contains(why, `"runner-a"`) || !strings.Contains(why, kobev1.FinalizerInstance)) {
			t.Errorf("%s: the reason does not name the recorded host and the way out: %q", tc.name, why)
		}
	}
}

// TestRegistryFence: a member is fenced through the backend of its type,
// only where this operator may act on it, and not at all by a backend that
// cannot fence or is not wired.
func TestRegistryFence(t *testing.T) {
	refused := errors.New("refused")
	cases := []struct {
		name    string
		inst    *kobev1.ClusterInstance
		b       func(*fencer) backend.Backend // nil: no backend of the type
		fails   error
		fenced  bool
		wantErr error
	}{
		{name: "a backend not tied to a host", inst: withRecord(""), b: func(f *fencer) backend.Backend { return f }, fenced: true},
		{name: "recorded on this host", inst: withRecord(thisHost), b: hostBound, fenced: true},
		{name: "not recorded", inst: withRecord(""), b: hostBound, fenced: true},
		{name: "recorded on another host", inst: withRecord(otherHost), b: hostBound, wantErr: backend.ErrOtherHost},
		{name: "the backend cannot fence", inst: withRecord(""), b: func(f *fencer) backend.Backend { return plain{f} }},
		{name: "no backend of the type", inst: withRecord("")},
		{name: "the fence fails", inst: withRecord(thisHost), b: hostBound, fails: refused, fenced: true, wantErr: refused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fencer{typ: kobev1.BackendLocal, err: tc.fails}
			r := backend.Registry{}
			if tc.b != nil {
				r[kobev1.BackendLocal] = tc.b(f)
			}
			other := &fencer{typ: kobev1.BackendKubernetes}
			r[kobev1.BackendKubernetes] = other
			err := r.Fence(t.Context(), tc.inst)
			if len(other.fenced) != 0 {
				t.Errorf("the backend of another type was asked to fence %+v", other.fenced)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Fence: %v, want %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.inst.Name) {
				t.Errorf("the error does not name the member: %v", err)
			}
			if got := len(f.fenced); got != map[bool]int{true: 1}[tc.fenced] {
				t.Fatalf("fenced %d times, want fenced=%v", got, tc.fenced)
			}
			if tc.fenced && !reflect.DeepEqual(f.fenced[0], backend.MemberOf(tc.inst)) {
				t.Errorf("fenced %+v, want %+v", f.fenced[0], backend.MemberOf(tc.inst))
			}
		})
	}
}

func hostBound(f *fencer) backend.Backend { return hostFencer{fencer: f, host: thisHost} }
