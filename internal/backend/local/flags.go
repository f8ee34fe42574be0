package local

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// defaultMaxMembersFlag is --local-max-members' default: 16 members idle at
// about 0.7 of a core of a 2-core host and, with a real node each, hold
// about 8 GiB; half the 32 network slots of members with nodes. (Options'
// MaxMembers has no default: zero is no cap.)
const defaultMaxMembersFlag = 16

// Flags are the operator's flags of the local backend.
type Flags struct {
	// Disable leaves the backend unwired (--disable-local-backend).
	Disable bool
	// BinDir, DataDir, AdvertiseHost, ProvisionTimeout, NodeBinDir,
	// NodeAgent, ImageDir and PauseImage are Options' fields of (nearly)
	// the same names.
	BinDir, DataDir, AdvertiseHost              string
	ProvisionTimeout                            time.Duration
	NodeBinDir, NodeAgent, ImageDir, PauseImage string
	// MaxMembers is Options.MaxMembers, and the pool controller's host cap
	// of local members.
	MaxMembers      int
	MemberNice      int
	MemberDiskLimit resource.QuantityValue
	MinFreeDisk     DiskFloor
	// DefaultNodes is Options.DefaultNodes.
	DefaultNodes backend.NodesDefault
}

// Bind registers the flags on fs with their defaults.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.Disable, "disable-local-backend", false, "Do not wire the local backend.")
	fs.StringVar(&f.BinDir, "local-bin-dir", DefaultBinDir, "Directory with etcd, kube-apiserver and kube-controller-manager for the local backend.")
	fs.StringVar(&f.DataDir, "local-data-dir", filepath.Join(os.TempDir(), "kobe-local"), "Directory holding the local backend's member data, this operator's alone; anything in it that no ClusterInstance of --namespace owns is removed at start.")
	fs.StringVar(&f.AdvertiseHost, "local-advertise-host", "127.0.0.1", "Host name or IP in local members' endpoints, reachable by lease holders.")
	fs.DurationVar(&f.ProvisionTimeout, "local-provision-timeout", 3*time.Minute, "How long a local member may take to start before it is reported failed.")
	fs.StringVar(&f.NodeBinDir, "local-node-bin-dir", DefaultNodeBinDir, "Directory with kubelet and kube-proxy for local members with nodes (`make node`).")
	fs.StringVar(&f.NodeAgent, "local-node-agent", "", "Path of the kobe-node program for local members with nodes (default: kobe-node next to this executable).")
	fs.StringVar(&f.ImageDir, "local-image-dir", DefaultImageDir, "Directory with the pause and cluster DNS image archives (pause.tar and coredns.tar: `make image-pause image-coredns`) and the image archives pools preload (backend.local.preloadImages).")
	fs.StringVar(&f.PauseImage, "local-pause-image", DefaultPauseImage, "Image name in the pause archive, the sandbox image of local members' nodes.")
	fs.IntVar(&f.MaxMembers, "local-max-members", defaultMaxMembersFlag, "Most ClusterInstances of backend local that this operator keeps at once across all its pools (any phase, being deleted included); a pool that wants more creates nothing and reports Capacity HostCapacityReached until members go away. 0 removes the cap. The default fits a 2-core host: each member idles at about 5% of a core (docs/benchmarks.md) and one with a real node holds about 0.5 GiB.")
	fs.IntVar(&f.MemberNice, "local-member-nice", DefaultMemberNice, "How much lower than the operator's the CPU priority of local members' processes is (their niceness above the operator's, 0 to 19; capped at 19): a burst of member builds then does not slow hand-outs. 0 runs them at the operator's priority.")
	f.MemberDiskLimit, f.MinFreeDisk = resource.QuantityValue{Quantity: DefaultMemberDiskLimit.DeepCopy()}, DefaultMinFreeDisk
	fs.Var(&f.MemberDiskLimit, "local-member-disk-limit", "Most disk a local member's data directory may take (etcd, logs and, with nodes, images, writable layers, emptyDirs and pod logs), as a quantity (20Gi); a member above it is reported failed and recycled, a leased one ending its lease. Measured at most every 30s. 0 removes the limit.")
	f.DefaultNodes = backend.NodesDefault{Auto: true}
	fs.Var(&f.DefaultNodes, "local-default-nodes", "Real nodes of a local member whose pool leaves backend.local.nodes unset: auto (1 where this operator can run nodes: root, the node binaries and images; else 0, and the pool's Nodes condition says why) or a number from 0 to 4.")
	fs.Var(&f.MinFreeDisk, "local-min-free-disk", "Free space the file system of --local-data-dir keeps, as a percentage of its size (5%) or a quantity (2Gi): below it local members are reported failed, the largest first, until their removal restores it, and no new one is created. 0 removes the floor.")
}

// Validate refuses values the operator must not start with. The cap is
// checked even with the backend disabled: the pool controller applies it.
func (f Flags) Validate() error {
	if f.MaxMembers < 0 || f.MaxMembers > math.MaxInt32 {
		return errors.New("--local-max-members must be 0 (no cap) or a positive number")
	}
	if f.MemberNice < 0 || f.MemberNice > maxNice {
		return fmt.Errorf("--local-member-nice must be from 0 (the operator's priority) to %d (the lowest), not %d", maxNice, f.MemberNice)
	}
	return nil
}

// Options are the backend's Options from the flags.
func (f Flags) Options(log logr.Logger) Options {
	return Options{
		BinDir: f.BinDir, DataRoot: f.DataDir, AdvertiseHost: f.AdvertiseHost,
		Logger: log, ProvisionTimeout: f.ProvisionTimeout,
		NodeBinDir: f.NodeBinDir, NodeAgent: f.NodeAgent, ImageDir: f.ImageDir,
		PauseImage: f.PauseImage, MaxMembers: f.MaxMembers, MemberNice: f.MemberNice,
		MemberDiskLimit: f.MemberDiskLimit.Value(), MinFreeDisk: f.MinFreeDisk,
		DefaultNodes: f.DefaultNodes,
	}
}
