//go:build root

// Package localnodes is the end to end test of leased `local` members with
// a real node (kubelet, containerd and kube-proxy in namespaces of their
// own): they run a user's Deployment of an image the pool preloads; kubectl logs,
// exec and port-forward work with the lease's kubeconfig, Direct and
// through the connect proxy; a ClusterIP Service answers from a pod; two
// members cannot reach each other's pods; Pod Security keeps a lease holder
// off the host; and after release nothing of a member is left on the
// machine. Needs root (make test-node runs it).
package localnodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
	"github.com/kunobi-ninja/kobe/internal/testenv/kobesuite"
	"github.com/kunobi-ninja/kobe/test/outside"
)

const (
	directPool = "nodes-direct"
	proxyPool  = "nodes-proxy"
	// mirrorURL is the proxy pool's registry mirror, in a documentation range.
	mirrorURL = "http://198.51.100.7:5000"
	// testappImage is make image-testapp's image, preloaded through
	// backend.local.preloadImages.
	testappImage   = "kobe.local/testapp:v1"
	testappArchive = "testapp.tar"
	// memberDeadline bounds waits that include building a member with a
	// node (control plane, containerd, image imports, kubelet, probe pod)
	// on 2 busy cores.
	memberDeadline = 4 * time.Minute
)

var (
	s *kobesuite.Suite
	// imageDir holds pause.tar and testapp.tar (make image-pause
	// image-testapp); IMAGE_DIR overrides it.
	imageDir string
)

// kubeletSysctls are the machine-wide settings kubelet changes; the suite
// puts them back, as a user's host would want.
// ip_forward is the host's, set by a member whose pool allows egress.
// kobe-node raises the inotify limits.
var kubeletSysctls = append([]string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward"}, node.InotifySysctls()...)

func TestMain(m *testing.M) {
	code, err := runSuite(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "localnodes:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func runSuite(m *testing.M) (int, error) {
	if os.Geteuid() != 0 {
		return 1, errors.New("members with real nodes need root (run `make test-node` as root)")
	}
	imageDir = os.Getenv("IMAGE_DIR")
	if imageDir == "" {
		imageDir = filepath.Join(testenv.RepoRoot(), "bin", "images")
	}
	for _, f := range []string{"pause.tar", "coredns.tar", testappArchive} {
		if _, err := os.Stat(filepath.Join(imageDir, f)); err != nil {
			return 1, fmt.Errorf("%s is missing: run `make image-pause image-coredns image-testapp`", filepath.Join(imageDir, f))
		}
	}
	ctx := context.Background()
	before, err := hostcluster.TakeSnapshot(ctx)
	if err != nil {
		return 1, err
	}
	saved := map[string][]byte{}
	for _, k := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			saved[k] = b
		}
	}

	work, err := os.MkdirTemp("", "kobe-localnodes-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	s, err = kobesuite.New(work, "kobe-node")
	if err != nil {
		return 1, err
	}
	code, err := runWithOperator(m)

	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if err := s.DeleteAll(ctx, 3*time.Minute); err != nil {
		errs = append(errs, fmt.Errorf("deleting every member: %w", err))
	}
	if code != 0 || len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "operator log tail:\n%s\n", s.Tail())
	}
	if err := s.Stop(); err != nil {
		errs = append(errs, err)
	}
	if err := leftovers(ctx, s.DataRoot); err != nil {
		errs = append(errs, fmt.Errorf("after every member was deleted: %w", err))
	}
	for k, v := range saved {
		if err := os.WriteFile("/proc/sys/"+k, v, 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", k, err))
		}
	}
	after, err := hostcluster.TakeSnapshot(ctx)
	if err != nil {
		errs = append(errs, err)
	} else if d := before.Diff(after); d != "" {
		errs = append(errs, fmt.Errorf("the machine is not as it was before the suite:\n%s", d))
	}
	return code, errors.Join(errs...)
}

func runWithOperator(m *testing.M) (int, error) {
	ctx := context.Background()
	rule := kobev1.AccessRule{Pools: []string{"*"}, MaxTTL: &metav1.Duration{Duration: time.Hour}, MaxConcurrentLeases: ptr.To[int32](4)}
	if err := s.CreatePolicy(ctx, "nodes-e2e", rule); err != nil {
		return 1, err
	}
	for name, mode := range map[string]kobev1.AccessMode{directPool: kobev1.AccessDirect, proxyPool: kobev1.AccessProxy} {
		p := &kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kobesuite.Namespace},
			Spec: kobev1.ClusterPoolSpec{
				Size: ptr.To[int32](1),
				TTL:  &metav1.Duration{Duration: 30 * time.Minute},
				// nodes unset: the operator's default (auto, below) gives
				// each member one node on this host.
				Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal, Local: &kobev1.LocalBackendSpec{
					PreloadImages: []string{testappArchive},
				}},
				Access: &kobev1.AccessSpec{Mode: mode},
			},
		}
		// Both name the outside registry (hostile_test.go), whose endpoint
		// is plain HTTP; only the proxy pool's egress reaches it.
		p.Spec.Cluster.RegistryMirrors = []kobev1.RegistryMirror{{Registry: outside.PublicIP + ":5000", Endpoints: []string{"http://" + outside.PublicIP + ":5000"}}}
		if name == directPool {
			// The noisy neighbour's attacks run here (limits_test.go).
			p.Spec.Cluster.Limits = &kobev1.MemberLimits{Memory: ptr.To(resource.MustParse(directMemory)),
				Processes: ptr.To[int64](directProcesses), PodProcesses: ptr.To[int64](directProcesses),
				Disk: ptr.To(resource.MustParse(strconv.Itoa(directDiskMiB) + "Mi"))}
		}
		if name == proxyPool {
			// The hostile suite checks both: no egress, and public only.
			p.Spec.Cluster.Egress = &kobev1.EgressSpec{Mode: kobev1.EgressPublic}
			// A mirror (nothing listens there: the workload's images are
			// preloaded) that the nodes' containerd must start with.
			p.Spec.Cluster.RegistryMirrors = append(p.Spec.Cluster.RegistryMirrors, kobev1.RegistryMirror{Registry: "docker.io", Endpoints: []string{mirrorURL}})
		}
		if err := s.Env.Client.Create(ctx, p); err != nil {
			return 1, fmt.Errorf("creating pool %s: %w", name, err)
		}
	}
	if err := s.StartOperator(
		"--disable-kubernetes-backend",
		"--local-node-bin-dir", hostcluster.NodeBinDir(),
		"--local-node-agent", filepath.Join(s.Bin, "kobe-node"),
		"--local-image-dir", imageDir,
		"--local-default-nodes=auto",
	); err != nil {
		return 1, err
	}
	return m.Run(), nil
}
