package soak

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Kind names a broken promise.
type Kind string

// The violations the soak fails on.
const (
	// DoubleBind: a member named two leases, a lease was named by two
	// members, or two Bound leases named one member.
	DoubleBind Kind = "double bind"
	// LostLease: a lease its client was told it got (or was waiting for)
	// ended, or went, without its release or its expiry.
	LostLease Kind = "lost lease"
	// StuckLease: Pending, or Bound but unusable, for longer than allowed.
	StuckLease Kind = "stuck lease"
	// OutlivedExpiry: Bound, or handing out a usable kubeconfig, more than
	// the grace after its expiresAt.
	OutlivedExpiry Kind = "outlived expiry"
	// LeakedMember: once the pool settled, more members than its size, or a
	// member whose lease ended still there.
	LeakedMember Kind = "leaked member"
	// UnconfirmedCredential: a kubeconfig for a member that did not name
	// the lease.
	UnconfirmedCredential Kind = "credential for an unconfirmed bind"
)

// Violation is one broken promise, as first seen.
type Violation struct {
	At     time.Time
	Kind   Kind
	Lease  string
	Member string
	Detail string
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s %s:", v.At.UTC().Format("15:04:05.000"), v.Kind)
	if v.Lease != "" {
		s += " lease " + v.Lease
	}
	if v.Member != "" {
		s += " member " + v.Member
	}
	return s + ": " + v.Detail
}

// Limits are the bounds the checker holds the system to.
type Limits struct {
	// ExpiryGrace is how long past its expiresAt a lease may stay Bound
	// while a leader renews (the operator's own lag); every moment without
	// a renewing leader is added to it.
	ExpiryGrace time.Duration
	// StuckAfter is how long a lease may be Pending, or Bound but
	// unusable, besides the time without a renewing leader.
	StuckAfter time.Duration
}

// Member is a ClusterInstance as the API server showed it.
type Member struct {
	Name string
	UID  types.UID
	Pool string
	// LeaseName and LeaseUID are spec.leaseRef, empty when unclaimed.
	LeaseName string
	LeaseUID  types.UID
	Deleting  bool
}

// Lease is a ClusterLease as the API server showed it.
type Lease struct {
	Name  string
	UID   types.UID
	Phase string
	// MemberName and MemberUID are status.instanceRef.
	MemberName string
	MemberUID  types.UID
	ExpiresAt  time.Time
	// EndedAt is status.endedAt: when the operator ended the lease, to the
	// second (truncated).
	EndedAt time.Time
	// EndReason is the Ended condition's reason once the lease ended.
	EndReason string
}

// Lease phases and end reasons, as the API spells them.
const (
	PhasePending     = "Pending"
	PhaseBound       = "Bound"
	PhaseReleased    = "Released"
	PhaseExpired     = "Expired"
	PhaseRecycling   = "Recycling"
	PhaseQuarantined = "Quarantined"
)

func ended(phase string) bool {
	switch phase {
	case PhaseReleased, PhaseExpired, PhaseRecycling, PhaseQuarantined:
		return true
	}
	return false
}

// Grant is what a client was told when it got a lease (a POST answered
// Bound, or a GET of its Pending lease showing Bound), and what it read
// live from the API server right after.
type Grant struct {
	Lease string
	// Member is the answer's cluster_name; KubeconfigMember the cluster of
	// the kubeconfig's current context.
	Member, KubeconfigMember string
	ExpiresAt                time.Time
	// CertNotAfter is the kubeconfig's client certificate's NotAfter.
	CertNotAfter time.Time
	// MemberRead is set when a live GET of Member answered; MemberFound
	// when it found it, and MemberLeaseRef is its spec.leaseRef.name.
	MemberRead, MemberFound bool
	MemberLeaseRef          string
}

// Seen is a client's GET of a lease it holds and has not released.
type Seen struct {
	Code       int
	Phase      string
	Kubeconfig bool
}

// Stats count what the checker saw.
type Stats struct {
	Grants, PendingAnswers, Releases int
	// EndedBy counts the leases seen ending, by end reason.
	EndedBy map[string]int
	// MembersSeen counts members seen; LeasesSeen leases.
	MembersSeen, LeasesSeen int
	// UnverifiedGrants were neither read live nor seen claimed by their
	// member in the watch.
	UnverifiedGrants int
	// Unanswered counts leases in the API server no client was told of
	// (their POST was cut by a fault).
	Unanswered int
	// LeaderGaps is every stretch without a renewing leader.
	LeaderGaps []time.Duration
}

type leaseTrack struct {
	cur                 Lease
	known, gone         bool
	firstSeen, endedAt  time.Time
	grant               *Grant
	pendingSince        time.Time
	releasedAt          time.Time
	apiUnusableSince    time.Time
	clientUnusableSince time.Time
	flagged             map[Kind]bool
}

type memberTrack struct {
	cur        Member
	gone       bool
	claims     []string // lease keys ever named, in order
	claimNames []string // their names
}

// Checker turns observations into violations. It is not safe for
// concurrent use; every method takes the observation's time.
type Checker struct {
	limits     Limits
	leases     map[string]*leaseTrack
	members    map[types.UID]*memberTrack
	byName     map[string]*memberTrack
	claimedBy  map[string][]types.UID // lease key -> members that named it
	leader     leaderLog
	violations []Violation
	stats      Stats
}

// NewChecker returns a checker holding the system to l.
func NewChecker(l Limits) *Checker {
	return &Checker{
		limits: l, leases: map[string]*leaseTrack{}, members: map[types.UID]*memberTrack{},
		byName: map[string]*memberTrack{}, claimedBy: map[string][]types.UID{},
		stats: Stats{EndedBy: map[string]int{}},
	}
}

// Add records violations found outside the checker (Leaks).
func (c *Checker) Add(vs ...Violation) { c.violations = append(c.violations, vs...) }

// Violations returns every violation so far, in the order found.
func (c *Checker) Violations() []Violation { return slices.Clone(c.violations) }

// Stats returns the counts so far.
func (c *Checker) Stats() Stats {
	s := c.stats
	s.EndedBy = map[string]int{}
	for k, v := range c.stats.EndedBy {
		s.EndedBy[k] = v
	}
	s.LeaderGaps = c.leader.durations()
	for _, t := range c.leases {
		if t.known && t.grant == nil && t.pendingSince.IsZero() {
			s.Unanswered++
		}
	}
	return s
}

func (c *Checker) lease(name string) *leaseTrack {
	t := c.leases[name]
	if t == nil {
		t = &leaseTrack{flagged: map[Kind]bool{}}
		c.leases[name] = t
	}
	return t
}

// flag records a violation once per lease and kind.
func (c *Checker) flag(at time.Time, t *leaseTrack, k Kind, lease, member, format string, args ...any) {
	if t != nil {
		if t.flagged[k] {
			return
		}
		t.flagged[k] = true
	}
	c.violations = append(c.violations, Violation{At: at, Kind: k, Lease: lease, Member: member, Detail: fmt.Sprintf(format, args...)})
}

// allowance is base plus the time without a renewing leader in [from, to].
func (c *Checker) allowance(base time.Duration, from, to time.Time) time.Duration {
	return base + c.leader.without(from, to)
}

// undecided is, within [from, to], the time since the leader's last
// renewal while no stretch without a leader is open yet: a leader frozen
// since then is told from a live one only leaderStale later, so a check
// made now must allow for it. Once a renewal or an open stretch decides it,
// the check counts exactly.
func (c *Checker) undecided(from, to time.Time) time.Duration {
	l := &c.leader
	if !l.open.IsZero() || l.lastRenew.IsZero() {
		return 0
	}
	if a := maxTime(l.lastRenew, from); to.After(a) {
		return to.Sub(a)
	}
	return 0
}

// ObserveLeader records whether a leader renewed recently at at; lastRenew
// is the leader lease's renewTime, where a stretch without one begins.
func (c *Checker) ObserveLeader(at time.Time, acting bool, lastRenew time.Time) {
	c.leader.observe(at, acting, lastRenew)
}

// ObserveMember records a member as the API server showed it.
func (c *Checker) ObserveMember(at time.Time, m Member) {
	mt := c.members[m.UID]
	if mt == nil {
		mt = &memberTrack{}
		c.members[m.UID] = mt
		c.stats.MembersSeen++
	}
	mt.cur = m
	c.byName[m.Name] = mt
	key := leaseKey(m.LeaseName, m.LeaseUID)
	if key == "" || slices.Contains(mt.claims, key) {
		return
	}
	mt.claims = append(mt.claims, key)
	mt.claimNames = append(mt.claimNames, m.LeaseName)
	if len(mt.claims) > 1 {
		c.flag(at, nil, DoubleBind, m.LeaseName, m.Name, "the member named leases %v over time", mt.claimNames)
	}
	c.claimedBy[key] = append(c.claimedBy[key], m.UID)
	if others := c.claimedBy[key]; len(others) > 1 {
		c.flag(at, c.leases[m.LeaseName], DoubleBind, m.LeaseName, m.Name, "the lease is named by %d members: %v%s", len(others), c.memberNames(others), c.grantText(m.LeaseName))
	}
}

// memberNames are the members' names (and UIDs), for a report.
func (c *Checker) memberNames(uids []types.UID) []string {
	var out []string
	for _, u := range uids {
		name := "?"
		if mt := c.members[u]; mt != nil {
			name = mt.cur.Name
		}
		out = append(out, fmt.Sprintf("%s (%s)", name, u))
	}
	return out
}

// grantText says which member the lease's client was handed, if any yet.
func (c *Checker) grantText(lease string) string {
	if t := c.leases[lease]; t != nil && t.grant != nil {
		return fmt.Sprintf("; its client was handed a kubeconfig for %s", t.grant.Member)
	}
	return "; no kubeconfig handed out yet"
}

// ObserveMemberGone records that a member no longer exists.
func (c *Checker) ObserveMemberGone(_ time.Time, uid types.UID) {
	if mt := c.members[uid]; mt != nil {
		mt.gone = true
	}
}

func leaseKey(name string, uid types.UID) string {
	if uid != "" {
		return string(uid)
	}
	if name != "" {
		return "name:" + name
	}
	return ""
}

// ObserveLease records a lease as the API server showed it.
func (c *Checker) ObserveLease(at time.Time, l Lease) {
	t := c.lease(l.Name)
	if !t.known {
		t.known, t.firstSeen = true, at
		c.stats.LeasesSeen++
	}
	if !t.endedAt.IsZero() && !ended(l.Phase) {
		// An ended lease never comes back: this is an older state that a
		// watch delivered after a live read had shown the end.
		return
	}
	t.cur = l
	if l.Phase == PhaseBound && l.MemberUID != "" {
		c.checkSharedMember(at, t)
	}
	if ended(l.Phase) && t.endedAt.IsZero() {
		t.endedAt = at
		reason := l.EndReason
		if reason == "" {
			reason = l.Phase
		}
		c.stats.EndedBy[reason]++
		c.checkEnd(at, t, reason)
	}
}

// checkSharedMember flags two Bound leases naming one member.
func (c *Checker) checkSharedMember(at time.Time, t *leaseTrack) {
	for name, o := range c.leases {
		if o == t || o.gone || o.cur.Phase != PhaseBound || o.cur.MemberUID != t.cur.MemberUID {
			continue
		}
		c.flag(at, t, DoubleBind, t.cur.Name, t.cur.MemberName, "lease %s is Bound to the same member", name)
	}
}

// ObserveLeaseGone records that a lease no longer exists.
func (c *Checker) ObserveLeaseGone(at time.Time, name string) {
	t := c.lease(name)
	if t.gone {
		return
	}
	t.gone = true
	if t.endedAt.IsZero() {
		t.endedAt = at
		c.checkEnd(at, t, "deleted")
	}
}

// checkEnd judges a lease's end (by reason, or "deleted") against what its
// client was told and did, and against its expiry.
func (c *Checker) checkEnd(at time.Time, t *leaseTrack, reason string) {
	name := t.cur.Name
	if name == "" && t.grant != nil {
		name = t.grant.Lease
	}
	released := !t.releasedAt.IsZero() && !t.releasedAt.After(at)
	exp := t.expiresAt()
	expired := !exp.IsZero() && !at.Before(exp.Add(-time.Second))
	if t.grant != nil || !t.pendingSince.IsZero() {
		switch {
		case reason == PhaseReleased && released, reason == PhaseExpired && expired:
		case reason == "deleted" && (released || expired):
		default:
			c.flag(at, t, LostLease, name, t.cur.MemberName, "ended (%s) while its client held or awaited it (released: %t, expiresAt %s)", reason, released, stamp(exp))
		}
	}
	if !exp.IsZero() && t.cur.Phase != PhasePending {
		// When it ended: as observed, or by its endedAt when that is
		// earlier (the watch lags its writes, by seconds after a
		// kube-apiserver restart). endedAt is truncated to the second, so
		// the end lies within the second after it.
		end := at
		if e := t.cur.EndedAt; !e.IsZero() && e.Add(time.Second).Before(end) {
			end = e.Add(time.Second)
		}
		if over := end.Sub(exp); over > c.allowance(c.limits.ExpiryGrace, exp, end) {
			c.flag(at, t, OutlivedExpiry, name, t.cur.MemberName, "ended %s after its expiresAt %s (allowed %s)", over.Round(time.Millisecond), stamp(exp), c.allowance(c.limits.ExpiryGrace, exp, end).Round(time.Millisecond))
		}
	}
}

func (t *leaseTrack) expiresAt() time.Time {
	if !t.cur.ExpiresAt.IsZero() {
		return t.cur.ExpiresAt
	}
	if t.grant != nil {
		return t.grant.ExpiresAt
	}
	return time.Time{}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format("15:04:05.000")
}

// ClientPending records that a client was answered Pending for lease.
func (c *Checker) ClientPending(at time.Time, lease string) {
	c.stats.PendingAnswers++
	if t := c.lease(lease); t.pendingSince.IsZero() {
		t.pendingSince = at
	}
}

// ClientGranted records a kubeconfig handed to a client and checks it
// against the member's leaseRef and the lease's expiry.
func (c *Checker) ClientGranted(at time.Time, g Grant) {
	c.stats.Grants++
	t := c.lease(g.Lease)
	t.grant = &g
	if g.KubeconfigMember != g.Member {
		c.flag(at, t, UnconfirmedCredential, g.Lease, g.Member, "the kubeconfig's context names cluster %q", g.KubeconfigMember)
	}
	switch {
	case !g.MemberRead:
	case !g.MemberFound:
		c.flag(at, t, UnconfirmedCredential, g.Lease, g.Member, "the member does not exist (read live after the answer)")
	case g.MemberLeaseRef != g.Lease:
		c.flag(at, t, UnconfirmedCredential, g.Lease, g.Member, "the member's spec.leaseRef names %q (read live after the answer)", g.MemberLeaseRef)
	}
	if g.CertNotAfter.After(g.ExpiresAt.Add(time.Second)) {
		c.flag(at, t, OutlivedExpiry, g.Lease, g.Member, "the certificate is valid until %s, the lease expires at %s", stamp(g.CertNotAfter), stamp(g.ExpiresAt))
	}
	if at.After(g.ExpiresAt.Add(c.limits.ExpiryGrace)) {
		c.flag(at, t, OutlivedExpiry, g.Lease, g.Member, "a kubeconfig was handed out %s after expiresAt", at.Sub(g.ExpiresAt).Round(time.Millisecond))
	}
}

// ClientReleased records that a client asked to release lease (call it
// before sending the request).
func (c *Checker) ClientReleased(at time.Time, lease string) {
	if t := c.lease(lease); t.releasedAt.IsZero() {
		t.releasedAt = at
		c.stats.Releases++
	}
}

// ClientSaw records a client's GET of a lease it was granted and has not
// released.
func (c *Checker) ClientSaw(at time.Time, lease string, s Seen) {
	t := c.lease(lease)
	if t.grant == nil || !t.releasedAt.IsZero() {
		return
	}
	exp := t.grant.ExpiresAt
	beforeExpiry := at.Before(exp.Add(-time.Second))
	switch {
	case s.Code == 404 && beforeExpiry:
		c.flag(at, t, LostLease, lease, t.grant.Member, "GET answered 404 before its release or expiry")
	case ended(s.Phase) && beforeExpiry:
		c.flag(at, t, LostLease, lease, t.grant.Member, "GET shows it %s before its release or expiry", s.Phase)
	case s.Phase == PhaseBound && s.Kubeconfig && at.After(exp.Add(c.limits.ExpiryGrace)):
		c.flag(at, t, OutlivedExpiry, lease, t.grant.Member, "GET still hands out a kubeconfig %s after expiresAt", at.Sub(exp).Round(time.Millisecond))
	case s.Phase == PhaseBound && !s.Kubeconfig && beforeExpiry:
		if t.clientUnusableSince.IsZero() {
			t.clientUnusableSince = at
		}
		return
	}
	t.clientUnusableSince = time.Time{}
}

// Tick checks, at now, what can only be seen by its absence: leases still
// Pending, still Bound past their expiry, or Bound to a member that does
// not name them.
func (c *Checker) Tick(now time.Time) {
	for _, name := range sortedKeys(c.leases) {
		t := c.leases[name]
		if !t.known || t.gone || !t.endedAt.IsZero() {
			continue
		}
		switch t.cur.Phase {
		case "", PhasePending:
			c.checkPending(now, t)
		case PhaseBound:
			c.checkBound(now, t)
		}
	}
}

// Overdue names the leases Tick at now would find still Bound past their
// expiry, so that the harness can read them live first (ObserveLease): the
// watch may lag, and a lease it still shows Bound may have ended.
func (c *Checker) Overdue(now time.Time) []string {
	var out []string
	for _, name := range sortedKeys(c.leases) {
		t := c.leases[name]
		if !t.known || t.gone || !t.endedAt.IsZero() || t.cur.Phase != PhaseBound || t.cur.ExpiresAt.IsZero() {
			continue
		}
		if exp := t.cur.ExpiresAt; now.Sub(exp) > c.allowance(c.limits.ExpiryGrace, exp, now)+c.undecided(exp, now) {
			out = append(out, name)
		}
	}
	return out
}

func (c *Checker) checkPending(now time.Time, t *leaseTrack) {
	since := t.firstSeen
	if !t.pendingSince.IsZero() && t.pendingSince.Before(since) {
		since = t.pendingSince
	}
	if allowed := c.allowance(c.limits.StuckAfter, since, now); now.Sub(since) > allowed {
		c.flag(now, t, StuckLease, t.cur.Name, "", "Pending for %s (allowed %s)", now.Sub(since).Round(time.Second), allowed.Round(time.Second))
	}
}

func (c *Checker) checkBound(now time.Time, t *leaseTrack) {
	l := t.cur
	if exp := l.ExpiresAt; !exp.IsZero() {
		// Still Bound is judged only once it is late whether or not the
		// leader froze after its last renewal (undecided); an end seen
		// later is judged exactly (checkEnd).
		if allowed := c.allowance(c.limits.ExpiryGrace, exp, now) + c.undecided(exp, now); now.Sub(exp) > allowed {
			c.flag(now, t, OutlivedExpiry, l.Name, l.MemberName, "still Bound %s after its expiresAt %s (allowed %s)", now.Sub(exp).Round(time.Millisecond), stamp(exp), allowed.Round(time.Millisecond))
		}
	}
	mt := c.members[l.MemberUID]
	if mt == nil {
		mt = c.byName[l.MemberName]
	}
	if mt != nil && !mt.gone && leaseKey(mt.cur.LeaseName, mt.cur.LeaseUID) == leaseKey(l.Name, l.UID) {
		t.apiUnusableSince = time.Time{}
	} else if t.apiUnusableSince.IsZero() {
		t.apiUnusableSince = now
	}
	for _, since := range []time.Time{t.apiUnusableSince, t.clientUnusableSince} {
		if since.IsZero() {
			continue
		}
		if allowed := c.allowance(c.limits.StuckAfter, since, now); now.Sub(since) > allowed {
			c.flag(now, t, StuckLease, l.Name, l.MemberName, "Bound but unusable for %s (its member does not name it, or GET gives no kubeconfig; allowed %s)", now.Sub(since).Round(time.Second), allowed.Round(time.Second))
		}
	}
}

// Final checks, once every client stopped, each grant against the member
// claims the watch recorded: every granted lease must have been seen, and
// its member, when seen, must have named it.
func (c *Checker) Final(now time.Time) {
	for _, name := range sortedKeys(c.leases) {
		t := c.leases[name]
		if t.grant == nil {
			continue
		}
		if !t.known {
			c.flag(now, t, LostLease, name, t.grant.Member, "granted, never seen in the API server")
			continue
		}
		if t.grant.MemberRead {
			// Read live right after the answer: ClientGranted judged that
			// read. The watch may have missed the claim altogether (it was
			// made and undone while a kube-apiserver restart cut the watch).
			continue
		}
		mt := c.byName[t.grant.Member]
		if mt == nil {
			c.stats.UnverifiedGrants++
			continue
		}
		if !slices.Contains(mt.claims, leaseKey(t.cur.Name, t.cur.UID)) && !slices.Contains(mt.claims, leaseKey(t.cur.Name, "")) {
			c.flag(now, t, UnconfirmedCredential, name, t.grant.Member, "its member never named it (it named %v)", mt.claims)
		}
	}
	c.Tick(now)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Snapshot is a pool's members and the namespace's leases, read at once
// after the clients stopped.
type Snapshot struct {
	Pool     string
	PoolSize int
	Members  []Member
	Leases   []Lease
}

// Leaks returns what is left over in a settled pool: more unclaimed members
// than its size, or members whose lease ended or is gone. The harness polls it
// until it is empty or a grace has passed.
func Leaks(at time.Time, s Snapshot) []Violation {
	leases := map[string]Lease{}
	for _, l := range s.Leases {
		leases[l.Name] = l
	}
	var out []Violation
	warm := 0 // unclaimed and not being deleted: what the pool's size counts
	for _, m := range s.Members {
		if m.Pool != s.Pool {
			continue
		}
		if m.LeaseName == "" {
			if !m.Deleting {
				warm++
			}
			continue
		}
		l, ok := leases[m.LeaseName]
		switch {
		case !ok:
			out = append(out, Violation{At: at, Kind: LeakedMember, Lease: m.LeaseName, Member: m.Name, Detail: "its lease is gone, the member is still there"})
		case ended(l.Phase):
			out = append(out, Violation{At: at, Kind: LeakedMember, Lease: m.LeaseName, Member: m.Name, Detail: fmt.Sprintf("its lease ended (%s), the member is still there", l.Phase)})
		}
	}
	if warm > s.PoolSize {
		out = append(out, Violation{At: at, Kind: LeakedMember, Detail: fmt.Sprintf("pool %s has %d unclaimed members not being deleted, its size is %d", s.Pool, warm, s.PoolSize)})
	}
	return out
}

// leaderLog keeps the stretches without a renewing leader.
type leaderLog struct {
	gaps []interval
	// open is the start of the current stretch, zero while a leader renews.
	open time.Time
	last time.Time
	// lastRenew is the latest renewal seen.
	lastRenew time.Time
}

type interval struct{ from, to time.Time }

func (l *leaderLog) observe(at time.Time, acting bool, lastRenew time.Time) {
	l.last = at
	if lastRenew.After(l.lastRenew) {
		l.lastRenew = lastRenew
	}
	switch {
	case !acting && l.open.IsZero():
		l.open = at
		if !lastRenew.IsZero() && lastRenew.Before(at) {
			l.open = lastRenew
		}
	case acting && !l.open.IsZero():
		l.gaps = append(l.gaps, interval{l.open, at})
		l.open = time.Time{}
	}
}

// without is how long, within [from, to], no leader renewed; a stretch
// still open runs to to.
func (l *leaderLog) without(from, to time.Time) time.Duration {
	var d time.Duration
	gaps := l.gaps
	if !l.open.IsZero() {
		gaps = append(slices.Clone(gaps), interval{l.open, to})
	}
	for _, g := range gaps {
		a, b := maxTime(g.from, from), minTime(g.to, to)
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

func (l *leaderLog) durations() []time.Duration {
	var out []time.Duration
	for _, g := range l.gaps {
		out = append(out, g.to.Sub(g.from))
	}
	if !l.open.IsZero() {
		out = append(out, l.last.Sub(l.open))
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
