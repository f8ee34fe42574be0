package cleanup

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/retention"
)

// Collector is a manager.Runnable (leader only) that deletes cleanup
// receipts whose kobe.kunobi.ninja/keep-until has passed, every Interval
// (retention.Janitor). It lists them live by label: receipts are few, and
// caching every ConfigMap of the namespace to find them would cost more
// than the list.
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
	return c.janitor(log.FromContext(ctx).WithName("receipts")).Start(ctx)
}

// Collect deletes every receipt past its keep-until and says how many. A
// receipt without a readable keep-until is kept: deleting a proof is the
// one mistake that cannot be undone.
func (c *Collector) Collect(ctx context.Context) (int, error) {
	return c.janitor(logr.Discard()).Sweep(ctx)
}

func (c *Collector) janitor(logger logr.Logger) *retention.Janitor {
	interval := c.Interval
	if interval <= 0 {
		interval = time.Hour
	}
	return &retention.Janitor{
		Kind: "cleanup receipt", Client: c.Client, Reader: c.Reader, Namespace: c.Namespace,
		Labels:   client.MatchingLabels{kobev1.LabelCleanupReceipt: "true"},
		NewList:  func() client.ObjectList { return &corev1.ConfigMapList{} },
		Deadline: keepUntil,
		Interval: interval, Clock: c.Clock, Log: logger,
	}
}

// keepUntil reads a receipt's kobe.kunobi.ninja/keep-until.
func keepUntil(o client.Object) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, o.GetAnnotations()[kobev1.AnnotationKeepUntil])
	return t, err == nil
}
