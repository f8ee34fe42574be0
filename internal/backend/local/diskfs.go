package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// A confined member with a disk limit (cluster.limits.disk) keeps its data
// directory on a file system of its own: an ext4 image of that size,
// sparse, beside the directory (<dir>.disk), loop-mounted on it before
// anything is written there. etcd, logs, images, containers' layers,
// emptyDirs and hostPath volumes under the storage root all land in it, so
// a write past the limit fails with ENOSPC inside the member and the
// operator's file system keeps its space; the nodes' kubelets, which see
// that file system as theirs, evict pods before it fills. The measurement
// of disk.go stays, for members without a file system of their own.

// diskImage is the file that holds member p's file system.
func (p paths) diskImage() string { return p.dir + diskImageSuffix }

const diskImageSuffix = ".disk"

// mountMemberDisk makes the member's file system of size bytes and mounts
// it on its (empty) data directory.
func mountMemberDisk(ctx context.Context, p paths, size int64) error {
	img := p.diskImage()
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating the member's disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing the member's disk image: %w", err)
	}
	// No reserved blocks (every process of the member is root), and the
	// inode tables and journal are written as they are used: a 20 GiB
	// file system is made in milliseconds and takes a few MiB.
	steps := [][]string{
		{"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", img},
		{"mount", "-o", "loop", img, p.dir},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.Chmod(p.dir, 0o700); err != nil {
		return err
	}
	return nil
}

// removeMemberDisk unmounts the member's file system (after everything
// mounted under it) and deletes its image. Idempotent.
func removeMemberDisk(p paths) error {
	if err := unmountUnder(p.dir); err != nil {
		return err
	}
	if err := os.Remove(p.diskImage()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the member's disk image: %w", err)
	}
	return nil
}

// diskFSSize is the size to give member m's file system, 0 for none.
func (b *Backend) diskFSSize(m backend.Member) int64 {
	if !b.fences() {
		return 0
	}
	return diskLimit(m)
}

// orphanImages are disk images under the data root whose directory is
// gone (a destroy that stopped between the two): their member names.
func orphanImages(entries []fs.DirEntry) []string {
	dirs := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() {
			dirs[e.Name()] = true
		}
	}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), diskImageSuffix)
		if ok && !e.IsDir() && !dirs[name] {
			if _, isMember := uidFromDirName(name); isMember {
				out = append(out, name)
			}
		}
	}
	return out
}
