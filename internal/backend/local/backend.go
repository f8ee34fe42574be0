package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// DefaultBinDir is where `make controlplane` (hack/build-controlplane.sh)
// puts the control-plane binaries, relative to the repository root.
const DefaultBinDir = "bin/controlplane/" + version.Kubernetes

// Options configure a Backend.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and, for
	// members with scheduling, kube-scheduler and kwok. Default DefaultBinDir
	// (relative to the working directory).
	BinDir string
	// DataRoot holds one data directory per member. Required: every
	// directory and process under it that no member owns is removed by
	// Sweep, so two operators must never share one.
	DataRoot string
	// AdvertiseHost is the host name or IP address in members' endpoints,
	// reachable by lease holders. Default 127.0.0.1. When it is not a
	// loopback address the API servers listen on all addresses.
	AdvertiseHost string
	// Logger receives the backend's own log lines (never credentials).
	Logger logr.Logger
	// ProvisionTimeout is how long a member may take from Create to Ready
	// before Observe reports it Failed. Default 3 minutes.
	ProvisionTimeout time.Duration
	// StopGracePeriod is how long Delete waits after SIGTERM before it
	// sends SIGKILL. Default 5 seconds.
	StopGracePeriod time.Duration
	// Host identifies this host and boot (see Backend.Host). Default
	// "<hostname>/<boot id>"; tests set it to pose as another host.
	Host string

	// NodeBinDir holds kubelet and kube-proxy for members with nodes.
	// Default DefaultNodeBinDir (relative to the working directory).
	NodeBinDir string
	// NodeAgent is the kobe-node program (its file name must be
	// kobe-node). Default: kobe-node next to the running executable.
	NodeAgent string
	// ImageDir holds the pause image archive (PauseArchive) and the
	// archives pools preload. Default DefaultImageDir.
	ImageDir string
	// PauseImage is the image name in the pause archive. Default
	// DefaultPauseImage.
	PauseImage string
	// MaxMembers caps the members in DataRoot (0: no cap). The pool
	// controller holds pools back at the same cap (--local-max-members)
	// before it creates ClusterInstances; this is the last line, for
	// members it could not see (another operator on the same data root).
	MaxMembers int
	// MemberNice is how much lower than the operator's the CPU priority of
	// a member's processes is (their niceness above the operator's, at
	// most 19; 0: the same). --local-member-nice, DefaultMemberNice.
	MemberNice int
	// MemberDiskLimit caps the bytes a member's data directory takes on
	// disk (0: no cap); Observe reports a member above it Failed.
	MemberDiskLimit int64
	// MinFreeDisk is the free space DataRoot's file system keeps (zero:
	// no floor): below it Observe reports members Failed, the largest
	// first, and Create refuses new ones.
	MinFreeDisk DiskFloor
	// DefaultNodes is how many real nodes a member gets when its pool
	// leaves backend.local.nodes unset (zero: none; Auto: 1 where this host
	// can run nodes).
	DefaultNodes backend.NodesDefault
}

// Backend runs members as local processes. It is safe for concurrent use.
type Backend struct {
	opts   Options
	log    logr.Logger
	tuning tuning
	// pickPort chooses the API server's port (freePort; tests replace it).
	pickPort func(host string) (int, error)

	// ctx bounds the start-up supervisors; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	members map[types.UID]*memberRT

	// slotMu serialises network slot choices of this instance.
	slotMu sync.Mutex
	// slotClaimDir is DefaultSlotClaimDir (tests replace it).
	slotClaimDir string

	// disk holds the last measurement of the members' disk use.
	disk diskCheck

	// canFreeze caches CanFreeze's answer (freeze.go), canLimit
	// EnforcesLimits' (limits.go).
	canFreeze, canLimit struct {
		once sync.Once
		ok   bool
		why  string
	}
}

// memberRT is what one Backend instance holds in memory about a member. It
// is never the only record: everything needed to observe or destroy the
// member is in its data directory.
type memberRT struct {
	// mu serialises operations on the member's files and processes.
	mu sync.Mutex
	// children are the member's processes this instance started (and reaps).
	children map[int]*child
	// sup is the running start-up supervisor, if any.
	sup *supervisor
}

type supervisor struct {
	cancel context.CancelFunc
	done   chan struct{}
	// status is what the supervisor is waiting for (guarded by memberRT.mu).
	status string
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.Sweeper    = (*Backend)(nil)
	_ backend.LeakFinder = (*Backend)(nil)
)

// New returns a local backend. It creates DataRoot; missing binaries are
// reported by Create (wrapping backend.ErrUnavailable), not here, so an
// operator without them still starts and serves its other backends.
func New(opts Options) (*Backend, error) {
	if opts.DataRoot == "" {
		return nil, errors.New("local backend: DataRoot is required")
	}
	if opts.MemberDiskLimit < 0 {
		return nil, errors.New("local backend: MemberDiskLimit must not be negative")
	}
	if err := opts.MinFreeDisk.validate(); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if opts.BinDir == "" {
		opts.BinDir = DefaultBinDir
	}
	if opts.AdvertiseHost == "" {
		opts.AdvertiseHost = "127.0.0.1"
	}
	if opts.ProvisionTimeout <= 0 {
		opts.ProvisionTimeout = 3 * time.Minute
	}
	if opts.StopGracePeriod <= 0 {
		opts.StopGracePeriod = 5 * time.Second
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if opts.NodeBinDir == "" {
		opts.NodeBinDir = DefaultNodeBinDir
	}
	if opts.ImageDir == "" {
		opts.ImageDir = DefaultImageDir
	}
	if opts.PauseImage == "" {
		opts.PauseImage = DefaultPauseImage
	}
	var err error
	if opts.NodeAgent == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local backend: finding kobe-node: %w", err)
		}
		opts.NodeAgent = filepath.Join(filepath.Dir(exe), compNode)
	}
	for _, d := range []*string{&opts.NodeBinDir, &opts.ImageDir, &opts.NodeAgent} {
		if *d, err = filepath.Abs(*d); err != nil {
			return nil, fmt.Errorf("local backend: %w", err)
		}
	}
	if opts.Host == "" {
		if opts.Host, err = hostIdentity(); err != nil {
			return nil, fmt.Errorf("local backend: %w", err)
		}
	}
	// Paths are compared with process command lines: make them absolute.
	if opts.BinDir, err = filepath.Abs(opts.BinDir); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if opts.DataRoot, err = filepath.Abs(opts.DataRoot); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if err := os.MkdirAll(opts.DataRoot, 0o700); err != nil {
		return nil, fmt.Errorf("local backend: creating data root: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Backend{
		opts:         opts,
		log:          opts.Logger.WithName("local-backend"),
		tuning:       defaultTuning(),
		pickPort:     freePort,
		slotClaimDir: DefaultSlotClaimDir,
		disk:         diskCheck{every: diskCheckInterval, bounds: defaultWalkBounds},
		ctx:          ctx,
		cancel:       cancel,
		members:      map[types.UID]*memberRT{},
	}, nil
}

// Close stops the start-up supervisors of this instance. Members' processes
// keep running: a new Backend over the same DataRoot adopts them.
func (b *Backend) Close() {
	b.cancel()
	b.wg.Wait()
}

// Type implements backend.Backend.
func (b *Backend) Type() kobev1.BackendType { return kobev1.BackendLocal }

// Capabilities: a member runs the control plane of one of the versions
// whose binaries are on the host (versions.go) as one server; with
// backend.local.scheduling it also runs kube-scheduler and kwok.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		KubernetesVersions: b.versions(),
		MaxServers:         1,
		Scheduling:         true,
	}
}

func (b *Backend) paths(m backend.Member) paths {
	return paths{dir: filepath.Join(b.opts.DataRoot, memberDirName(m))}
}

func (b *Backend) member(uid types.UID) *memberRT {
	b.mu.Lock()
	defer b.mu.Unlock()
	rt, ok := b.members[uid]
	if !ok {
		rt = &memberRT{children: map[int]*child{}}
		b.members[uid] = rt
	}
	return rt
}

// components of a member, in start order (without its nodes).
func components(scheduling bool) []string {
	return memberComponents(scheduling, 0)
}

// memberComponents: with nodes, kube-scheduler belongs to the member too.
func memberComponents(scheduling bool, nodes int) []string {
	switch {
	case scheduling:
		return []string{compEtcd, compAPIServer, compKCM, compScheduler, compKwok}
	case nodes > 0:
		return []string{compEtcd, compAPIServer, compKCM, compScheduler}
	}
	return []string{compEtcd, compAPIServer, compKCM}
}

// checkBinaries returns an error wrapping backend.ErrUnavailable naming the
// first binary of Kubernetes version v that is missing.
func (b *Backend) checkBinaries(v string, scheduling bool, nodes int) error {
	if nodes > 0 {
		if err := b.checkNodePrereqs(v); err != nil {
			return err
		}
	}
	for _, c := range memberComponents(scheduling, nodes) {
		bin := filepath.Join(b.binDir(v), c)
		fi, err := os.Stat(bin)
		if err != nil {
			return fmt.Errorf("%w: %s is missing (build it with `make controlplane`): %w", backend.ErrUnavailable, bin, err)
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%w: %s is not an executable file", backend.ErrUnavailable, bin)
		}
	}
	if scheduling {
		if err := b.checkKwokStages(v); err != nil {
			return fmt.Errorf("%w: %w (build them with `make controlplane`)", backend.ErrUnavailable, err)
		}
	}
	return nil
}

// validMember rejects members whose identity cannot name a data directory.
// The API validates namespaces and names as DNS names already; this guards
// the file system against anything else.
func validMember(m backend.Member) error {
	if !uidPattern.MatchString(string(m.UID)) {
		return fmt.Errorf("local backend: member UID %q is not a UID", m.UID)
	}
	for _, s := range []string{m.Namespace, m.Name} {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
			return fmt.Errorf("local backend: member %s/%s cannot name a directory", m.Namespace, m.Name)
		}
	}
	return nil
}

func scheduling(m backend.Member) bool {
	return m.Spec.Backend.Local != nil && m.Spec.Backend.Local.Scheduling
}

// Create implements backend.Backend. It writes the member's certificates,
// keys and state file, starts etcd and kube-apiserver, and leaves the rest
// of the start-up (kube-controller-manager once the API server answers,
// retries after a port clash) to a background supervisor. Calling it again
// for a member that exists only resumes that supervisor if an operator
// restart interrupted it.
func (b *Backend) Create(ctx context.Context, m backend.Member) error {
	if err := validMember(m); err != nil {
		return err
	}
	rt := b.member(m.UID)
	p := b.paths(m)
	rt.mu.Lock()
	defer rt.mu.Unlock()

	st, err := readState(p)
	switch {
	case err == nil:
		if st.Failure == "" && !st.Started && rt.sup == nil {
			b.startSupervisor(m, rt, p)
		}
		return nil
	case !errors.Is(err, errNoState):
		// An unreadable state file: Observe reports Failed and the member
		// is destroyed; Create must not paper over it.
		return nil
	}
	nodes := nodeCount(m)
	if nodes > node.MaxNodes {
		return fmt.Errorf("%w: spec.backend.local.nodes is %d, at most %d", backend.ErrInvalidSpec, nodes, node.MaxNodes)
	}
	if err := b.checkHostCap(memberDirName(m)); err != nil {
		return err
	}
	if err := b.checkFreeDisk(); err != nil {
		return err
	}
	kubeVersion, err := b.memberVersion(m)
	if err != nil {
		return err
	}
	if err := b.checkBinaries(kubeVersion, scheduling(m), nodes); err != nil {
		return err
	}
	if nodes > 0 {
		if _, err := nodeImages(b.opts.ImageDir, m); err != nil {
			return err
		}
		if _, err := (&state{Egress: memberEgress(m)}).egress(); err != nil {
			return err
		}
	}

	// No state file: nothing was created, or a Create was interrupted
	// before its commit point. Start from a clean directory either way.
	if _, err := os.Stat(p.dir); err == nil {
		if err := b.destroy(ctx, rt, p); err != nil {
			return fmt.Errorf("clearing interrupted creation of %s: %w", p.dir, err)
		}
	}
	log := b.log.WithValues("member", m.Namespace+"/"+m.Name, "uid", m.UID)
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	if size := b.diskFSSize(m); size > 0 { // recorded as st.DiskLimit
		if err := mountMemberDisk(ctx, p, size); err != nil {
			return err
		}
	}
	st = &state{
		Version:      stateVersion,
		Namespace:    m.Namespace,
		Name:         m.Name,
		UID:          m.UID,
		Scheduling:   scheduling(m),
		Nodes:        nodes,
		StartedAt:    time.Now().UTC(),
		PodPidsLimit: podPidsLimit(m),
		DiskLimit:    b.diskFSSize(m),
		// The default version is recorded too: a later change of the
		// default must not change what this member restarts with.
		KubernetesVersion: kubeVersion,
	}
	var extraIPs []net.IP
	if nodes > 0 {
		slot, err := b.allocateSlot(ctx, p)
		if err != nil {
			return err
		}
		st.Slot = &slot
		st.Egress = memberEgress(m)
		mn, err := memberNet(st)
		if err != nil {
			return err
		}
		st.LocalHost = mn.Gateway.String()
		extraIPs = []net.IP{net.IP(mn.Gateway.AsSlice()), net.IP(mn.KubernetesServiceIP().AsSlice())}
	}
	if err := writeAssets(p, b.opts.AdvertiseHost, extraIPs...); err != nil {
		return fmt.Errorf("creating certificates for %s: %w", p.dir, err)
	}
	if err := writeAdmissionConfig(p, m.Spec.Cluster); err != nil {
		return fmt.Errorf("writing the admission configuration: %w", err)
	}
	if st.Confined, err = b.confine(m); err != nil {
		return err
	}
	if nodes > 0 {
		if err := writeKubeletClient(p); err != nil {
			return fmt.Errorf("creating the API server's kubelet client certificate: %w", err)
		}
	}
	if err := b.launchCore(rt, p, st); err != nil {
		b.killChildren(rt)
		return err
	}
	log.Info("Started member control plane", "dir", p.dir, "endpoint", st.Endpoint)
	b.startSupervisor(m, rt, p)
	return nil
}

// launchCore starts etcd and kube-apiserver on a fresh port and writes the
// state file. Called with rt.mu held.
func (b *Backend) launchCore(rt *memberRT, p paths, st *state) error {
	bindHost := "127.0.0.1"
	if !isLoopbackHost(b.opts.AdvertiseHost) || st.Nodes > 0 {
		// With nodes the API server binds the member's gateway, which
		// exists only once the network is set up for a port: a port free
		// on every address is free there too.
		bindHost = "0.0.0.0"
	}
	port, err := b.pickPort(bindHost)
	if err != nil {
		return err
	}
	st.Attempt++
	st.APIServerPort = port
	st.Endpoint = endpointURL(b.opts.AdvertiseHost, port)
	if st.Nodes > 0 {
		mn, err := memberNet(st)
		if err != nil {
			return err
		}
		if isLoopbackHost(b.opts.AdvertiseHost) {
			st.Endpoint = endpointURL(mn.Gateway.String(), port)
		}
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		egress, err := st.egress()
		if err == nil {
			err = node.SetUpMemberNetwork(ctx, mn, port, egress)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("setting up the member's network: %w", err)
		}
	}
	if err := writeAddressGuard(p, st); err != nil {
		return fmt.Errorf("writing the member's address guard: %w", err)
	}
	if st.Confined {
		if err := b.fenceControlPlane(st, port); err != nil {
			return err
		}
	}
	st.Processes = nil
	for _, c := range []string{compEtcd, compAPIServer} {
		pr, err := b.startComponent(rt, p, st, c)
		if err != nil {
			return err
		}
		st.Processes = append(st.Processes, pr)
	}
	return writeState(p, st)
}

// Observe implements backend.Backend. A member is Provisioning until its
// API server's /readyz answers "ok" to the admin credentials, the "default"
// ServiceAccount exists (kube-controller-manager works) and, with
// scheduling, the simulated node is Ready; then Ready, with Access, for as
// long as all its processes run (a failing probe after that is reported in
// Message and left to the operator's health checks). It is Failed when a
// process has exited or cannot be verified as the member's (a recycled
// pid), when the data directory is inconsistent, when it is not ready
// within ProvisionTimeout, or when its disk use breaks MemberDiskLimit or
// MinFreeDisk (see disk.go). Observe only reads, apart from recording the
// first time it saw the member ready and a failure for its disk use.
func (b *Backend) Observe(ctx context.Context, m backend.Member) (backend.Observation, error) {
	obs, err := b.observe(ctx, m)
	if err != nil || obs.State != backend.StateFailed || validMember(m) != nil {
		return obs, err
	}
	// Recorded, so that its destroy keeps its logs (keptlogs.go), and
	// said, so that a person finds them once the member is gone.
	rt, p := b.member(m.UID), b.paths(m)
	rt.mu.Lock()
	if st, err := readState(p); err == nil && st.validate(m) == nil && st.Failure == "" {
		b.recordFailure(p, st, obs.Message)
	}
	rt.mu.Unlock()
	obs.Message += "; its logs are kept in " + b.keptLogs(p)
	return obs, nil
}

func (b *Backend) observe(ctx context.Context, m backend.Member) (backend.Observation, error) {
	if validMember(m) != nil {
		// Create refuses such a member, so nothing of it exists.
		return backend.Observation{State: backend.StateAbsent}, nil
	}
	rt := b.member(m.UID)
	p := b.paths(m)
	b.enforceDiskLimits(rt, p, m)
	rt.mu.Lock()
	obs, st, done := b.observeLocked(rt, p, m)
	rt.mu.Unlock()
	if done {
		return obs, nil
	}

	// Every process runs: ask the API server, without holding the lock.
	acc, err := access(p, st.Endpoint)
	if err != nil {
		return failed("reading member credentials: %v", err), nil
	}
	if st.ReadyAt != nil {
		// A frozen API server answers nothing: say so rather than wait
		// for a probe's timeout. Whoever thaws it checks it.
		if isFrozen, err := frozen(string(m.UID)); err == nil && isFrozen {
			return ready(st, acc, "frozen: its health is checked when it thaws"), nil
		}
	}
	probeErr := probeReady(ctx, acc.adminKubeconfig, st.ReadyAt == nil, readyNodes(st))
	if probeErr != nil {
		if ctx.Err() != nil {
			return backend.Observation{}, ctx.Err()
		}
		switch {
		case st.ReadyAt != nil:
			// Once ready, a failing probe is for the operator's health
			// checks to judge (they count consecutive failures); Observe
			// reports Failed only for what cannot heal.
			return ready(st, acc, fmt.Sprintf("readiness probe failing: %v", probeErr)), nil
		case time.Since(st.StartedAt) > b.opts.ProvisionTimeout:
			return failed("not ready %s after start: %v", b.opts.ProvisionTimeout, probeErr), nil
		}
		return backend.Observation{State: backend.StateProvisioning, Message: fmt.Sprintf("waiting for the API server: %v", probeErr)}, nil
	}
	if st.ReadyAt == nil {
		b.markReady(rt, p, m)
	}
	return ready(st, acc, ""), nil
}

// observeLocked judges a member from its files and processes. done is false
// when every process runs and only the API server can tell the rest.
func (b *Backend) observeLocked(rt *memberRT, p paths, m backend.Member) (obs backend.Observation, st *state, done bool) {
	st, err := readState(p)
	if errors.Is(err, errNoState) {
		if _, statErr := os.Stat(p.dir); errors.Is(statErr, fs.ErrNotExist) {
			return backend.Observation{State: backend.StateAbsent}, nil, true
		}
		return failed("data directory %s has no state file: its creation was interrupted", p.dir), nil, true
	}
	if err == nil {
		err = st.validate(m)
	}
	if err != nil {
		return failed("inconsistent state in %s: %v", p.dir, err), nil, true
	}
	if st.Failure != "" {
		return failed("%s", st.Failure), nil, true
	}
	var want []process
	for _, c := range memberComponents(st.Scheduling, st.Nodes) {
		want = append(want, process{Component: c})
	}
	for i := range st.Nodes {
		want = append(want, process{Component: compNode, Node: i})
	}
	for _, w := range want {
		if !st.Started && (w.Component != compEtcd && w.Component != compAPIServer) {
			continue
		}
		i := slices.IndexFunc(st.Processes, func(pr process) bool { return pr.Component == w.Component && pr.Node == w.Node })
		if i < 0 {
			return failed("state file lists no %s process", w.logName()), nil, true
		}
		if alive, why := b.alive(rt, p, st.Processes[i]); !alive {
			if rt.sup != nil {
				// The supervisor decides: a port clash is retried.
				return provisioning(rt.sup.status), nil, true
			}
			return failed("%s (pid %d) %s; its log is %s: %s", w.logName(), st.Processes[i].PID, why, p.log(w.logName()), lastLogLine(p, w.logName())), nil, true
		}
	}
	if !st.Started {
		switch {
		case rt.sup != nil:
			return provisioning(rt.sup.status), nil, true
		case time.Since(st.StartedAt) > b.opts.ProvisionTimeout:
			return failed("start-up did not finish within %s", b.opts.ProvisionTimeout), nil, true
		}
		// The operator restarted during start-up; its next Create resumes it.
		return provisioning("start-up interrupted by an operator restart; Create resumes it"), nil, true
	}
	return backend.Observation{}, st, false
}

// alive reports whether pr still runs as this member's process.
func (b *Backend) alive(rt *memberRT, p paths, pr process) (bool, string) {
	if ch, ok := rt.children[pr.PID]; ok {
		if exited, err := ch.exited(); exited {
			if err == nil {
				return false, "exited with status 0"
			}
			return false, err.Error()
		}
		return true, ""
	}
	info, ok := readProc(pr.PID)
	switch {
	case !ok || info.zombie:
		return false, "is not running"
	case !info.isOurs(p.dir) || info.component() != pr.Component:
		// The pid was recycled by an unrelated process.
		return false, "is not running (its pid now belongs to another program)"
	}
	return true, ""
}

func (b *Backend) markReady(rt *memberRT, p paths, m backend.Member) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, err := readState(p)
	if err != nil || st.validate(m) != nil || st.ReadyAt != nil {
		return
	}
	now := time.Now().UTC()
	st.ReadyAt = &now
	if err := writeState(p, st); err != nil {
		b.log.Error(err, "Recording readiness failed", "dir", p.dir)
		return
	}
	b.log.Info("Member ready", "dir", p.dir, "after", now.Sub(st.StartedAt).Round(time.Millisecond).String())
}

func ready(st *state, a *accessFiles, msg string) backend.Observation {
	return backend.Observation{
		State:   backend.StateReady,
		Message: msg,
		Access: &backend.Access{
			Endpoint:        st.Endpoint,
			CACert:          a.serverCA,
			ClientCACert:    a.clientCACert,
			ClientCAKey:     a.clientCAKey,
			AdminKubeconfig: a.adminKubeconfig,
		},
	}
}

func failed(format string, args ...any) backend.Observation {
	return backend.Observation{State: backend.StateFailed, Message: fmt.Sprintf(format, args...)}
}

func provisioning(msg string) backend.Observation {
	return backend.Observation{State: backend.StateProvisioning, Message: msg}
}

// Delete implements backend.Backend: it stops the member's processes
// (SIGTERM to each process group, SIGKILL after StopGracePeriod), waits until
// they are gone and removes the data directory.
func (b *Backend) Delete(ctx context.Context, m backend.Member) (bool, error) {
	if validMember(m) != nil {
		return true, nil // Create refuses such a member.
	}
	rt := b.member(m.UID)
	p := b.paths(m)
	b.stopSupervisor(rt)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := b.destroy(ctx, rt, p); err != nil {
		if errors.Is(err, errStillRunning) {
			b.log.Info("Member processes still running; will retry", "dir", p.dir, "reason", err.Error())
			return false, nil
		}
		return false, err
	}
	b.forget(m.UID, rt)
	return true, nil
}

// forget drops the in-memory record of a destroyed member.
func (b *Backend) forget(uid types.UID, rt *memberRT) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.members[uid] == rt {
		delete(b.members, uid)
	}
}

var errStillRunning = errors.New("processes still running")

// destroy kills every process of the member directory p (those in its state
// file and any other whose command line refers to it) and removes the
// directory. Called with rt.mu held.
func (b *Backend) destroy(ctx context.Context, rt *memberRT, p paths) error {
	// Nodes first, while their API server still answers: kobe-node stops
	// in well under a second then, and the API server has no kubelet
	// connections left to drain.
	if err := b.killProcsOf(ctx, rt, p.dir, compNode); err != nil {
		return err
	}
	if err := b.killProcs(ctx, rt, p.dir); err != nil {
		return err
	}
	if uid, ok := uidFromDirName(filepath.Base(p.dir)); ok && b.fences() {
		if err := node.UnfenceControlPlane(ctx, string(uid)); err != nil {
			return err
		}
	}
	if _, err := os.Stat(p.dir); errors.Is(err, fs.ErrNotExist) {
		// The directory went before the member (a stray): what it made
		// outside the directory goes now.
		if uid, ok := uidFromDirName(filepath.Base(p.dir)); ok {
			if err := removeMemberCgroup(ctx, uid); err != nil {
				return fmt.Errorf("removing the cgroup of %s: %w", p.dir, err)
			}
		}
		return removeMemberDisk(p)
	}
	// Its processes are gone, so its logs are final; kept now, before the
	// nodes' teardown detaches every mount under the directory (its own
	// file system included).
	if st, err := readState(p); err == nil && st.Failure != "" {
		if err := b.keepLogs(p); err != nil {
			b.log.Error(err, "Keeping a failed member's logs failed", "dir", p.dir)
		}
	}
	if err := b.destroyNodeHost(ctx, p); err != nil {
		return fmt.Errorf("removing the nodes of %s: %w", p.dir, err)
	}
	if uid, ok := uidFromDirName(filepath.Base(p.dir)); ok {
		if err := removeMemberCgroup(ctx, uid); err != nil {
			return fmt.Errorf("removing the cgroup of %s: %w", p.dir, err)
		}
	}
	// Its own file system goes whole, not file by file.
	if err := removeMemberDisk(p); err != nil {
		return err
	}
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("removing %s: %w", p.dir, err)
	}
	b.log.Info("Member destroyed", "dir", p.dir)
	return nil
}

// killProcs stops every process referring to dir and waits until they are
// gone; errStillRunning when they outlive the wait.
func (b *Backend) killProcs(ctx context.Context, rt *memberRT, dir string) error {
	return b.killProcsOf(ctx, rt, dir, "")
}

// killProcsOf is killProcs for the processes of one component ("" for
// all).
func (b *Backend) killProcsOf(ctx context.Context, rt *memberRT, dir, component string) error {
	if err := thawForKill(ctx, dir); err != nil {
		return fmt.Errorf("thawing %s before stopping it: %w", dir, err)
	}
	procs, err := scanProcs(dir)
	if err != nil {
		return err
	}
	if component != "" {
		procs = slices.DeleteFunc(procs, func(pr procInfo) bool { return pr.component() != component })
	}
	if len(procs) == 0 {
		return nil
	}
	for _, pr := range procs {
		if err := signal(pr, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stopping %s (pid %d): %w", pr.component(), pr.pid, err)
		}
	}
	if b.waitGone(ctx, rt, procs, b.opts.StopGracePeriod) {
		return nil
	}
	for _, pr := range procs {
		if b.isGone(rt, pr) {
			continue
		}
		b.log.V(1).Info("Killing process that ignored SIGTERM", "component", pr.component(), "pid", pr.pid)
		if err := signal(pr, syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing %s (pid %d): %w", pr.component(), pr.pid, err)
		}
	}
	if b.waitGone(ctx, rt, procs, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("%w: %d process(es) of %s survived SIGKILL", errStillRunning, len(procs), dir)
}

// isGone reports whether a process has exited (and, if it is our child,
// has been reaped).
func (b *Backend) isGone(rt *memberRT, pr procInfo) bool {
	if ch, ok := rt.children[pr.pid]; ok {
		exited, _ := ch.exited()
		return exited
	}
	info, ok := readProc(pr.pid)
	// A zombie that is not our child is reaped by its parent (init).
	return !ok || info.zombie || !slices.Equal(info.argv, pr.argv)
}

func (b *Backend) waitGone(ctx context.Context, rt *memberRT, procs []procInfo, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if !slices.ContainsFunc(procs, func(pr procInfo) bool { return !b.isGone(rt, pr) }) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// killChildren kills what this instance started for a member whose Create
// failed half-way. Called with rt.mu held.
func (b *Backend) killChildren(rt *memberRT) {
	for pid, ch := range rt.children {
		if exited, _ := ch.exited(); !exited {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-ch.done
		}
	}
}

// checkHostCap refuses a new member when DataRoot holds MaxMembers others
// already (own is the new member's directory: an interrupted Create may
// have left it).
func (b *Backend) checkHostCap(own string) error {
	if b.opts.MaxMembers <= 0 {
		return nil
	}
	entries, err := os.ReadDir(b.opts.DataRoot)
	if err != nil {
		return fmt.Errorf("counting members in %s: %w", b.opts.DataRoot, err)
	}
	n := 0
	for _, e := range entries {
		if _, ok := uidFromDirName(e.Name()); ok && e.IsDir() && e.Name() != own {
			n++
		}
	}
	if n >= b.opts.MaxMembers {
		return fmt.Errorf("%w: this host runs %d local members, its cap (--local-max-members %d)", backend.ErrUnavailable, n, b.opts.MaxMembers)
	}
	return nil
}
