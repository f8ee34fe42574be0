//go:build integration

package crd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// statusSuffix marks a status fixture: "<kind>_<name>.status.yaml" is applied
// to the status subresource of the object that "<kind>_<name>.yaml" creates.
const statusSuffix = ".status.yaml"

// docExamples are the YAML examples of the product documents
// (/work/shared/spec). They must apply to kobe unchanged, so each sample that
// carries one must contain it verbatim.
var docExamples = map[string][]string{
	// "kobe 101": Pools and leases.
	"clusterpool_ci-small.yaml": {`apiVersion: kobe.kunobi.ninja/v1alpha1
kind: ClusterPool
metadata:
  name: ci-small
spec:
  size: 3                 # warm clusters to keep ready
  ttl: "1h"               # default lease duration
  backend:
    type: k3s             # k3s | k0s | vcluster | capi
  cluster:
    version: "v1.31.3+k3s1"
    servers: 1
`},
	// "kobe 101": Who is allowed to lease.
	"accesspolicy_github-ci.yaml": {`apiVersion: kobe.kunobi.ninja/v1alpha1
kind: AccessPolicy
metadata:
  name: github-ci
spec:
  auth:
    oidc:
      issuer: https://token.actions.githubusercontent.com
      audience: ["https://kobe.example.com"]
  identity: "{repository}:{ref}"
  rules:
    - match:
        claim: repository
        value: my-org/my-repo
      pools: ["ci-*"]
      maxTtl: 1h
      maxConcurrentLeases: 3
`},
	// "Pool lifecycle": Pool status.
	"clusterpool_ci-small.status.yaml": {`status:
  phase: Healthy
  ready: 2      # clusters in Ready phase
  leased: 1     # clusters in Leased phase
  creating: 1   # clusters in Creating phase
  recycling: 0  # clusters being torn down and replaced
  unhealthy: 0  # clusters marked unhealthy
  quarantined: 0 # cleanup could not be proven; still consumes capacity
  queueDepth: 0 # leases waiting for capacity
`},
	// "Pool lifecycle": Autoscaling and Health checks, under one spec.
	"clusterpool_ci-autoscaling.yaml": {`
  scaling:
    minReady: 1
    maxClusters: 10
    scaleUpThreshold: 0  # start creating more when ready count drops to this
    scaleDownAfter: 5m
    queueTimeout: 5m
`, `
  healthCheck:
    intervalSeconds: 30
    failureThreshold: 3
`},
}

// testSamples applies every sample in config/samples, unchanged, and each
// status fixture to its object's status subresource.
func testSamples(t *testing.T, env *testenv.Env) {
	dir := filepath.Join(testenv.RepoRoot(), "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in %s (%v)", dir, err)
	}
	ns := newNamespace(t, env, "samples")

	var objects, statuses []string
	for _, f := range files {
		if strings.HasSuffix(f, statusSuffix) {
			statuses = append(statuses, f)
		} else {
			objects = append(objects, f)
		}
	}

	t.Run("documents' examples are kept verbatim", func(t *testing.T) {
		for name, blocks := range docExamples {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("sample of a documented example: %v", err)
				continue
			}
			for _, block := range blocks {
				if !strings.Contains(string(b), block) {
					t.Errorf("%s does not contain the documented example verbatim:\n%s", name, block)
				}
			}
		}
	})

	t.Run("every kind has a sample", func(t *testing.T) {
		kinds := map[string]bool{}
		for _, f := range objects {
			var meta struct{ APIVersion, Kind string }
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &meta); err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			if meta.APIVersion != kobev1.GroupVersion.String() {
				t.Errorf("%s: apiVersion %q, want %q", filepath.Base(f), meta.APIVersion, kobev1.GroupVersion)
			}
			if want := strings.ToLower(meta.Kind) + "_"; !strings.HasPrefix(filepath.Base(f), want) {
				t.Errorf("%s: a %s sample is named %s<name>.yaml", filepath.Base(f), meta.Kind, want)
			}
			kinds[meta.Kind] = true
		}
		for _, k := range []string{"ClusterPool", "ClusterInstance", "ClusterLease", "AccessPolicy", "BootstrapConfig"} {
			if !kinds[k] {
				t.Errorf("no sample of %s", k)
			}
		}
	})

	// Objects first: each status fixture needs its object.
	for _, f := range objects {
		t.Run(filepath.Base(f), func(t *testing.T) {
			// --validate=strict: a field kobe does not know fails the apply
			// instead of being dropped.
			out, err := kubectl(t, env, "apply", "--validate=strict", "-n", ns, "-f", f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(strings.TrimSpace(out), " created") {
				t.Errorf("kubectl apply: %q, want the object created", out)
			}
		})
	}

	for _, f := range statuses {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			kind, name, ok := strings.Cut(strings.TrimSuffix(base, statusSuffix), "_")
			if !ok || kind != "clusterpool" {
				t.Fatalf("status fixture %s: want clusterpool_<name>%s (only pool status fixtures are checked)", base, statusSuffix)
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// Strict: every documented status field is a field of the type.
			var want struct {
				Status kobev1.ClusterPoolStatus `json:"status"`
			}
			if err := yaml.UnmarshalStrict(b, &want); err != nil {
				t.Fatalf("%s does not match ClusterPoolStatus: %v", base, err)
			}
			if want.Status.Phase == "" {
				t.Fatalf("%s sets no phase: reading it back would prove nothing", base)
			}

			if _, err := kubectl(t, env, "patch", kind, name, "-n", ns,
				"--subresource=status", "--type=merge", "--patch-file", f); err != nil {
				t.Fatal(err)
			}

			var got kobev1.ClusterPool
			if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &got); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Status, want.Status) {
				t.Errorf("status read back = %+v, want %+v", got.Status, want.Status)
			}
		})
	}
}
