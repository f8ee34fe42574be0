package pool

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// readyAt is member n, Ready since at.
func readyAt(n int32, at time.Time) kobev1.ClusterInstance {
	return member(n, kobev1.InstanceReady, func(m *kobev1.ClusterInstance) {
		m.CreationTimestamp = metav1.NewTime(at.Add(-20 * time.Second))
		m.Status.TimeToReady = &metav1.Duration{Duration: 20 * time.Second}
	})
}

func TestCountFailures(t *testing.T) {
	name := MemberName("ci", 0)
	streak := func(f, timeouts int32, last string, ago time.Duration, counted ...string) kobev1.ClusterPoolStatus {
		return kobev1.ClusterPoolStatus{Failures: f, CreatingTimeouts: timeouts, CountedFailures: counted,
			LastFailure: &kobev1.MemberFailure{Member: last, Reason: kobev1.ReasonProvisionFailed, Time: metav1.NewTime(now.Add(-ago))}}
	}
	cases := []struct {
		name    string
		status  kobev1.ClusterPoolStatus
		members []kobev1.ClusterInstance
		// want checks failures, creatingTimeouts, countedFailures and
		// lastFailure's member and reason.
		wantFailures, wantTimeouts int32
		wantCounted                []string
		wantLast, wantLastReason   string
		wantReturned               []CountedFailure
	}{{
		name:         "a failed member is counted once and named",
		members:      []kobev1.ClusterInstance{failedMember(0, kobev1.ReasonProvisionFailed, 0)},
		wantFailures: 1, wantCounted: []string{name}, wantLast: name, wantLastReason: kobev1.ReasonProvisionFailed,
		wantReturned: []CountedFailure{{Member: name, Reason: kobev1.ReasonProvisionFailed}},
	}, {
		name:         "a member already named is not counted again",
		status:       streak(1, 0, name, 0, name),
		members:      []kobev1.ClusterInstance{failedMember(0, kobev1.ReasonProvisionFailed, 0)},
		wantFailures: 1, wantCounted: []string{name}, wantLast: name, wantLastReason: kobev1.ReasonProvisionFailed,
	}, {
		name: "failures seen together count oldest first; creatingTimeout reaps count as churn too",
		members: []kobev1.ClusterInstance{
			failedMember(2, kobev1.ReasonCreatingTimeout, 0), failedMember(1, kobev1.ReasonProvisionFailed, 5*time.Second),
			failedMember(3, kobev1.ReasonCreatingTimeout, 2*time.Second),
		},
		wantFailures: 3, wantTimeouts: 2, wantCounted: []string{MemberName("ci", 1), MemberName("ci", 3), MemberName("ci", 2)},
		wantLast: MemberName("ci", 2), wantLastReason: kobev1.ReasonCreatingTimeout,
		wantReturned: []CountedFailure{{MemberName("ci", 1), kobev1.ReasonProvisionFailed}, {MemberName("ci", 3), kobev1.ReasonCreatingTimeout}, {MemberName("ci", 2), kobev1.ReasonCreatingTimeout}},
	}, {
		name:         "the name of a member that is gone is forgotten; the streak stays",
		status:       streak(2, 0, "pool-ci-9", time.Minute, "pool-ci-9"),
		wantFailures: 2, wantLast: "pool-ci-9", wantLastReason: kobev1.ReasonProvisionFailed,
	}, {
		name:         "a member Ready after the last failure ends the streak; lastFailure stays as history",
		status:       streak(3, 2, "pool-ci-9", time.Minute),
		members:      []kobev1.ClusterInstance{readyAt(4, now.Add(-30*time.Second))},
		wantFailures: 0, wantLast: "pool-ci-9", wantLastReason: kobev1.ReasonProvisionFailed,
	}, {
		name:         "a member Ready before the last failure does not",
		status:       streak(3, 2, "pool-ci-9", time.Minute),
		members:      []kobev1.ClusterInstance{readyAt(4, now.Add(-2*time.Minute))},
		wantFailures: 3, wantTimeouts: 2, wantLast: "pool-ci-9", wantLastReason: kobev1.ReasonProvisionFailed,
	}, {
		name:         "a failure older than the last Ready member is named (so it may go) but starts no streak",
		members:      []kobev1.ClusterInstance{failedMember(0, kobev1.ReasonProvisionFailed, time.Minute), readyAt(4, now.Add(-30*time.Second))},
		wantFailures: 0, wantCounted: []string{name},
		wantReturned: []CountedFailure{{Member: name, Reason: kobev1.ReasonProvisionFailed}},
	}, {
		name: "a member recycled for another reason, or once Ready, is no failure",
		members: []kobev1.ClusterInstance{
			failedMember(0, kobev1.ReasonUnhealthy, 0),
			func() kobev1.ClusterInstance {
				m := failedMember(1, kobev1.ReasonProvisionFailed, 0)
				m.Status.TimeToReady = &metav1.Duration{Duration: time.Second}
				return m
			}(),
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.status
			got := CountFailures(&st, tc.members)
			if !reflect.DeepEqual(got, tc.wantReturned) {
				t.Errorf("counted %v, want %v", got, tc.wantReturned)
			}
			if st.Failures != tc.wantFailures || st.CreatingTimeouts != tc.wantTimeouts {
				t.Errorf("failures %d, creatingTimeouts %d; want %d, %d", st.Failures, st.CreatingTimeouts, tc.wantFailures, tc.wantTimeouts)
			}
			if len(st.CountedFailures) != len(tc.wantCounted) || (len(tc.wantCounted) > 0 && !reflect.DeepEqual(st.CountedFailures, tc.wantCounted)) {
				t.Errorf("countedFailures %v, want %v", st.CountedFailures, tc.wantCounted)
			}
			switch lf := st.LastFailure; {
			case tc.wantLast == "" && lf != nil:
				t.Errorf("lastFailure %+v, want none", lf)
			case tc.wantLast != "" && (lf == nil || lf.Member != tc.wantLast || lf.Reason != tc.wantLastReason):
				t.Errorf("lastFailure %+v, want %s (%s)", lf, tc.wantLast, tc.wantLastReason)
			}
			// Idempotent: the same members again change nothing.
			again := *st.DeepCopy()
			if more := CountFailures(&again, tc.members); len(more) > 0 || !reflect.DeepEqual(again, st) {
				t.Errorf("a second count changed the status: counted %v, %+v -> %+v", more, st, again)
			}
		})
	}
}

func TestCountFailuresRecordsTheMember(t *testing.T) {
	m := failedMember(0, kobev1.ReasonBootstrapFailed, 3*time.Second)
	m.Status.Conditions[0].Message = strings.Repeat("é", 700) // 1400 bytes
	var st kobev1.ClusterPoolStatus
	CountFailures(&st, []kobev1.ClusterInstance{m})
	lf := st.LastFailure
	if lf == nil || lf.Member != m.Name || lf.Reason != kobev1.ReasonBootstrapFailed || !lf.Time.Equal(m.Status.LastPhaseChange) ||
		lf.TemplateHash == "" || lf.TemplateHash != m.Spec.TemplateHash {
		t.Fatalf("lastFailure %+v, want %s BootstrapFailed at its move to Recycling with its template", lf, m.Name)
	}
	if len(lf.Message) > maxFailureMessage || len(lf.Message) < maxFailureMessage-1 || !utf8.ValidString(lf.Message) {
		t.Errorf("lastFailure.message is %d bytes (valid UTF-8 %v), want the first %d bytes of whole runes", len(lf.Message), utf8.ValidString(lf.Message), maxFailureMessage)
	}
}

func TestCountFailuresStopsAtTheListBound(t *testing.T) {
	st := kobev1.ClusterPoolStatus{}
	members := make([]kobev1.ClusterInstance, 0, MaxCountedFailures+2)
	for i := range int32(MaxCountedFailures + 2) {
		members = append(members, failedMember(i, kobev1.ReasonProvisionFailed, time.Duration(MaxCountedFailures+2-i)*time.Second))
	}
	counted := CountFailures(&st, members)
	if len(counted) != MaxCountedFailures || len(st.CountedFailures) != MaxCountedFailures || st.Failures != MaxCountedFailures {
		t.Fatalf("counted %d, named %d, failures %d; want %d each", len(counted), len(st.CountedFailures), st.Failures, MaxCountedFailures)
	}
	// The two left over wait, still present, until two named members are
	// gone and their names leave the list.
	counted = CountFailures(&st, members[2:])
	if want := fmt.Sprint([]string{MemberName("ci", MaxCountedFailures), MemberName("ci", MaxCountedFailures+1)}); fmt.Sprint(names(counted)) != want {
		t.Errorf("after two members went, counted %v, want %s", names(counted), want)
	}
}

func names(cs []CountedFailure) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Member
	}
	return out
}
