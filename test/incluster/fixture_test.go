//go:build root

package incluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const namespace = "kobe-system"

// fixture is one host cluster with kobe's CRDs and one kobe-operator process
// on the machine serving the lease API (and the connect proxy) over TLS.
type fixture struct {
	hc     *hostcluster.Cluster
	c      client.Client
	op     *operatorproc.Process
	apiURL string // https://127.0.0.1:<port>
	caFile string // CA of the API's serving certificate
	token  string // bearer token of the test's AccessPolicy
	cli    string // the kobe CLI
	work   string
}

// inputs are the images and binaries `make test-node` builds.
func inputs(t *testing.T) (images []string, cli string) {
	t.Helper()
	root := testenv.RepoRoot()
	or := func(key, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return def
	}
	images = []string{or("HOSTCLUSTER_PAUSE_TAR", filepath.Join(root, "bin", "images", "pause.tar"))}
	dir := or("CONTROLPLANE_IMAGE_DIR", filepath.Join(root, "bin", "images"))
	// kube-scheduler and kobe-node: members with node pods.
	// testapp: the bootstrap Jobs' image.
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kobe-node", "testapp"} {
		images = append(images, filepath.Join(dir, name+".tar"))
	}
	cli = or("KOBE_CLI", filepath.Join(root, "bin", "kobe"))
	for _, f := range append([]string{cli}, images...) {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run `make test-node` (it builds the images, make image-node's too, and the CLI)", f)
		}
	}
	return images, cli
}

// start brings the fixture up; everything it starts is stopped by
// t.Cleanup, and the machine is compared with before.
func start(t *testing.T) *fixture {
	t.Helper()
	ctx := t.Context()
	images, cli := inputs(t)
	if err := hostcluster.Teardown(ctx, hostcluster.DefaultDir); err != nil {
		t.Fatalf("teardown before the test: %v", err)
	}
	before, err := hostcluster.TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(logr.Discard()) // envtest.InstallCRDs logs through it
	f := &fixture{cli: cli, work: t.TempDir()}
	began := time.Now()
	f.hc, err = hostcluster.New(ctx, hostcluster.Options{PauseImage: "kobe.local/pause:v1", Images: images})
	if err != nil {
		t.Fatalf("starting host cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := f.hc.Stop(context.Background()); err != nil {
			t.Errorf("stopping host cluster: %v", err)
		}
		after, err := hostcluster.TakeSnapshot(context.Background())
		if err != nil {
			t.Errorf("snapshot after: %v", err)
			return
		}
		if d := before.Diff(after); d != "" {
			t.Errorf("the machine changed:\n%s", d)
		}
	})
	t.Logf("host cluster up with %d images imported in %v", len(images), time.Since(began).Round(time.Millisecond))

	if _, err := envtest.InstallCRDs(f.hc.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("installing CRDs: %v", err)
	}
	if f.c, err = client.New(f.hc.Config, client.Options{Scheme: testenv.Scheme()}); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	f.startOperator(t)
	return f
}

// startOperator runs kobe-operator against the host cluster with the lease
// API on TLS (a CA and certificate made here for 127.0.0.1), so that Proxy
// members' kubeconfigs can be minted.
func (f *fixture) startOperator(t *testing.T) {
	t.Helper()
	ca, err := pki.NewCA("kobe-incluster-test-ca", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueServing("kobe-api", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.caFile = filepath.Join(f.work, "api-ca.crt")
	certFile, keyFile := filepath.Join(f.work, "api.crt"), filepath.Join(f.work, "api.key")
	for path, data := range map[string][]byte{f.caFile: ca.CertPEM, certFile: cert, keyFile: key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := operatorproc.Build(f.work)
	if err != nil {
		t.Fatal(err)
	}
	f.op, err = operatorproc.Start(operatorproc.Options{
		Binary: bin, Kubeconfig: f.hc.Kubeconfig, Namespace: namespace, Dir: f.work,
		TLS: &operatorproc.TLS{CertFile: certFile, KeyFile: keyFile, CAFile: f.caFile},
		Args: []string{
			// The host cluster has a node: BootstrapConfigs' Jobs run.
			"--bootstrap-jobs",
			// The host's bridge CNI enforces no NetworkPolicy: required, no
			// pool would hand anything out. The suite checks that the pools
			// say so (networkPolicyNotEnforced).
			"--require-network-policy-enforcement=false",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.op.Stop(); err != nil {
			t.Errorf("stopping the operator: %v", err)
		}
		if t.Failed() {
			t.Logf("operator log (tail):\n%s", f.op.Tail(8000))
		}
	})
	f.apiURL = f.op.APIURL
	if err := f.op.WaitReady(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
}

// kobe runs the CLI against the fixture's API with its token and CA.
func (f *fixture) kobe(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.cli, append(args, "--ca-file", f.caFile)...)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+f.apiURL, "KOBE_TOKEN="+f.token, "KOBE_CONFIG="+filepath.Join(f.work, "kobe-config.yaml"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// lease runs `kobe lease` and returns the lease and its kubeconfig file.
func (f *fixture) lease(t *testing.T, pool string) (wire.Lease, string) {
	t.Helper()
	kc := filepath.Join(f.work, fmt.Sprintf("lease-%d.kubeconfig", time.Now().UnixNano()))
	out, errOut, err := f.kobe(t, "lease", pool, "--ttl", "20m", "--kubeconfig", kc, "-o", "json")
	if err != nil {
		t.Fatalf("kobe lease: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	var l wire.Lease
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("kobe lease -o json printed %q: %v", out, err)
	}
	return l, kc
}

// hostObjects lists the host objects in namespace that match selector,
// as kind/name strings.
func (f *fixture) hostObjects(ctx context.Context, selector string) ([]string, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, l := range hostObjectLists() {
		if err := f.c.List(ctx, l.list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, fmt.Errorf("listing %s: %w", l.kind, err)
		}
		for _, name := range l.names() {
			found = append(found, l.kind+"/"+name)
		}
	}
	return found, nil
}

var errStillThere = errors.New("still there")
