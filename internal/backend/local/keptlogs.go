package local

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// A member that fails is destroyed, and with it the logs that would say
// why (issue 42: a kubelet that exited while its neighbours churned). So
// the destroy of a failed member first keeps the tail of each of its logs
// (control plane, kobe-node, kubelet, containerd, kube-proxy) in
// <DataRoot>-failed/<member directory>/, beside the data root (whose
// entries are members only), and the failure's message names that
// directory (the pool's status.lastFailure shows it). Only the last
// keptFailedMembers failed members are kept, at most keptLogTail of each
// log, and a pool's go with the pool (ForgetPool).

const (
	keptFailedMembers = 5
	keptLogTail       = 256 << 10
)

// keptLogs is where member p's logs are kept once it failed.
func (b *Backend) keptLogs(p paths) string {
	return filepath.Join(filepath.Clean(b.opts.DataRoot)+"-failed", filepath.Base(p.dir))
}

// keepLogs copies the tail of every log of member p (*.log under its
// directory) to keptLogs, then removes the oldest kept members beyond
// keptFailedMembers.
func (b *Backend) keepLogs(p paths) error {
	dst := b.keptLogs(p)
	err := filepath.WalkDir(p.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".log") || !d.Type().IsRegular() {
			return nil
		}
		tail, err := readTail(path, keptLogTail)
		if err != nil {
			return nil //nolint:nilerr // a log that cannot be read is left out
		}
		rel, err := filepath.Rel(p.dir, path)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
			return err
		}
		return os.WriteFile(out, tail, 0o600)
	})
	if err != nil {
		return fmt.Errorf("keeping the logs of %s: %w", p.dir, err)
	}
	return pruneKeptLogs(filepath.Dir(dst), keptFailedMembers)
}

// pruneKeptLogs removes the oldest member directories under dir beyond
// keep.
func pruneKeptLogs(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	type kept struct {
		name string
		at   int64
	}
	var all []kept
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() {
			all = append(all, kept{e.Name(), info.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(all, func(a, b kept) int { return cmp.Compare(b.at, a.at) })
	for _, k := range all[min(keep, len(all)):] {
		if err := os.RemoveAll(filepath.Join(dir, k.name)); err != nil {
			return err
		}
	}
	return nil
}

var _ backend.PoolForgetter = (*Backend)(nil)

// ForgetPool removes the kept logs of the failed members of a pool being
// deleted (backend.PoolForgetter): member directories are named
// <namespace>_<name>_<uid>, and neither part holds "_".
func (b *Backend) ForgetPool(namespace string, member func(name string) bool) error {
	dir := filepath.Clean(b.opts.DataRoot) + "-failed"
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		parts := strings.Split(e.Name(), "_")
		if len(parts) != 3 || parts[0] != namespace || !member(parts[1]) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("removing the kept logs of %s: %w", parts[1], err)
		}
	}
	return nil
}
