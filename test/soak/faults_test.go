//go:build soak

package soak

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// The faults, injected in this rotation.
const (
	faultKill      = "replica SIGKILLed"
	faultFreeze    = "leader SIGSTOPped 20s"
	faultAPIServer = "kube-apiserver restarted"
)

var faultRotation = []string{faultKill, faultFreeze, faultAPIServer}

// freezeFor is how long the leader stays stopped.
const freezeFor = 20 * time.Second

// injectFaults injects one fault every `every` until stop is closed,
// finishing the fault under way.
func injectFaults(ctx context.Context, stop <-chan struct{}, every time.Duration, reps *replicas, rec *recorder) {
	next := time.Now().Add(every)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(next)):
		}
		next = next.Add(every)
		kind := faultRotation[n%len(faultRotation)]
		f := inject(ctx, kind, n/len(faultRotation), reps)
		rec.note(func(r *recorder) { r.faults = append(r.faults, f) })
		fmt.Printf("soak: %s %s: %s, recovered in %s; resumed leader quit after %s %s\n", f.at.UTC().Format("15:04:05"), f.kind, f.target, f.recovered.Round(100*time.Millisecond), f.lingered.Round(100*time.Millisecond), f.err)
	}
}

// inject runs one fault; round says which replica a kill takes (the leader
// in even rounds, the follower in odd ones).
func inject(ctx context.Context, kind string, round int, reps *replicas) fault {
	f := fault{kind: kind, at: time.Now()}
	var err error
	switch kind {
	case faultKill:
		err = killOne(ctx, round, reps, &f)
	case faultFreeze:
		err = freezeLeader(ctx, reps, &f)
	case faultAPIServer:
		f.target = "kube-apiserver"
		err = suite.env.RestartAPIServer()
		if err == nil {
			err = apiAnswers(ctx)
		}
	}
	f.recovered = time.Since(f.at)
	if err != nil {
		f.err = err.Error()
	}
	return f
}

// killOne SIGKILLs the leader (even rounds) or the follower, and waits
// until its restarted process serves again.
func killOne(ctx context.Context, round int, reps *replicas, f *fault) error {
	lead, err := reps.leader(ctx, 30*time.Second)
	target, role := lead, "leader"
	switch {
	case err != nil:
		target, role = round%2, "no clear leader"
	case round%2 == 1:
		target, role = 1-lead, "follower"
	}
	f.target = fmt.Sprintf("r%d (%s)", target, role)
	f.at = time.Now()
	reps.kill(target)
	return reps.waitServing(ctx, target, 2*time.Minute)
}

// freezeLeader SIGSTOPs the leader for freezeFor, SIGCONTs it, and waits
// until a replica leads again.
func freezeLeader(ctx context.Context, reps *replicas, f *fault) error {
	lead, err := reps.leader(ctx, 30*time.Second)
	if err != nil {
		f.target = "none"
		return fmt.Errorf("no leader to stop: %w", err)
	}
	f.target = fmt.Sprintf("r%d", lead)
	f.at = time.Now()
	p := reps.proc(lead)
	if err := reps.freeze(ctx, lead, freezeFor); err != nil {
		return err
	}
	// The stopped leader, resumed, still believes it leads until a renewal
	// fails, if the other took over meanwhile: then two replicas may
	// reconcile at once until it quits.
	if d, quit := reps.exitedWithin(p, lingerWithin); quit {
		f.lingered = d
	}
	_, err = reps.leader(ctx, 2*time.Minute)
	return err
}

// lingerWithin bounds the wait for a resumed leader to quit: past the
// renew deadline (10 s) it kept its lease, nobody having taken it.
const lingerWithin = 15 * time.Second

// apiAnswers waits until kube-apiserver answers a list.
func apiAnswers(ctx context.Context) error {
	return testenv.Poll(ctx, 2*time.Minute, func() error {
		return suite.env.Client.List(ctx, &corev1.NamespaceList{}, client.Limit(1))
	})
}
