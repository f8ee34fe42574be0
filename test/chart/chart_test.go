package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// allOn switches on every optional value of the chart (with the local
// backend off: it has a test of its own, as it changes the replicas).
func allOn(t *testing.T) map[string]any {
	return valuesFile(t, "all-on.yaml")
}

func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{"defaults": nil, "every optional value": allOn(t), "local backend": valuesFile(t, "local.yaml")} {
		t.Run(name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = testNamespace
			res := l.Run([]string{chartDir}, vals)
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			if len(res.Errors) > 0 {
				t.Fatalf("helm lint --strict: %v", res.Errors)
			}
			if res.TotalChartsLinted != 1 {
				t.Fatalf("%d charts linted", res.TotalChartsLinted)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	r := mustRender(t, nil)
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy %+v, want a rolling update with maxUnavailable 0", d.Spec.Strategy)
	}
	c := operator(t, &d)
	for _, want := range []string{"--leader-elect", "--bind-all-interfaces", "--disable-local-backend",
		"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s",
		"--api-bind-address=:8090", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8080",
		"--default-max-ttl=24h", "--max-queued-per-owner=10", "--audit-retention=720h", "--lease-retention=1h",
		"--api-tls-cert-file=/etc/kobe/tls/tls.crt", "--api-tls-key-file=/etc/kobe/tls/tls.key", "--api-tls-ca-file=/etc/kobe/tls/ca.crt",
		"--member-network-policy-operator-selector=app.kubernetes.io/instance=kobe,app.kubernetes.io/name=kobe",
		"--require-network-policy-enforcement=true", "--kubernetes-host-cidrs=auto"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	for _, not := range []string{"--enable-sim-backend", "--connect-url", "--api-audience", "--local-bin-dir", "--login-", "--trusted-proxy-cidrs"} {
		if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, not) }) {
			t.Errorf("args %q have %s", c.Args, not)
		}
	}
	if c.Image != "ghcr.io/kunobi-ninja/kobe-operator:v0.1.0" {
		t.Errorf("image %s, want the repository at the chart's appVersion", c.Image)
	}
	checkSecurity(t, &d)
	checkProbes(t, c, 8081)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	if env := envNames(c); !slices.Contains(env, "POD_NAMESPACE") || !slices.Contains(env, "GOMEMLIMIT") {
		t.Errorf("env %v lacks POD_NAMESPACE or GOMEMLIMIT", env)
	}
	if d.Spec.Template.Spec.ServiceAccountName != "kobe" {
		t.Errorf("service account %q", d.Spec.Template.Spec.ServiceAccountName)
	}

	var pdb policyv1.PodDisruptionBudget
	r.typed(t, "PodDisruptionBudget", &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("PDB selects %v, the Deployment's pods are %v", pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels)
	}
	services := r.find(t, "Service", 2)
	api := services[0]
	if api.GetName() != "kobe" {
		api = services[1]
	}
	var svc corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(api.Object, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8090 || svc.Spec.Ports[0].TargetPort.String() != "api" {
		t.Errorf("API Service %+v: want ClusterIP 8090 -> api", svc.Spec)
	}
	if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
		t.Errorf("Service selects %v, the Deployment's pods are %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
	}
	r.find(t, "ServiceMonitor", 0)
	r.find(t, "Certificate", 0)
	r.find(t, "Secret", 1) // the API's self-signed certificate (tls_test.go)
	r.find(t, "ServiceAccount", 1)
	checkCRDs(t, r, true)
	checkRBAC(t, r)
}

func TestEveryOptionalValue(t *testing.T) {
	r := mustRender(t, allOn(t))
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	c := operator(t, &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", d.Spec.Replicas)
	}
	for _, want := range []string{"--leader-elect", "--enable-sim-backend", "--disable-local-backend",
		"--api-tls-cert-file=/etc/kobe/tls/tls.crt", "--api-tls-key-file=/etc/kobe/tls/tls.key",
		"--api-audience=kobe:test", "--leader-elect-lease-duration=8s", "--default-max-ttl=2h",
		"--max-queued-per-owner=5", "--audit-retention=48h", "--zap-log-level=debug", "--api-max-in-flight=50",
		"--api-tls-ca-file=/etc/kobe/tls/ca.crt", "--connect-url=https://kobe.example.com", "--connect-max-in-flight=300",
		"--require-network-policy-enforcement=false", "--login-issuer=https://idp.example.com/realms/dev", "--login-client-id=kobe-cli",
		"--login-scopes=openid,email,groups,offline_access", "--kubernetes-host-cidrs=10.42.0.0/16,10.43.0.0/16",
		"--trusted-proxy-cidrs=10.0.0.0/24,fd00::/64"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if c.Image != "registry.example/kobe-operator@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image %s: want the digest, not the tag", c.Image)
	}
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == "kobe-api-tls"
	}) {
		t.Errorf("no volume of the Secret kobe-api-tls: %+v", d.Spec.Template.Spec.Volumes)
	}
	checkSecurity(t, &d)
	checkProbes(t, c, 9081)

	// cert-manager writes the Secret: the chart makes none.
	r.find(t, "Secret", 0)
	cert := r.find(t, "Certificate", 1)[0]
	if got := str(cert.Object, "spec", "secretName"); got != "kobe-api-tls" {
		t.Errorf("Certificate writes %q, the pod mounts kobe-api-tls", got)
	}
	if got := str(cert.Object, "spec", "issuerRef", "name"); got != "ca-issuer" {
		t.Errorf("Certificate issuer %q", got)
	}
	dns, _ := cert.Object["spec"].(map[string]any)["dnsNames"].([]any)
	if !slices.Contains(dns, any("kobe.kobe-system.svc")) || !slices.Contains(dns, any("kobe.example.com")) {
		t.Errorf("Certificate names %v: want the Service's and the extra one", dns)
	}
	sm := r.find(t, "ServiceMonitor", 1)[0]
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v lack release=prometheus", sm.GetLabels())
	}
	var svc corev1.Service
	for _, o := range r.find(t, "Service", 2) {
		if o.GetName() == "kobe" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if svc.Spec.Ports[0].Name != "https" || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("API Service %+v: want an https port on a LoadBalancer", svc.Spec)
	}
	if !strings.Contains(r.notes, "sim backend is on") {
		t.Errorf("notes do not warn of the sim backend:\n%s", r.notes)
	}
	// With api.audience set the operator never reads its Namespace; with
	// hostCIDRs listed, never Nodes nor ServiceCIDRs.
	checkRBAC(t, r, "namespaces", "nodes", "servicecidrs")
	// crds.install false: the CRDs are someone else's.
	r.find(t, "CustomResourceDefinition", 0)
}

func TestTLSFromSecret(t *testing.T) {
	r := mustRender(t, map[string]any{"api": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "my-cert"}}})
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	if !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Secret != nil && v.Secret.SecretName == "my-cert"
	}) {
		t.Errorf("the Secret my-cert is not mounted: %+v", d.Spec.Template.Spec.Volumes)
	}
	if !slices.Contains(operator(t, &d).Args, "--api-tls-cert-file=/etc/kobe/tls/tls.crt") {
		t.Error("no --api-tls-cert-file")
	}
	// The Secret is the user's: the chart makes none and mounts all of it.
	r.find(t, "Certificate", 0)
	r.find(t, "Secret", 0)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && len(v.Secret.Items) > 0 {
			t.Errorf("volume %s mounts only %v of the user's Secret", v.Name, v.Secret.Items)
		}
	}
}

func TestLocalBackendForcesOneReplica(t *testing.T) {
	r := mustRender(t, valuesFile(t, "local.yaml"))
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v with the local backend and replicaCount 3, want 1", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %s, want Recreate", d.Spec.Strategy.Type)
	}
	c := operator(t, &d)
	if slices.Contains(c.Args, "--disable-local-backend") {
		t.Errorf("args %q disable the local backend", c.Args)
	}
	for _, want := range []string{"--local-data-dir=/var/lib/kobe-local", "--local-advertise-host=$(POD_IP)", "--local-bin-dir=/opt/kobe/bin"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if !slices.Contains(envNames(c), "POD_IP") {
		t.Error("no POD_IP for --local-advertise-host")
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/lib/kobe-local" }) {
		t.Error("the local data directory is not a volume (the root file system is read-only)")
	}
	checkSecurity(t, &d)
	r.find(t, "PodDisruptionBudget", 0)
	if !strings.Contains(r.notes, "loses every member") {
		t.Errorf("notes do not warn that a restart loses the members:\n%s", r.notes)
	}
}

// TestRefused: values the schema or the chart refuse, each with a message
// that names what to fix.
func TestRefused(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want []string
	}{
		{"typo at the top", valuesFile(t, "typo-top.yaml"), []string{"additional properties", "replicaCont"}},
		{"typo nested", valuesFile(t, "typo-nested.yaml"), []string{"/leaderElection", "enabeld"}},
		{"typo two levels down", map[string]any{"api": map[string]any{"tls": map[string]any{"certManger": map[string]any{}}}}, []string{"/api/tls", "certManger"}},
		{"typo in resources", map[string]any{"resources": map[string]any{"limit": map[string]any{"memory": "1Gi"}}}, []string{"/resources", "limit"}},
		{"wrong type", map[string]any{"replicaCount": "two"}, []string{"/replicaCount", "integer"}},
		{"bad duration", map[string]any{"limits": map[string]any{"defaultMaxTTL": "a day"}}, []string{"/limits/defaultMaxTTL"}},
		{"bad digest", map[string]any{"image": map[string]any{"digest": "latest"}}, []string{"/image/digest"}},
		{"two replicas without leader election", map[string]any{"leaderElection": map[string]any{"enabled": false}}, []string{"replicaCount > 1 needs leaderElection.enabled"}},
		{"self-signed for no time", map[string]any{"api": map[string]any{"tls": map[string]any{"selfSigned": map[string]any{"validityDays": 0}}}}, []string{"/api/tls/selfSigned/validityDays"}},
		{"self-signed without its CA in kubeconfigs", map[string]any{"api": map[string]any{"tls": map[string]any{"caCert": false}}}, []string{"api.tls.caCert", "self-signed"}},
		{"typo in selfSigned", map[string]any{"api": map[string]any{"tls": map[string]any{"selfSigned": map[string]any{"extraDNSNames": []any{"x"}}}}}, []string{"/api/tls/selfSigned", "extraDNSNames"}},
		{"cert-manager without issuer", map[string]any{"api": map[string]any{"tls": map[string]any{"enabled": true, "certManager": map[string]any{"enabled": true}}}}, []string{"issuerRef.name"}},
		{"login issuer without client", map[string]any{"api": map[string]any{"login": map[string]any{"issuer": "https://idp.example.com"}}}, []string{"api.login.clientId is required"}},
		{"login issuer over plain http", map[string]any{"api": map[string]any{"login": map[string]any{"issuer": "http://idp.example.com", "clientId": "kobe"}}}, []string{"/api/login/issuer"}},
		{"trusted proxy that is no CIDR", map[string]any{"api": map[string]any{"trustedProxyCIDRs": []any{"ingress-nginx"}}}, []string{"/api/trustedProxyCIDRs/0"}},
		{"ServiceMonitor without metrics", map[string]any{"metrics": map[string]any{"enabled": false, "serviceMonitor": map[string]any{"enabled": true}}}, []string{"metrics.serviceMonitor.enabled needs metrics.enabled"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.vals)
			if err == nil {
				t.Fatalf("%v rendered", tc.vals)
			}
			t.Logf("refused: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestLeaderElectionOffWithOneReplica: one replica may run without leader
// election (the refusal is about two).
func TestLeaderElectionOffWithOneReplica(t *testing.T) {
	r := mustRender(t, map[string]any{"replicaCount": 1, "leaderElection": map[string]any{"enabled": false}})
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	if slices.ContainsFunc(operator(t, &d).Args, func(a string) bool { return strings.HasPrefix(a, "--leader-elect") }) {
		t.Error("leader election flags with leaderElection.enabled false")
	}
	r.find(t, "PodDisruptionBudget", 0)
}

func operator(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "operator" {
		t.Fatalf("containers %+v, want one named operator", cs)
	}
	return &cs[0]
}

func envNames(c *corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name)
	}
	return out
}

// checkSecurity: non-root, read-only root, no capabilities, RuntimeDefault
// seccomp, no privilege escalation.
func checkSecurity(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 ||
		ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want non-root 65532 and seccomp RuntimeDefault", ps)
	}
	c := operator(t, d)
	cs := c.SecurityContext
	if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
		cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
		cs.Capabilities == nil || !reflect.DeepEqual(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0 {
		t.Errorf("container securityContext %+v: want a read-only root, no escalation, every capability dropped", cs)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a hostPath", v.Name)
		}
	}
}

func checkProbes(t *testing.T, c *corev1.Container, port int32) {
	t.Helper()
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := "/healthz"
		if name == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "probes" {
			t.Errorf("%s probe %+v: want GET %s on the probes port", name, p, want)
		}
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "probes" && p.ContainerPort == port }) {
		t.Errorf("ports %+v lack probes %d", c.Ports, port)
	}
}

// checkCRDs: the five CRDs are rendered from config/crd/bases unchanged but
// for the chart's labels and the keep annotation.
func checkCRDs(t *testing.T, r *rendered, keep bool) {
	t.Helper()
	src, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(src) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	got := map[string]*apiextv1.CustomResourceDefinition{}
	for _, o := range r.find(t, "CustomResourceDefinition", len(src)) {
		var crd apiextv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &crd, true); err != nil {
			t.Fatalf("CRD %s: %v", o.GetName(), err)
		}
		got[crd.Name] = &crd
	}
	for _, path := range src {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile(filepath.Join(chartDir, "files", "crds", filepath.Base(path)))
		if err != nil || string(copied) != string(b) {
			t.Errorf("charts/kobe/files/crds/%s differs from %s: run make chart-crds", filepath.Base(path), path)
		}
		var want apiextv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &want); err != nil {
			t.Fatal(err)
		}
		g := got[want.Name]
		if g == nil {
			t.Errorf("CRD %s not rendered", want.Name)
			continue
		}
		if !reflect.DeepEqual(g.Spec, want.Spec) {
			t.Errorf("CRD %s: rendered spec differs from %s", want.Name, path)
		}
		if (g.Annotations["helm.sh/resource-policy"] == "keep") != keep {
			t.Errorf("CRD %s annotations %v, keep %v", want.Name, g.Annotations, keep)
		}
		for k, v := range want.Annotations {
			if g.Annotations[k] != v {
				t.Errorf("CRD %s lost annotation %s=%s", want.Name, k, v)
			}
		}
		if g.Labels["app.kubernetes.io/part-of"] != "kobe" {
			t.Errorf("CRD %s labels %v", want.Name, g.Labels)
		}
	}
}

func str(m map[string]any, path ...string) string {
	for _, p := range path[:len(path)-1] {
		m, _ = m[p].(map[string]any)
	}
	s, _ := m[path[len(path)-1]].(string)
	return s
}
