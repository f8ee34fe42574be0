package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// Sweep implements backend.Sweeper: it destroys every member directory under
// DataRoot whose UID owned rejects, then stops any member process whose
// directory no longer exists. removed names what was destroyed.
func (b *Backend) Sweep(ctx context.Context, owned backend.OwnedFunc) (removed []string, err error) {
	dirs, _, err := b.unowned(owned)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, name := range dirs {
		uid, _ := uidFromDirName(name)
		if err := b.destroyUnowned(ctx, uid, filepath.Join(b.opts.DataRoot, name)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	// Directories just destroyed took their processes with them.
	_, strays, err := b.unowned(owned)
	if err != nil {
		return removed, errors.Join(append(errs, err)...)
	}
	for _, dir := range strays {
		rt := &memberRT{children: map[int]*child{}}
		uid, hasUID := uidFromDirName(filepath.Base(dir))
		if hasUID {
			rt = b.member(uid)
			b.stopSupervisor(rt)
		}
		rt.mu.Lock()
		// Its directory is gone: destroy stops its processes and removes
		// what it made outside the directory (cgroup, fence, image).
		err := b.destroy(ctx, rt, paths{dir: dir})
		rt.mu.Unlock()
		if hasUID && err == nil {
			b.forget(uid, rt)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.log.Info("Stopped processes of a member whose directory is gone", "dir", dir)
		removed = append(removed, "processes of "+filepath.Base(dir))
	}
	return removed, errors.Join(errs...)
}

// Leaks implements backend.LeakFinder: what Sweep would destroy, destroying
// nothing.
func (b *Backend) Leaks(_ context.Context, owned backend.OwnedFunc) ([]string, error) {
	dirs, strays, err := b.unowned(owned)
	if err != nil {
		return nil, err
	}
	for _, dir := range strays {
		dirs = append(dirs, "processes of "+filepath.Base(dir))
	}
	return dirs, nil
}

// unowned returns the member directories under DataRoot whose UID owned
// rejects (their names), and the directories of running member processes
// that no longer exist (strays).
func (b *Backend) unowned(owned backend.OwnedFunc) (dirs, strays []string, err error) {
	entries, err := os.ReadDir(b.opts.DataRoot)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", b.opts.DataRoot, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		uid, ok := uidFromDirName(e.Name())
		if !ok {
			b.log.Info("Ignoring directory that is not a member's", "dir", filepath.Join(b.opts.DataRoot, e.Name()))
			continue
		}
		if !owned(namespaceFromDirName(e.Name()), uid) {
			dirs = append(dirs, e.Name())
		}
	}
	// A disk image whose directory is gone is destroyed like a member.
	for _, name := range orphanImages(entries) {
		if uid, _ := uidFromDirName(name); !owned(namespaceFromDirName(name), uid) {
			dirs = append(dirs, name)
		}
	}
	procs, err := scanProcs(b.opts.DataRoot)
	if err != nil {
		return dirs, nil, err
	}
	seen := map[string]bool{}
	for _, pr := range procs {
		dir, ok := pr.memberDir(b.opts.DataRoot)
		if !ok || seen[dir] {
			continue
		}
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			seen[dir] = true
			strays = append(strays, dir)
		}
	}
	sort.Strings(strays)
	return dirs, strays, nil
}

func (b *Backend) destroyUnowned(ctx context.Context, uid types.UID, dir string) error {
	rt := b.member(uid)
	b.stopSupervisor(rt)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := b.destroy(ctx, rt, paths{dir: dir}); err != nil {
		return fmt.Errorf("sweeping %s: %w", dir, err)
	}
	b.forget(uid, rt)
	return nil
}
