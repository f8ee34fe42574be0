package soak

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

var (
	t0     = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	limits = Limits{ExpiryGrace: 5 * time.Second, StuckAfter: 60 * time.Second}
)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// step is one observation at a second after t0.
type step func(c *Checker)

func member(s float64, name, lease string) step {
	return func(c *Checker) {
		m := Member{Name: name, UID: uid(name), Pool: "p", LeaseName: lease}
		if lease != "" {
			m.LeaseUID = uid(lease)
		}
		c.ObserveMember(at(s), m)
	}
}

func uid(name string) types.UID { return types.UID("uid-" + name) }

func lease(s float64, name, phase, memberName string, expires float64, reason string) step {
	return func(c *Checker) {
		l := Lease{Name: name, UID: uid(name), Phase: phase, EndReason: reason}
		if memberName != "" {
			l.MemberName, l.MemberUID = memberName, uid(memberName)
		}
		if expires != 0 {
			l.ExpiresAt = at(expires)
		}
		c.ObserveLease(at(s), l)
	}
}

// endedLease is lease expired at expires, ended by the operator at endedAt
// (whole seconds, as the API has it), observed at s.
func endedLease(s float64, name, memberName string, expires, endedAt float64) step {
	return func(c *Checker) {
		c.ObserveLease(at(s), Lease{Name: name, UID: uid(name), Phase: PhaseExpired, EndReason: "Expired",
			MemberName: memberName, MemberUID: uid(memberName), ExpiresAt: at(expires), EndedAt: at(endedAt)})
	}
}

func leaseGone(s float64, name string) step {
	return func(c *Checker) { c.ObserveLeaseGone(at(s), name) }
}

// granted is a well-formed grant of lease on memberName expiring at expires.
func granted(s float64, name, memberName string, expires float64) step {
	return grant(s, Grant{Lease: name, Member: memberName, KubeconfigMember: memberName, ExpiresAt: at(expires),
		CertNotAfter: at(expires), MemberRead: true, MemberFound: true, MemberLeaseRef: name})
}

func grant(s float64, g Grant) step { return func(c *Checker) { c.ClientGranted(at(s), g) } }

func released(s float64, name string) step {
	return func(c *Checker) { c.ClientReleased(at(s), name) }
}

func pending(s float64, name string) step { return func(c *Checker) { c.ClientPending(at(s), name) } }

func saw(s float64, name string, seen Seen) step {
	return func(c *Checker) { c.ClientSaw(at(s), name, seen) }
}

func leader(s float64, acting bool, lastRenew float64) step {
	return func(c *Checker) { c.ObserveLeader(at(s), acting, at(lastRenew)) }
}

func tick(s float64) step  { return func(c *Checker) { c.Tick(at(s)) } }
func final(s float64) step { return func(c *Checker) { c.Final(at(s)) } }

// boundCycle is a lease bound to a member at s, released 2 s later and
// ended and its member gone 1 s after that.
func boundCycle(s float64, name, memberName string) []step {
	return []step{
		member(s, memberName, ""),
		member(s+0.1, memberName, name),
		granted(s+0.2, name, memberName, s+120),
		lease(s+0.3, name, PhaseBound, memberName, s+120, ""),
		released(s+2, name),
		lease(s+3, name, PhaseReleased, memberName, s+120, "Released"),
		func(c *Checker) { c.ObserveMemberGone(at(s+3.5), uid(memberName)) },
	}
}

func TestChecker(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
		// want is the kinds of the violations expected, in order.
		want []Kind
	}{
		{name: "a released cycle", steps: append(boundCycle(0, "l1", "m1"), tick(300), final(300))},
		{name: "pending then bound, expired on time and its member gone", steps: []step{
			pending(0, "l1"), lease(0.1, "l1", PhasePending, "", 0, ""),
			member(5, "m1", "l1"), lease(5.1, "l1", PhaseBound, "m1", 20, ""), granted(5.2, "l1", "m1", 20),
			saw(10, "l1", Seen{Code: 200, Phase: PhaseBound, Kubeconfig: true}),
			tick(21), saw(24, "l1", Seen{Code: 200, Phase: PhaseBound}),
			lease(23, "l1", PhaseExpired, "m1", 20, "Expired"), tick(100), final(100),
		}},
		{name: "a member that names two leases", steps: []step{
			member(0, "m1", "l1"), member(1, "m1", "l2"),
		}, want: []Kind{DoubleBind}},
		{name: "a lease named by two members", steps: []step{
			member(0, "m1", "l1"), member(1, "m2", "l1"),
		}, want: []Kind{DoubleBind}},
		{name: "two Bound leases on one member", steps: []step{
			lease(0, "l1", PhaseBound, "m1", 100, ""), lease(1, "l2", PhaseBound, "m1", 100, ""),
		}, want: []Kind{DoubleBind}},
		{name: "lost: released without its client releasing", steps: []step{
			member(0, "m1", "l1"), granted(0.1, "l1", "m1", 120), lease(0.2, "l1", PhaseBound, "m1", 120, ""),
			lease(10, "l1", PhaseReleased, "m1", 120, "Released"),
		}, want: []Kind{LostLease}},
		{name: "lost: expired before its expiry", steps: []step{
			member(0, "m1", "l1"), granted(0.1, "l1", "m1", 120), lease(0.2, "l1", PhaseBound, "m1", 120, ""),
			lease(30, "l1", PhaseExpired, "m1", 120, "Expired"),
		}, want: []Kind{LostLease}},
		{name: "lost: the member was lost", steps: []step{
			member(0, "m1", "l1"), granted(0.1, "l1", "m1", 120), lease(0.2, "l1", PhaseBound, "m1", 120, ""),
			lease(30, "l1", PhaseRecycling, "m1", 120, "InstanceLost"),
		}, want: []Kind{LostLease}},
		{name: "lost: deleted while held", steps: []step{
			member(0, "m1", "l1"), granted(0.1, "l1", "m1", 120), lease(0.2, "l1", PhaseBound, "m1", 120, ""),
			leaseGone(30, "l1"),
		}, want: []Kind{LostLease}},
		{name: "lost: a GET answers 404", steps: []step{
			granted(0.1, "l1", "m1", 120), saw(10, "l1", Seen{Code: 404}),
		}, want: []Kind{LostLease}},
		{name: "lost: ended while its client waited", steps: []step{
			pending(0, "l1"), lease(0.1, "l1", PhasePending, "", 0, ""),
			lease(50, "l1", PhaseExpired, "", 0, "QueueTimeout"),
		}, want: []Kind{LostLease}},
		{name: "lost: granted, never seen", steps: []step{
			granted(0.1, "l1", "m1", 120), final(200),
		}, want: []Kind{LostLease}},
		{name: "a released lease is not lost", steps: []step{
			member(0, "m1", "l1"), granted(0.1, "l1", "m1", 120), lease(0.2, "l1", PhaseBound, "m1", 120, ""),
			released(5, "l1"), saw(5.5, "l1", Seen{Code: 404}), leaseGone(6, "l1"),
		}},
		{name: "stuck Pending", steps: []step{
			pending(0, "l1"), lease(0.1, "l1", PhasePending, "", 0, ""), tick(59), tick(61),
		}, want: []Kind{StuckLease}},
		{name: "Pending through a leaderless stretch is not stuck", steps: []step{
			pending(0, "l1"), lease(0.1, "l1", PhasePending, "", 0, ""),
			leader(10, true, 9), leader(20, false, 12), leader(40, true, 39), tick(70),
		}},
		{name: "Bound to a member that does not name it", steps: []step{
			member(0, "m1", ""), lease(1, "l1", PhaseBound, "m1", 1000, ""), tick(2), tick(70),
		}, want: []Kind{StuckLease}},
		{name: "Bound but GET gives no kubeconfig", steps: []step{
			member(0, "m1", "l1"), granted(0.1, "l1", "m1", 1000), lease(0.2, "l1", PhaseBound, "m1", 1000, ""),
			saw(1, "l1", Seen{Code: 200, Phase: PhaseBound}), tick(30), saw(40, "l1", Seen{Code: 200, Phase: PhaseBound}), tick(62),
		}, want: []Kind{StuckLease}},
		{name: "still Bound 6 s after expiry with a leader", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""), leader(1, true, 1), leader(23.5, true, 23.5), tick(24),
			leader(25.8, true, 25.8), tick(26),
		}, want: []Kind{OutlivedExpiry}},
		{name: "ended 8 s after expiry with a leader", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""), lease(28, "l1", PhaseExpired, "m1", 20, "Expired"),
		}, want: []Kind{OutlivedExpiry}},
		{name: "seen ended 8 s after expiry by a lagging watch, ended 1 s after by its endedAt", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""), endedLease(28, "l1", "m1", 20, 21),
		}},
		{name: "seen ended 8 s after expiry, its endedAt as late", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""), endedLease(28, "l1", "m1", 20, 27),
		}, want: []Kind{OutlivedExpiry}},
		{name: "a lagging watch's Bound after a live read's end changes nothing", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""), endedLease(26, "l1", "m1", 20, 21),
			lease(27, "l1", PhaseBound, "m1", 20, ""), tick(30),
		}},
		{name: "still Bound 5.3 s after expiry, the leader frozen since its renewal 0.5 s after the expiry", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""), leader(19, true, 19), leader(20.6, true, 20.5),
			leader(25, true, 20.5), tick(25.3), leader(25.6, false, 20.5), tick(26), leader(36, true, 36), lease(36.2, "l1", PhaseExpired, "m1", 20, "Expired"),
		}},
		{name: "still Bound past expiry with a leader renewing all along", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""),
			leader(20, true, 20), leader(22, true, 22), leader(24, true, 24), leader(26, true, 26), tick(26.5), leader(28, true, 28), tick(29.5),
		}, want: []Kind{OutlivedExpiry}},
		{name: "ended 20 s after expiry, 17 s of it without a leader", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""),
			leader(18, true, 18), leader(25, false, 19), leader(36, true, 36), tick(30), tick(39),
			lease(40, "l1", PhaseExpired, "m1", 20, "Expired"),
		}},
		{name: "a leaderless stretch before the expiry does not count", steps: []step{
			member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""),
			leader(1, false, 0.5), leader(15, true, 15), lease(27, "l1", PhaseExpired, "m1", 20, "Expired"),
		}, want: []Kind{OutlivedExpiry}},
		{name: "a certificate valid past the expiry", steps: []step{
			member(0, "m1", "l1"), grant(0.1, Grant{Lease: "l1", Member: "m1", KubeconfigMember: "m1", ExpiresAt: at(20), CertNotAfter: at(80), MemberRead: true, MemberFound: true, MemberLeaseRef: "l1"}),
		}, want: []Kind{OutlivedExpiry}},
		{name: "a kubeconfig handed out by GET 6 s past expiry", steps: []step{
			member(0, "m1", "l1"), granted(0.1, "l1", "m1", 20), saw(26, "l1", Seen{Code: 200, Phase: PhaseBound, Kubeconfig: true}),
		}, want: []Kind{OutlivedExpiry}},
		{name: "a kubeconfig for a member naming another lease", steps: []step{
			grant(0.1, Grant{Lease: "l1", Member: "m1", KubeconfigMember: "m1", ExpiresAt: at(20), CertNotAfter: at(20), MemberRead: true, MemberFound: true, MemberLeaseRef: "l9"}),
		}, want: []Kind{UnconfirmedCredential}},
		{name: "a kubeconfig for a member that does not exist", steps: []step{
			grant(0.1, Grant{Lease: "l1", Member: "m1", KubeconfigMember: "m1", ExpiresAt: at(20), CertNotAfter: at(20), MemberRead: true}),
		}, want: []Kind{UnconfirmedCredential}},
		{name: "a kubeconfig naming another cluster than the answer", steps: []step{
			grant(0.1, Grant{Lease: "l1", Member: "m1", KubeconfigMember: "m2", ExpiresAt: at(20), CertNotAfter: at(20), MemberRead: true, MemberFound: true, MemberLeaseRef: "l1"}),
		}, want: []Kind{UnconfirmedCredential}},
		{name: "the watch never saw the member name the granted lease", steps: []step{
			member(0, "m1", ""), grant(0.1, Grant{Lease: "l1", Member: "m1", KubeconfigMember: "m1", ExpiresAt: at(20), CertNotAfter: at(20)}),
			lease(0.2, "l1", PhaseBound, "m1", 20, ""), lease(21, "l1", PhaseExpired, "m1", 20, "Expired"), final(30),
		}, want: []Kind{UnconfirmedCredential}},
		{name: "a grant read live names its member; a watch that missed the claim counts for nothing", steps: []step{
			member(0, "m1", ""), granted(0.1, "l1", "m1", 20),
			lease(0.2, "l1", PhaseBound, "m1", 20, ""), lease(21, "l1", PhaseExpired, "m1", 20, "Expired"), final(30),
		}},
		{name: "each kind is reported once per lease", steps: []step{
			pending(0, "l1"), lease(0.1, "l1", PhasePending, "", 0, ""), tick(61), tick(62), tick(90),
		}, want: []Kind{StuckLease}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewChecker(limits)
			for _, s := range tc.steps {
				s(c)
			}
			var got []Kind
			for _, v := range c.Violations() {
				got = append(got, v.Kind)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want kinds %v", c.Violations(), tc.want)
			}
		})
	}
}

func TestLeaks(t *testing.T) {
	leases := []Lease{{Name: "l1", Phase: PhaseBound}, {Name: "l2", Phase: PhaseReleased}}
	cases := []struct {
		name    string
		members []Member
		want    int
	}{
		{"settled", []Member{{Name: "m1", Pool: "p"}, {Name: "m2", Pool: "p"}, {Name: "m3", Pool: "p", LeaseName: "l1"}}, 0},
		{"members being deleted beyond the size", []Member{{Name: "m1", Pool: "p"}, {Name: "m2", Pool: "p"}, {Name: "m3", Pool: "p", Deleting: true}}, 0},
		{"more members than the size", []Member{{Name: "m1", Pool: "p"}, {Name: "m2", Pool: "p"}, {Name: "m3", Pool: "p"}}, 1},
		{"a member of an ended lease", []Member{{Name: "m1", Pool: "p", LeaseName: "l2", Deleting: true}}, 1},
		{"a member of a lease that is gone", []Member{{Name: "m1", Pool: "p", LeaseName: "l7"}}, 1},
		{"other pools do not count", []Member{{Name: "m1", Pool: "q"}, {Name: "m2", Pool: "q"}, {Name: "m3", Pool: "q", LeaseName: "l7"}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Leaks(t0, Snapshot{Pool: "p", PoolSize: 2, Members: tc.members, Leases: leases})
			if len(got) != tc.want {
				t.Errorf("leaks %v, want %d", got, tc.want)
			}
			for _, v := range got {
				if v.Kind != LeakedMember {
					t.Errorf("kind %s", v.Kind)
				}
			}
		})
	}
}

func TestLeaderlessTime(t *testing.T) {
	var l leaderLog
	l.observe(at(0), true, at(0))
	l.observe(at(10), false, at(8)) // the stretch starts at the last renewal
	l.observe(at(20), true, at(20))
	l.observe(at(30), false, at(29))
	for _, tc := range []struct {
		from, to float64
		want     time.Duration
	}{
		{0, 5, 0},
		{0, 40, 12*time.Second + 11*time.Second},
		{9, 12, 3 * time.Second},
		{25, 31, 2 * time.Second},
	} {
		if got := l.without(at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("without(%v, %v) = %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestOverdue names the leases the watch shows Bound past their allowance,
// and only those, for the harness to read live.
func TestOverdue(t *testing.T) {
	c := NewChecker(limits)
	for _, s := range []step{
		member(0, "m1", "l1"), lease(0.2, "l1", PhaseBound, "m1", 20, ""),
		member(0, "m2", "l2"), lease(0.2, "l2", PhaseBound, "m2", 30, ""),
		member(0, "m3", "l3"), lease(0.2, "l3", PhaseBound, "m3", 20, ""), endedLease(22, "l3", "m3", 20, 21),
	} {
		s(c)
	}
	if got := c.Overdue(at(26)); !slices.Equal(got, []string{"l1"}) {
		t.Errorf("Overdue(26 s) = %v, want [l1]", got)
	}
	if got := c.Overdue(at(24)); len(got) != 0 {
		t.Errorf("Overdue(24 s) = %v, want none (within the 5 s grace)", got)
	}
}
