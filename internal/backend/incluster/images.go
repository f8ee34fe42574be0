package incluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// PodExec runs a command in a container of a host pod, its standard input
// read from stdin, and returns what it wrote (standard output and error).
type PodExec interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string, stdin io.Reader) ([]byte, error)
}

// NodeContainer is the container of a node pod that runs kobe-node and
// the node's containerd.
const NodeContainer = "node"

var _ backend.ImageLoader = (*Backend)(nil)

// LoadImages imports a docker-archive into the containerd of every node
// pod of the member (kobe load): the archive streams into each pod's
// import command through the host API server's exec. The images land in
// the node pod's own data volume, within its ephemeral-storage limit.
func (b *Backend) LoadImages(ctx context.Context, m backend.Member, archive string) (int, error) {
	if b.opts.Exec == nil || len(b.opts.NodeImport) == 0 {
		return 0, fmt.Errorf("%w: this operator cannot run commands in node pods", backend.ErrUnavailable)
	}
	nodes, err := b.runningNodePods(ctx, m)
	if err != nil {
		return 0, err
	}
	for i := range nodes {
		if err := b.importInto(ctx, &nodes[i], archive); err != nil {
			return i, err
		}
	}
	return len(nodes), nil
}

func (b *Backend) importInto(ctx context.Context, pod *corev1.Pod, archive string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	out, err := b.opts.Exec.Exec(ctx, pod.Namespace, pod.Name, NodeContainer, b.opts.NodeImport, f)
	if err != nil {
		return fmt.Errorf("importing into node pod %s: %w: %s", pod.Name, err, node.FailureLine(out))
	}
	return nil
}

// runningNodePods are the member's node pods, by name, each Running with
// its node container ready; ErrNoNodes when the member has none.
func (b *Backend) runningNodePods(ctx context.Context, m backend.Member) ([]corev1.Pod, error) {
	sel := selectorFor(b.opts.Type, m)
	sel[LabelComponent] = ComponentNode
	var list corev1.PodList
	if err := b.opts.Client.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingLabels(sel)); err != nil {
		return nil, fmt.Errorf("listing the node pods of member %s: %w", m.Name, err)
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !ownedBy(&p, m) })
	if len(pods) == 0 {
		return nil, backend.ErrNoNodes
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods {
		if why := notRunning(&pods[i]); why != "" {
			return nil, fmt.Errorf("node pod %s of member %s %s", pods[i].Name, m.Name, why)
		}
	}
	return pods, nil
}

// notRunning says why a node pod cannot take an import ("" when it can).
func notRunning(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "is being deleted"
	case p.Status.Phase != corev1.PodRunning:
		return "is " + strings.ToLower(string(p.Status.Phase))
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == NodeContainer && c.State.Running != nil {
			return ""
		}
	}
	return "has no running " + NodeContainer + " container"
}
