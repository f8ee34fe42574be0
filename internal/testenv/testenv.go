package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	kobescheme "github.com/kunobi-ninja/kobe/internal/scheme"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// KubernetesVersion is the control-plane version the tests run against.
const KubernetesVersion = version.Kubernetes

// Env is a running test control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme
	// Kubeconfig is the path of an admin kubeconfig for kubectl.
	Kubeconfig string
	// EtcdURL is etcd's client URL, for tests that must write what no API
	// request may.
	EtcdURL string

	// restartAPIServer is set when Options.RestartableAPIServer asked for it.
	restartAPIServer func() error
}

// RestartAPIServer stops kube-apiserver (SIGTERM) and starts it again on the
// same port with the same certificates and etcd, waiting until it answers:
// every client and kubeconfig keeps working across it. Only for a control
// plane started with Options.RestartableAPIServer.
func (e *Env) RestartAPIServer() error {
	if e.restartAPIServer == nil {
		return errors.New("testenv: the API server was not started restartable (Options.RestartableAPIServer)")
	}
	return e.restartAPIServer()
}

// RepoRoot returns the repository root: the nearest directory above the
// working directory (a test's package directory) whose go.mod declares the
// kobe module. Not from this file's compiled path, which -trimpath removes.
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("testenv: no working directory: %v", err))
	}
	for d := dir; ; d = filepath.Dir(d) {
		if mod, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && slices.Contains(strings.Split(string(mod), "\n"), "module "+kobeModule) {
			return d
		}
		if filepath.Dir(d) == d {
			panic(fmt.Sprintf("testenv: no go.mod of %s above %s", kobeModule, dir))
		}
	}
}

const kobeModule = "github.com/kunobi-ninja/kobe"

// BinDir is where the control-plane binaries are; CONTROLPLANE_DIR overrides it.
func BinDir() string {
	if d := os.Getenv("CONTROLPLANE_DIR"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin", "controlplane", KubernetesVersion)
}

// Scheme returns a scheme with the built-in kinds and kobe's kinds.
func Scheme() *k8sruntime.Scheme { return kobescheme.New() }

// Start brings up etcd and kube-apiserver with the CRDs from
// config/crd/bases, and stops them when the test ends.
func Start(t testing.TB) *Env {
	t.Helper()
	env, stop, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Logf("stopping test control plane: %v", err)
		}
	})
	return env
}

// New brings up a control plane outside a test (TestMain); the caller must
// call stop. dir receives the admin kubeconfig.
func New(dir string) (env *Env, stop func() error, err error) {
	return NewWith(dir, Options{})
}

// controlPlaneStartTimeout bounds how long etcd and kube-apiserver may take
// to answer after they start.
const controlPlaneStartTimeout = 90 * time.Second

// Options change the control plane NewWith brings up.
type Options struct {
	// APIServerFlags are kube-apiserver flags (name without dashes: value)
	// set besides envtest's, such as admission-control-config-file.
	APIServerFlags map[string]string
	// RestartableAPIServer keeps kube-apiserver's certificates in
	// <dir>/kube-apiserver, so that Env.RestartAPIServer can restart it:
	// envtest deletes a certificate directory it made itself when the
	// server stops, and a restart would then serve a new CA and trust a new
	// client CA, which no existing kubeconfig would accept.
	RestartableAPIServer bool
}

// NewWith is New with Options.
func NewWith(dir string, o Options) (env *Env, stop func() error, err error) {
	bin := BinDir()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, nil, fmt.Errorf("control-plane binary %s missing in %s: run `make controlplane` first (%w)", name, bin, err)
		}
	}
	scheme := Scheme()
	te := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
		// envtest's 20 s is too short when the heavy layer's packages boot
		// members side by side on two cores: kube-apiserver missed it five
		// times in a row there. A stuck start still fails within minutes.
		ControlPlaneStartTimeout: controlPlaneStartTimeout,
	}
	for name, value := range o.APIServerFlags {
		te.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
	if o.RestartableAPIServer {
		certs := filepath.Join(dir, "kube-apiserver")
		if err := os.MkdirAll(certs, 0o700); err != nil {
			return nil, nil, err
		}
		te.ControlPlane.GetAPIServer().CertDir = certs
	}
	if err := auditWrites(dir, te); err != nil {
		return nil, nil, err
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting test control plane: %w", err)
	}
	fail := func(err error) (*Env, func() error, error) {
		_ = te.Stop()
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fail(fmt.Errorf("creating client: %w", err))
	}
	user, err := te.ControlPlane.AddUser(envtest.User{Name: "kobe-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail(fmt.Errorf("adding admin user: %w", err))
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fail(fmt.Errorf("rendering kubeconfig: %w", err))
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return fail(fmt.Errorf("writing kubeconfig: %w", err))
	}
	env = &Env{Config: cfg, Client: c, Scheme: scheme, Kubeconfig: path, EtcdURL: te.ControlPlane.Etcd.URL.String()}
	if o.RestartableAPIServer {
		api := te.ControlPlane.GetAPIServer()
		env.restartAPIServer = func() error {
			// Stop sends SIGTERM and, when the server has not exited
			// within envtest's stop timeout (20 s; a busy server drains
			// its requests for longer), SIGKILL without waiting: wait
			// for the port instead.
			_ = api.Stop()
			addr := net.JoinHostPort(api.Address, api.Port)
			if err := waitPortFree(addr, 30*time.Second); err != nil {
				return err
			}
			if err := api.Start(); err != nil {
				return fmt.Errorf("starting kube-apiserver again: %w", err)
			}
			return nil
		}
	}
	return env, te.Stop, nil
}

// waitPortFree waits until nothing listens on addr.
func waitPortFree(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver still listens on %s %s after it was stopped", addr, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// GVK is a small helper for tests that build unstructured objects.
func GVK(kind string) schema.GroupVersionKind { return kobev1.GroupVersion.WithKind(kind) }

// AuditLogEnv names an environment variable: when set to a file path, the
// test control plane logs every write request (verb, resource, user, object;
// metadata only) there as JSON lines. It explains a write count that
// changed (TestWritesPerCycle, make bench): who wrote what, in which order.
const AuditLogEnv = "KOBE_TEST_AUDIT_LOG"

// auditPolicy logs writes at Metadata level and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// auditWrites turns on the write log AuditLogEnv asks for.
func auditWrites(dir string, te *envtest.Environment) error {
	path := os.Getenv(AuditLogEnv)
	if path == "" {
		return nil
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return fmt.Errorf("writing the audit policy: %w", err)
	}
	args := te.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", policy)
	args.Set("audit-log-path", path)
	args.Set("audit-log-mode", "blocking")
	return nil
}
