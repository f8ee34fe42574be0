package cleanup

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Collector is a manager.Runnable (leader only) that deletes cleanup
// receipts whose kobe.kunobi.ninja/keep-until has passed, every Interval.
// It lists them live by label: receipts are few, and caching every
// ConfigMap of the namespace to find them would cost more than the list.
type Collector struct {
	Client client.Client
	// Reader lists receipts (the manager's APIReader).
	Reader    client.Reader
	Namespace string
	Clock     clock.PassiveClock
	// Interval between collections; an hour when zero.
	Interval time.Duration
}

// NeedLeaderElection: one replica deletes.
func (c *Collector) NeedLeaderElection() bool { return true }

// Start collects at once and then every Interval until ctx ends.
func (c *Collector) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("receipts")
	interval := c.Interval
	if interval <= 0 {
		interval = time.Hour
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if n, err := c.Collect(ctx); err != nil {
			log.Error(err, "Collecting expired cleanup receipts")
		} else if n > 0 {
			log.Info("Deleted expired cleanup receipts", "count", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Collect deletes every receipt past its keep-until and says how many. A
// receipt without a readable keep-until is kept: deleting a proof is the
// one mistake that cannot be undone.
func (c *Collector) Collect(ctx context.Context) (int, error) {
	var list corev1.ConfigMapList
	if err := c.Reader.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingLabels{kobev1.LabelCleanupReceipt: "true"}); err != nil {
		return 0, fmt.Errorf("listing cleanup receipts: %w", err)
	}
	now := c.Clock.Now()
	n := 0
	for i := range list.Items {
		cm := &list.Items[i]
		until, err := time.Parse(time.RFC3339, cm.Annotations[kobev1.AnnotationKeepUntil])
		if err != nil || now.Before(until) {
			continue
		}
		err = c.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		switch {
		case err == nil:
			n++
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			return n, fmt.Errorf("deleting cleanup receipt %s: %w", cm.Name, err)
		}
	}
	return n, nil
}
