package install

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/kube"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// helmTimeout bounds each install, upgrade and uninstall, their waits
// included.
const helmTimeout = 3 * time.Minute

// Helm runs helm install, upgrade and uninstall of charts/kobe as one
// release, as the helm CLI does with --wait (the kstatus watcher).
type Helm struct {
	Namespace, Release string

	cfg   *action.Configuration
	chart chart.Charter
}

// NewHelm loads charts/kobe of this repository and connects to the cluster
// of kubeconfig; Helm's own log goes to stderr, warnings and errors only.
func NewHelm(kubeconfig, namespace, release string) (*Helm, error) {
	ch, err := loader.Load(filepath.Join(testenv.RepoRoot(), "charts", "kobe"))
	if err != nil {
		return nil, fmt.Errorf("loading charts/kobe: %w", err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(
		slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
	return &Helm{Namespace: namespace, Release: release, cfg: cfg, chart: ch}, nil
}

// Install is `helm install --create-namespace --wait` with vals.
func (h *Helm) Install(ctx context.Context, vals map[string]any) error {
	in := action.NewInstall(h.cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = h.Release, h.Namespace, true
	in.WaitStrategy, in.Timeout = kube.StatusWatcherStrategy, helmTimeout
	if _, err := in.RunWithContext(ctx, h.chart, vals); err != nil {
		return fmt.Errorf("helm install %s: %w", h.Release, err)
	}
	return nil
}

// Upgrade is `helm upgrade --wait` with vals (which replace the release's
// values, as the CLI does without --reuse-values).
func (h *Helm) Upgrade(ctx context.Context, vals map[string]any) error {
	up := action.NewUpgrade(h.cfg)
	up.Namespace = h.Namespace
	up.WaitStrategy, up.Timeout = kube.StatusWatcherStrategy, helmTimeout
	if _, err := up.RunWithContext(ctx, h.Release, h.chart, vals); err != nil {
		return fmt.Errorf("helm upgrade %s: %w", h.Release, err)
	}
	return nil
}

// Uninstall is `helm uninstall --wait`: it returns once the release's
// objects are gone (those the chart keeps aside).
func (h *Helm) Uninstall(context.Context) error {
	un := action.NewUninstall(h.cfg)
	un.WaitStrategy, un.Timeout = kube.StatusWatcherStrategy, helmTimeout
	if _, err := un.Run(h.Release); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", h.Release, err)
	}
	return nil
}

// Values are the chart values that run the locally built image imported
// into the node (never pulled) with the sim backend on, so that a pool can
// fill without real clusters.
func Values(repository, tag string) map[string]any {
	return map[string]any{
		"image": map[string]any{"repository": repository, "tag": tag, "pullPolicy": "Never"},
		"backends": map[string]any{
			"sim": map[string]any{"enabled": true},
			// The real-node host's bridge CNI enforces no NetworkPolicy:
			// its kubernetes pools would hand out nothing. Opted out here,
			// on a single-tenant test host only.
			// Its pools run no node pods by default: the node image is
			// not built for these tests (test/incluster runs node pods).
			"kubernetes": map[string]any{"requireNetworkPolicyEnforcement": false, "defaultNodes": 0},
		},
	}
}

// CheckImported fails unless containerd of the node at socket holds ref
// (imported from a tarball: pods with imagePullPolicy Never run nothing
// else), naming the images it holds.
func CheckImported(ctx context.Context, socket, ref string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", socket, "-n", "k8s.io", "images", "ls", "-q").Output()
	if err != nil {
		return fmt.Errorf("listing the node's images: %w", err)
	}
	have := strings.Fields(string(out))
	if !slices.Contains(have, ref) {
		return fmt.Errorf("the node has no image %s (it has %v): KOBE_IMAGE_REPOSITORY/KOBE_IMAGE_TAG must name what `make image` built", ref, have)
	}
	return nil
}
