package node

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// The control-plane fence (issue 42): a local member's etcd, API server
// and controllers are processes of the operator's host, in its network.
// What they connect to is decided by a lease holder who is system:masters
// of the API server: a webhook's Service, an aggregated API, a redirect
// that a webhook answers with (the API server's clients follow them). The
// address guard checks the addresses written in objects; this fence holds
// where the connections are made: an nftables table per member that
// matches the sockets of the member's control-plane cgroup (cgroup v2,
// `socket cgroupv2`) and lets them open connections only to the member's
// own API server port on this host and out of the member's bridge (its
// nodes and pods). Everything else is refused at once, loopback and the
// operator's own ports included; answers to connections made to the
// member are not touched.

// cgroupMount is where nft resolves `socket cgroupv2` paths from.
const cgroupMount = "/sys/fs/cgroup"

// ControlPlaneTable is the nftables table (family inet) that fences the
// control plane of member uid.
func ControlPlaneTable(uid string) string { return "kobe-cp-" + uid }

// fenceScript is the table for the control plane in cgroup path (relative
// to cgroupMount) at level (its depth in the cgroup v2 hierarchy), whose
// API server listens on apiPort; bridge is the member's bridge ("" for a
// member without nodes).
func fenceScript(table, path string, level, apiPort int, bridge string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", table, table, table)
	b.WriteString("  chain output {\n    type filter hook output priority filter - 10; policy accept;\n")
	fmt.Fprintf(&b, "    socket cgroupv2 level %d %q jump member\n", level, path)
	b.WriteString("  }\n")
	b.WriteString("  chain member {\n")
	b.WriteString("    ct state established,related accept\n")
	fmt.Fprintf(&b, "    oifname \"lo\" tcp dport %d accept\n", apiPort)
	if bridge != "" {
		fmt.Fprintf(&b, "    oifname %q accept\n", bridge)
	}
	refuse(&b, "")
	b.WriteString("  }\n}\n")
	return b.String()
}

// FenceControlPlane loads (or replaces) the fence of member uid, whose
// control plane runs in the cgroup rel: it must exist in the cgroup v2
// hierarchy, mounted at or below /sys/fs/cgroup, before the table is
// loaded (nft resolves the path once). Idempotent; called again whenever
// the API server's port changes.
func FenceControlPlane(ctx context.Context, uid, rel string, apiPort int, bridge string) error {
	if apiPort <= 0 || apiPort > 65535 {
		return fmt.Errorf("API server port %d is not a port", apiPort)
	}
	full, err := UnifiedCgroup(rel)
	if err != nil {
		return err
	}
	path, err := filepath.Rel(cgroupMount, full)
	if err != nil || strings.HasPrefix(path, "..") {
		return fmt.Errorf("the cgroup v2 hierarchy is not mounted below %s: %s", cgroupMount, full)
	}
	// The level is the cgroup's depth from the hierarchy's root, which
	// is its mount here (an operator in a cgroup namespace is not
	// root of the host, and makes no cgroups).
	level := strings.Count(rel, "/") + 1
	if _, err := run(ctx, []byte(fenceScript(ControlPlaneTable(uid), path, level, apiPort, bridge)), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("loading nftables table %s: %w", ControlPlaneTable(uid), err)
	}
	return nil
}

// UnfenceControlPlane deletes the fence of member uid, once its processes
// are gone. A fence that does not exist is fine.
func UnfenceControlPlane(ctx context.Context, uid string) error {
	t := ControlPlaneTable(uid)
	// Made first, so that the delete never fails for a missing table.
	if _, err := run(ctx, []byte("table inet "+t+"\ndelete table inet "+t+"\n"), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("deleting nftables table %s: %w", t, err)
	}
	return nil
}
