//go:build heavy

package ha

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// memberClaims records, from a watch of a namespace's members opened
// before any lease exists, every lease UID each member (by UID) ever named
// in its spec.leaseRef, and each member's name.
type memberClaims struct {
	mu     sync.Mutex
	claims map[types.UID]map[types.UID]bool
	names  map[types.UID]string
	err    error
	done   chan struct{}
}

// watchMemberClaims starts recording until ctx ends; stop waits for it.
func watchMemberClaims(t *testing.T, ctx context.Context, ns string) *memberClaims {
	t.Helper()
	wc, err := client.NewWithWatch(suite.env.Config, client.Options{Scheme: suite.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var list kobev1.ClusterInstanceList
	if err := wc.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	mc := &memberClaims{claims: map[types.UID]map[types.UID]bool{}, names: map[types.UID]string{}, done: make(chan struct{})}
	for i := range list.Items {
		mc.observe(&list.Items[i])
	}
	rv := list.ResourceVersion
	go func() {
		defer close(mc.done)
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &kobev1.ClusterInstanceList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				if ctx.Err() == nil {
					mc.fail(fmt.Errorf("watching members from %s: %w", rv, err))
				}
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() != nil {
						w.Stop()
						return
					}
					mc.fail(fmt.Errorf("member watch: %v", ev.Object))
					w.Stop()
					return
				}
				m, ok := ev.Object.(*kobev1.ClusterInstance)
				if !ok {
					continue
				}
				rv = m.ResourceVersion
				if ev.Type != watch.Bookmark {
					mc.observe(m)
				}
			}
			// The server closed the watch (its timeout): resume from rv.
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return mc
}

func (mc *memberClaims) observe(m *kobev1.ClusterInstance) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.names[m.UID] = m.Name
	if m.Spec.LeaseRef == nil {
		return
	}
	if mc.claims[m.UID] == nil {
		mc.claims[m.UID] = map[types.UID]bool{}
	}
	mc.claims[m.UID][m.Spec.LeaseRef.UID] = true
}

func (mc *memberClaims) fail(err error) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.err == nil {
		mc.err = err
	}
}

// result returns a copy of what was recorded, or the watch's error.
func (mc *memberClaims) result() (claims map[types.UID][]types.UID, names map[types.UID]string, err error) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	claims = map[types.UID][]types.UID{}
	for m, ls := range mc.claims {
		for l := range ls {
			claims[m] = append(claims[m], l)
		}
	}
	names = map[types.UID]string{}
	for k, v := range mc.names {
		names[k] = v
	}
	return claims, names, mc.err
}
