package incluster

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

func member(name string, mode kobev1.AccessMode) backend.Member {
	m := backend.Member{Namespace: "kobe", Name: name, UID: "uid-1", Pool: "ci"}
	if mode != "" {
		m.Spec.Access = &kobev1.AccessSpec{Mode: mode}
	}
	return m
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, tc := range []struct{ name, want string }{
		{"pool-ci-0", "kobe-pool-ci-0"},
		{"pool.ci.0", "kobe-pool-ci-0"},
		{"0abc", "kobe-0abc"},
		{long, ""},
	} {
		m := member(tc.name, "")
		got := baseName(m)
		if tc.want != "" && got != tc.want {
			t.Errorf("baseName(%q) = %q, want %q", tc.name, got, tc.want)
		}
		for _, n := range []string{serviceName(m), secretName(m), policyName(m), podName(m, 12)} {
			if errs := validation.IsDNS1035Label(n); len(errs) > 0 {
				t.Errorf("name %q of member %q: %v", n, tc.name, errs)
			}
		}
	}
	a, b := member(long, ""), member(long, "")
	b.UID = "uid-2"
	if baseName(a) == baseName(b) {
		t.Errorf("two long-named members of different UIDs share %q", baseName(a))
	}
	if v := memberLabels(kobev1.BackendKubernetes, member(long, ""))[kobev1.LabelInstance]; len(v) > 63 {
		t.Errorf("instance label %d characters", len(v))
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func TestResources(t *testing.T) {
	def := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("512Mi")},
	}
	for _, tc := range []struct {
		name string
		in   *corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{"unset: defaults", nil, def},
		{"requests only: default limits", &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("200m")}},
			corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("128Mi")},
				Limits:   def.Limits,
			}},
		{"request above the default limit raises the limit", &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
			corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("2Gi")},
			}},
		{"limit below the default request lowers the request", &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: q("50m")}},
			corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("512Mi")},
			}},
		{"other resources are kept", &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: q("1Gi")}},
			corev1.ResourceRequirements{
				Requests: def.Requests,
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("512Mi"), corev1.ResourceEphemeralStorage: q("1Gi")},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Resources(tc.in, def); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestNetworkPolicy(t *testing.T) {
	sel := map[string]string{"app.kubernetes.io/name": "kobe"}
	for _, tc := range []struct {
		mode        kobev1.AccessMode
		openToWorld bool
	}{{"", false}, {kobev1.AccessProxy, false}, {kobev1.AccessDirect, true}} {
		np := renderNetworkPolicy(kobev1.BackendKubernetes, member("m", tc.mode), 6443, sel)
		var world, operator, own bool
		for _, r := range np.Spec.Ingress {
			switch {
			case len(r.From) == 0:
				world = len(r.Ports) == 1 && r.Ports[0].Port.IntVal == 6443
				if len(r.Ports) != 1 {
					t.Errorf("mode %q: an ingress rule from anywhere on %v", tc.mode, r.Ports)
				}
			case r.From[0].PodSelector != nil && equality.Semantic.DeepEqual(r.From[0].PodSelector.MatchLabels, sel):
				operator = len(r.Ports) == 1 && r.Ports[0].Port.IntVal == 6443
			case r.From[0].PodSelector != nil && r.From[0].PodSelector.MatchLabels[LabelMemberUID] == "uid-1":
				own = len(r.Ports) == 0
			default:
				t.Errorf("mode %q: unexpected ingress rule %+v", tc.mode, r)
			}
			if len(r.From) > 0 && r.From[0].NamespaceSelector != nil {
				t.Errorf("mode %q: a rule admits other namespaces: %+v", tc.mode, r)
			}
		}
		if world != tc.openToWorld || !operator || !own {
			t.Errorf("mode %q: world %v operator %v own %v", tc.mode, world, operator, own)
		}
		if len(np.Spec.PolicyTypes) != 2 {
			t.Errorf("policy types %v: egress must be restricted too", np.Spec.PolicyTypes)
		}
		for _, r := range np.Spec.Egress {
			if len(r.To) == 0 {
				for _, p := range r.Ports {
					if p.Port.IntVal != 53 {
						t.Errorf("egress to anywhere on port %v", p.Port)
					}
				}
			} else if r.To[0].PodSelector.MatchLabels[LabelMemberUID] != "uid-1" || r.To[0].NamespaceSelector != nil {
				t.Errorf("egress to %+v", r.To)
			}
		}
	}
}

func TestFinishPod(t *testing.T) {
	full := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("1m"), corev1.ResourceMemory: q("1Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1m"), corev1.ResourceMemory: q("1Mi")},
	}
	m := member("m", "")
	p := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: full}}}}
	place := &kobev1.Placement{
		NodeSelector: map[string]string{"role": "members"}, PriorityClassName: "p",
		Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
	}
	items := pkiItems(map[string][]byte{KeyServingCert: nil, KeyClientCAKey: nil, KeyAdminKubeconfig: nil, KeySAKey: nil})
	if err := finishPod(kobev1.BackendKubernetes, m, &p, 3, place, items); err != nil {
		t.Fatal(err)
	}
	if p.Name != "kobe-m-server-3" || p.Namespace != "kobe" || p.Labels[LabelComponent] != "control-plane" {
		t.Errorf("meta %+v", p.ObjectMeta)
	}
	if p.Spec.NodeSelector["role"] != "members" || p.Spec.PriorityClassName != "p" || len(p.Spec.Tolerations) != 1 {
		t.Errorf("placement %+v", p.Spec)
	}
	if len(p.Spec.TopologySpreadConstraints) != 1 || p.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels[kobev1.LabelPool] != "ci" {
		t.Errorf("spread %+v", p.Spec.TopologySpreadConstraints)
	}
	var keys []string
	for _, it := range p.Spec.Volumes[0].Secret.Items {
		keys = append(keys, it.Key)
	}
	if strings.Join(keys, ",") != KeyServingCert+","+KeySAKey {
		t.Errorf("mounted keys %v, want the serving certificate and SA key only", keys)
	}
	if *p.Spec.AutomountServiceAccountToken || !*p.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("pod security %+v", p.Spec.SecurityContext)
	}

	place.SpreadAcrossNodes = ptr.To(false)
	p2 := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: full}}}}
	if err := finishPod(kobev1.BackendKubernetes, m, &p2, 0, place, nil); err != nil || len(p2.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("spreadAcrossNodes false: %v %v", err, p2.Spec.TopologySpreadConstraints)
	}

	for _, drop := range []func(*corev1.ResourceRequirements){
		func(r *corev1.ResourceRequirements) { delete(r.Requests, corev1.ResourceCPU) },
		func(r *corev1.ResourceRequirements) { delete(r.Limits, corev1.ResourceMemory) },
	} {
		r := *full.DeepCopy()
		drop(&r)
		bad := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: r}}}}
		if err := finishPod(kobev1.BackendKubernetes, m, &bad, 0, nil, nil); err == nil {
			t.Errorf("a container with %v was accepted", r)
		}
	}
}

func TestPDB(t *testing.T) {
	pdb := renderPDB(kobev1.BackendKubernetes, member("m", ""), 3)
	if pdb.Spec.MinAvailable.IntVal != 3 || pdb.Spec.MaxUnavailable != nil || *pdb.Spec.UnhealthyPodEvictionPolicy != "AlwaysAllow" {
		t.Errorf("PDB %+v", pdb.Spec)
	}
}

func pod(name string, mut func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}}
	if mut != nil {
		mut(&p)
	}
	return p
}

func TestJudgePods(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	b := &Backend{opts: Options{UnschedulableTimeout: time.Minute, Now: func() time.Time { return now }}}
	m := member("m", "")
	p0 := podName(m, 0)
	unsched := func(ago time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes", LastTransitionTime: metav1.NewTime(now.Add(-ago))}}
		}
	}
	waiting := func(reason string, restarts int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-apiserver", RestartCount: restarts,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
		}
	}
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		created int
		want    backend.State // "" = Ready (not done)
		msg     string
	}{
		{"nothing created yet", nil, 0, backend.StateProvisioning, "creating"},
		{"created pods not recorded yet", []corev1.Pod{pod(p0, nil)}, 0, backend.StateProvisioning, "creating the member's pods"},
		{"ready", []corev1.Pod{pod(p0, nil)}, 1, "", ""},
		{"pod gone", nil, 1, backend.StateFailed, "is gone"},
		{"pod being deleted", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now)) })}, 1, backend.StateFailed, "being deleted"},
		{"pod failed", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "Evicted" })}, 1, backend.StateFailed, "Evicted"},
		{"pod succeeded", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })}, 1, backend.StateFailed, "Succeeded"},
		{"not ready", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse })}, 1, backend.StateProvisioning, "not Ready"},
		{"pending", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })}, 1, backend.StateProvisioning, "Pending"},
		{"unschedulable for a while", []corev1.Pod{pod(p0, unsched(30*time.Second))}, 1, backend.StateProvisioning, "unschedulable: 0/3 nodes"},
		{"unschedulable too long", []corev1.Pod{pod(p0, unsched(2*time.Minute))}, 1, backend.StateFailed, "unschedulable for more than 1m0s: 0/3 nodes"},
		{"image never pulled", []corev1.Pod{pod(p0, waiting("ErrImageNeverPull", 0))}, 1, backend.StateFailed, "ErrImageNeverPull"},
		{"crash loop, early", []corev1.Pod{pod(p0, waiting("CrashLoopBackOff", 1))}, 1, backend.StateProvisioning, "not Ready"},
		{"crash loop", []corev1.Pod{pod(p0, waiting("CrashLoopBackOff", 3))}, 1, backend.StateFailed, "CrashLoopBackOff"},
		{"second of two gone", []corev1.Pod{pod(p0, nil)}, 2, backend.StateFailed, podName(m, 1) + " is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, done := b.judgePods(m, tc.pods, tc.created)
			if tc.want == "" {
				if done {
					t.Fatalf("got %+v, want Ready", obs)
				}
				return
			}
			if !done || obs.State != tc.want || !strings.Contains(obs.Message, tc.msg) {
				t.Errorf("got %v %+v, want %s containing %q", done, obs, tc.want, tc.msg)
			}
		})
	}
}
