//go:build heavy

package local

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// testFence runs on a Ready member m (TestMemberLifecycle's, so that no
// other member is started): a client certificate of its client CA and a
// ServiceAccount token minted inside it both work; once Fence returns,
// neither is accepted, the member is Failed, and neither a second Fence nor
// Create brings its API server back.
func testFence(t *testing.T, b *Backend, m backend.Member, acc *backend.Access) {
	admin, err := clientcmd.RESTConfigFromKubeConfig(acc.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	adminCS := kubernetes.NewForConfigOrDie(admin)
	ctx := t.Context()
	if _, err := adminCS.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "holder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := adminCS.CoreV1().ServiceAccounts("default").CreateToken(ctx, "holder", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(acc.ClientCACert, acc.ClientCAKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	certPEM, keyPEM, err := ca.IssueClient("lease-holder", []string{"system:masters"}, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tls := rest.TLSClientConfig{CAData: acc.CACert}
	certCfg := &rest.Config{Host: acc.Endpoint, TLSClientConfig: tls, Timeout: 2 * time.Second}
	certCfg.CertData, certCfg.KeyData = certPEM, keyPEM
	tokenCfg := &rest.Config{Host: acc.Endpoint, TLSClientConfig: tls, Timeout: 2 * time.Second, BearerToken: tr.Status.Token}
	accepted := func() []string {
		var ok []string
		for name, cfg := range map[string]*rest.Config{"client certificate": certCfg, "minted token": tokenCfg} {
			cs := kubernetes.NewForConfigOrDie(cfg)
			if _, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
				ok = append(ok, name)
			}
		}
		slices.Sort(ok)
		return ok
	}
	if ok := accepted(); len(ok) != 2 {
		t.Fatalf("accepted before the fence: %v, want both", ok)
	}

	start := time.Now()
	if err := b.Fence(ctx, m); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	t.Logf("Fence returned after %s", time.Since(start).Round(time.Millisecond))
	if ok := accepted(); len(ok) > 0 {
		t.Errorf("accepted once Fence returned: %v, want none", ok)
	}
	if err := b.Fence(ctx, m); err != nil {
		t.Errorf("second Fence: %v, want nil", err)
	}
	if err := b.Create(ctx, m); err != nil {
		t.Errorf("Create of a fenced member: %v", err)
	}
	if obs, err := b.Observe(ctx, m); err != nil || obs.State != backend.StateFailed || !strings.Contains(obs.Message, "fenced") {
		t.Errorf("Observe after Fence = %+v, %v; want Failed, saying fenced", obs, err)
	}
	// Nothing starts it again.
	testenv.Consistently(t, 2*superviseInterval, "the fenced member to stay down", func() error {
		for _, p := range runningUnder(t, b.paths(m).dir) {
			if strings.Contains(p.Cmdline, compAPIServer) {
				return fmt.Errorf("kube-apiserver runs again after Fence: %s", p)
			}
		}
		if ok := accepted(); len(ok) > 0 {
			return fmt.Errorf("accepted after Create: %v, want none", ok)
		}
		return nil
	})
}
