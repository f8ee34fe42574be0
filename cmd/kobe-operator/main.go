// Command kobe-operator runs kobe: the pool, instance, lease and access
// policy controllers (on the elected leader) and the lease HTTP API (on every
// replica). Backends are wired here explicitly.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/backend"
	kubebackend "github.com/kunobi-ninja/kobe/internal/backend/kubernetes"
	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/internal/backend/sim"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/cachetrim"
	"github.com/kunobi-ninja/kobe/internal/cleanup"
	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/controller/accesspolicy"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterinstance"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterpool"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/leadership"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/netpolprobe"
	"github.com/kunobi-ninja/kobe/internal/replay"
	kobescheme "github.com/kunobi-ninja/kobe/internal/scheme"
	"github.com/kunobi-ninja/kobe/internal/version"
)

func main() {
	var o options
	o.bind(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "kobe-operator: refusing to start:", err)
		os.Exit(2)
	}
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "Operator failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	log := ctrl.Log.WithName("kobe")
	scheme := kobescheme.New()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	o.hostAPI.apply(cfg)
	var lock *leadership.Lock
	if o.leaderElect {
		if lock, err = o.leaderElectTimes.lock(cfg, o.namespace); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  "0", // served by addProbeServer
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: o.namespace,
		// A replica stopped with SIGTERM (a rolling update) hands the
		// lease over at once instead of making the others wait out its
		// duration; safe because the process exits when the manager
		// returns, after the controllers have stopped.
		LeaderElectionReleaseOnCancel: true,
		// Set only with --leader-elect (a nil *Lock would be a non-nil
		// interface); nil lets controller-runtime build none.
		LeaderElectionResourceLockInterface: resourceLock(lock),
		LeaseDuration:                       &o.leaderElectTimes.leaseDuration,
		RenewDeadline:                       &o.leaderElectTimes.renewDeadline,
		RetryPeriod:                         &o.leaderElectTimes.retryPeriod,
		Cache: cache.Options{
			// One namespace: pools, leases, members and the token Secrets
			// of policies all live there. Secrets are cached whole: tokens
			// are read on each request and the policy controller watches
			// token Secrets, which carry no label of kobe's to select them
			// by.
			DefaultNamespaces: map[string]cache.Config{o.namespace: {}},
			// Cached objects carry no managedFields (nor, for Secrets, a
			// last-applied copy): at 10,000 members they are a large part
			// of the cache and nothing reads them.
			DefaultTransform: cachetrim.Transform,
		},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Event{}}}},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := index.Setup(ctx, mgr); err != nil {
		return err
	}

	backends := backend.Registry{}
	if !o.local.Disable {
		lb, err := local.New(o.local.Options(log.WithName("local-backend")))
		if err != nil {
			return fmt.Errorf("wiring local backend: %w", err)
		}
		backends[kobev1.BackendLocal] = lb
	}
	var netpol *netpolprobe.Prober
	if !o.kubernetes.Disable {
		// Uncached: Observe's verdict reaps members, and caching every pod
		// and Service of the namespace would cost more than a few GETs.
		hc, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return fmt.Errorf("wiring kubernetes backend: %w", err)
		}
		kopts, err := o.kubernetes.Options(hc, o.namespace, log.WithName("kubernetes-backend"))
		if err != nil {
			return err
		}
		kopts.Config = cfg
		kb, err := kubebackend.New(kopts)
		if err != nil {
			return fmt.Errorf("wiring kubernetes backend: %w", err)
		}
		backends[kobev1.BackendKubernetes] = kb
		netpol = &netpolprobe.Prober{Client: hc, Namespace: o.namespace, DefaultImage: kubebackend.DefaultEtcdImage,
			Clock: clock.RealClock{}, Log: log.WithName("netpol-probe"), Owner: ownPod()}
		if err := mgr.Add(netpol); err != nil {
			return fmt.Errorf("adding NetworkPolicy probe: %w", err)
		}
		if !o.kubernetes.RequireNetworkPolicyEnforcement {
			log.Info("WARNING: --require-network-policy-enforcement=false: kubernetes backend members are handed out even where the host cluster does not enforce NetworkPolicy, and then are not isolated")
		}
	}
	if o.enableSim {
		backends[kobev1.BackendSim] = sim.New(sim.Options{})
		log.Info("WARNING: --enable-sim-backend is set: pools with backend.type sim are served simulated members; their kubeconfigs reach no cluster. Benchmarks and demos only, never real use",
			"endpoint", sim.Endpoint)
	}

	clk := clock.RealClock{}
	binder := &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk, Verifiable: verifiableIn(backends)}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating clientset: %w", err)
	}

	// Every replica seals and opens members' access material with one key,
	// kept in a Secret of the namespace; the first replica to start makes it.
	access, err := memberaccess.LoadOrCreateKey(ctx, mgr.GetClient(), mgr.GetAPIReader(), o.namespace)
	if err != nil {
		return fmt.Errorf("loading the member access key: %w", err)
	}
	if err := setupControllers(mgr, backends, binder, netpol, access, leaderChecker(lock), clk, o); err != nil {
		return err
	}

	audience, err := o.auth.SSHAudience(ctx, mgr.GetAPIReader(), o.namespace)
	if err != nil {
		return err
	}
	// SSH nonces are claimed in the API server, so that every replica
	// refuses a replay; the janitor deletes them after the window.
	if err := mgr.Add(&replay.Janitor{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.namespace, Log: log.WithName("replay")}); err != nil {
		return fmt.Errorf("adding nonce janitor: %w", err)
	}
	authn := auth.NewAuthenticator(auth.Options{
		Reader:                     mgr.GetClient(),
		Namespace:                  o.namespace,
		TokenReviewer:              kube.AuthenticationV1().TokenReviews(),
		ServiceAccountIssuers:      o.auth.ServiceAccountIssuers,
		IssuerDiscovery:            kube.Discovery().RESTClient(),
		SSHAudience:                audience,
		SSHNonces:                  &replay.Store{Client: mgr.GetClient(), Namespace: o.namespace},
		DefaultMaxTTL:              o.auth.DefaultMaxTTL,
		Logger:                     log.WithName("auth"),
		DefaultMaxConcurrentLeases: int32(o.auth.DefaultMaxConcurrentLeases),
	})
	cacheSynced := watchCacheSync(ctx, mgr.GetCache())
	apiLog := log.WithName("api")
	leases := leaseservice.New(leaseservice.Options{
		Namespace: o.namespace, Client: mgr.GetClient(), Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Binder: binder, Clock: clk, Log: apiLog, Access: access,
		MaxQueuedPerOwner: int32(o.leaseLimits.MaxQueuedPerOwner), Fence: backends.Fence,
		ProxyEndpoint: o.api.ProxyEndpoint(apiLog), LoadImages: backends.LoadImages,
	})
	connectOpts := connect.Options{
		Namespace: o.namespace, Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Informers: mgr.GetCache(),
		Clock: clk, Log: apiLog.WithName("connect"), Activity: leases.RecordActivity, Access: access,
	}
	o.api.ApplyConnect(&connectOpts)
	apiOpts := apiserver.Options{
		Namespace: o.namespace, Leases: leases, Connect: connect.New(connectOpts),
		Auth: authn, Log: apiLog, Version: version.Version, Ready: cacheSynced.Load,
	}
	o.api.Apply(&apiOpts)
	api, err := apiserver.New(apiOpts)
	if err != nil {
		return fmt.Errorf("wiring API server: %w", err)
	}
	if err := mgr.Add(api); err != nil {
		return fmt.Errorf("adding API server: %w", err)
	}
	ledgers := leaseservice.NewLedgerJanitor(leaseservice.Options{
		Namespace: o.namespace, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clk, Log: log.WithName("ledgers"),
	}, 0)
	if err := mgr.Add(ledgers); err != nil {
		return fmt.Errorf("adding lease ledger janitor: %w", err)
	}
	if err := addProbeServer(mgr, o.probeAddr, cacheSynced.Load); err != nil {
		return err
	}
	log.Info("Starting kobe operator", "version", version.Version, "namespace", o.namespace, "api", o.api.BindAddress, "backends", backendNames(backends))
	return mgr.Start(ctx)
}

// leader tells the controllers whether this replica surely still leads
// (nil without leader election).
func setupControllers(mgr ctrl.Manager, backends backend.Registry, binder *binding.Binder, netpol *netpolprobe.Prober, access *memberaccess.Sealer,
	leader leadership.Checker, clk clock.Clock, o options) error {
	pools := &clusterpool.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("kobe-pool"), Backends: backends, Clock: clk,
		HostCaps: map[kobev1.BackendType]clusterpool.HostCap{
			kobev1.BackendLocal: {Max: int32(o.local.MaxMembers), Setting: "--local-max-members"},
		},
		BootstrapJobs:           o.kubernetes.BootstrapJobs,
		RequireNetworkPolicy:    o.kubernetes.RequireNetworkPolicyEnforcement,
		MaxConcurrentReconciles: o.poolWorkers,
		Leadership:              leader,
		Limits:                  o.memberLimits.Policy(),
	}
	if netpol != nil {
		// Only when set: a nil *Prober would be a non-nil interface.
		pools.NetworkPolicy = netpol
	}
	if err := pools.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up pool controller: %w", err)
	}
	instances := &clusterinstance.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("kobe-instance"), Backends: backends, Clock: clk, Access: access,
		// The probe pods of NodesReady run the pause image the nodes preload.
		NodeProbeImage:          o.local.PauseImage,
		ReceiptRetention:        o.receipts.ReceiptRetention,
		BootstrapJobs:           o.kubernetes.BootstrapJobs,
		PollInterval:            o.memberPoll,
		MaxConcurrentReconciles: o.memberWorkers,
		Leadership:              leader,
	}
	if err := instances.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up instance controller: %w", err)
	}
	leases := &clusterlease.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Binder: binder,
		Recorder: mgr.GetEventRecorder("kobe-lease"), Clock: clk,
		Retention: o.leaseRetention.Retention, AuditRetention: o.leaseRetention.AuditRetention,
		Fence: backends.Fence, Leadership: leader, MaxConcurrentReconciles: o.leaseWorkers,
	}
	if err := leases.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up lease controller: %w", err)
	}
	if err := mgr.Add(&clusterlease.AuditJanitor{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.namespace,
		Retention: o.leaseRetention.AuditRetention, Clock: clk}); err != nil {
		return fmt.Errorf("adding audit janitor: %w", err)
	}
	policies := &accesspolicy.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("kobe-accesspolicy"), Clock: clk}
	if err := policies.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up access policy controller: %w", err)
	}
	if err := mgr.Add(&clusterinstance.SweepRunnable{Backends: backends, Namespace: o.namespace, Reader: mgr.GetAPIReader(),
		Interval: o.sweep.interval, RemoveLeaks: o.sweep.delete}); err != nil {
		return fmt.Errorf("adding sweep: %w", err)
	}
	if err := mgr.Add(&cleanup.Collector{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.namespace, Clock: clk}); err != nil {
		return fmt.Errorf("adding receipt collector: %w", err)
	}
	return nil
}

// verifiableIn says which backend types of r can prove a member destroyed.
func verifiableIn(r backend.Registry) func(kobev1.BackendType) bool {
	return func(t kobev1.BackendType) bool {
		b, ok := r.For(t)
		return ok && backend.CanVerify(b)
	}
}

func backendNames(r backend.Registry) []string {
	out := make([]string, 0, len(r))
	for t := range r {
		out = append(out, string(t))
	}
	return out
}

// ownPod is the operator's own pod, from the POD_NAME and POD_UID the chart
// sets (downward API), as an owner for objects that must not outlive it;
// nil outside a pod.
func ownPod() *metav1.OwnerReference {
	name, uid := os.Getenv("POD_NAME"), os.Getenv("POD_UID")
	if name == "" || uid == "" {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid)}
}
