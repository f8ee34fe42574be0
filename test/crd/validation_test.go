//go:build integration

package crd_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const (
	pool      = "ClusterPool"
	policy    = "AccessPolicy"
	lease     = "ClusterLease"
	instance  = "ClusterInstance"
	bootstrap = "BootstrapConfig"
)

// validCase is an object the API server must accept. When update is set the
// object is created from spec, then update (a merge patch of the spec) must
// be accepted too.
type validCase struct {
	name   string
	kind   string
	spec   string
	update string
	// want maps a dotted field path to its value after the API server
	// defaulted the object, compared as printed by fmt.Sprint.
	want map[string]string
}

// invalidCase is an object the API server must reject. When update is set the
// object is created from spec (which must succeed), then update (a merge
// patch of the spec) must be rejected.
type invalidCase struct {
	name   string
	kind   string
	spec   string
	update string
	// want are substrings of the rejection: the field and what is wrong with it.
	want []string
}

const (
	// policyRules completes an AccessPolicy spec whose case is about auth.
	policyRules = "\nrules: [{pools: [\"*\"]}]"
	// policyAuth completes an AccessPolicy spec whose case is about rules.
	policyAuth = "auth: {serviceAccount: {audiences: [kobe]}}\n"
	// instanceSpec is a ClusterInstance already bound to lease-a.
	instanceSpec = "poolRef: {name: ci-small}\nbackend: {type: k3s}\nleaseRef: {name: lease-a}"
)

var invalidCases = []invalidCase{
	{name: "pool preloadImages with nodes 0", kind: pool, spec: `backend: {type: local, local: {nodes: 0, preloadImages: [a.tar]}}`,
		want: []string{"spec.backend.local", "backend.local.preloadImages needs real nodes"}},
	{name: "pool preloadImages with scheduling and nodes unset", kind: pool, spec: `backend: {type: local, local: {scheduling: true, preloadImages: [a.tar]}}`,
		want: []string{"spec.backend.local", "backend.local.preloadImages needs real nodes"}},
	{name: "pool scheduling and real nodes", kind: pool, spec: `backend: {type: local, local: {scheduling: true, nodes: 1}}`,
		want: []string{"spec.backend.local", "exclude each other"}},
	{name: "pool more nodes than 4", kind: pool, spec: `backend: {type: kubernetes, kubernetes: {nodes: 5}}`,
		want: []string{"spec.backend.kubernetes.nodes", "less than or equal to 4"}},
	// ClusterPool
	{name: "pool registry mirror without endpoints", kind: pool, spec: `cluster: {registryMirrors: [{registry: docker.io, endpoints: []}]}`,
		want: []string{"spec.cluster.registryMirrors[0].endpoints", "at least 1"}},
	{name: "pool registry mirror endpoint that breaks out of its TOML string", kind: pool, spec: `cluster: {registryMirrors: [{registry: docker.io, endpoints: ["https://m.example\"]\n[x]"]}]}`,
		want: []string{"spec.cluster.registryMirrors[0].endpoints[0]", "should match"}},
	{name: "pool registry mirror endpoint without a scheme", kind: pool, spec: `cluster: {registryMirrors: [{registry: docker.io, endpoints: [mirror.example]}]}`,
		want: []string{"spec.cluster.registryMirrors[0].endpoints[0]", "should match"}},
	{name: "pool registry mirror of a registry that is no host", kind: pool, spec: `cluster: {registryMirrors: [{registry: "docker.io/library", endpoints: ["https://m.example"]}]}`,
		want: []string{"spec.cluster.registryMirrors[0].registry", "should match"}},
	{name: "pool registry mirrors of one registry twice", kind: pool, spec: `cluster: {registryMirrors: [{registry: docker.io, endpoints: ["https://a.example"]}, {registry: docker.io, endpoints: ["https://b.example"]}]}`,
		want: []string{"spec.cluster.registryMirrors[1]", "Duplicate value"}},
	{name: "pool member memory below a control plane's", kind: pool, spec: `cluster: {limits: {memory: 100Mi}}`,
		want: []string{"spec.cluster.limits.memory", "limits.memory must be at least 256Mi"}},
	{name: "pool member memory that is no quantity", kind: pool, spec: `cluster: {limits: {memory: lots}}`,
		want: []string{"spec.cluster.limits.memory"}},
	{name: "pool member disk below etcd's", kind: pool, spec: `cluster: {limits: {disk: 512Mi}}`,
		want: []string{"spec.cluster.limits.disk", "limits.disk must be at least 1Gi"}},
	{name: "pool member processes too few to start", kind: pool, spec: `cluster: {limits: {processes: 10}}`,
		want: []string{"spec.cluster.limits.processes", "greater than or equal to 256"}},
	{name: "pool pod processes too few", kind: pool, spec: `cluster: {limits: {podProcesses: 1}}`,
		want: []string{"spec.cluster.limits.podProcesses", "greater than or equal to 16"}},
	{name: "pool network volumes neither refused nor allowed", kind: pool, spec: `cluster: {networkVolumes: Maybe}`,
		want: []string{"spec.cluster.networkVolumes", `"Refused", "Allowed"`}},
	{name: "pool warm.running negative", kind: pool, spec: `warm: {running: -1}`,
		want: []string{"spec.warm.running", "should be greater than or equal to 0"}},
	{name: "pool size negative", kind: pool, spec: `size: -1`,
		want: []string{"spec.size", "should be greater than or equal to 0"}},
	{name: "pool size above the maximum", kind: pool, spec: `size: 501`,
		want: []string{"spec.size", "should be less than or equal to 500"}},
	{name: "pool ttl malformed", kind: pool, spec: `ttl: "1 hour"`,
		want: []string{`spec.ttl: Invalid value: "1 hour"`, "should match"}},
	{name: "pool ttl zero", kind: pool, spec: `ttl: 0s`,
		want: []string{"spec.ttl", "ttl must be greater than zero"}},
	{name: "pool backend type unknown", kind: pool, spec: `backend: {type: kind}`,
		want: []string{`spec.backend.type: Unsupported value: "kind"`, `"local", "kubernetes", "k3s", "k0s", "vcluster", "capi"`}},
	{name: "pool scaling maxClusters below minReady", kind: pool, spec: `scaling: {minReady: 5, maxClusters: 2}`,
		want: []string{"scaling.maxClusters must be greater than or equal to scaling.minReady"}},
	{name: "pool scaling queueTimeout zero", kind: pool, spec: `scaling: {queueTimeout: 0s}`,
		want: []string{"spec.scaling.queueTimeout", "queueTimeout must be greater than zero"}},
	{name: "pool healthCheck intervalSeconds zero", kind: pool, spec: `healthCheck: {intervalSeconds: 0}`,
		want: []string{"spec.healthCheck.intervalSeconds", "should be greater than or equal to 1"}},
	{name: "pool healthCheck failureThreshold zero", kind: pool, spec: `healthCheck: {failureThreshold: 0}`,
		want: []string{"spec.healthCheck.failureThreshold", "should be greater than or equal to 1"}},
	{name: "pool creatingTimeout malformed", kind: pool, spec: `creatingTimeout: "ten minutes"`,
		want: []string{`spec.creatingTimeout: Invalid value: "ten minutes"`, "should match"}},
	{name: "pool backend local set with type k3s", kind: pool, spec: `backend: {type: k3s, local: {scheduling: true}}`,
		want: []string{"spec.backend", "backend.local may only be set when backend.type is local"}},
	{name: "pool backend local set with the default type", kind: pool, spec: `backend: {local: {}}`,
		want: []string{"backend.local may only be set when backend.type is local"}},
	{name: "pool backend k3s datastore unknown", kind: pool, spec: `backend: {type: k3s, k3s: {datastore: etcd}}`,
		want: []string{`spec.backend.k3s.datastore: Unsupported value: "etcd"`}},
	{name: "pool cluster servers zero", kind: pool, spec: `cluster: {servers: 0}`,
		want: []string{"spec.cluster.servers", "should be greater than or equal to 1"}},
	{name: "pool readiness gate type malformed", kind: pool, spec: `readinessGates: [{type: "nodes ready"}]`,
		want: []string{`spec.readinessGates[0].type: Invalid value: "nodes ready"`, "should match"}},
	{name: "pool readiness gate listed twice", kind: pool, spec: `readinessGates: [{type: NodesReady}, {type: NodesReady}]`,
		want: []string{"spec.readinessGates", "readinessGates must have unique names"}},
	{name: "pool readiness gates of one type without names", kind: pool,
		spec: `readinessGates: [{type: CRDExists, crd: {name: a.example.com}}, {type: CRDExists, crd: {name: b.example.com}}]`,
		want: []string{"spec.readinessGates", "give gates of one type different names"}},
	{name: "pool readiness gate name taken by another gate's type", kind: pool,
		spec: `readinessGates: [{type: Signal}, {type: URLHealthy, name: Signal, url: "http://127.0.0.1/"}]`,
		want: []string{"readinessGates must have unique names"}},
	{name: "pool CRDExists gate without crd", kind: pool, spec: `readinessGates: [{type: CRDExists}]`,
		want: []string{"crd is required for a gate of type CRDExists, and only for it"}},
	{name: "pool crd on a gate of another type", kind: pool, spec: `readinessGates: [{type: NodesReady, crd: {name: a.example.com}}]`,
		want: []string{"crd is required for a gate of type CRDExists, and only for it"}},
	{name: "pool DeploymentReady gate without deployment", kind: pool, spec: `readinessGates: [{type: DeploymentReady}]`,
		want: []string{"deployment is required for a gate of type DeploymentReady, and only for it"}},
	{name: "pool DeploymentReady gate without a namespace", kind: pool, spec: `readinessGates: [{type: DeploymentReady, deployment: {name: ingress}}]`,
		want: []string{"spec.readinessGates[0].deployment.namespace: Required value"}},
	{name: "pool URLHealthy gate without url", kind: pool, spec: `readinessGates: [{type: URLHealthy}]`,
		want: []string{"url is required for a gate of type URLHealthy, and only for it"}},
	{name: "pool URLHealthy gate with a relative url", kind: pool, spec: `readinessGates: [{type: URLHealthy, url: "/healthz"}]`,
		want: []string{"url must be an absolute http or https URL"}},
	{name: "pool URLHealthy gate with a file url", kind: pool, spec: `readinessGates: [{type: URLHealthy, url: "file:///etc/passwd"}]`,
		want: []string{"url must be an absolute http or https URL"}},
	{name: "pool readiness gate named like a built-in gate", kind: pool,
		spec: `readinessGates: [{type: CRDExists, name: APIServerReachable, crd: {name: a.example.com}}]`,
		want: []string{"name must not be a built-in gate type or a ClusterInstance condition kobe sets"}},
	{name: "pool readiness gate named Ready", kind: pool, spec: `readinessGates: [{type: Signal, name: Ready}]`,
		want: []string{"name must not be a built-in gate type or a ClusterInstance condition kobe sets"}},

	// AccessPolicy
	{name: "policy without auth", kind: policy, spec: `rules: [{pools: ["*"]}]`,
		want: []string{"spec.auth: Required value"}},
	{name: "policy with no auth method", kind: policy, spec: `auth: {}` + policyRules,
		want: []string{"spec.auth", "auth must set exactly one of oidc, ssh, token or serviceAccount"}},
	{name: "policy with two auth methods", kind: policy,
		spec: `auth: {oidc: {issuer: "https://token.actions.githubusercontent.com", audience: [kobe]}, serviceAccount: {audiences: [kobe]}}` + policyRules,
		want: []string{"spec.auth", "auth must set exactly one of oidc, ssh, token or serviceAccount"}},
	{name: "policy with empty rules", kind: policy, spec: policyAuth + `rules: []`,
		want: []string{"spec.rules", "should have at least 1 items"}},
	{name: "policy maxTtl malformed", kind: policy, spec: policyAuth + `rules: [{pools: ["*"], maxTtl: "1 hour"}]`,
		want: []string{`spec.rules[0].maxTtl: Invalid value: "1 hour"`, "should match"}},
	{name: "policy maxTtl zero", kind: policy, spec: policyAuth + `rules: [{pools: ["*"], maxTtl: 0s}]`,
		want: []string{"spec.rules[0].maxTtl", "maxTtl must be greater than zero"}},
	{name: "policy maxConcurrentLeases zero", kind: policy, spec: policyAuth + `rules: [{pools: ["*"], maxConcurrentLeases: 0}]`,
		want: []string{"spec.rules[0].maxConcurrentLeases", "should be greater than or equal to 1"}},
	{name: "policy pool glob with a leading star", kind: policy, spec: policyAuth + `rules: [{pools: ["*-small"]}]`,
		want: []string{`spec.rules[0].pools[0]: Invalid value: "*-small"`, "should match"}},
	{name: "policy pool glob with a star inside", kind: policy, spec: policyAuth + `rules: [{pools: ["ci-*-small"]}]`,
		want: []string{`spec.rules[0].pools[0]: Invalid value: "ci-*-small"`, "should match"}},
	{name: "policy rule without pools", kind: policy, spec: policyAuth + `rules: [{pools: []}]`,
		want: []string{"spec.rules[0].pools", "should have at least 1 items"}},
	{name: "policy oidc issuer not a URL", kind: policy, spec: `auth: {oidc: {issuer: token.actions.githubusercontent.com, audience: [kobe]}}` + policyRules,
		want: []string{`spec.auth.oidc.issuer: Invalid value: "token.actions.githubusercontent.com"`, "issuer must be an absolute http(s) URL with a host"}},
	{name: "policy oidc issuer without host", kind: policy, spec: `auth: {oidc: {issuer: "https://", audience: [kobe]}}` + policyRules,
		want: []string{"spec.auth.oidc.issuer", "issuer must be an absolute http(s) URL with a host"}},
	{name: "policy oidc with empty audience", kind: policy, spec: `auth: {oidc: {issuer: "https://token.actions.githubusercontent.com", audience: []}}` + policyRules,
		want: []string{"spec.auth.oidc.audience", "should have at least 1 items"}},
	{name: "policy ssh without keys", kind: policy, spec: `auth: {ssh: {authorizedKeys: []}}` + policyRules,
		want: []string{"spec.auth.ssh.authorizedKeys", "should have at least 1 items"}},
	{name: "policy token without secret name", kind: policy, spec: `auth: {token: {secretRef: {key: token}}}` + policyRules,
		want: []string{"spec.auth.token.secretRef.name: Required value"}},

	// ClusterLease
	{name: "lease without pool", kind: lease, spec: `ttl: 30m`,
		want: []string{"spec.pool: Required value"}},
	{name: "lease ttl zero", kind: lease, spec: `{pool: ci-small, ttl: 0s}`,
		want: []string{"spec.ttl", "ttl must be greater than zero"}},
	{name: "lease ttl malformed", kind: lease, spec: `{pool: ci-small, ttl: "30 minutes"}`,
		want: []string{`spec.ttl: Invalid value: "30 minutes"`, "should match"}},
	{name: "lease cleanupMode unknown", kind: lease, spec: `{pool: ci-small, cleanupMode: Paranoid}`,
		want: []string{`spec.cleanupMode: Unsupported value: "Paranoid"`, `"Standard", "VerifiedDestroy"`}},
	{name: "lease maxExtensions negative", kind: lease, spec: `{pool: ci-small, maxExtensions: -1}`,
		want: []string{"spec.maxExtensions", "should be greater than or equal to 0"}},
	{name: "lease cleanupMode changed after creation", kind: lease,
		spec: `{pool: ci-small}`, update: `{cleanupMode: VerifiedDestroy}`,
		want: []string{"spec.cleanupMode", "cleanupMode is write-once"}},
	{name: "lease cleanupMode downgraded after creation", kind: lease,
		spec: `{pool: ci-small, cleanupMode: VerifiedDestroy}`, update: `{cleanupMode: Standard}`,
		want: []string{"spec.cleanupMode", "cleanupMode is write-once"}},
	{name: "lease pool changed after creation", kind: lease,
		spec: `{pool: ci-small}`, update: `{pool: ci-large}`,
		want: []string{"spec.pool", "pool is immutable"}},
	{name: "lease ttl changed after creation", kind: lease,
		spec: `{pool: ci-small, ttl: 30m}`, update: `{ttl: 100h}`,
		want: []string{"spec.ttl", "ttl is write-once"}},
	{name: "lease ttl added after creation", kind: lease,
		spec: `{pool: ci-small}`, update: `{ttl: 100h}`,
		want: []string{"spec", "ttl is write-once"}},
	{name: "lease maxExtensions raised after creation", kind: lease,
		spec: `{pool: ci-small, maxExtensions: 2}`, update: `{maxExtensions: 100}`,
		want: []string{"spec.maxExtensions", "maxExtensions is write-once"}},
	{name: "lease maxExtensions added after creation", kind: lease,
		spec: `{pool: ci-small}`, update: `{maxExtensions: 100}`,
		want: []string{"spec", "maxExtensions is write-once"}},
	{name: "lease maxExtensions removed after creation", kind: lease,
		spec: `{pool: ci-small, maxExtensions: 0}`, update: `{maxExtensions: null}`,
		want: []string{"spec", "maxExtensions is write-once"}},
	{name: "lease maxTtl zero", kind: lease, spec: `{pool: ci-small, maxTtl: 0s}`,
		want: []string{"spec.maxTtl", "maxTtl must be greater than zero"}},
	{name: "lease maxTtl changed after creation", kind: lease,
		spec: `{pool: ci-small, maxTtl: 1h}`, update: `{maxTtl: 100h}`,
		want: []string{"spec.maxTtl", "maxTtl is write-once"}},
	{name: "lease maxTtl added after creation", kind: lease,
		spec: `{pool: ci-small}`, update: `{maxTtl: 100h}`,
		want: []string{"spec", "maxTtl is write-once"}},
	{name: "lease maxTtl removed after creation", kind: lease,
		spec: `{pool: ci-small, maxTtl: 1h}`, update: `{maxTtl: null}`,
		want: []string{"spec", "maxTtl is write-once"}},
	{name: "lease heartbeatTimeout below 10s", kind: lease, spec: `{pool: ci-small, heartbeatTimeout: 5s}`,
		want: []string{"spec.heartbeatTimeout", "heartbeatTimeout must be between 10s and 24h"}},
	{name: "lease heartbeatTimeout above 24h", kind: lease, spec: `{pool: ci-small, heartbeatTimeout: 25h}`,
		want: []string{"spec.heartbeatTimeout", "heartbeatTimeout must be between 10s and 24h"}},
	{name: "lease heartbeatTimeout changed after creation", kind: lease,
		spec: `{pool: ci-small, heartbeatTimeout: 1m}`, update: `{heartbeatTimeout: 24h}`,
		want: []string{"spec.heartbeatTimeout", "heartbeatTimeout is write-once"}},
	{name: "lease heartbeatTimeout removed after creation", kind: lease,
		spec: `{pool: ci-small, heartbeatTimeout: 1m}`, update: `{heartbeatTimeout: null}`,
		want: []string{"spec", "heartbeatTimeout is write-once"}},
	{name: "lease heartbeatTimeout added after creation", kind: lease,
		spec: `{pool: ci-small}`, update: `{heartbeatTimeout: 1m}`,
		want: []string{"spec", "heartbeatTimeout is write-once"}},
	{name: "pool heartbeatTimeout below 10s", kind: pool, spec: `heartbeatTimeout: 9s`,
		want: []string{"spec.heartbeatTimeout", "heartbeatTimeout must be between 10s and 24h"}},
	{name: "pool heartbeatTimeout malformed", kind: pool, spec: `heartbeatTimeout: "5 minutes"`,
		want: []string{`spec.heartbeatTimeout: Invalid value: "5 minutes"`, "should match"}},
	{name: "policy maxHeartbeatTimeout above 24h", kind: policy, spec: policyAuth + `rules: [{pools: ["*"], maxHeartbeatTimeout: 48h}]`,
		want: []string{"spec.rules[0].maxHeartbeatTimeout", "maxHeartbeatTimeout must be between 10s and 24h"}},
	{name: "pool idleTimeout with Direct access", kind: pool, spec: `{idleTimeout: 5m, backend: {type: local}}`,
		want: []string{"spec", "idleTimeout needs access mode Proxy"}},
	{name: "pool idleTimeout with access mode Direct named", kind: pool, spec: `{idleTimeout: 5m, access: {mode: Direct}}`,
		want: []string{"spec", "idleTimeout needs access mode Proxy"}},
	{name: "pool idleTimeout below 10s", kind: pool, spec: `{idleTimeout: 1s, access: {mode: Proxy}}`,
		want: []string{"spec.idleTimeout", "idleTimeout must be between 10s and 24h"}},
	{name: "lease idleTimeout added after creation", kind: lease,
		spec: `{pool: ci-small}`, update: `{idleTimeout: 1m}`,
		want: []string{"spec", "idleTimeout is write-once"}},
	{name: "lease idleTimeout changed after creation", kind: lease,
		spec: `{pool: ci-small, idleTimeout: 1m}`, update: `{idleTimeout: 24h}`,
		want: []string{"spec.idleTimeout", "idleTimeout is write-once"}},
	{name: "policy rule idleTimeout above 24h", kind: policy, spec: policyAuth + `rules: [{pools: ["*"], idleTimeout: 25h}]`,
		want: []string{"spec.rules[0].idleTimeout", "idleTimeout must be between 10s and 24h"}},
	{name: "policy rule with match and matchAny", kind: policy,
		spec: policyAuth + `rules: [{pools: ["*"], matchAny: true, match: {claim: sub, value: x}}]`,
		want: []string{"spec.rules[0]", "set either match or matchAny: true, not both"}},

	// ClusterInstance
	{name: "instance without backend", kind: instance, spec: `poolRef: {name: ci-small}`,
		want: []string{"spec.backend: Required value"}},
	{name: "instance leaseRef changed after set", kind: instance,
		spec: instanceSpec, update: `leaseRef: {name: lease-b}`,
		want: []string{"spec.leaseRef", "leaseRef is immutable once set"}},
	{name: "instance leaseRef uid changed after set", kind: instance,
		spec: instanceSpec, update: `leaseRef: {uid: 6f1c3c5e-0000-4000-8000-000000000001}`,
		want: []string{"spec.leaseRef", "leaseRef is immutable once set"}},
	{name: "instance leaseRef removed after set", kind: instance,
		spec: instanceSpec, update: `leaseRef: null`,
		want: []string{"spec", "leaseRef cannot be removed once set"}},
	{name: "instance templateHash changed after creation", kind: instance,
		spec: instanceSpec, update: `templateHash: abc123`,
		want: []string{"spec", "frozen at creation"}},
	{name: "instance bound and frozen", kind: instance,
		spec: instanceSpec + "\nfrozen: true",
		want: []string{"spec", "a bound member is never frozen"}},
	{name: "instance frozen after its bind", kind: instance,
		spec: instanceSpec, update: `frozen: true`,
		want: []string{"spec", "a bound member is never frozen"}},
	{name: "instance moved to another pool", kind: instance,
		spec: instanceSpec, update: `poolRef: {name: other}`,
		want: []string{"spec", "frozen at creation"}},

	// BootstrapConfig
	{name: "bootstrap with both manifests and job", kind: bootstrap,
		spec: `{manifests: [{name: a, content: "kind: Namespace"}], job: {image: busybox}}`,
		want: []string{"spec", "set exactly one of manifests or job"}},
	{name: "bootstrap with neither manifests nor job", kind: bootstrap, spec: `{}`,
		want: []string{"spec", "set exactly one of manifests or job"}},
	{name: "bootstrap with empty manifests", kind: bootstrap, spec: `{manifests: []}`,
		want: []string{"spec.manifests", "should have at least 1 items"}},
	{name: "bootstrap job without image", kind: bootstrap, spec: `{job: {args: [install]}}`,
		want: []string{"spec.job.image: Required value"}},
	{name: "bootstrap job timeout zero", kind: bootstrap, spec: `{job: {image: busybox, timeout: 0s}}`,
		want: []string{"spec.job.timeout", "timeout must be greater than zero"}},
	{name: "bootstrap job timeout malformed", kind: bootstrap, spec: `{job: {image: busybox, timeout: "5 minutes"}}`,
		want: []string{`spec.job.timeout: Invalid value: "5 minutes"`, "should match"}},
	{name: "bootstrap parameter name with a dot", kind: bootstrap,
		spec: `{manifests: [{name: a, content: "kind: Namespace"}], parameters: [{name: git.branch}]}`,
		want: []string{`spec.parameters[0].name: Invalid value: "git.branch"`, "should match"}},
	{name: "bootstrap parameter declared twice", kind: bootstrap,
		spec: `{manifests: [{name: a, content: "kind: Namespace"}], parameters: [{name: branch}, {name: branch}]}`,
		want: []string{"spec.parameters[1]: Duplicate value"}},
	{name: "pool passes a parameter whose name has a separator", kind: pool,
		spec: `bootstraps: [{name: flux, parameters: {"branch)": main}}]`,
		want: []string{"spec.bootstraps[0].parameters", "parameter names are letters, digits and underscores"}},
}

var validCases = []validCase{
	{name: "pool member limits", kind: pool, spec: `cluster: {limits: {memory: 3Gi, processes: 2048, podProcesses: 512, disk: 8Gi}, networkVolumes: Allowed}`,
		want: map[string]string{"spec.cluster.limits.memory": "3Gi", "spec.cluster.limits.processes": "2048", "spec.cluster.networkVolumes": "Allowed"}},
	{name: "pool member memory in bytes", kind: pool, spec: `cluster: {limits: {memory: 1073741824}}`,
		want: map[string]string{"spec.cluster.limits.memory": "1073741824"}},
	// nodes unset takes the operator's default; an explicit 0 (API-only
	// members) is kept as written, not dropped as an empty value.
	{name: "pool preloadImages with nodes unset", kind: pool, spec: `backend: {type: local, local: {preloadImages: [a.tar]}}`,
		want: map[string]string{"spec.backend.local.preloadImages": "[a.tar]"}},
	{name: "pool local nodes 0", kind: pool, spec: `backend: {type: local, local: {nodes: 0}}`,
		want: map[string]string{"spec.backend.local.nodes": "0"}},
	{name: "pool kubernetes nodes 0", kind: pool, spec: `backend: {type: kubernetes, kubernetes: {nodes: 0}}`,
		want: map[string]string{"spec.backend.kubernetes.nodes": "0"}},
	{name: "pool scheduling with nodes 0", kind: pool, spec: `backend: {type: local, local: {scheduling: true, nodes: 0}}`,
		want: map[string]string{"spec.backend.local.nodes": "0"}},
	{name: "pool with registry mirrors of one registry and of every registry", kind: pool, spec: `cluster:
  registryMirrors:
  - {registry: docker.io, endpoints: ["https://mirror.internal:5000", "http://10.1.2.3:5000/cache"]}
  - {registry: "registry.example:5443", endpoints: ["https://r.example"]}
  - {registry: "*", endpoints: ["https://all.example"]}`},
	{name: "pool with gates of one type told apart by name, and each parameterised type", kind: pool, spec: `readinessGates:
- {type: NodesReady}
- {type: CRDExists, name: WidgetsAPI, crd: {name: widgets.example.com}}
- {type: CRDExists, name: GadgetsAPI, crd: {name: gadgets.example.com}}
- {type: DeploymentReady, deployment: {namespace: ingress, name: controller}}
- {type: URLHealthy, name: AppHealthy, url: "https://app.example.com:8443/healthz"}
- {type: ExternalSignal}`},
	{name: "pool heartbeatTimeout kept", kind: pool, spec: `heartbeatTimeout: 2m`,
		want: map[string]string{"spec.heartbeatTimeout": "2m"}},
	{name: "lease heartbeatTimeout at its bounds", kind: lease, spec: `{pool: ci-small, heartbeatTimeout: 24h}`,
		want: map[string]string{"spec.heartbeatTimeout": "24h"}},
	{name: "pool idleTimeout, Proxy by its backend's default", kind: pool, spec: `idleTimeout: 30m`,
		want: map[string]string{"spec.idleTimeout": "30m"}},
	{name: "pool idleTimeout, local backend with access mode Proxy", kind: pool, spec: `{idleTimeout: 30m, backend: {type: local}, access: {mode: Proxy}}`,
		want: map[string]string{"spec.idleTimeout": "30m"}},
	{name: "minimal pool gets defaults", kind: pool, spec: `{}`,
		want: map[string]string{"spec.size": "3", "spec.ttl": "1h", "spec.backend.type": "kubernetes", "spec.creatingTimeout": "10m"}},
	{name: "pool cluster gets one server", kind: pool, spec: `cluster: {version: "v1.31.3+k3s1"}`,
		want: map[string]string{"spec.cluster.servers": "1"}},
	{name: "pool empty healthCheck gets defaults", kind: pool, spec: `healthCheck: {}`,
		want: map[string]string{"spec.healthCheck.intervalSeconds": "30", "spec.healthCheck.failureThreshold": "3"}},
	{name: "pool of size zero", kind: pool, spec: `size: 0`,
		want: map[string]string{"spec.size": "0"}},
	{name: "pool of the maximum size", kind: pool, spec: `size: 500`,
		want: map[string]string{"spec.size": "500"}},
	{name: "pool ttl compound", kind: pool, spec: `ttl: 1h30m`,
		want: map[string]string{"spec.ttl": "1h30m"}},
	{name: "pool ttl fractional", kind: pool, spec: `ttl: 1.5h`,
		want: map[string]string{"spec.ttl": "1.5h"}},
	{name: "pool scaling with minReady equal to maxClusters", kind: pool, spec: `scaling: {minReady: 3, maxClusters: 3}`,
		want: map[string]string{"spec.scaling.maxClusters": "3"}},
	{name: "pool scaling with minReady zero and no maxClusters", kind: pool, spec: `scaling: {minReady: 0}`,
		want: map[string]string{"spec.scaling.minReady": "0"}},
	{name: "pool local backend without settings", kind: pool, spec: `backend: {type: local}`,
		want: map[string]string{"spec.backend.type": "local"}},
	{name: "pool local backend with scheduling", kind: pool, spec: `backend: {type: local, local: {scheduling: true}}`,
		want: map[string]string{"spec.backend.local.scheduling": "true"}},
	{name: "policy pool globs", kind: policy, spec: policyAuth + `rules: [{pools: ["*", "ci-*", "team.a-*", "ci*", "exact-name"]}]`,
		want: map[string]string{"spec.rules": `[map[pools:[* ci-* team.a-* ci* exact-name]]]`}},
	{name: "policy http issuer with a port and path", kind: policy, spec: `auth: {oidc: {issuer: "http://dex.kobe-system.svc:5556/dex", audience: [kobe]}}` + policyRules,
		want: map[string]string{"spec.auth.oidc.issuer": "http://dex.kobe-system.svc:5556/dex"}},
	{name: "policy rule matching any token on purpose", kind: policy, spec: policyAuth + `rules: [{pools: ["*"], matchAny: true}]`,
		want: map[string]string{"spec.rules": `[map[matchAny:true pools:[*]]]`}},
	{name: "policy maxExtensions zero", kind: policy, spec: policyAuth + `rules: [{pools: ["*"], maxExtensions: 0}]`,
		want: map[string]string{"spec.rules": `[map[maxExtensions:0 pools:[*]]]`}},
	{name: "minimal lease gets Standard cleanup", kind: lease, spec: `{pool: ci-small}`,
		want: map[string]string{"spec.cleanupMode": "Standard"}},
	{name: "lease update restating cleanupMode", kind: lease,
		spec: `{pool: ci-small, cleanupMode: VerifiedDestroy, maxExtensions: 1}`, update: `{cleanupMode: VerifiedDestroy, maxExtensions: 1}`,
		want: map[string]string{"spec.cleanupMode": "VerifiedDestroy", "spec.maxExtensions": "1"}},
	{name: "instance leaseRef set by the bind", kind: instance,
		spec: "poolRef: {name: ci-small}\nbackend: {type: k3s}", update: `leaseRef: {name: lease-a, uid: 6f1c3c5e-0000-4000-8000-000000000001}`,
		want: map[string]string{"spec.leaseRef.name": "lease-a"}},
	{name: "instance update keeping leaseRef", kind: instance,
		spec: instanceSpec, update: `leaseRef: {name: lease-a}`,
		want: map[string]string{"spec.leaseRef.name": "lease-a", "spec.poolRef.name": "ci-small"}},
	{name: "bootstrap job gets a timeout", kind: bootstrap, spec: `{job: {image: busybox}}`,
		want: map[string]string{"spec.job.timeout": "10m"}},
	{name: "pool passes parameters to a bundle", kind: pool, spec: `bootstraps: [{name: flux, parameters: {branch: main, REPO_2: shop}}]`,
		want: map[string]string{"spec.bootstraps": "[map[name:flux parameters:map[REPO_2:shop branch:main]]]"}},
	{name: "bootstrap single manifest", kind: bootstrap, spec: `{manifests: [{name: a, content: "kind: Namespace"}]}`,
		want: map[string]string{"spec.manifests": "[map[content:kind: Namespace name:a]]"}},
}

func testInvalidObjectsRejected(t *testing.T, env *testenv.Env) {
	ns := newNamespace(t, env, "invalid")
	for i, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := object(t, tc.kind, ns, fmt.Sprintf("invalid-%02d", i), tc.spec)
			err := env.Client.Create(t.Context(), obj)
			if tc.update != "" {
				if err != nil {
					t.Fatalf("creating the object to update: %v", err)
				}
				err = env.Client.Patch(t.Context(), obj, specPatch(t, tc.update))
			}
			if err == nil {
				t.Fatalf("accepted, want rejected with %q", tc.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error is not Invalid (422): %v", err)
			}
			t.Logf("rejected: %v", err)
			// A CEL rule that fails to evaluate (a malformed duration fed to
			// duration()) adds a message about the rule, not about the value.
			if strings.Contains(err.Error(), "evaluating rule") {
				t.Errorf("a validation rule failed to evaluate instead of saying what is wrong:\n%v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func testValidEdgeCasesAccepted(t *testing.T, env *testenv.Env) {
	ns := newNamespace(t, env, "valid")
	for i, tc := range validCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := object(t, tc.kind, ns, fmt.Sprintf("valid-%02d", i), tc.spec)
			if err := env.Client.Create(t.Context(), obj); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if tc.update != "" {
				if err := env.Client.Patch(t.Context(), obj, specPatch(t, tc.update)); err != nil {
					t.Fatalf("update rejected: %v", err)
				}
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: obj.GetName()}, got); err != nil {
				t.Fatal(err)
			}
			for path, want := range tc.want {
				v, found, err := unstructured.NestedFieldNoCopy(got.Object, strings.Split(path, ".")...)
				if err != nil || !found {
					t.Errorf("%s: not set (%v) in %v", path, err, got.Object["spec"])
					continue
				}
				if s := fmt.Sprint(v); s != want {
					t.Errorf("%s = %s, want %s", path, s, want)
				}
			}
		})
	}
}

// specPatch turns a YAML fragment of a spec into a JSON merge patch.
func specPatch(t *testing.T, spec string) client.Patch {
	t.Helper()
	var s any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("test bug: update is not YAML: %v", err)
	}
	b, err := json.Marshal(map[string]any{"spec": s})
	if err != nil {
		t.Fatal(err)
	}
	return client.RawPatch(types.MergePatchType, b)
}
