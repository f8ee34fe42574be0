package local

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// Disk: everything a member writes lands under its data directory on the
// operator's disk: etcd (capped by etcdQuota), logs and, with nodes,
// containerd's images and writable layers, emptyDirs and pod logs (the
// nodes' /run, /var/lib and /var/log are size-limited tmpfs). Observe
// measures the data directories and reports a member Failed when its own
// exceeds Options.MemberDiskLimit, or, while the file system keeps less
// than Options.MinFreeDisk free, the largest members until their removal
// restores it.
var (
	// DefaultMemberDiskLimit is --local-member-disk-limit: room for etcd
	// at its quota with its write-ahead log and snapshots, a node's
	// preloaded images and a CI job's images, layers and emptyDirs.
	DefaultMemberDiskLimit = resource.MustParse("20Gi")
	// DefaultMinFreeDisk is --local-min-free-disk. Below the nested
	// kubelets' eviction threshold (nodefs.available 10%), so that on a
	// member with nodes kubelet, which knows which pod writes, evicts it
	// first; a relative floor suits a 50 GiB laptop and a 2 TiB server.
	DefaultMinFreeDisk = DiskFloor{Percent: 5}
)

const (
	// diskCheckInterval is how often the data directories are walked at
	// most: a walk of a member with nodes reads tens of thousands of files.
	diskCheckInterval = 30 * time.Second
	// readDirChunk bounds the memory of reading one directory.
	readDirChunk = 256
)

// walkBounds bound one measurement of a member's directory. A member
// beyond them is failed rather than measured at any cost.
type walkBounds struct {
	entries int
	depth   int
}

var defaultWalkBounds = walkBounds{entries: 1 << 20, depth: 128}

// errWalkBound is a member directory that exceeds walkBounds.
var errWalkBound = errors.New("beyond the bounds of a measurement")

// DiskFloor is free space to keep on a file system: Percent of its size,
// or Bytes. The zero value keeps none. It is a flag.Value ("5%", "2Gi").
type DiskFloor struct {
	Percent float64
	Bytes   int64
}

// ParseDiskFloor parses "<percent>%" (0 to 100) or a resource quantity.
func ParseDiskFloor(s string) (DiskFloor, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(v) || v < 0 || v >= 100 {
			return DiskFloor{}, fmt.Errorf("free disk floor %q: want a percentage from 0 to below 100 or a size such as 2Gi", s)
		}
		return DiskFloor{Percent: v}, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return DiskFloor{}, fmt.Errorf("free disk floor %q: want a percentage such as 5%% or a size such as 2Gi: %w", s, err)
	}
	if q.Sign() < 0 {
		return DiskFloor{}, fmt.Errorf("free disk floor %q is negative", s)
	}
	return DiskFloor{Bytes: q.Value()}, nil
}

// Set implements flag.Value.
func (f *DiskFloor) Set(s string) error {
	v, err := ParseDiskFloor(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// String implements flag.Value.
func (f *DiskFloor) String() string {
	if f.Percent > 0 {
		return strconv.FormatFloat(f.Percent, 'f', -1, 64) + "%"
	}
	return resource.NewQuantity(f.Bytes, resource.BinarySI).String()
}

// of is the floor in bytes on a file system of size bytes.
func (f DiskFloor) of(size int64) int64 {
	if f.Percent > 0 {
		return int64(f.Percent / 100 * float64(size))
	}
	return f.Bytes
}

func (f DiskFloor) zero() bool { return f.Percent <= 0 && f.Bytes <= 0 }

func (f DiskFloor) validate() error {
	if f.Bytes < 0 || f.Percent < 0 || f.Percent >= 100 || math.IsNaN(f.Percent) {
		return fmt.Errorf("MinFreeDisk %s is out of range", f.String())
	}
	return nil
}

// memberDisk is what one measurement found of a member's directory.
type memberDisk struct {
	// dir is the directory's name under DataRoot.
	dir string
	// bytes are the blocks its files take on disk.
	bytes int64
	// failed: the member is Failed already and its space is freed when it
	// is destroyed.
	failed bool
	// err is set when the walk stopped at a bound (bytes are then partial).
	err error
	// ownFS: the member's data directory is a file system of its own
	// (diskfs.go), which bounds it; MemberDiskLimit does not apply.
	ownFS bool
}

// fsSpace is the data root's file system as statfs(2) reports it to
// unprivileged users (as kubelet's nodefs.available does).
type fsSpace struct {
	size, avail int64
}

// diskLimits are Options.MemberDiskLimit and Options.MinFreeDisk.
type diskLimits struct {
	memberLimit int64
	minFree     DiskFloor
}

// diskVerdicts decides which members fail for their disk use, and why:
// any beyond the walk's bounds or above memberLimit; then, while the file
// system has less than minFree available, the largest of the others until
// removing them (with the members failed already) restores the floor.
func diskVerdicts(members []memberDisk, lim diskLimits, space fsSpace) map[string]string {
	why := map[string]string{}
	var freed int64
	var rest []memberDisk
	for _, m := range members {
		switch {
		case m.failed:
			freed += m.bytes
			continue
		case m.err != nil:
			why[m.dir] = fmt.Sprintf("member data directory cannot be measured: %v", m.err)
		case !m.ownFS && lim.memberLimit > 0 && m.bytes > lim.memberLimit:
			why[m.dir] = fmt.Sprintf("member data directory is %s, above --local-member-disk-limit %s", formatBytes(m.bytes), formatBytes(lim.memberLimit))
		default:
			rest = append(rest, m)
			continue
		}
		freed += m.bytes
	}
	floor := lim.minFree.of(space.size)
	if floor <= 0 || space.avail+freed >= floor {
		return why
	}
	slices.SortStableFunc(rest, func(a, b memberDisk) int {
		return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.dir, b.dir))
	})
	for _, m := range rest {
		if space.avail+freed >= floor {
			break
		}
		why[m.dir] = fmt.Sprintf("the file system of --local-data-dir has %s free, below --local-min-free-disk %s (%s); the largest members are recycled first, and this one's data directory is %s",
			formatBytes(space.avail), lim.minFree.String(), formatBytes(floor), formatBytes(m.bytes))
		freed += m.bytes
	}
	return why
}

// formatBytes writes n in binary units with at most one decimal.
func formatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + units[i]
}

// dirUsage sums the blocks that the files under dir take on disk (not
// their apparent sizes: a sparse file costs what it holds). It never
// follows a symbolic link, counts a hard-linked file once and stays on
// dir's file system. Memory and time are bounded by b: a directory beyond
// them is an error wrapping errWalkBound.
func dirUsage(dir string, b walkBounds) (int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer func() { _ = root.Close() }()
	fi, err := root.Lstat(".")
	if err != nil {
		return 0, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	w := &walker{bounds: b, dev: st.Dev, links: map[uint64]bool{}}
	w.add(st)
	err = w.walk(root, 0)
	return w.bytes, err
}

type walker struct {
	bounds  walkBounds
	dev     uint64
	bytes   int64
	entries int
	// links are the inodes with several names counted already.
	links map[uint64]bool
}

func (w *walker) add(st *syscall.Stat_t) {
	if st.Nlink > 1 && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		if w.links[st.Ino] {
			return
		}
		w.links[st.Ino] = true
	}
	w.bytes += st.Blocks * 512 // st_blocks counts 512-byte units
}

// walk adds what is under r, which is depth levels below the top.
func (w *walker) walk(r *os.Root, depth int) error {
	f, err := r.Open(".")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	for {
		ents, readErr := f.ReadDir(readDirChunk)
		for _, e := range ents {
			if w.entries++; w.entries > w.bounds.entries {
				return fmt.Errorf("it holds more than %d files: %w", w.bounds.entries, errWalkBound)
			}
			fi, err := r.Lstat(e.Name())
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while we read
			}
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Dev != w.dev {
				continue // a mount point: another file system's
			}
			w.add(st)
			if !fi.IsDir() {
				continue
			}
			if depth+1 > w.bounds.depth {
				return fmt.Errorf("it nests directories more than %d deep: %w", w.bounds.depth, errWalkBound)
			}
			if err := w.walkSub(r, e.Name(), depth+1); err != nil {
				return err
			}
		}
		switch {
		case readErr == io.EOF:
			return nil
		case readErr != nil:
			return readErr
		}
	}
}

func (w *walker) walkSub(r *os.Root, name string, depth int) error {
	sub, err := r.OpenRoot(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	defer func() { _ = sub.Close() }()
	// Replaced by a link or mount between Lstat and OpenRoot: not ours.
	if fi, err := sub.Lstat("."); err != nil || fi.Sys().(*syscall.Stat_t).Dev != w.dev {
		return nil
	}
	return w.walk(sub, depth)
}

// freeSpace reports the file system of path.
func freeSpace(path string) (fsSpace, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return fsSpace{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	return fsSpace{size: int64(s.Blocks) * s.Bsize, avail: int64(s.Bavail) * s.Bsize}, nil
}

// diskCheck holds the last verdicts of the data root's measurement.
type diskCheck struct {
	// every is how often the directories are walked at most.
	every    time.Duration
	bounds   walkBounds
	mu       sync.Mutex
	at       time.Time
	verdicts map[string]string
}

func (b *Backend) diskLimited() bool {
	return b.opts.MemberDiskLimit > 0 || !b.opts.MinFreeDisk.zero()
}

// enforceDiskLimits records member m Failed when the last measurement
// (at most diskCheck.every old) judged its disk use too large.
func (b *Backend) enforceDiskLimits(rt *memberRT, p paths, m backend.Member) {
	if !b.diskLimited() {
		return
	}
	why := b.diskVerdict(filepath.Base(p.dir))
	if why == "" {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, err := readState(p)
	if err != nil || st.validate(m) != nil || st.Failure != "" {
		return // Observe reports these Failed on its own
	}
	b.recordFailure(p, st, why)
}

// diskVerdict is why the member in directory dir fails for its disk use
// ("" when it does not), measuring the data root again when the last
// measurement is older than diskCheck.every.
func (b *Backend) diskVerdict(dir string) string {
	b.disk.mu.Lock()
	defer b.disk.mu.Unlock()
	if b.disk.verdicts == nil || time.Since(b.disk.at) >= b.disk.every {
		b.disk.verdicts = b.measureDisk()
		b.disk.at = time.Now()
	}
	return b.disk.verdicts[dir]
}

// measureDisk measures the data root and its member directories (only
// when a limit needs their sizes) and decides.
func (b *Backend) measureDisk() map[string]string {
	lim := diskLimits{memberLimit: b.opts.MemberDiskLimit, minFree: b.opts.MinFreeDisk}
	space, err := freeSpace(b.opts.DataRoot)
	if err != nil {
		b.log.Error(err, "Measuring free disk space failed; the floor is not enforced this time")
		lim.minFree = DiskFloor{}
	}
	if lim.memberLimit <= 0 && space.avail >= lim.minFree.of(space.size) {
		return map[string]string{} // nothing needs the members' sizes
	}
	entries, err := os.ReadDir(b.opts.DataRoot)
	if err != nil {
		b.log.Error(err, "Listing member directories failed", "dir", b.opts.DataRoot)
		return map[string]string{}
	}
	var members []memberDisk
	for _, e := range entries {
		if _, ok := uidFromDirName(e.Name()); !ok || !e.IsDir() {
			continue
		}
		p := paths{dir: filepath.Join(b.opts.DataRoot, e.Name())}
		n, err := dirUsage(p.dir, b.disk.bounds)
		if err != nil && !errors.Is(err, errWalkBound) {
			if !errors.Is(err, fs.ErrNotExist) {
				b.log.Error(err, "Measuring a member's data directory failed", "dir", p.dir)
			}
			continue
		}
		st, _ := readState(p)
		members = append(members, memberDisk{dir: e.Name(), bytes: n, failed: st != nil && st.Failure != "", err: err, ownFS: st != nil && st.DiskLimit > 0})
	}
	why := diskVerdicts(members, lim, space)
	b.log.V(1).Info("Measured member data directories", "members", len(members), "available", formatBytes(space.avail), "failing", len(why))
	return why
}

// checkFreeDisk refuses a new member while the data root's file system
// is below its floor: the member would be failed at once.
func (b *Backend) checkFreeDisk() error {
	if b.opts.MinFreeDisk.zero() {
		return nil
	}
	space, err := freeSpace(b.opts.DataRoot)
	if err != nil {
		return err
	}
	if floor := b.opts.MinFreeDisk.of(space.size); space.avail < floor {
		return fmt.Errorf("%w: the file system of --local-data-dir has %s free, below --local-min-free-disk %s (%s)",
			backend.ErrUnavailable, formatBytes(space.avail), b.opts.MinFreeDisk.String(), formatBytes(floor))
	}
	return nil
}
