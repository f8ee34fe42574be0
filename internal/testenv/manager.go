package testenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kunobi-ninja/kobe/internal/cachetrim"
)

// managerStopTimeout bounds how long stopping a test manager may take.
const managerStopTimeout = 30 * time.Second

// ManagerOptions are options for a manager in a test: the env's scheme, no
// metrics or health listeners, no leader election, controller name
// validation off (tests build the same controller more than once in one
// process), and a cache limited to namespaces when any are given.
func (e *Env) ManagerOptions(namespaces ...string) ctrl.Options {
	opts := ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		// Cache what the operator caches, trimmed the same way, so that a
		// test reading from the cache sees what production code sees.
		Cache: cache.Options{DefaultTransform: cachetrim.Transform},
	}
	if len(namespaces) > 0 {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// NewManager is ctrl.NewManager with ManagerOptions(namespaces...); the test
// fails when it cannot be built.
func (e *Env) NewManager(t testing.TB, namespaces ...string) manager.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(e.Config, e.ManagerOptions(namespaces...))
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	return mgr
}

// StartManager starts mgr (add controllers and runnables first), waits until
// its cache has synced, and when the test ends stops it and fails the test
// if it returned an error.
func StartManager(t testing.TB, mgr manager.Manager) {
	t.Helper()
	stop, err := RunManager(mgr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// RunManager is StartManager outside a test (TestMain): it returns once the
// cache has synced; stop cancels the manager and waits for it to return,
// at most 30 s.
func RunManager(mgr manager.Manager) (stop func() error, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(managerStopTimeout):
			return fmt.Errorf("manager did not stop within %s", managerStopTimeout)
		}
	}
	synced := make(chan bool, 1)
	go func() { synced <- mgr.GetCache().WaitForCacheSync(ctx) }()
	select {
	case ok := <-synced:
		if !ok {
			return nil, errors.Join(errors.New("manager cache did not sync"), stop())
		}
		return stop, nil
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("manager returned before its cache synced")
		}
		return nil, fmt.Errorf("starting manager: %w", err)
	case <-time.After(managerStopTimeout):
		return nil, errors.Join(fmt.Errorf("manager cache did not sync within %s", managerStopTimeout), stop())
	}
}

// NewNamespace creates a namespace with a generated name for one test and
// returns its name.
func (e *Env) NewNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := e.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// Namespaces are namespaces made before a manager starts, for a test whose
// subtests each want a namespace of their own: a manager's cache is limited
// to namespaces it knows when it is built (NewManager), so they are made up
// front and handed out with Take.
type Namespaces struct {
	mu    sync.Mutex
	names []string
	taken int
}

// NewNamespaces creates n namespaces with generated names.
func (e *Env) NewNamespaces(t testing.TB, n int) *Namespaces {
	t.Helper()
	ns := &Namespaces{}
	for range n {
		ns.names = append(ns.names, e.NewNamespace(t))
	}
	return ns
}

// All returns every namespace, for NewManager.
func (n *Namespaces) All() []string { return slices.Clone(n.names) }

// Take returns a namespace no one has taken yet; the test fails when all
// are taken.
func (n *Namespaces) Take(t testing.TB) string {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.taken == len(n.names) {
		t.Fatalf("all %d namespaces made up front are taken: make more", len(n.names))
	}
	n.taken++
	return n.names[n.taken-1]
}
