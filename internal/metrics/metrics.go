// Package metrics defines kobe's Prometheus collectors (prefix kobe_),
// registered on controller-runtime's registry so that the operator's metrics
// endpoint serves them (never the lease API's port).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	leaseRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kobe_lease_requests_total",
		Help: "Lease API requests by pool and outcome (bound, pending, refused, error).",
	}, []string{"pool", "outcome"})

	leasesEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kobe_leases_ended_total",
		Help: "Leases that ended, by pool and reason (Released, Expired, QueueTimeout, InstanceLost).",
	}, []string{"pool", "reason"})

	bindLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kobe_bind_duration_seconds",
		Help:    "Time from lease creation to Bound, by pool and path (api: fast path, controller: from the queue).",
		Buckets: []float64{0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"pool", "path"})

	handoutPhase = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kobe_handout_phase_seconds",
		Help: "Time a POST /v1/leases spends in each phase on the replica that served it: authenticate (the caller's credential), " +
			"admit (policy, pool, limits), create (the ClusterLease, and the caller's ledger when a limit or alias needs it), " +
			"bind (the member's claim), mint (the kubeconfig), answer (encoding and writing the response). " +
			"A request answered Pending has no bind or mint; a refused one stops after its phase.",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	}, []string{"phase"})

	queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kobe_pool_queue_depth",
		Help: "Leases waiting for a member, by pool.",
	}, []string{"namespace", "pool"})

	poolMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kobe_pool_members",
		Help: "Pool members by phase (ready, leased, creating, recycling, unhealthy, quarantined).",
	}, []string{"namespace", "pool", "phase"})

	poolFailures = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kobe_pool_failures",
		Help: "Consecutive members of a pool that failed to become Ready (the pool's status.failures; 0 again once one is Ready).",
	}, []string{"namespace", "pool"})

	memberFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kobe_pool_member_failures_total",
		Help: "Members that failed to become Ready, by pool and reason (ProvisionFailed, CreatingTimeout, ...); the total that status.failures, a streak, does not keep.",
	}, []string{"namespace", "pool", "reason"})
	leakedMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kobe_leaked_members",
		Help: "What the last periodic sweep found of members no ClusterInstance owns (a member directory, its stray processes, a host object), by backend.",
	}, []string{"backend"})
	leaksRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kobe_leaks_removed_total",
		Help: "Pieces of members no ClusterInstance owned that a sweep destroyed, by backend.",
	}, []string{"backend"})
)

func init() {
	crmetrics.Registry.MustRegister(leaseRequests, leasesEnded, bindLatency, handoutPhase, queueDepth, poolMembers, poolFailures, memberFailures, leakedMembers, leaksRemoved)
}

// The phases of a hand-out (kobe_handout_phase_seconds).
const (
	PhaseAuthenticate = "authenticate"
	PhaseAdmit        = "admit"
	PhaseCreate       = "create"
	PhaseBind         = "bind"
	PhaseMint         = "mint"
	PhaseAnswer       = "answer"
)

// HandoutPhase records how long one phase of a POST /v1/leases took, so that
// a slow hand-out on a user's cluster can be explained from /metrics.
func HandoutPhase(phase string, d time.Duration) {
	handoutPhase.WithLabelValues(phase).Observe(d.Seconds())
}

// LeaseRequest counts one lease API request outcome.
func LeaseRequest(pool, outcome string) { leaseRequests.WithLabelValues(pool, outcome).Inc() }

// LeaseBound records the time from a lease's creation to its bind.
func LeaseBound(pool, path string, d time.Duration) {
	bindLatency.WithLabelValues(pool, path).Observe(d.Seconds())
}

// LeaseEnded counts a lease that ended.
func LeaseEnded(pool, reason string) { leasesEnded.WithLabelValues(pool, reason).Inc() }

// MemberFailure counts a member of a pool that failed to become Ready.
func MemberFailure(namespace, pool, reason string) {
	memberFailures.WithLabelValues(namespace, pool, reason).Inc()
}

// PoolCounters publishes a pool's status counters.
type PoolCounters struct {
	Ready, Leased, Creating, Recycling, Unhealthy, Quarantined, QueueDepth, Failures int32
}

// SetPool publishes a pool's counters.
func SetPool(namespace, pool string, c PoolCounters) {
	for phase, v := range map[string]int32{
		"ready": c.Ready, "leased": c.Leased, "creating": c.Creating, "recycling": c.Recycling,
		"unhealthy": c.Unhealthy, "quarantined": c.Quarantined,
	} {
		poolMembers.WithLabelValues(namespace, pool, phase).Set(float64(v))
	}
	queueDepth.WithLabelValues(namespace, pool).Set(float64(c.QueueDepth))
	poolFailures.WithLabelValues(namespace, pool).Set(float64(c.Failures))
}

// DeletePool forgets a deleted pool's series.
func DeletePool(namespace, pool string) {
	for _, phase := range []string{"ready", "leased", "creating", "recycling", "unhealthy", "quarantined"} {
		poolMembers.DeleteLabelValues(namespace, pool, phase)
	}
	queueDepth.DeleteLabelValues(namespace, pool)
	poolFailures.DeleteLabelValues(namespace, pool)
	memberFailures.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "pool": pool})
}

// SetLeaks publishes how much of members nobody owns a sweep found.
func SetLeaks(backend string, n int) { leakedMembers.WithLabelValues(backend).Set(float64(n)) }

// LeaksRemoved counts what a sweep destroyed.
func LeaksRemoved(backend string, n int) { leaksRemoved.WithLabelValues(backend).Add(float64(n)) }

// Leaks reads kobe_leaked_members of a backend (for tests).
func Leaks(backend string) float64 {
	var m dto.Metric
	if err := leakedMembers.WithLabelValues(backend).Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}
