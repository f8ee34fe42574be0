package lease

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestIsActiveAndCountActive(t *testing.T) {
	deleting := mkLease("deleting", t0, kobev1.LeaseBound)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	tests := []struct {
		lease kobev1.ClusterLease
		want  bool
	}{
		{mkLease("new", t0, ""), true},
		{mkLease("pending", t0, kobev1.LeasePending), true},
		{mkLease("bound", t0, kobev1.LeaseBound), true},
		{mkLease("released", t0, kobev1.LeaseReleased), false},
		{mkLease("expired", t0, kobev1.LeaseExpired), false},
		{mkLease("recycling", t0, kobev1.LeaseRecycling), false},
		{mkLease("quarantined", t0, kobev1.LeaseQuarantined), false},
		{deleting, false},
	}
	var all []kobev1.ClusterLease
	var want int32
	for _, tt := range tests {
		if got := IsActive(&tt.lease); got != tt.want {
			t.Errorf("IsActive(%s) = %v, want %v", tt.lease.Name, got, tt.want)
		}
		all = append(all, tt.lease)
		if tt.want {
			want++
		}
	}
	if got := CountActive(all); got != want {
		t.Errorf("CountActive = %d, want %d", got, want)
	}
	if got := CountActive(nil); got != 0 {
		t.Errorf("CountActive(nil) = %d", got)
	}
}

func TestEnd(t *testing.T) {
	now := t0.Add(90 * time.Minute)
	boundCond := metav1.Condition{Type: kobev1.ConditionBound, Status: metav1.ConditionTrue, Reason: kobev1.ReasonBound, Message: "bound to m"}
	queuedCond := metav1.Condition{Type: kobev1.ConditionBound, Status: metav1.ConditionFalse, Reason: kobev1.ReasonQueued, Message: "waiting"}
	mk := func(phase kobev1.LeasePhase, pos int32, conds ...metav1.Condition) *kobev1.ClusterLease {
		l := mkLease("l", t0, phase)
		l.Generation = 3
		l.Status.QueuePosition = pos
		l.Status.Conditions = conds
		return &l
	}
	tests := []struct {
		name       string
		lease      *kobev1.ClusterLease
		phase      kobev1.LeasePhase
		reason     string
		wantBound  metav1.ConditionStatus // "" means no Bound condition
		wantReason string                 // Bound's reason after End
	}{
		{"bound lease released: Bound turns False with the end's reason", mk(kobev1.LeaseBound, 0, boundCond), kobev1.LeaseReleased, kobev1.ReasonReleased, metav1.ConditionFalse, kobev1.ReasonReleased},
		{"bound lease expires", mk(kobev1.LeaseBound, 0, boundCond), kobev1.LeaseExpired, kobev1.ReasonExpired, metav1.ConditionFalse, kobev1.ReasonExpired},
		{"queued lease times out: Bound stays False, Queued", mk(kobev1.LeasePending, 4, queuedCond), kobev1.LeaseExpired, kobev1.ReasonQueueTimeout, metav1.ConditionFalse, kobev1.ReasonQueued},
		{"new lease refused: no Bound condition appears", mk("", 0), kobev1.LeaseReleased, kobev1.ReasonCleanupModeUnsupported, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.lease
			End(l, tt.phase, tt.reason, "why", now)
			if l.Status.Phase != tt.phase || l.Status.QueuePosition != 0 || l.Status.EndedAt == nil || !l.Status.EndedAt.Time.Equal(now) {
				t.Fatalf("status = phase %s pos %d endedAt %v; want %s, 0, %s", l.Status.Phase, l.Status.QueuePosition, l.Status.EndedAt, tt.phase, now)
			}
			if l.Status.ObservedGeneration != 3 {
				t.Errorf("observedGeneration = %d, want 3", l.Status.ObservedGeneration)
			}
			ended := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded)
			if ended == nil || ended.Status != metav1.ConditionTrue || ended.Reason != tt.reason || ended.Message != "why" || ended.ObservedGeneration != 3 {
				t.Fatalf("Ended condition = %+v, want True %s at generation 3", ended, tt.reason)
			}
			if !ended.LastTransitionTime.Time.Equal(now) {
				t.Errorf("Ended lastTransitionTime = %s, want the injected now %s", ended.LastTransitionTime, now)
			}
			bound := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionBound)
			switch {
			case tt.wantBound == "" && bound != nil:
				t.Errorf("Bound condition = %+v, want none", bound)
			case tt.wantBound != "" && (bound == nil || bound.Status != tt.wantBound || bound.Reason != tt.wantReason):
				t.Errorf("Bound condition = %+v, want %s %s", bound, tt.wantBound, tt.wantReason)
			case tt.wantReason == tt.reason && !bound.LastTransitionTime.Time.Equal(now):
				t.Errorf("Bound lastTransitionTime = %s, want the injected now %s", bound.LastTransitionTime, now)
			}
		})
	}

	t.Run("an ended lease keeps its first end", func(t *testing.T) {
		l := mk(kobev1.LeaseBound, 0, boundCond)
		End(l, kobev1.LeaseReleased, kobev1.ReasonReleased, "released by its holder", now)
		first := l.DeepCopy()
		End(l, kobev1.LeaseExpired, kobev1.ReasonExpired, "expired", now.Add(time.Hour))
		if !equality.Semantic.DeepEqual(first, l) {
			t.Fatalf("second End changed the lease: %+v, want %+v", l.Status, first.Status)
		}
	})
}

func TestExtend(t *testing.T) {
	mk := func(ext int32, max *int32, expires time.Time, phase kobev1.LeasePhase) *kobev1.ClusterLease {
		l := mkLease("l", t0, phase)
		l.Spec.MaxExtensions = max
		l.Status.Extensions = ext
		l.Status.ExpiresAt = ptr.To(metav1.NewTime(expires))
		return &l
	}
	deleting := mk(0, nil, t0.Add(time.Hour), kobev1.LeaseBound)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	noExpiry := mk(0, nil, t0.Add(time.Hour), kobev1.LeaseBound)
	noExpiry.Status.ExpiresAt = nil
	tests := []struct {
		name     string
		lease    *kobev1.ClusterLease
		by       time.Duration
		want     time.Time
		wantExts int32
		wantErr  error
	}{
		{"first extension adds to expiry", mk(0, nil, t0.Add(time.Hour), kobev1.LeaseBound), 30 * time.Minute, t0.Add(90 * time.Minute), 1, nil},
		{"second of default two", mk(1, nil, t0.Add(time.Hour), kobev1.LeaseBound), time.Hour, t0.Add(2 * time.Hour), 2, nil},
		{"a nanosecond before expiry still extends", mk(0, nil, t0.Add(time.Nanosecond), kobev1.LeaseBound), time.Hour, t0.Add(time.Hour + time.Nanosecond), 1, nil},
		{"policy allows ten", mk(9, ptr.To[int32](10), t0.Add(time.Hour), kobev1.LeaseBound), time.Minute, t0.Add(61 * time.Minute), 10, nil},
		{"third of default two refused", mk(2, nil, t0.Add(time.Hour), kobev1.LeaseBound), time.Hour, time.Time{}, 0, ErrExtensionLimit},
		{"policy allows none", mk(0, ptr.To[int32](0), t0.Add(time.Hour), kobev1.LeaseBound), time.Hour, time.Time{}, 0, ErrExtensionLimit},
		{"pending lease cannot extend", mk(0, nil, t0.Add(time.Hour), kobev1.LeasePending), time.Hour, time.Time{}, 0, ErrNotBound},
		{"new lease cannot extend", mk(0, nil, t0.Add(time.Hour), ""), time.Hour, time.Time{}, 0, ErrNotBound},
		{"released lease cannot extend", mk(0, nil, t0.Add(time.Hour), kobev1.LeaseReleased), time.Hour, time.Time{}, 0, ErrNotBound},
		{"bound lease without expiry cannot extend", noExpiry, time.Hour, time.Time{}, 0, ErrNotBound},
		{"lease being deleted cannot extend", deleting, time.Hour, time.Time{}, 0, ErrNotBound},
		{"zero extension refused", mk(0, nil, t0.Add(time.Hour), kobev1.LeaseBound), 0, time.Time{}, 0, ErrBadExtension},
		{"negative extension refused", mk(0, nil, t0.Add(time.Hour), kobev1.LeaseBound), -time.Minute, time.Time{}, 0, ErrBadExtension},
		{"at its expiry it cannot come back", mk(0, nil, t0, kobev1.LeaseBound), time.Hour, time.Time{}, 0, ErrExpired},
		{"expired an hour ago (operator was down)", mk(0, nil, t0.Add(-time.Hour), kobev1.LeaseBound), time.Hour, time.Time{}, 0, ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.lease.DeepCopy()
			shared := tt.lease.Status.ExpiresAt
			err := Extend(tt.lease, tt.by, t0)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if !equality.Semantic.DeepEqual(before, tt.lease) {
					t.Fatalf("a refused extension changed the lease: %+v, want %+v", tt.lease.Status, before.Status)
				}
				return
			}
			if err != nil {
				t.Fatalf("Extend: %v", err)
			}
			if got := tt.lease.Status.ExpiresAt.Time; !got.Equal(tt.want) || tt.lease.Status.Extensions != tt.wantExts {
				t.Fatalf("after Extend: expiresAt %s, extensions %d; want %s, %d", got, tt.lease.Status.Extensions, tt.want, tt.wantExts)
			}
			if !shared.Equal(before.Status.ExpiresAt) {
				t.Fatalf("Extend wrote through the old expiresAt pointer (%s), which a cache may share", shared)
			}
		})
	}
}
