// Package kobesuite runs kobe as its users do, for end-to-end test packages:
// a test control plane as the host, the real kobe-operator binary serving
// its API over TLS (a CA of the suite's own), a token AccessPolicy, and the
// real kobe CLI. A package starts one Suite in TestMain and stops it after
// m.Run.
package kobesuite

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// Namespace is where the suite's policy, pools and members live.
const Namespace = "default"

// Suite is a running operator with its host and credentials.
type Suite struct {
	Env *testenv.Env
	// Work is the suite's directory; Bin holds the binaries it built.
	Work, Bin string
	// DataRoot is the local backend's data directory.
	DataRoot string
	APIURL   string
	// Token authenticates as Identity through the suite's AccessPolicy.
	Token, Identity string
	CAFile          string
	Roots           *x509.CertPool

	stopEnv  func() error
	operator *operatorproc.Process
}

// New builds kobe-operator, kobe and every extra command (./cmd/<name>)
// into <work>/bin, starts the test control plane and writes the API's CA
// and serving certificate (127.0.0.1, localhost).
func New(work string, extraCommands ...string) (*Suite, error) {
	s := &Suite{Work: work, Bin: filepath.Join(work, "bin"), DataRoot: filepath.Join(work, "members")}
	if err := testenv.BuildCommands(s.Bin, append([]string{"kobe-operator", "kobe"}, extraCommands...)...); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("kobe-api-test-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.IssueServing("kobe-api", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 12*time.Hour)
	if err != nil {
		return nil, err
	}
	s.CAFile = filepath.Join(work, "ca.crt")
	for name, b := range map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	s.Roots = x509.NewCertPool()
	s.Roots.AppendCertsFromPEM(ca.CertPEM)
	env, stop, err := testenv.New(work)
	if err != nil {
		return nil, err
	}
	s.Env, s.stopEnv = env, stop
	return s, nil
}

// CreatePolicy creates a token Secret and an AccessPolicy with rule for its
// bearer, who is identity.
func (s *Suite) CreatePolicy(ctx context.Context, identity string, rule kobev1.AccessRule) error {
	s.Identity = identity
	s.Token = fmt.Sprintf("%s-%d", identity, time.Now().UnixNano())
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: identity + "-token", Namespace: Namespace}, StringData: map[string]string{"token": s.Token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: identity, Namespace: Namespace},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: identity + "-token"}}},
				Identity: identity,
				Rules:    []kobev1.AccessRule{rule},
			},
		},
	} {
		if err := s.Env.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// StartOperator starts kobe-operator (operatorproc) with the suite's TLS
// and the local backend on DataRoot, plus extra flags, and waits for its
// API's /readyz.
func (s *Suite) StartOperator(extra ...string) error {
	p, err := operatorproc.Start(operatorproc.Options{
		Binary: filepath.Join(s.Bin, "kobe-operator"), Kubeconfig: s.Env.Kubeconfig, Namespace: Namespace,
		Dir: s.Work, DataDir: s.DataRoot, Args: extra,
		TLS: &operatorproc.TLS{CertFile: filepath.Join(s.Work, "tls.crt"), KeyFile: filepath.Join(s.Work, "tls.key"), CAFile: s.CAFile},
	})
	if err != nil {
		return err
	}
	s.operator, s.APIURL = p, p.APIURL
	return p.WaitReady(context.Background(), 60*time.Second)
}

// HTTPClient trusts the API's CA.
func (s *Suite) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Roots, MinVersion: tls.VersionTLS12}}}
}

// Tail is the end of the operator's log.
func (s *Suite) Tail() string {
	if s.operator == nil {
		return ""
	}
	return s.operator.Tail(8000)
}

// Kobe runs the CLI against the suite's API with its token, trusting its
// CA, with a config file of the test's own.
func (s *Suite) Kobe(t *testing.T, within time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.Bin, "kobe"), append(args, "--ca-file", s.CAFile)...)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+s.APIURL, "KOBE_TOKEN="+s.Token, "KOBE_CONFIG="+filepath.Join(t.TempDir(), "config.yaml"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// DeleteAll deletes every lease, pool and member through the operator and
// waits (up to within) until no ClusterInstance is left.
func (s *Suite) DeleteAll(ctx context.Context, within time.Duration) error {
	c := s.Env.Client
	_ = c.DeleteAllOf(ctx, &kobev1.ClusterLease{}, client.InNamespace(Namespace))
	_ = c.DeleteAllOf(ctx, &kobev1.ClusterPool{}, client.InNamespace(Namespace))
	_ = c.DeleteAllOf(ctx, &kobev1.ClusterInstance{}, client.InNamespace(Namespace))
	return testenv.Poll(ctx, within, func() error {
		var l kobev1.ClusterInstanceList
		if err := c.List(ctx, &l, client.InNamespace(Namespace)); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d members left", len(l.Items))
		}
		return nil
	})
}

// Teardown deletes every lease, pool and member through the operator, stops
// it and the control plane, and checks that no member process is left (any
// found is killed and reported).
func (s *Suite) Teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var errs []error
	if err := s.DeleteAll(ctx, 3*time.Minute); err != nil {
		errs = append(errs, fmt.Errorf("deleting every member: %w", err))
	}
	if err := s.Stop(); err != nil {
		errs = append(errs, err)
	}
	procs, err := memberproc.Running(s.DataRoot)
	if err != nil {
		errs = append(errs, err)
	}
	var left []memberproc.Process
	for _, p := range procs {
		if !strings.Contains(p.Cmdline, "kobe-operator") {
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("member processes left after teardown: %v", left))
		memberproc.Kill(left)
	}
	return errors.Join(errs...)
}

// Stop stops the operator (SIGTERM, SIGKILL after 20 s) and the control
// plane.
func (s *Suite) Stop() error {
	var errs []error
	if s.operator != nil {
		_ = s.operator.Stop() // SIGKILL after 20 s; not counted as a failure
	}
	if s.stopEnv != nil {
		if err := s.stopEnv(); err != nil && !strings.Contains(err.Error(), "already") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
