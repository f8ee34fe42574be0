package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/auth"
	kubebackend "github.com/kunobi-ninja/kobe/internal/backend/kubernetes"
	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/internal/cleanup"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// options are the operator's flags: its own, then one set per component,
// which binds and validates its flags in the component's package.
type options struct {
	namespace         string
	metricsAddr       string
	probeAddr         string
	pprofAddr         string
	bindAllInterfaces bool
	leaderElect       bool
	leaderElectTimes  leaderElectTimings
	enableSim         bool
	sweep             sweepFlags
	memberPoll        time.Duration
	poolWorkers       int
	memberWorkers     int
	leaseWorkers      int
	hostAPI           hostAPILimits

	local          local.Flags
	kubernetes     kubebackend.Flags
	api            apiserver.Flags
	auth           auth.Flags
	leaseLimits    leaseservice.Flags
	leaseRetention clusterlease.Flags
	receipts       cleanup.Flags
	memberLimits   pool.LimitFlags
}

func (o *options) bind(fs *flag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	fs.StringVar(&o.namespace, "namespace", ns, "Namespace whose pools, instances, leases and access policies the operator manages and the API serves.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "", "Address of the controller metrics endpoint (default 127.0.0.1:8080; :8080 with --"+bindAllInterfacesFlag+"); 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", "", "Address of the /healthz and /readyz probes (default 127.0.0.1:8081; :8081 with --"+bindAllInterfacesFlag+"); 0 disables them.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Serve Go's /debug/pprof on this address (e.g. 127.0.0.1:6060) for profiling; empty disables it.")
	fs.BoolVar(&o.bindAllInterfaces, bindAllInterfacesFlag, false, "Let endpoints served over plain HTTP (metrics, probes, pprof, and the API without TLS) listen beyond loopback: on every interface by default, or on the non-loopback address given. Only where the network in front of them is trusted, e.g. a pod network behind a NetworkPolicy.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that several replicas can run; only the leader reconciles.")
	o.leaderElectTimes.bind(fs)
	fs.BoolVar(&o.enableSim, "enable-sim-backend", false, "Wire the sim backend: pools with backend.type sim get simulated members, with no cluster behind them, whose kubeconfigs point at an address that answers nothing. For benchmarks, scale tests and demos only; never for real use.")
	o.sweep.bind(fs)
	o.hostAPI.bind(fs)
	fs.IntVar(&o.poolWorkers, "pool-workers", defaultPoolWorkers, "Pools reconciled at once (1 to 256). A pool that fills waits on the host API server for each member it creates, and a pool's status waits behind the pools queued before it: with many pools, more workers fill them side by side.")
	fs.IntVar(&o.leaseWorkers, "lease-workers", defaultLeaseWorkers, "Leases reconciled at once (1 to 256). A new leader looks at every lease kept for --lease-retention; with more workers, the leases that must bind or end now do not wait behind that.")
	fs.IntVar(&o.memberWorkers, "member-workers", defaultMemberWorkers, "Members reconciled at once (1 to 256). Each waits on the host API server or a member's own (gates, probes), so one slow member must not hold up the others.")
	fs.DurationVar(&o.memberPoll, "member-poll-interval", 500*time.Millisecond, "How often a member that is not Ready yet is observed and its readiness gates are checked (50ms to 1m). Each check is a call to the backend and, for gates, to the member's own API server; a member is handed out at most this long after it became ready.")

	o.local.Bind(fs)
	o.kubernetes.Bind(fs)
	o.api.Bind(fs)
	o.auth.Bind(fs)
	o.leaseLimits.Bind(fs)
	o.leaseRetention.Bind(fs)
	o.receipts.Bind(fs)
	o.memberLimits.Bind(fs)
}

// validate returns the first refusal of any flag set, then resolves the
// listen addresses (resolveListeners), which may refuse too.
func (o *options) validate() error {
	for _, check := range []func() error{
		o.auth.Validate,
		o.local.Validate,
		o.leaseLimits.Validate,
		o.receipts.Validate,
		o.memberLimits.Validate,
		o.sweep.validate,
		o.validateMemberPoll,
		o.validateWorkers,
		o.hostAPI.validate,
		o.leaderElectTimes.validate,
		o.kubernetes.Validate,
		o.api.Validate,
		o.leaseRetention.Validate,
		o.resolveListeners,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (o *options) validateMemberPoll() error {
	if o.memberPoll < 50*time.Millisecond || o.memberPoll > time.Minute {
		return fmt.Errorf("--member-poll-interval %v: must be between 50ms and 1m", o.memberPoll)
	}
	return nil
}

// validateWorkers bounds the controllers' concurrent reconciles.
func (o *options) validateWorkers() error {
	for _, w := range []struct {
		flag string
		n    int
	}{{"--pool-workers", o.poolWorkers}, {"--member-workers", o.memberWorkers}, {"--lease-workers", o.leaseWorkers}} {
		if w.n < 1 || w.n > maxWorkers {
			return fmt.Errorf("%s %d: must be between 1 and %d", w.flag, w.n, maxWorkers)
		}
	}
	return nil
}

// sweepFlags are the periodic leak sweep's (clusterinstance.SweepRunnable).
type sweepFlags struct {
	interval time.Duration
	delete   bool
}

func (s *sweepFlags) bind(fs *flag.FlagSet) {
	fs.DurationVar(&s.interval, "leak-sweep-interval", 10*time.Minute, "How often the leader looks for members no ClusterInstance owns (local member directories and processes, the kubernetes backend's host objects) and reports them: a log line and the kobe_leaked_members metric. 0 sweeps only at start, where what it finds is always destroyed.")
	fs.BoolVar(&s.delete, "leak-sweep-delete", false, "Destroy what the periodic leak sweep finds, as the start-up sweep does, instead of only reporting it.")
}

func (s sweepFlags) validate() error {
	if s.interval < 0 {
		return errors.New("--leak-sweep-interval must be 0 (at start only) or positive")
	}
	return nil
}

// hostAPILimits are the client-side rate limit of the operator's requests
// to the host cluster's API server. client-go's default (20 a second, the
// one controller-runtime sets) capped a refill at about 5 members a second:
// each member costs three to four writes and some reads. The host's API
// server protects itself with API Priority and Fairness whatever a client
// does; this limit is kobe's own ceiling on top of it.
type hostAPILimits struct {
	qps   float64
	burst int
}

// Defaults and bound of --pool-workers and --member-workers. 16, not
// controller-runtime's 1 or the 4 the reconcilers take when unset: with
// 1,000 pools filling at once, 4 pool workers each spending ~0.6 s on a
// pool's ten creates left every pool's status about two minutes behind its
// members (make bench's scale, 2026-12-04); 16 brought it within seconds.
// Leases take 4: one worker left a new leader ending expired leases seconds
// late, behind the audit check of every lease kept for retention (make soak).
const (
	defaultPoolWorkers   = 16
	defaultMemberWorkers = 16
	defaultLeaseWorkers  = 4
	maxWorkers           = 256
)

// Defaults of --kube-api-qps and --kube-api-burst.
const (
	defaultKubeAPIQPS   = 500
	defaultKubeAPIBurst = 1000
)

func (l *hostAPILimits) bind(fs *flag.FlagSet) {
	fs.Float64Var(&l.qps, "kube-api-qps", defaultKubeAPIQPS, "Most requests a second the operator sends to the host cluster's API server, on average (-1: no client-side limit, only the server's API Priority and Fairness). Each member built and destroyed costs about 4 writes.")
	fs.IntVar(&l.burst, "kube-api-burst", defaultKubeAPIBurst, "Most requests the operator sends to the host cluster's API server at once, beyond --kube-api-qps, in a burst.")
}

func (l *hostAPILimits) validate() error {
	switch {
	case l.qps != -1 && l.qps <= 0:
		return fmt.Errorf("--kube-api-qps %v: must be positive, or -1 for no client-side limit", l.qps)
	case l.qps != -1 && l.burst < 1:
		return fmt.Errorf("--kube-api-burst %d: must be at least 1", l.burst)
	}
	return nil
}

// apply sets the limits on cfg, the host cluster's client configuration.
func (l *hostAPILimits) apply(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = float32(l.qps), l.burst
}
