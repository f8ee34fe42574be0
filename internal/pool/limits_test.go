package pool

import (
	"flag"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

func TestResolveLimits(t *testing.T) {
	policy := LimitPolicy{
		Default: kobev1.MemberLimits{Memory: q("2Gi"), Processes: ptr.To[int64](4096), PodProcesses: ptr.To[int64](1024), Disk: q("20Gi")},
		Ceiling: kobev1.MemberLimits{Memory: q("8Gi"), Processes: ptr.To[int64](16384), PodProcesses: ptr.To[int64](4096), Disk: q("100Gi")},
	}
	for _, tc := range []struct {
		name   string
		policy LimitPolicy
		asked  *kobev1.MemberLimits
		want   string
		capped []string
	}{
		{name: "nothing asked: the defaults", policy: policy, want: "memory 2Gi, 4096 processes, 1024 per pod, disk 20Gi"},
		{name: "asks below the ceiling", policy: policy,
			asked: &kobev1.MemberLimits{Memory: q("3Gi"), Processes: ptr.To[int64](512)},
			// 1024 per pod, but a pod cannot have more than its member.
			want: "memory 3Gi, 512 processes, 512 per pod, disk 20Gi"},
		{name: "asks above every ceiling: capped, and said", policy: policy,
			asked:  &kobev1.MemberLimits{Memory: q("64Gi"), Processes: ptr.To[int64](1 << 20), PodProcesses: ptr.To[int64](1 << 20), Disk: q("1Ti")},
			want:   "memory 8Gi, 16384 processes, 4096 per pod, disk 100Gi",
			capped: []string{"memory 64Gi capped at the operator's 8Gi", "processes 1048576 capped at the operator's 16384", "podProcesses 1048576 capped at the operator's 4096", "disk 1Ti capped at the operator's 100Gi"}},
		{name: "a pool cannot lift a limit by asking for 0", policy: policy,
			asked: &kobev1.MemberLimits{Memory: q("0"), Processes: ptr.To[int64](0)},
			want:  "memory 8Gi, 16384 processes, 1024 per pod, disk 20Gi"},
		{name: "no default: the ceiling", policy: LimitPolicy{Ceiling: policy.Ceiling},
			want: "memory 8Gi, 16384 processes, 4096 per pod, disk 100Gi"},
		{name: "no ceiling: what the pool asks", policy: LimitPolicy{Default: policy.Default},
			asked: &kobev1.MemberLimits{Memory: q("64Gi")},
			want:  "memory 64Gi, 4096 processes, 1024 per pod, disk 20Gi"},
		{name: "neither: no limits", want: "no limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, capped := tc.policy.Resolve(tc.asked)
			if d := DescribeLimits(got); d != tc.want {
				t.Errorf("got %s, want %s", d, tc.want)
			}
			if strings.Join(capped, "|") != strings.Join(tc.capped, "|") {
				t.Errorf("capped %q, want %q", capped, tc.capped)
			}
		})
	}
}

func TestMemberLimitsOnlyWhereEnforced(t *testing.T) {
	lp := LimitPolicy{Default: kobev1.MemberLimits{Processes: ptr.To[int64](4096)}, Ceiling: kobev1.MemberLimits{Memory: q("1Gi")}}
	for _, bt := range []kobev1.BackendType{kobev1.BackendLocal, kobev1.BackendKubernetes} {
		spec := &kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: bt}, Cluster: kobev1.ClusterTemplate{Limits: &kobev1.MemberLimits{Memory: q("4Gi")}}}
		l, c := memberLimits(spec, lp, "")
		if l == nil || c == nil || c.Reason != kobev1.ReasonLimitsCapped || !strings.Contains(c.Message, "memory 4Gi capped at the operator's 1Gi") {
			t.Errorf("%s: limits %v, condition %+v", bt, l, c)
		}
	}
	sim := &kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendSim}}
	if l, c := memberLimits(sim, lp, ""); l != nil || c != nil {
		t.Errorf("sim members run nothing on a host, yet get %v, %v", l, c)
	}
	local := &kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}
	if l, c := memberLimits(local, LimitPolicy{}, ""); l != nil || c != nil {
		t.Errorf("no limit anywhere, yet %v, %v", l, c)
	}
	l, c := memberLimits(local, lp, "the operator is not root")
	if l != nil || c == nil || c.Status != "False" || c.Reason != kobev1.ReasonLimitsNotEnforced ||
		c.Message != "members run without limits: the operator is not root (asked: memory 1Gi, 4096 processes)" {
		t.Errorf("limits a backend cannot enforce: %v, %+v", l, c)
	}
}

// The limits are part of what members are built from: members built
// before the operator's limits changed are replaced.
func TestLimitsChangeTheTemplate(t *testing.T) {
	p := &kobev1.ClusterPool{Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	a := Decide(Input{Pool: p, Limits: LimitPolicy{Default: kobev1.MemberLimits{Memory: q("2Gi")}}})
	b := Decide(Input{Pool: p, Limits: LimitPolicy{Default: kobev1.MemberLimits{Memory: q("3Gi")}}})
	if a.TemplateHash == b.TemplateHash {
		t.Error("members built with 2Gi and with 3Gi share a template hash")
	}
	if a.MemberLimits == nil || a.MemberLimits.Memory.String() != "2Gi" {
		t.Errorf("plan's member limits %v", a.MemberLimits)
	}
}

func TestLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" accepted, else part of the refusal
	}{
		{args: nil},
		{args: []string{"--member-memory=16Gi"}, want: "--member-memory 16Gi is above --member-max-memory 8Gi"},
		{args: []string{"--member-processes=-1"}, want: "must not be negative"},
		{args: []string{"--member-max-disk=0", "--member-disk=1Ti"}},
		{args: []string{"--member-pod-processes=5000"}, want: "--member-pod-processes 5000 is above --member-max-pod-processes 4096"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var f LimitFlags
		f.Bind(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := f.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	var f LimitFlags
	f.Bind(flag.NewFlagSet("t", flag.ContinueOnError))
	if d := DescribeLimits(f.Policy().Default); d != "memory 2Gi, 4096 processes, 1024 per pod, disk 20Gi" {
		t.Errorf("defaults: %s", d)
	}
}
