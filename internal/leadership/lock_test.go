package leadership

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeLock answers writes with err and names itself id.
type fakeLock struct {
	resourcelock.Interface
	id  string
	err error
}

func (f *fakeLock) Identity() string { return f.id }
func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}

func TestLockCertainty(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	own := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	cases := []struct {
		name string
		run  func(l *Lock, f *fakeLock, clk *clocktesting.FakePassiveClock)
		want bool
	}{{
		name: "never acquired",
		run:  func(*Lock, *fakeLock, *clocktesting.FakePassiveClock) {},
	}, {
		name: "just acquired",
		run: func(l *Lock, _ *fakeLock, _ *clocktesting.FakePassiveClock) {
			_ = l.Create(ctx, own)
		},
		want: true,
	}, {
		name: "renewed a moment under the window ago",
		run: func(l *Lock, _ *fakeLock, clk *clocktesting.FakePassiveClock) {
			_ = l.Update(ctx, own)
			clk.SetTime(start.Add(10*time.Second - time.Millisecond))
		},
		want: true,
	}, {
		name: "resumed after a pause as long as the window",
		run: func(l *Lock, _ *fakeLock, clk *clocktesting.FakePassiveClock) {
			_ = l.Update(ctx, own)
			clk.SetTime(start.Add(20 * time.Second))
		},
	}, {
		name: "renewals failing since the window began",
		run: func(l *Lock, f *fakeLock, clk *clocktesting.FakePassiveClock) {
			_ = l.Update(ctx, own)
			f.err = errors.New("connection refused")
			for i := 1; i <= 5; i++ {
				clk.SetTime(start.Add(time.Duration(i) * 2 * time.Second))
				_ = l.Update(ctx, own)
			}
		},
	}, {
		name: "a failed renewal after a good one keeps the good one",
		run: func(l *Lock, f *fakeLock, clk *clocktesting.FakePassiveClock) {
			_ = l.Update(ctx, own)
			clk.SetTime(start.Add(2 * time.Second))
			f.err = errors.New("timeout")
			_ = l.Update(ctx, own)
		},
		want: true,
	}, {
		name: "released",
		run: func(l *Lock, _ *fakeLock, _ *clocktesting.FakePassiveClock) {
			_ = l.Update(ctx, own)
			_ = l.Update(ctx, resourcelock.LeaderElectionRecord{})
		},
	}, {
		name: "a record naming another replica",
		run: func(l *Lock, _ *fakeLock, _ *clocktesting.FakePassiveClock) {
			_ = l.Update(ctx, own)
			_ = l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "other"})
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			f := &fakeLock{id: "me"}
			l := &Lock{Interface: f, Window: 10 * time.Second, Clock: clk}
			tc.run(l, f, clk)
			if got := l.Certain(); got != tc.want {
				t.Errorf("Certain() = %v, want %v", got, tc.want)
			}
		})
	}
	if !Certain(nil) {
		t.Error("Certain(nil) = false: without an election a replica always acts")
	}
}
