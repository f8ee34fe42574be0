// Command kobe-operator runs kobe: the pool, instance, lease and access
// policy controllers (on the elected leader) and the lease HTTP API (on every
// replica). Backends are wired here explicitly.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
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
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/netpolprobe"
	"github.com/kunobi-ninja/kobe/internal/replay"
	kobescheme "github.com/kunobi-ninja/kobe/internal/scheme"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// defaultLocalMaxMembers is --local-max-members' default: 16 members idle at
// about 0.7 of a core of this machine's 2 and, with a real node each, hold
// about 8 GiB; half the 32 network slots of members with nodes.
const defaultLocalMaxMembers = 16

// defaultMaxConcurrentLeases is --default-max-concurrent-leases: enough for
// a CI job's parallel clusters, few enough that one caller cannot drain
// every Ready member of a pool.
const defaultMaxConcurrentLeases = 10

// options are the operator's flags.
type options struct {
	leakSweepInterval time.Duration
	receiptRetention  time.Duration
	bootstrapJobs     bool
	leakSweepDelete   bool
	namespace         string
	apiAddr           string
	metricsAddr       string
	probeAddr         string
	leaderElect       bool
	leaderElectTimes  leaderElectTimings
	localBinDir       string
	localDataRoot     string
	localAdvertise    string
	localNodeBinDir   string
	localNodeAgent    string
	localImageDir     string
	localPauseImage   string
	localMaxMembers   int
	localMemberDisk   resource.QuantityValue
	localMinFreeDisk  local.DiskFloor
	leaseRetention    time.Duration
	auditRetention    time.Duration
	defaultMaxTTL     time.Duration
	maxQueuedPerOwner int
	defaultMaxLeases  int
	saIssuers         []string
	apiTLSCert        string
	apiTLSKey         string
	apiMaxInFlight    int
	apiTLSCA          string
	connectURL        string
	connectMaxInFlt   int
	connectMaxStreams int
	apiAudience       string
	disableLocal      bool
	disableKubernetes bool
	memberOperatorSel string
	requireNetpol     bool
	localProvisionMax time.Duration
	enableSim         bool
	pprofAddr         string
	bindAllInterfaces bool
}

func (o *options) bind(fs *flag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	fs.StringVar(&o.namespace, "namespace", ns, "Namespace whose pools, instances, leases and access policies the operator manages and the API serves.")
	fs.StringVar(&o.apiAddr, "api-bind-address", "", "Address of the lease HTTP API (default 127.0.0.1:8090; :8090 with --api-tls-cert-file or --"+bindAllInterfacesFlag+").")
	fs.StringVar(&o.apiTLSCert, "api-tls-cert-file", "", "Serve the lease API over HTTPS with this certificate (and --api-tls-key-file); both files are read again when they change, so a renewed certificate is served without a restart.")
	fs.StringVar(&o.apiTLSKey, "api-tls-key-file", "", "Key of --api-tls-cert-file.")
	fs.IntVar(&o.apiMaxInFlight, "api-max-in-flight", apiserver.DefaultMaxInFlight, "Concurrent API requests served before answering 429.")
	fs.StringVar(&o.apiTLSCA, "api-tls-ca-file", "", "PEM CA that verifies --api-tls-cert-file, put in the kubeconfigs of leases reached through the connect proxy (pools with access mode Proxy); empty leaves them to the system's trust roots.")
	fs.StringVar(&o.connectURL, "connect-url", "", "Base URL (https://host[:port]) under which lease holders reach the connect proxy: Proxy-mode kubeconfigs point at <url>/connect/<lease>. Empty: https://<the Host of the API request that returned the kubeconfig>. Proxy access needs --api-tls-cert-file.")
	fs.IntVar(&o.connectMaxStreams, "connect-max-streams-per-lease", connect.DefaultMaxStreamsPerLease, "Concurrent connect proxy requests of one lease on this replica (watches, exec, attach, logs -f and port-forward sessions included) before answering 429, so that one lease cannot take every --connect-max-in-flight slot.")
	fs.IntVar(&o.connectMaxInFlt, "connect-max-in-flight", connect.DefaultMaxInFlight, "Concurrent connect proxy requests (open watches and exec, attach, logs -f and port-forward sessions included) served before answering 429; separate from --api-max-in-flight.")
	fs.StringVar(&o.apiAudience, "api-audience", "", "Audience of this installation, published in GET /v1/status; SSH-signed requests must name it (default kobe:<namespace>:<namespace UID>). Give every replica the same value.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "", "Address of the controller metrics endpoint (default 127.0.0.1:8080; :8080 with --"+bindAllInterfacesFlag+"); 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", "", "Address of the /healthz and /readyz probes (default 127.0.0.1:8081; :8081 with --"+bindAllInterfacesFlag+"); 0 disables them.")
	fs.BoolVar(&o.bindAllInterfaces, bindAllInterfacesFlag, false, "Let endpoints served over plain HTTP (metrics, probes, pprof, and the API without TLS) listen beyond loopback: on every interface by default, or on the non-loopback address given. Only where the network in front of them is trusted, e.g. a pod network behind a NetworkPolicy.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that several replicas can run; only the leader reconciles.")
	o.leaderElectTimes.bind(fs)
	fs.StringVar(&o.localBinDir, "local-bin-dir", local.DefaultBinDir, "Directory with etcd, kube-apiserver and kube-controller-manager for the local backend.")
	fs.StringVar(&o.localDataRoot, "local-data-dir", filepath.Join(os.TempDir(), "kobe-local"), "Directory holding the local backend's member data, this operator's alone; anything in it that no ClusterInstance of --namespace owns is removed at start.")
	fs.StringVar(&o.localAdvertise, "local-advertise-host", "127.0.0.1", "Host name or IP in local members' endpoints, reachable by lease holders.")
	fs.DurationVar(&o.localProvisionMax, "local-provision-timeout", 3*time.Minute, "How long a local member may take to start before it is reported failed.")
	fs.StringVar(&o.localNodeBinDir, "local-node-bin-dir", local.DefaultNodeBinDir, "Directory with kubelet and kube-proxy for local members with nodes (`make node`).")
	fs.StringVar(&o.localNodeAgent, "local-node-agent", "", "Path of the kobe-node program for local members with nodes (default: kobe-node next to this executable).")
	fs.StringVar(&o.localImageDir, "local-image-dir", local.DefaultImageDir, "Directory with the pause image archive (pause.tar, `make image-pause`) and the image archives pools preload (backend.local.preloadImages).")
	fs.StringVar(&o.localPauseImage, "local-pause-image", local.DefaultPauseImage, "Image name in the pause archive, the sandbox image of local members' nodes.")
	fs.IntVar(&o.localMaxMembers, "local-max-members", defaultLocalMaxMembers, "Most ClusterInstances of backend local that this operator keeps at once across all its pools (any phase, being deleted included); a pool that wants more creates nothing and reports Capacity HostCapacityReached until members go away. 0 removes the cap. The default fits a 2-core host: each member idles at about 5% of a core (docs/benchmarks.md) and one with a real node holds about 0.5 GiB.")
	o.localMemberDisk, o.localMinFreeDisk = resource.QuantityValue{Quantity: local.DefaultMemberDiskLimit}, local.DefaultMinFreeDisk
	fs.Var(&o.localMemberDisk, "local-member-disk-limit", "Most disk a local member's data directory may take (etcd, logs and, with nodes, images, writable layers, emptyDirs and pod logs), as a quantity (20Gi); a member above it is reported failed and recycled, a leased one ending its lease. Measured at most every 30s. 0 removes the limit.")
	fs.Var(&o.localMinFreeDisk, "local-min-free-disk", "Free space the file system of --local-data-dir keeps, as a percentage of its size (5%) or a quantity (2Gi): below it local members are reported failed, the largest first, until their removal restores it, and no new one is created. 0 removes the floor.")
	fs.BoolVar(&o.disableLocal, "disable-local-backend", false, "Do not wire the local backend.")
	fs.BoolVar(&o.disableKubernetes, "disable-kubernetes-backend", false, "Do not wire the kubernetes backend (members as etcd, kube-apiserver and kube-controller-manager pods in --namespace of the host cluster).")
	fs.BoolVar(&o.requireNetpol, "require-network-policy-enforcement", true, "Kubernetes backend pools build and hand out members only once a probe (pods in --namespace, the pool's etcd image) proved that the host cluster's CNI enforces NetworkPolicy, on which each member's isolation rests. false: members are handed out on a CNI that does not enforce it (not isolated from each other or from the host cluster's pods); pools still report the verdict (condition NetworkPolicyEnforced).")
	fs.StringVar(&o.memberOperatorSel, "member-network-policy-operator-selector", "app.kubernetes.io/name=kobe", "Labels (k=v,...) of the operator's pods: each kubernetes-backend member's NetworkPolicy lets only them (and, for Direct access, anyone) reach its API port. The default matches the chart's pods.")
	fs.BoolVar(&o.enableSim, "enable-sim-backend", false, "Wire the sim backend: pools with backend.type sim get simulated members, with no cluster behind them, whose kubeconfigs point at an address that answers nothing. For benchmarks, scale tests and demos only; never for real use.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Serve Go's /debug/pprof on this address (e.g. 127.0.0.1:6060) for profiling; empty disables it.")
	fs.DurationVar(&o.leaseRetention, "lease-retention", time.Hour, "How long ended leases are kept before deletion.")
	fs.BoolVar(&o.bootstrapJobs, "bootstrap-jobs", false, "Run the Jobs of BootstrapConfigs (in the operator's namespace of the host cluster, which must have nodes) for kubernetes backend members. Without it a pool naming a Job bundle builds no member and says why.")
	fs.DurationVar(&o.receiptRetention, "cleanup-receipt-retention", cleanup.DefaultRetention, "How long the receipt of a VerifiedDestroy teardown (a ConfigMap kobe-cleanup-<member>-<uid>) is kept after it was last written. At least 720h (30 days).")
	fs.DurationVar(&o.leakSweepInterval, "leak-sweep-interval", 10*time.Minute, "How often the leader looks for members no ClusterInstance owns (local member directories and processes, the kubernetes backend's host objects) and reports them: a log line and the kobe_leaked_members metric. 0 sweeps only at start, where what it finds is always destroyed.")
	fs.BoolVar(&o.leakSweepDelete, "leak-sweep-delete", false, "Destroy what the periodic leak sweep finds, as the start-up sweep does, instead of only reporting it.")
	fs.DurationVar(&o.auditRetention, "audit-retention", clusterlease.DefaultAuditRetention, "How long the audit record of a lease that held a member (ConfigMap kobe-audit-<lease UID>: who held which member, from when to when, under which policy) is kept; it outlives the lease.")
	fs.IntVar(&o.maxQueuedPerOwner, "max-queued-per-owner", leaseservice.DefaultMaxQueuedPerOwner, "Most leases one caller (policy and identity) may have waiting for a member when its AccessPolicy rule sets no maxConcurrentLeases; beyond it the API answers 429 QueuedLeaseLimit.")
	fs.IntVar(&o.defaultMaxLeases, "default-max-concurrent-leases", defaultMaxConcurrentLeases, "Most leases (Bound and Pending) one caller (policy and identity) may hold at once when its AccessPolicy rule sets no maxConcurrentLeases (the rule's own setting wins); beyond it the API answers 429 ConcurrentLeaseLimit. 0 removes the cap.")
	fs.Func("service-account-issuer", "Issuer (\"iss\") of the host API server's ServiceAccount tokens, as its own --service-account-issuer; repeat for several. Bearer JWTs of other issuers cost no TokenReview. Unset: read once from the host API server's /.well-known/openid-configuration, which names only the first issuer (list them all here while issuers are being migrated).", func(v string) error {
		o.saIssuers = append(o.saIssuers, v)
		return nil
	})
	fs.DurationVar(&o.defaultMaxTTL, "default-max-ttl", auth.DefaultMaxTTL, "Longest lease TTL, and longest single extension, under an AccessPolicy rule that sets no maxTtl; longer requests are clamped.")
}

func main() {
	var o options
	o.bind(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if o.defaultMaxTTL <= 0 {
		fmt.Fprintln(os.Stderr, "kobe-operator: refusing to start: --default-max-ttl must be greater than zero")
		os.Exit(2)
	}
	if o.localMaxMembers < 0 || o.localMaxMembers > math.MaxInt32 {
		fmt.Fprintln(os.Stderr, "kobe-operator: refusing to start: --local-max-members must be 0 (no cap) or a positive number")
		os.Exit(2)
	}
	if o.defaultMaxLeases < 0 || o.defaultMaxLeases > math.MaxInt32 {
		fmt.Fprintln(os.Stderr, "kobe-operator: refusing to start: --default-max-concurrent-leases must be 0 (no cap) or a positive number")
		os.Exit(2)
	}
	if o.maxQueuedPerOwner <= 0 || o.maxQueuedPerOwner > math.MaxInt32 {
		fmt.Fprintln(os.Stderr, "kobe-operator: refusing to start: --max-queued-per-owner must be a positive number")
		os.Exit(2)
	}
	if o.receiptRetention < cleanup.DefaultRetention {
		fmt.Fprintln(os.Stderr, "kobe-operator: refusing to start: --cleanup-receipt-retention must be at least 720h (30 days): receipts must outlive the leases they prove")
		os.Exit(2)
	}
	if o.leakSweepInterval < 0 {
		fmt.Fprintln(os.Stderr, "kobe-operator: refusing to start: --leak-sweep-interval must be 0 (at start only) or positive")
		os.Exit(2)
	}
	if err := o.resolveListeners(); err != nil {
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
	if err := o.leaderElectTimes.validate(); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  "0", // served by addProbeServer
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "kobe-operator.kobe.kunobi.ninja",
		LeaderElectionNamespace: o.namespace,
		// A replica stopped with SIGTERM (a rolling update) hands the
		// lease over at once instead of making the others wait out its
		// duration; safe because the process exits when the manager
		// returns, after the controllers have stopped.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaderElectTimes.leaseDuration,
		RenewDeadline:                 &o.leaderElectTimes.renewDeadline,
		RetryPeriod:                   &o.leaderElectTimes.retryPeriod,
		Cache: cache.Options{
			// One namespace: pools, leases, the access Secrets of members
			// and the token Secrets of policies all live there. Secrets are
			// cached whole: both kinds are read on the hand-out path (the
			// token on each request, the access Secret at each bind) and
			// the policy controller watches token Secrets, which carry no
			// label of kobe's to select them by.
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
	if !o.disableLocal {
		lb, err := local.New(local.Options{
			BinDir: o.localBinDir, DataRoot: o.localDataRoot, AdvertiseHost: o.localAdvertise,
			Logger: log.WithName("local-backend"), ProvisionTimeout: o.localProvisionMax,
			NodeBinDir: o.localNodeBinDir, NodeAgent: o.localNodeAgent, ImageDir: o.localImageDir,
			PauseImage: o.localPauseImage, MaxMembers: o.localMaxMembers,
			MemberDiskLimit: o.localMemberDisk.Value(), MinFreeDisk: o.localMinFreeDisk,
		})
		if err != nil {
			return fmt.Errorf("wiring local backend: %w", err)
		}
		backends[kobev1.BackendLocal] = lb
	}
	var netpol *netpolprobe.Prober
	if !o.disableKubernetes {
		sel, err := labels.ConvertSelectorToLabelsMap(o.memberOperatorSel)
		if err != nil {
			return fmt.Errorf("--member-network-policy-operator-selector: %w", err)
		}
		// Uncached: Observe's verdict reaps members, and caching every pod
		// and Service of the namespace would cost more than a few GETs.
		hc, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return fmt.Errorf("wiring kubernetes backend: %w", err)
		}
		kb, err := kubebackend.New(kubebackend.Options{
			Client: hc, Namespace: o.namespace, OperatorSelector: sel, Log: log.WithName("kubernetes-backend"),
		})
		if err != nil {
			return fmt.Errorf("wiring kubernetes backend: %w", err)
		}
		backends[kobev1.BackendKubernetes] = kb
		netpol = &netpolprobe.Prober{Client: hc, Namespace: o.namespace, DefaultImage: kubebackend.DefaultEtcdImage,
			Clock: clock.RealClock{}, Log: log.WithName("netpol-probe")}
		if err := mgr.Add(netpol); err != nil {
			return fmt.Errorf("adding NetworkPolicy probe: %w", err)
		}
		if !o.requireNetpol {
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

	if err := setupControllers(mgr, backends, binder, netpol, clk, o); err != nil {
		return err
	}

	audience := o.apiAudience
	switch {
	case audience == "":
		if audience, err = auth.InstallationAudience(ctx, mgr.GetAPIReader(), o.namespace); err != nil {
			return err
		}
	case !sshsig.ValidAudience(audience):
		return fmt.Errorf("--api-audience must be 1 to %d printable ASCII characters", sshsig.MaxAudienceLen)
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
		ServiceAccountIssuers:      o.saIssuers,
		IssuerDiscovery:            kube.Discovery().RESTClient(),
		SSHAudience:                audience,
		SSHNonces:                  &replay.Store{Client: mgr.GetClient(), Namespace: o.namespace},
		DefaultMaxTTL:              o.defaultMaxTTL,
		Logger:                     log.WithName("auth"),
		DefaultMaxConcurrentLeases: int32(o.defaultMaxLeases),
	})
	cacheSynced := watchCacheSync(ctx, mgr.GetCache())
	api := apiserver.New(apiserver.Options{
		Addr: o.apiAddr, Namespace: o.namespace,
		Client: mgr.GetClient(), Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Binder: binder, Auth: authn, Recorder: mgr.GetEventRecorder("kobe-api"), Clock: clk,
		Log: log.WithName("api"), Version: version.Version, MaxInFlight: o.apiMaxInFlight,
		TLSCertFile: o.apiTLSCert, TLSKeyFile: o.apiTLSKey,
		Ready: cacheSynced.Load, MaxQueuedPerOwner: int32(o.maxQueuedPerOwner),
		TLSCAFile: o.apiTLSCA, ConnectURL: o.connectURL, ConnectMaxInFlight: o.connectMaxInFlt, Informers: mgr.GetCache(),
		ConnectMaxStreamsPerLease: o.connectMaxStreams, Fence: backends.Fence,
	})
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
	log.Info("Starting kobe operator", "version", version.Version, "namespace", o.namespace, "api", o.apiAddr, "backends", backendNames(backends))
	return mgr.Start(ctx)
}

func setupControllers(mgr ctrl.Manager, backends backend.Registry, binder *binding.Binder, netpol *netpolprobe.Prober, clk clock.Clock, o options) error {
	pools := &clusterpool.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("kobe-pool"), Backends: backends, Clock: clk,
		HostCaps: map[kobev1.BackendType]clusterpool.HostCap{
			kobev1.BackendLocal: {Max: int32(o.localMaxMembers), Setting: "--local-max-members"},
		},
		BootstrapJobs:        o.bootstrapJobs,
		RequireNetworkPolicy: o.requireNetpol,
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
		Recorder: mgr.GetEventRecorder("kobe-instance"), Backends: backends, Clock: clk,
		// The probe pods of NodesReady run the pause image the nodes preload.
		NodeProbeImage:   o.localPauseImage,
		ReceiptRetention: o.receiptRetention,
		BootstrapJobs:    o.bootstrapJobs,
	}
	if err := instances.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up instance controller: %w", err)
	}
	leases := &clusterlease.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Binder: binder,
		Recorder: mgr.GetEventRecorder("kobe-lease"), Clock: clk,
		Retention: o.leaseRetention, AuditRetention: o.auditRetention,
	}
	if err := leases.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up lease controller: %w", err)
	}
	if err := mgr.Add(&clusterlease.AuditJanitor{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.namespace,
		Retention: o.auditRetention, Clock: clk}); err != nil {
		return fmt.Errorf("adding audit janitor: %w", err)
	}
	policies := &accesspolicy.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("kobe-accesspolicy"), Clock: clk}
	if err := policies.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up access policy controller: %w", err)
	}
	if err := mgr.Add(&clusterinstance.SweepRunnable{Backends: backends, Namespace: o.namespace, Reader: mgr.GetAPIReader(),
		Interval: o.leakSweepInterval, RemoveLeaks: o.leakSweepDelete}); err != nil {
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
