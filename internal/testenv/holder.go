package testenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// CredentialCut bounds how long a lease holder's credentials may still work
// after the lease ended (DELETE's answer, or its expiry).
const CredentialCut = 2 * time.Second

// cutPollInterval is how often the holder tries its credentials.
const cutPollInterval = 100 * time.Millisecond

// cutTries is how many tries in a row every credential must fail before
// they count as cut: one slow answer on a loaded machine is not a cut.
const cutTries = 3

// Holder is what a lease holder keeps after the lease ends: the lease
// kubeconfig's client certificate, and a ServiceAccount token minted inside
// the member with it (`kubectl create token`). From KeepCredentials on, they
// are tried in the background, as a holder would keep trying them, so that
// the moment they stop working is measured even while the test is busy
// elsewhere at that moment (restarting the operator, waiting for a refill
// on a loaded machine). The kubeconfig must reach the member's API server
// itself (Direct access) for the token to be tried.
type Holder struct {
	clients map[string]*kubernetes.Clientset

	mu sync.Mutex
	// lastAccepted is when the last try that any credential passed started.
	lastAccepted time.Time
	// refusedSince is when the first try after lastAccepted that every
	// credential failed started; zero while they still work.
	refusedSince time.Time
	// refusedTries counts the tries in a row that every credential failed.
	refusedTries int
	stop         context.CancelFunc
	stopped      chan struct{}
}

// KeepCredentials mints the token, checks that both credentials work and
// starts trying them in the background until the test ends or WaitCut.
func KeepCredentials(t testing.TB, kubeconfig string) *Holder {
	t.Helper()
	token, err := Kubectl(t, kubeconfig, "-n", "default", "create", "token", "default", "--duration=1h")
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
	h := &Holder{clients: map[string]*kubernetes.Clientset{}, stopped: make(chan struct{})}
	for name, c := range map[string]*rest.Config{"lease certificate": cfg, "minted token": tokenCfg} {
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		h.clients[name] = cs
	}
	if ok := h.accepted(t.Context()); len(ok) != len(h.clients) {
		t.Fatalf("credentials accepted before the lease ended: %v, want all of them", ok)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go h.keepTrying(ctx)
	t.Cleanup(h.halt)
	return h
}

// accepted names the credentials the member's API server still
// authenticates (a SelfSubjectReview, which every authenticated user may
// create, answers).
func (h *Holder) accepted(ctx context.Context) []string {
	var ok []string
	for name, cs := range h.clients {
		if _, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
			ok = append(ok, name)
		}
	}
	return ok
}

// keepTrying tries the credentials every cutPollInterval and records when
// they last worked and since when they fail.
func (h *Holder) keepTrying(ctx context.Context) {
	defer close(h.stopped)
	tick := time.NewTicker(cutPollInterval)
	defer tick.Stop()
	for {
		start := time.Now()
		ok := h.accepted(ctx)
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		if len(ok) > 0 {
			h.lastAccepted, h.refusedSince, h.refusedTries = start, time.Time{}, 0
		} else {
			if h.refusedTries == 0 {
				h.refusedSince = start
			}
			h.refusedTries++
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (h *Holder) halt() {
	h.stop()
	<-h.stopped
}

// WaitCut waits until since has passed and no credential works, and fails
// the test when one worked more than CredentialCut after since. It returns
// how long after since they last worked (negative: before since). diag,
// when not nil, says more when they never stop working (the operator's
// log).
func (h *Holder) WaitCut(t testing.TB, since time.Time, after string, diag func() string) time.Duration {
	t.Helper()
	var lastAccepted, refusedSince time.Time
	err := Poll(t.Context(), time.Until(since)+30*time.Second, func() error {
		h.mu.Lock()
		lastAccepted, refusedSince = h.lastAccepted, h.refusedSince
		cut := h.refusedTries >= cutTries
		h.mu.Unlock()
		if !cut || time.Now().Before(since) {
			return fmt.Errorf("still accepted, last at %s", lastAccepted.Format(time.StampMilli))
		}
		return nil
	})
	h.halt()
	if err != nil {
		more := ""
		if diag != nil {
			more = "\n" + diag()
		}
		t.Fatalf("the lease's credentials still work %s after %s: %v%s", time.Since(since).Round(time.Millisecond), after, err, more)
	}
	worked := lastAccepted.Sub(since)
	t.Logf("the lease certificate and the token minted inside last worked %s after %s, and failed from %s after it on",
		worked.Round(time.Millisecond), after, refusedSince.Sub(since).Round(time.Millisecond))
	if worked > CredentialCut {
		t.Errorf("credentials worked until %s after %s, want at most %s", worked.Round(time.Millisecond), after, CredentialCut)
	}
	if ok := h.accepted(t.Context()); len(ok) > 0 {
		t.Errorf("%s accepted again after the cut", strings.Join(ok, ", "))
	}
	return worked
}
