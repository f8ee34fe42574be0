//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// credentialCut bounds how long a lease holder's credentials may still work
// after the lease ended (DELETE's answer, or its expiry).
const credentialCut = 2 * time.Second

// holderCredentials are what a lease holder keeps after the lease ends: the
// lease kubeconfig's client certificate, and a ServiceAccount token minted
// inside the member with it (`kubectl create token`).
type holderCredentials map[string]*kubernetes.Clientset

// keepCredentials mints the token and checks that both credentials work.
func keepCredentials(t *testing.T, kubeconfig string) holderCredentials {
	t.Helper()
	token, err := testenv.Kubectl(t, kubeconfig, "-n", "default", "create", "token", "default", "--duration=1h")
	if err != nil {
		t.Fatalf("kubectl create token with the lease's kubeconfig: %v\n%s", err, token)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// A dead API server refuses connections at once; a short timeout only
	// keeps a stuck one from stretching the measurement.
	cfg.Timeout = time.Second
	tokenCfg := rest.AnonymousClientConfig(cfg)
	tokenCfg.BearerToken = strings.TrimSpace(token)
	creds := holderCredentials{}
	for name, c := range map[string]*rest.Config{"lease certificate": cfg, "minted token": tokenCfg} {
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		creds[name] = cs
	}
	if ok := creds.accepted(t); len(ok) != len(creds) {
		t.Fatalf("credentials accepted before the lease ended: %v, want all of them", ok)
	}
	return creds
}

// accepted names the credentials the member's API server still
// authenticates (a SelfSubjectReview, which every authenticated user may
// create, answers).
func (h holderCredentials) accepted(t *testing.T) []string {
	var ok []string
	for name, cs := range h {
		if _, err := cs.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
			ok = append(ok, name)
		}
	}
	return ok
}

// waitCut waits until no credential works and returns how long after since
// that was first seen; it fails the test beyond credentialCut.
func (h holderCredentials) waitCut(t *testing.T, since time.Time, after string) time.Duration {
	t.Helper()
	err := testenv.Poll(t.Context(), 30*time.Second, func() error {
		if ok := h.accepted(t); len(ok) > 0 {
			return fmt.Errorf("still accepted: %s", strings.Join(ok, ", "))
		}
		return nil
	})
	took := time.Since(since)
	if err != nil {
		t.Fatalf("the lease's credentials still work %s after %s: %v\noperator:\n%s", took.Round(time.Millisecond), after, err, s.tail())
	}
	t.Logf("the lease certificate and the token minted inside stopped working %s after %s", took.Round(time.Millisecond), after)
	if took > credentialCut {
		t.Errorf("credentials worked until %s after %s, want at most %s", took.Round(time.Millisecond), after, credentialCut)
	}
	if ok := h.accepted(t); len(ok) > 0 {
		t.Errorf("%s accepted again after the cut", strings.Join(ok, ", "))
	}
	return took
}

// waitCutOperatorKilled is waitCut with the operator killed (SIGKILL) at
// once: the cut must not wait for the operator's teardown, which a leader
// that dies right after answering never runs. The operator is started
// again after the measure, for the tests that follow.
func (h holderCredentials) waitCutOperatorKilled(t *testing.T, since time.Time, after string) time.Duration {
	t.Helper()
	s.killOperator()
	defer func() {
		if err := s.startOperator(); err != nil {
			t.Errorf("starting the operator again: %v", err)
		}
	}()
	return h.waitCut(t, since, after+", the operator killed right after it")
}
