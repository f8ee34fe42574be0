package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// Freezing (issue 28): a Ready member that waits for a lease can be frozen
// with the cgroup v2 freezer, so that it uses no CPU until it is thawed
// (docs/benchmarks.md, "Frozen warm members"). Its control-plane processes
// are moved into cpCgroup, beside its nodes' cgroups; writing
// cgroup.freeze of NodeCgroup(uid) freezes them all. A frozen member's
// API server answers nothing, so Observe reports it Ready with a message
// and no probe, and whoever thaws it checks its health before a hand-out
// (backend.Freezer: the pool controller decides, the instance controller
// freezes, thaws and checks).

var _ backend.Freezer = (*Backend)(nil)

// cpCgroup is the cgroup (in the unified hierarchy only) that holds a
// member's control-plane processes once it has been frozen.
func cpCgroup(uid string) string { return NodeCgroup(uid) + "/cp" }

// freezeWait bounds the wait for the kernel to report a cgroup (un)frozen.
const freezeWait = 10 * time.Second

// CanFreeze: members are frozen only by an operator running as root on a
// host whose cgroup v2 hierarchy has the freezer (cgroup.freeze, Linux
// 5.2 and later). Probed once, by making and removing an empty cgroup.
func (b *Backend) CanFreeze() (bool, string) {
	c := &b.canFreeze
	c.once.Do(func() { c.ok, c.why = probeFreezer() })
	return c.ok, c.why
}

func probeFreezer() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "the operator is not root (the cgroup freezer needs it)"
	}
	probe := "kobe/freeze-probe-" + strconv.Itoa(os.Getpid())
	cg, err := node.UnifiedCgroup(probe)
	if err != nil {
		return false, err.Error()
	}
	if err := os.MkdirAll(cg, 0o755); err != nil {
		return false, fmt.Sprintf("cannot make a cgroup in the cgroup v2 hierarchy: %v", err)
	}
	_, statErr := os.Stat(filepath.Join(cg, "cgroup.freeze"))
	_ = os.Remove(cg)
	if statErr != nil {
		return false, "the cgroup v2 hierarchy has no freezer (cgroup.freeze; Linux 5.2 or later)"
	}
	return true, ""
}

// Freeze stops every process of a Ready member with the cgroup v2 freezer
// and returns once the kernel reports them frozen. Idempotent. Root only.
func (b *Backend) Freeze(ctx context.Context, m backend.Member) error {
	if err := validMember(m); err != nil {
		return err
	}
	rt := b.member(m.UID)
	p := b.paths(m)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, err := readState(p)
	if err == nil {
		err = st.validate(m)
	}
	if err != nil {
		return fmt.Errorf("freezing %s: %w", m.Name, err)
	}
	if st.ReadyAt == nil || !st.Started || rt.sup != nil {
		return fmt.Errorf("freezing %s: only a Ready member is frozen", m.Name)
	}
	uid := string(m.UID)
	cp, err := node.UnifiedCgroup(cpCgroup(uid))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cp, 0o755); err != nil {
		return fmt.Errorf("freezing %s: %w", m.Name, err)
	}
	for _, pr := range st.Processes {
		if pr.Component == compNode {
			continue // in its node's cgroup already, with everything it started
		}
		if alive, why := b.alive(rt, p, pr); !alive {
			return fmt.Errorf("freezing %s: %s (pid %d) %s", m.Name, pr.Component, pr.PID, why)
		}
		if err := os.WriteFile(filepath.Join(cp, "cgroup.procs"), []byte(strconv.Itoa(pr.PID)), 0o644); err != nil {
			return fmt.Errorf("freezing %s: moving %s (pid %d): %w", m.Name, pr.Component, pr.PID, err)
		}
	}
	return setFreeze(ctx, filepath.Dir(cp), true)
}

// Thaw resumes a frozen member and returns once the kernel reports it
// thawed; its API server answers within about a second. A member that was
// never frozen is left alone. Idempotent.
func (b *Backend) Thaw(ctx context.Context, m backend.Member) error {
	if err := validMember(m); err != nil {
		return err
	}
	return thawCgroup(ctx, string(m.UID))
}

// Frozen reports whether a member is frozen (or being frozen).
func (b *Backend) Frozen(m backend.Member) (bool, error) {
	if err := validMember(m); err != nil {
		return false, err
	}
	return frozen(string(m.UID))
}

func frozen(uid string) (bool, error) {
	cg, err := node.UnifiedCgroup(NodeCgroup(uid))
	if err != nil {
		return false, nil //nolint:nilerr // without cgroup2 nothing was frozen
	}
	data, err := os.ReadFile(filepath.Join(cg, "cgroup.freeze"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(data)) == "1", nil
}

// thawCgroup thaws the member uid's cgroup when it exists.
func thawCgroup(ctx context.Context, uid string) error {
	cg, err := node.UnifiedCgroup(NodeCgroup(uid))
	if err != nil {
		return nil //nolint:nilerr // without cgroup2 nothing was frozen
	}
	if _, err := os.Stat(cg); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return setFreeze(ctx, cg, false)
}

// thawForKill thaws the member whose directory is dir before its processes
// are signalled: a frozen process acts on no signal but SIGKILL.
func thawForKill(ctx context.Context, dir string) error {
	uid, ok := uidFromDirName(filepath.Base(dir))
	if !ok {
		return nil
	}
	return thawCgroup(ctx, string(uid))
}

// removeMemberCgroup kills what is left in the cgroup that confine and
// Freeze created for a member and removes it (destroyNodeHost does the same
// first for a member with nodes).
func removeMemberCgroup(ctx context.Context, uid types.UID) error {
	// Made by Freeze in the unified hierarchy, or by confine in all.
	if where, err := node.CgroupPaths(NodeCgroup(string(uid))); err != nil || len(where) == 0 {
		return err
	}
	kctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := node.KillCgroup(kctx, NodeCgroup(string(uid)))
	cancel()
	if err != nil {
		return fmt.Errorf("%w: %w", errStillRunning, err)
	}
	if err := node.RemoveCgroup(NodeCgroup(string(uid))); err != nil {
		return err
	}
	return node.RemoveEmptyCgroup(filepath.Dir(NodeCgroup(string(uid))))
}

// setFreeze writes cgroup.freeze of cg and waits until cgroup.events
// reports the state reached.
func setFreeze(ctx context.Context, cg string, freeze bool) error {
	v, want := "0", "frozen 0"
	if freeze {
		v, want = "1", "frozen 1"
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte(v), 0o644); err != nil {
		return fmt.Errorf("writing %s/cgroup.freeze: %w", cg, err)
	}
	deadline := time.Now().Add(freezeWait)
	for {
		data, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("reading %s/cgroup.events: %w", cg, err)
		}
		if slices.Contains(strings.Split(string(data), "\n"), want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not %q after %s", cg, want, freezeWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond): // cgroup.events changes within milliseconds
		}
	}
}
