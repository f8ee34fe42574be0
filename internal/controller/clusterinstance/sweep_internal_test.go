package clusterinstance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// leakyBackend holds members by UID; Sweep and Leaks judge them with owned.
type leakyBackend struct {
	backend.Backend
	mu      sync.Mutex
	members []types.UID
	sweeps  int
}

func (b *leakyBackend) unowned(owned backend.OwnedFunc) []string {
	var out []string
	for _, uid := range b.members {
		if !owned("ns", uid) {
			out = append(out, string(uid))
		}
	}
	return out
}

func (b *leakyBackend) Sweep(_ context.Context, owned backend.OwnedFunc) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweeps++
	gone := b.unowned(owned)
	b.members = slices.DeleteFunc(b.members, func(u types.UID) bool { return slices.Contains(gone, string(u)) })
	return gone, nil
}

func (b *leakyBackend) Leaks(_ context.Context, owned backend.OwnedFunc) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unowned(owned), nil
}

func (b *leakyBackend) state() (members []types.UID, sweeps int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.members), b.sweeps
}

// TestPeriodicSweepReportsLeaks: the start-up sweep destroys what nobody
// owns; the periodic one reports a leak that appears later (the metric)
// and destroys it only with RemoveLeaks.
func TestPeriodicSweepReportsLeaks(t *testing.T) {
	kept := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", UID: "kept"}}
	for _, remove := range []bool{false, true} {
		t.Run(map[bool]string{false: "report", true: "remove"}[remove], func(t *testing.T) {
			typ := kobev1.BackendType("leaky-" + map[bool]string{false: "report", true: "remove"}[remove])
			b := &leakyBackend{members: []types.UID{"kept", "left-by-a-crash"}}
			r := &SweepRunnable{
				Backends: backend.Registry{typ: b}, Namespace: "ns", Interval: 20 * time.Millisecond, RemoveLeaks: remove,
				Reader: fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(kept).Build(),
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- r.Start(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Start: %v", err)
				}
			}()
			testenv.Eventually(t, 5*time.Second, "the start-up sweep", func() error {
				if ms, _ := b.state(); slices.Contains(ms, "left-by-a-crash") {
					return errNotYet
				}
				return nil
			})
			// A leak appears while the operator runs.
			b.mu.Lock()
			b.members = append(b.members, "leaked-later")
			b.mu.Unlock()
			gauge := metricsGauge(string(typ))
			if !remove {
				testenv.Eventually(t, 5*time.Second, "the leak reported", func() error {
					if gauge() != 1 {
						return errNotYet
					}
					return nil
				})
				// Several periodic sweeps.
				testenv.Consistently(t, 100*time.Millisecond, "a report-only sweep to destroy nothing", func() error {
					if ms, sweeps := b.state(); !slices.Contains(ms, "leaked-later") || sweeps != 1 {
						return fmt.Errorf("members %v after %d Sweep calls: a report-only sweep destroyed something", ms, sweeps)
					}
					return nil
				})
				return
			}
			testenv.Eventually(t, 5*time.Second, "the leak removed", func() error {
				if ms, _ := b.state(); slices.Contains(ms, "leaked-later") {
					return errNotYet
				}
				return nil
			})
			if ms, _ := b.state(); !slices.Equal(ms, []types.UID{"kept"}) {
				t.Errorf("members %v, want the owned one kept", ms)
			}
		})
	}
}

var errNotYet = errorString("not yet")

type errorString string

func (e errorString) Error() string { return string(e) }

// metricsGauge reads kobe_leaked_members for a backend.
func metricsGauge(b string) func() float64 {
	return func() float64 { return metrics.Leaks(b) }
}
