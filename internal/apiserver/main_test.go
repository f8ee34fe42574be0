//go:build integration

package apiserver_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/replay"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
)

// The tests of this package drive the real HTTP API, served on its own
// listener by a controller-runtime manager, against a real kube-apiserver.
// The Authenticator reads AccessPolicies and token Secrets from the
// manager's cache, as in the operator. No controller runs: pools hold
// pre-made Ready members with access Secrets (as in test/bench), so the
// API's fast path binds leases without real member clusters, and nothing
// ends or deletes a lease behind a test's back.
//
// The tests share one control plane and run one after another (no
// t.Parallel): several of them prove that a refused request created no
// ClusterLease by listing every lease of the namespace before and after.

const (
	ns          = "default"
	testVersion = "test-version"
	// oidcKID is the key id under which the trusted issuer publishes oidcKey.
	oidcKID = "rsa-1"
	// oidcAudience is the audience policy github-ci accepts.
	oidcAudience = "kobe"
	// saAudience is the audience policy in-cluster reviews tokens for.
	saAudience = "kobe"
	// sshAudience is the server's SSH audience.
	sshAudience = "kobe:ns:default:apiserver-test"
	// aliceComment is the comment of the ssh-keygen key policy developers
	// authorises; SSH identities default to it.
	aliceComment = "alice@laptop"
)

// pools are the pools every test leases from, each with enough pre-made
// Ready members for all tests of the package (no member is ever recycled).
var pools = []struct {
	name    string
	ttl     time.Duration
	members int
	// heartbeat is the pool's default heartbeat timeout; 0 for none.
	heartbeat time.Duration
}{
	{"ci-small", 30 * time.Minute, 24, 0},
	{"ci-large", 2 * time.Hour, 8, 0},
	{"dev", time.Hour, 6, 0},
	{heartbeatPool, time.Hour, 6, 30 * time.Second},
	// kobe load's tests (images_test.go); members of noImagesPool have no
	// nodes.
	{imagesPool, time.Hour, 4, 0},
	{noImagesPool, time.Hour, 2, 0},
}

// fx is the package fixture, built once by TestMain.
var fx *fixture

type fixture struct {
	env  *testenv.Env
	kube kubernetes.Interface
	// mgr serves the API's cache, for servers a test starts beside the
	// package's (startServer).
	mgr ctrl.Manager
	// url is the API server's base URL ("http://127.0.0.1:port").
	url  string
	http *http.Client
	// issuer is trusted by policy github-ci and publishes oidcKey as
	// oidcKID; foreign is a real issuer that no policy trusts.
	issuer, foreign *oidcissuer.Issuer
	oidcKey         *rsa.PrivateKey
	// sshKeyPath is alice's private key made by ssh-keygen; sshAuthorizedKey
	// its authorized_keys line, the only key of policy developers.
	sshKeyPath, sshAuthorizedKey string
	// access is every member's access material (readyMember).
	access *backend.Access
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	log.SetLogger(logr.Discard())
	flag.Parse()
	if fuzzing() {
		// Fuzz targets here are pure functions; each fuzz worker process
		// runs TestMain too, and must not start a control plane of its own
		// (make fuzz passes -run='^$', so no test needs the fixture).
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "kobe-apiserver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	f, stop, err := setup(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "setting up the API test fixture: %v\n", err)
		return 1
	}
	defer stop()
	fx = f
	return m.Run()
}

// fuzzing reports whether this test binary runs a fuzz target (-test.fuzz)
// or is one of its workers.
func fuzzing() bool {
	f, w := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")
	return (f != nil && f.Value.String() != "") || (w != nil && w.Value.String() == "true")
}

// setup starts the control plane, the OIDC issuers, a manager with the API
// server, and creates pools, members, ServiceAccounts and the policies.
func setup(dir string) (_ *fixture, _ func(), err error) {
	var cleanups []func()
	stop := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()

	env, stopEnv, err := testenv.New(dir)
	if err != nil {
		return nil, nil, err
	}
	cleanups = append(cleanups, func() {
		if err := stopEnv(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping test control plane: %v\n", err)
		}
	})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, nil, err
	}
	f := &fixture{env: env, kube: kube, http: &http.Client{Timeout: 30 * time.Second}}

	f.issuer, f.foreign = oidcissuer.Start(), oidcissuer.Start()
	cleanups = append(cleanups, f.issuer.Close, f.foreign.Close)
	if f.oidcKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		return nil, nil, err
	}
	f.issuer.Publish(f.oidcKey, oidcKID, jose.RS256)

	if f.sshKeyPath, f.sshAuthorizedKey, err = sshKeygen(dir, aliceComment); err != nil {
		return nil, nil, err
	}

	ctx, cancel := context.WithCancel(context.Background())
	cleanups = append(cleanups, cancel)
	mgr, err := ctrl.NewManager(env.Config, env.ManagerOptions(ns))
	if err != nil {
		return nil, nil, err
	}
	if err := index.Setup(ctx, mgr); err != nil {
		return nil, nil, err
	}
	f.mgr = mgr
	srv, err := newServer(mgr, apiserver.Options{
		Addr:          "127.0.0.1:0",
		MaxImageBytes: maxImageBytes,
		ImageDir:      dir,
		Auth: auth.NewAuthenticator(auth.Options{
			Reader:        mgr.GetCache(),
			Namespace:     ns,
			TokenReviewer: kube.AuthenticationV1().TokenReviews(),
			SSHAudience:   sshAudience,
			SSHNonces:     &replay.Store{Client: mgr.GetClient(), Namespace: ns},
		}),
		Version: testVersion,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := mgr.Add(srv); err != nil {
		return nil, nil, err
	}
	stopMgr, err := testenv.RunManager(mgr)
	if err != nil {
		return nil, nil, err
	}
	cleanups = append(cleanups, func() {
		if err := stopMgr(); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	})
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return srv.Addr() != "", nil
	}); err != nil {
		return nil, nil, fmt.Errorf("API server did not listen: %w", err)
	}
	f.url = "http://" + srv.Addr()

	if err := f.createWorld(ctx); err != nil {
		return nil, nil, err
	}
	if err := f.waitForCache(ctx, mgr.GetCache()); err != nil {
		return nil, nil, err
	}
	return f, stop, nil
}

// newServer builds an API server of ns as the operator does: its lease
// service and connect proxy read through mgr, and leases reach the connect
// proxy as opts' TLS files and ConnectURL say. Nothing is logged.
func newServer(mgr ctrl.Manager, opts apiserver.Options) (*apiserver.Server, error) {
	clk := clock.RealClock{}
	opts.Namespace, opts.Log = ns, logr.Discard()
	opts.Leases = leaseservice.New(leaseservice.Options{
		Namespace: ns, Client: mgr.GetClient(), Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Binder: &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk},
		Clock:  clk, Log: opts.Log, Access: accesstest.Sealer(),
		ProxyEndpoint: apiserver.ProxyEndpoint(apiserver.ProxyEndpointOptions{
			TLSCertFile: opts.TLSCertFile, TLSKeyFile: opts.TLSKeyFile, ConnectURL: opts.ConnectURL, Log: opts.Log,
		}),
		LoadImages: loads.load,
	})
	opts.Connect = connect.New(connect.Options{Namespace: ns, Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clk, Log: opts.Log,
		Access: accesstest.Sealer()})
	return apiserver.New(opts)
}

// createWorld creates the pools with their Ready members, the
// ServiceAccounts and the AccessPolicies the tests use.
func (f *fixture) createWorld(ctx context.Context) error {
	c := f.env.Client
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ci-runner", Namespace: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns}},
		policy("github-ci", "{repository}:{ref}",
			kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: f.issuer.URL, Audience: []string{oidcAudience}}},
			kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: "repository_owner", Value: "my-org"}, Pools: []string{"ci-*"}}),
		policy("developers", "",
			kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{f.sshAuthorizedKey}}},
			kobev1.AccessRule{Pools: []string{"dev"}}),
		policy("in-cluster", "",
			kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{saAudience}}},
			kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: "sub", Value: "system:serviceaccount:" + ns + ":ci-runner"}, Pools: []string{"ci-*"}}),
	}
	for _, tp := range []struct {
		name string
		rule kobev1.AccessRule
	}{
		{"capped", kobev1.AccessRule{Pools: []string{"ci-*"}, MaxTTL: &metav1.Duration{Duration: time.Hour}}},
		{"burst", kobev1.AccessRule{Pools: []string{"ci-*"}, MaxConcurrentLeases: ptr.To[int32](3)}},
		{"extender", kobev1.AccessRule{Pools: []string{"ci-*"}, MaxExtensions: ptr.To[int32](1)}},
		{"ci-only", kobev1.AccessRule{Pools: []string{"ci-*"}}},
		{"owner-a", kobev1.AccessRule{Pools: []string{"ci-*"}}},
		{"owner-b", kobev1.AccessRule{Pools: []string{"ci-*"}}},
		{"everything", kobev1.AccessRule{Pools: []string{"*"}}},
		{"aliaser", kobev1.AccessRule{Pools: []string{"ci-*"}}},
		{"queuer", kobev1.AccessRule{Pools: []string{queuePool}}},
		{"unavail", kobev1.AccessRule{Pools: []string{"x-*"}}},
		{"beater", kobev1.AccessRule{Pools: []string{"ci-*", heartbeatPool}, MaxHeartbeatTimeout: &metav1.Duration{Duration: time.Minute}}},
	} {
		objs = append(objs, tokenPolicy(tp.name, tp.rule)...)
	}
	for _, p := range pools {
		pool := &kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns},
			Spec: kobev1.ClusterPoolSpec{
				Size:    ptr.To[int32](0),
				TTL:     &metav1.Duration{Duration: p.ttl},
				Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal},
			},
		}
		if p.heartbeat > 0 {
			pool.Spec.HeartbeatTimeout = &metav1.Duration{Duration: p.heartbeat}
		}
		objs = append(objs, pool)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	if err := createOddPools(ctx, c); err != nil {
		return err
	}

	// Lease client certificates expire with their lease and must lie within
	// the member's client CA: give the CAs room for every TTL used here.
	const caValidity = 30 * 24 * time.Hour
	serverCA, err := pki.NewCA("apiserver-test-server-ca", caValidity)
	if err != nil {
		return err
	}
	clientCA, err := pki.NewCA("apiserver-test-client-ca", caValidity)
	if err != nil {
		return err
	}
	f.access = &backend.Access{
		Endpoint: "https://127.0.0.1:6443", CACert: serverCA.CertPEM,
		ClientCACert: clientCA.CertPEM, ClientCAKey: clientCA.KeyPEM, AdminKubeconfig: []byte("unused"),
	}
	for _, p := range pools {
		for i := range p.members {
			if _, err := f.readyMember(ctx, p.name, fmt.Sprintf("%s-%02d", p.name, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// readyMember creates member name of pool, Ready with the fixture's access
// material; nothing reconciles it.
func (f *fixture) readyMember(ctx context.Context, pool, name string) (*kobev1.ClusterInstance, error) {
	c := f.env.Client
	inst := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{kobev1.LabelPool: pool}},
		Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: pool}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
	}
	if err := c.Create(ctx, inst); err != nil {
		return nil, fmt.Errorf("creating member %s: %w", inst.Name, err)
	}
	if err := accesstest.Sealer().Publish(inst, f.access); err != nil {
		return nil, err
	}
	inst.Status.Phase = kobev1.InstanceReady
	if err := c.Status().Update(ctx, inst); err != nil {
		return nil, fmt.Errorf("making member %s Ready: %w", inst.Name, err)
	}
	return inst, nil
}

// Pools without members, for the queue and for each reason a pool cannot
// serve. Nothing reconciles them: their status is written here.
const (
	// queuePool has no member: every lease of it stays Pending.
	queuePool = "queue"
	// heartbeatPool gives its leases a 30s heartbeat timeout by default.
	heartbeatPool = "hb"
	// deletingPool is being deleted (a test finalizer holds it).
	deletingPool = "x-deleting"
	// backendlessPool reports its backend unavailable.
	backendlessPool = "x-backendless"
	// quarantinedPool (size 1) has its one member Quarantined.
	quarantinedPool = "x-quarantined"
	testFinalizer   = "kobe.kunobi.ninja/test-hold"
)

// createOddPools creates queuePool and the x- pools in their states.
func createOddPools(ctx context.Context, c client.Client) error {
	mk := func(name string, size int32, finalizers ...string) *kobev1.ClusterPool {
		return &kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: finalizers},
			Spec:       kobev1.ClusterPoolSpec{Size: ptr.To(size), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
		}
	}
	for _, p := range []*kobev1.ClusterPool{mk(queuePool, 0), mk(deletingPool, 0, testFinalizer), mk(backendlessPool, 1), mk(quarantinedPool, 1)} {
		if err := c.Create(ctx, p); err != nil {
			return fmt.Errorf("creating pool %s: %w", p.Name, err)
		}
		switch p.Name {
		case deletingPool:
			if err := c.Delete(ctx, p); err != nil {
				return fmt.Errorf("deleting pool %s: %w", p.Name, err)
			}
		case backendlessPool:
			p.Status.Conditions = []metav1.Condition{{
				Type: kobev1.ConditionCapacity, Status: metav1.ConditionFalse, Reason: kobev1.ReasonBackendUnavailable,
				Message: `backend "local" is not wired in this operator`, ObservedGeneration: p.Generation, LastTransitionTime: metav1.Now(),
			}}
		case quarantinedPool:
			p.Status.Quarantined = 1
		}
		if len(p.Status.Conditions) > 0 || p.Status.Quarantined > 0 {
			if err := c.Status().Update(ctx, p); err != nil {
				return fmt.Errorf("writing status of pool %s: %w", p.Name, err)
			}
		}
	}
	return nil
}

// waitForCache waits until the manager's cache holds every policy and sees
// every member Ready, so the first request of a test does not race the
// informers.
func (f *fixture) waitForCache(ctx context.Context, c cache.Cache) error {
	var want kobev1.AccessPolicyList
	if err := f.env.Client.List(ctx, &want, client.InNamespace(ns)); err != nil {
		return err
	}
	members := 0
	for _, p := range pools {
		members += p.members
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var pols kobev1.AccessPolicyList
		if err := c.List(ctx, &pols, client.InNamespace(ns)); err != nil {
			return false, err
		}
		var insts kobev1.ClusterInstanceList
		if err := c.List(ctx, &insts, client.InNamespace(ns)); err != nil {
			return false, err
		}
		ready := 0
		for i := range insts.Items {
			if lease.Bindable(&insts.Items[i]) {
				ready++
			}
		}
		var pls kobev1.ClusterPoolList
		if err := c.List(ctx, &pls, client.InNamespace(ns)); err != nil {
			return false, err
		}
		odd := 0
		for _, p := range pls.Items {
			if !p.DeletionTimestamp.IsZero() || len(p.Status.Conditions) > 0 || p.Status.Quarantined > 0 {
				odd++
			}
		}
		return len(pols.Items) == len(want.Items) && ready == members && odd == 3, nil
	})
}

// policy renders an AccessPolicy of the test namespace.
func policy(name, identity string, a kobev1.AuthSpec, rules ...kobev1.AccessRule) *kobev1.AccessPolicy {
	return &kobev1.AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       kobev1.AccessPolicySpec{Auth: a, Identity: identity, Rules: rules},
	}
}

// tokenPolicy renders a token policy and the Secret holding its token
// (tokenOf(name)). A token policy's identity is its name.
func tokenPolicy(name string, rules ...kobev1.AccessRule) []client.Object {
	return []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-token", Namespace: ns},
			StringData: map[string]string{"token": string(tokenOf(name))},
		},
		policy(name, "", kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: name + "-token"}}}, rules...),
	}
}

// sshKeygen makes an Ed25519 key with ssh-keygen (no passphrase) in dir and
// returns its private key path and authorized_keys line. The tests load it
// into a real ssh-agent (sshsigtest), which needs a testing.TB that TestMain
// does not have; hence this one ssh-keygen call here.
func sshKeygen(dir, comment string) (path, authorizedKey string, err error) {
	path = filepath.Join(dir, "alice-ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("ssh-keygen (apt-get install openssh-client): %w: %s", err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		return "", "", err
	}
	return path, strings.TrimSpace(string(pub)), nil
}
