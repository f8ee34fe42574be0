package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kunobi-ninja/kobe/internal/leadership"
)

// leaderElectTimings are the leader election's durations. The defaults are
// controller-runtime's; tests shorten them to measure a failover quickly.
type leaderElectTimings struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

func (l *leaderElectTimings) bind(fs *flag.FlagSet) {
	fs.DurationVar(&l.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a replica waits, after the leader last renewed its lease, before taking over; a failover takes about this long.")
	fs.DurationVar(&l.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its lease before it gives up leadership (and exits); less than --leader-elect-lease-duration.")
	fs.DurationVar(&l.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the lease.")
}

// jitterFactor is client-go's leaderelection.JitterFactor: the renew
// deadline must exceed the retry period times this.
const jitterFactor = 1.2

// validate refuses timings client-go's leader elector would refuse, naming
// the flags to change.
func (l leaderElectTimings) validate() error {
	switch {
	case l.leaseDuration <= 0 || l.renewDeadline <= 0 || l.retryPeriod <= 0:
		return fmt.Errorf("--leader-elect-lease-duration (%s), --leader-elect-renew-deadline (%s) and --leader-elect-retry-period (%s) must all be greater than zero",
			l.leaseDuration, l.renewDeadline, l.retryPeriod)
	case l.renewDeadline >= l.leaseDuration:
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be less than --leader-elect-lease-duration (%s): a leader must give up before another replica may take over",
			l.renewDeadline, l.leaseDuration)
	case float64(l.renewDeadline) <= jitterFactor*float64(l.retryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be more than %.1f times --leader-elect-retry-period (%s), so that the leader retries a renewal at least once",
			l.renewDeadline, jitterFactor, l.retryPeriod)
	}
	return nil
}

// leaderElectionID names the leader-election Lease in the operator's
// namespace.
const leaderElectionID = "kobe-operator.kobe.kunobi.ninja"

// lock builds the election's Lease lock, as controller-runtime would
// (identity host_uuid, its own client and user agent), wrapped so that the
// controllers can ask whether this replica surely still leads
// (leadership.Lock): a leader paused past its lease must not act beside
// the one that took over. Certainty lasts the renew deadline after each
// renewal, which leaves a step started just before it the rest of the lease.
func (l leaderElectTimings) lock(cfg *rest.Config, namespace string) (*leadership.Lock, error) {
	cs, err := kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("leader election identity: %w", err)
	}
	rl, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, leaderElectionID, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	return &leadership.Lock{Interface: rl, Window: l.renewDeadline}, nil
}

// resourceLock and leaderChecker give lock as interfaces, nil (not a nil
// *Lock) without --leader-elect.
func resourceLock(lock *leadership.Lock) resourcelock.Interface {
	if lock == nil {
		return nil
	}
	return lock
}

func leaderChecker(lock *leadership.Lock) leadership.Checker {
	if lock == nil {
		return nil
	}
	return lock
}
