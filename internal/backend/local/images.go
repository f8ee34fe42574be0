package local

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

var _ backend.ImageLoader = (*Backend)(nil)

// LoadImages imports a docker-archive into the containerd of every node of
// the member (kobe load). Each node's containerd listens in the node's own
// mount namespace; the operator reaches its socket through
// /proc/<kobe-node's pid>/root after checking that the pid is still that
// node's kobe-node, so a recycled pid never gets the archive. The images
// land in the node's own containerd root, under the member's directory and
// within its disk limit.
func (b *Backend) LoadImages(ctx context.Context, m backend.Member, archive string) (int, error) {
	if err := validMember(m); err != nil {
		return 0, err
	}
	sockets, err := b.nodeSockets(m)
	if err != nil {
		return 0, err
	}
	for i, socket := range sockets {
		argv := node.ImportCommand(ctrBin, socket, archive)
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return i, fmt.Errorf("importing into %s: %w: %s", NodeName(i), err, node.FailureLine(out))
		}
	}
	return len(sockets), nil
}

// nodeSockets are the containerd sockets of the member's nodes, in node
// order, each reached through its running kobe-node.
func (b *Backend) nodeSockets(m backend.Member) ([]string, error) {
	rt := b.member(m.UID)
	p := b.paths(m)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, err := readState(p)
	if err == nil {
		err = st.validate(m)
	}
	if err != nil {
		return nil, fmt.Errorf("loading images into %s: %w", m.Name, err)
	}
	if st.Nodes == 0 {
		return nil, backend.ErrNoNodes
	}
	sockets := make([]string, st.Nodes)
	for _, pr := range st.Processes {
		if pr.Component != compNode || pr.Node < 0 || pr.Node >= len(sockets) {
			continue
		}
		if alive, why := b.alive(rt, p, pr); !alive {
			return nil, fmt.Errorf("loading images into %s: %s %s", m.Name, NodeName(pr.Node), why)
		}
		sockets[pr.Node] = "/proc/" + strconv.Itoa(pr.PID) + "/root" + node.ContainerdSocket
	}
	for i, s := range sockets {
		if s == "" {
			return nil, fmt.Errorf("loading images into %s: %s is not running", m.Name, NodeName(i))
		}
	}
	return sockets, nil
}
