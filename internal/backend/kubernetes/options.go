package kubernetes

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
)

// Options wire the kubernetes backend (incluster.Options without what this
// package fixes: type, template and capabilities).
type Options struct {
	// Client reads and writes host objects; uncached (client.New), since
	// Observe's verdict reaps members.
	Client client.Client
	// Namespace is the operator's namespace, where members' objects live
	// and which Sweep searches.
	Namespace string
	// OperatorSelector are the labels of the operator's pods (the
	// NetworkPolicy lets them reach members' API servers).
	OperatorSelector map[string]string
	// UnschedulableTimeout: see incluster.Options.
	UnschedulableTimeout time.Duration
	// Log receives what Sweep removes.
	Log logr.Logger
	// NodeImage replaces DefaultNodeImage for pools that name no
	// images.node.
	NodeImage string
	// NodePreload are image archives, paths inside the node image, that
	// each node imports into its containerd at start besides the pause
	// image: a node image built with the images a member's workload needs
	// runs them without a registry (imagePullPolicy Never or IfNotPresent).
	NodePreload []string
	// DefaultNodes is how many node pods a member gets when its pool
	// leaves backend.kubernetes.nodes unset (zero: none; Auto: 1).
	DefaultNodes backend.NodesDefault
	// HostRanges are the host cluster's ranges, which members' pods never
	// reach (incluster.Options.HostRanges).
	HostRanges *incluster.HostRanges
	// Config reaches the host API server for pods/exec, which kobe load
	// streams image archives through into node pods (nil: members take no
	// images).
	Config *rest.Config
}
