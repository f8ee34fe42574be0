//go:build integration

package replay_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/replay"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestStoreAndJanitor runs against a real API server: two stores (two
// replicas, each with its own client) accept a nonce exactly once between
// them, even when they race, and the janitor deletes expired nonce objects
// and nothing else.
func TestStoreAndJanitor(t *testing.T) {
	env := testenv.Start(t)
	ns := env.NewNamespace(t)
	ctx := t.Context()
	now := time.Now()
	clk := clocktesting.NewFakePassiveClock(now)

	newClient := func() client.Client {
		c, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := &replay.Store{Client: newClient(), Namespace: ns, Clock: clk}
	b := &replay.Store{Client: newClient(), Namespace: ns, Clock: clk}

	t.Run("a nonce is accepted once across replicas", func(t *testing.T) {
		if err := a.Claim(ctx, "SHA256:key nonce-1", now.Add(31*time.Second)); err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*replay.Store{"same replica": a, "other replica": b} {
			if err := s.Claim(ctx, "SHA256:key nonce-1", now.Add(31*time.Second)); !errors.Is(err, sshsig.ErrReplayed) {
				t.Fatalf("%s: got %v, want ErrReplayed", name, err)
			}
		}
		// The same nonce under another key is another value.
		if err := b.Claim(ctx, "SHA256:other nonce-1", now.Add(31*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("racing replicas accept a nonce once", func(t *testing.T) {
		const racers = 16
		var wg sync.WaitGroup
		var mu sync.Mutex
		accepted, replayed := 0, 0
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := a
				if i%2 == 1 {
					s = b
				}
				err := s.Claim(ctx, "SHA256:key race", now.Add(31*time.Second))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					accepted++
				case errors.Is(err, sshsig.ErrReplayed):
					replayed++
				default:
					t.Errorf("claim: %v", err)
				}
			}()
		}
		wg.Wait()
		if accepted != 1 || replayed != racers-1 {
			t.Fatalf("%d accepted, %d replayed; want 1 and %d", accepted, replayed, racers-1)
		}
	})

	t.Run("the name carries no part of the id", func(t *testing.T) {
		name := replay.Name("SHA256:abcdef nonce-secretish")
		if len(name) > 253 || name == replay.Name("SHA256:abcdef nonce-secretish2") {
			t.Fatalf("name %q", name)
		}
		for _, part := range []string{"abcdef", "secretish"} {
			if strings.Contains(strings.ToLower(name), part) {
				t.Fatalf("name %q shows %q", name, part)
			}
		}
	})

	t.Run("janitor deletes expired nonce objects only", func(t *testing.T) {
		// Objects that are not nonce objects: a leader-election Lease and
		// an unlabelled Lease with a nonce-like name, both long expired.
		for _, name := range []string{"kobe-operator.kobe.kunobi.ninja", replay.NamePrefix + "foreign"} {
			if err := env.Client.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: coordinationv1.LeaseSpec{
					AcquireTime:          ptr.To(metav1.NewMicroTime(now.Add(-time.Hour))),
					LeaseDurationSeconds: ptr.To[int32](15),
				},
			}); err != nil {
				t.Fatal(err)
			}
		}
		short := &replay.Store{Client: newClient(), Namespace: ns, Clock: clk}
		for i := range 3 {
			if err := short.Claim(ctx, fmt.Sprintf("SHA256:key short-%d", i), now.Add(5*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		j := &replay.Janitor{Client: env.Client, Reader: env.Client, Namespace: ns, Clock: clk}
		// Nothing has expired yet.
		if n, err := j.Sweep(ctx); err != nil || n != 0 {
			t.Fatalf("sweep before expiry: deleted %d, %v", n, err)
		}
		clk.SetTime(now.Add(10 * time.Second))
		if n, err := j.Sweep(ctx); err != nil || n != 3 {
			t.Fatalf("sweep after the short nonces expired: deleted %d, %v; want 3", n, err)
		}
		// An expired nonce may be claimed again by the store; the signature
		// clock refuses such an old signature before it gets here.
		if err := short.Claim(ctx, "SHA256:key short-0", now.Add(40*time.Second)); err != nil {
			t.Fatalf("claim after the janitor deleted it: %v", err)
		}
		clk.SetTime(now.Add(time.Minute))
		if n, err := j.Sweep(ctx); err != nil || n != 4 {
			t.Fatalf("sweep after every nonce expired: deleted %d, %v; want 4 (nonce-1 of two keys, race, short-0)", n, err)
		}
		var left coordinationv1.LeaseList
		if err := env.Client.List(ctx, &left, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range left.Items {
			names = append(names, l.Name)
		}
		if len(names) != 2 {
			t.Fatalf("leases left %v; want only the two that are not nonce objects", names)
		}
	})

	// The leader's janitor deletes nonces on its own clock. A replica
	// whose clock lags the leader's (here by 5 s, and by a whole window)
	// still accepts the signature's timestamp after the leader considers it
	// old: the nonce must still be there for that replica to refuse the
	// replay.
	t.Run("janitor keeps a nonce a lagging replica would still accept", func(t *testing.T) {
		ns := env.NewNamespace(t)
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		key, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		const audience = "kobe:test"
		signedAt := time.Unix(now.Unix(), 0)
		for _, lag := range []time.Duration{5 * time.Second, sshsig.DefaultWindow} {
			leader := clocktesting.NewFakePassiveClock(signedAt)
			lagging := clocktesting.NewFakePassiveClock(signedAt.Add(-lag))
			replica := func(clk clock.PassiveClock) *sshsig.Verifier {
				v, err := sshsig.NewVerifier(sshsig.VerifierOptions{Audience: audience, Now: clk.Now,
					Nonces: &replay.Store{Client: newClient(), Namespace: ns, Clock: clk}})
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			onLeader, onLagging := replica(leader), replica(lagging)
			req, err := http.NewRequest(http.MethodGet, "https://kobe.example.com/v1/leases", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := sshsig.SignRequest(req, nil, key, audience, signedAt); err != nil {
				t.Fatal(err)
			}
			send := func(v *sshsig.Verifier) error {
				h, err := sshsig.ParseHeader(req.Header.Get("Authorization"))
				if err != nil {
					t.Fatal(err)
				}
				return v.Verify(ctx, httptest.NewRequest(http.MethodGet, "/v1/leases", nil), nil, h)
			}
			if err := send(onLeader); err != nil {
				t.Fatalf("lag %s: first use on the leader: %v", lag, err)
			}
			// The last instant the lagging replica accepts the timestamp.
			leader.SetTime(signedAt.Add(sshsig.DefaultWindow + lag))
			lagging.SetTime(signedAt.Add(sshsig.DefaultWindow))
			j := &replay.Janitor{Client: env.Client, Reader: env.Client, Namespace: ns, Clock: leader}
			if n, err := j.Sweep(ctx); err != nil || n != 0 {
				t.Fatalf("lag %s: the janitor deleted %d nonce objects (%v) a replica still needs", lag, n, err)
			}
			if err := send(onLagging); !errors.Is(err, sshsig.ErrReplayed) {
				t.Fatalf("lag %s: replay to the lagging replica: %v, want %v", lag, err, sshsig.ErrReplayed)
			}
			// Once every replica refuses the timestamp, the nonce goes.
			leader.SetTime(signedAt.Add(2*sshsig.DefaultWindow + 2*time.Second))
			lagging.SetTime(leader.Now().Add(-lag))
			if err := send(onLagging); !errors.Is(err, sshsig.ErrClockSkew) {
				t.Fatalf("lag %s: the lagging replica after the janitor's expiry: %v, want %v", lag, err, sshsig.ErrClockSkew)
			}
			if n, err := j.Sweep(ctx); err != nil || n != 1 {
				t.Fatalf("lag %s: sweep after the expiry deleted %d (%v), want 1", lag, n, err)
			}
		}
	})

	t.Run("janitor runs as a runnable", func(t *testing.T) {
		live := &replay.Store{Client: newClient(), Namespace: ns}
		if err := live.Claim(ctx, "SHA256:key runnable", time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		j := &replay.Janitor{Client: env.Client, Reader: env.Client, Namespace: ns, Interval: 200 * time.Millisecond, Clock: clock.RealClock{}}
		if !j.NeedLeaderElection() {
			t.Fatal("janitor should run on the leader only")
		}
		done := make(chan error, 1)
		jctx, cancel := context.WithCancel(ctx)
		go func() { done <- j.Start(jctx) }()
		testenv.Eventually(t, 30*time.Second, "the janitor to delete the expired nonce", func() error {
			var l coordinationv1.Lease
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: replay.Name("SHA256:key runnable")}, &l)
			if err == nil {
				return fmt.Errorf("nonce object %s still exists", l.Name)
			}
			return client.IgnoreNotFound(err)
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("janitor ended with %v", err)
		}
	})
}
