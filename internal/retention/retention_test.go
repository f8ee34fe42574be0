package retention

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestDue(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	keepUnreadable := Rule{}
	nonce := Rule{DeleteUnreadable: true, LiveAtDeadline: true}
	tests := []struct {
		name     string
		rule     Rule
		deadline time.Time
		ok       bool
		want     bool
	}{
		{"before the deadline", keepUnreadable, now.Add(time.Second), true, false},
		{"at the deadline", keepUnreadable, now, true, true},
		{"past the deadline", keepUnreadable, now.Add(-time.Hour), true, true},
		{"unreadable is kept", keepUnreadable, time.Time{}, false, false},
		{"live record before its deadline", nonce, now.Add(time.Nanosecond), true, false},
		{"live record at its deadline", nonce, now, true, false},
		{"live record past its deadline", nonce, now.Add(-time.Nanosecond), true, true},
		{"unreadable is deleted", nonce, time.Time{}, false, true},
		{"unreadable is deleted whatever the zero time", Rule{DeleteUnreadable: true}, now.Add(time.Hour), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Due(tt.deadline, tt.ok, now); got != tt.want {
				t.Errorf("Due = %v, want %v", got, tt.want)
			}
		})
	}
}

const deadlineKey = "deadline"

func record(name, deadline string, labelled bool) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{deadlineKey: deadline}}}
	if labelled {
		cm.Labels = map[string]string{"kind": "record"}
	}
	return cm
}

func newJanitor(c client.Client, r client.Reader, now time.Time, rule Rule) *Janitor {
	return &Janitor{
		Kind: "record", Client: c, Reader: r, Namespace: "ns",
		Labels:  client.MatchingLabels{"kind": "record"},
		NewList: func() client.ObjectList { return &corev1.ConfigMapList{} },
		Deadline: func(o client.Object) (time.Time, bool) {
			t, err := time.Parse(time.RFC3339, o.GetAnnotations()[deadlineKey])
			return t, err == nil
		},
		Rule: rule, Interval: time.Hour, Clock: clocktesting.NewFakePassiveClock(now),
	}
}

func names(t *testing.T, c client.Client) []string {
	t.Helper()
	var list corev1.ConfigMapList
	if err := c.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, cm := range list.Items {
		out = append(out, cm.Name)
	}
	slices.Sort(out)
	return out
}

// TestSweep: a sweep deletes the labelled records that are due, on every
// page, and leaves the rest alone.
func TestSweep(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Minute).Format(time.RFC3339)
	var objs []client.Object
	for i := range listPage + 10 { // more than one page
		objs = append(objs, record(fmt.Sprintf("old-%04d", i), past, true))
	}
	objs = append(objs, record("new", future, true), record("unreadable", "soon", true), record("foreign", past, false))
	c := fake.NewClientBuilder().WithObjects(objs...).Build()

	n, err := newJanitor(c, c, now, Rule{}).Sweep(t.Context())
	if err != nil || n != listPage+10 {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, listPage+10)
	}
	if got := strings.Join(names(t, c), ","); got != "foreign,new,unreadable" {
		t.Errorf("left %s", got)
	}
	n, err = newJanitor(c, c, now, Rule{DeleteUnreadable: true}).Sweep(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("Sweep deleting unreadable records = %d, %v; want 1", n, err)
	}
	if got := strings.Join(names(t, c), ","); got != "foreign,new" {
		t.Errorf("left %s", got)
	}
}

// staleReader lists what it was given: a record as it was before someone
// rewrote it.
type staleReader struct {
	client.Reader
	items []corev1.ConfigMap
}

func (s staleReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*corev1.ConfigMapList).Items = s.items
	return nil
}

// TestSweepIsFenced: a record rewritten with a later deadline after the
// list is not deleted on the strength of the old one, nor one re-created
// under the same name (which the next sweep judges); neither fails the
// sweep.
func TestSweepIsFenced(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	c := fake.NewClientBuilder().WithObjects(
		record("rewritten", now.Add(-time.Minute).Format(time.RFC3339), true),
		record("recreated", now.Add(-time.Minute).Format(time.RFC3339), true),
	).Build()
	var seen corev1.ConfigMapList
	if err := c.List(t.Context(), &seen); err != nil {
		t.Fatal(err)
	}
	rw := record("rewritten", now.Add(time.Hour).Format(time.RFC3339), true)
	if err := c.Update(t.Context(), rw); err != nil {
		t.Fatal(err)
	}
	again := record("recreated", now.Add(-time.Minute).Format(time.RFC3339), true)
	if err := c.Delete(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	n, err := newJanitor(c, staleReader{items: seen.Items}, now, Rule{}).Sweep(t.Context())
	if err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want nothing deleted", n, err)
	}
	if got := strings.Join(names(t, c), ","); got != "recreated,rewritten" {
		t.Errorf("left %s", got)
	}
}

func TestJanitorRefusesToGuess(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	j := newJanitor(c, c, time.Now(), Rule{})
	j.Labels = nil
	if _, err := j.Sweep(t.Context()); err == nil {
		t.Error("a janitor without labels swept the namespace")
	}
	j = newJanitor(c, c, time.Now(), Rule{})
	j.Interval = 0
	if err := j.Start(t.Context()); err == nil {
		t.Error("a janitor without an interval started")
	}
}
