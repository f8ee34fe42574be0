//go:build heavy

package local

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const gib = int64(1) << 30

func TestDiskVerdicts(t *testing.T) {
	roomy := fsSpace{size: 100 * gib, avail: 50 * gib}
	tight := func(avail int64) fsSpace { return fsSpace{size: 100 * gib, avail: avail} }
	pct5 := DiskFloor{Percent: 5} // 5 GiB of 100 GiB
	for _, tt := range []struct {
		name    string
		members []memberDisk
		lim     diskLimits
		space   fsSpace
		// want maps each failing member to a part of its reason.
		want map[string]string
	}{
		{
			name:    "no limits",
			members: []memberDisk{{dir: "a", bytes: 900 * gib}},
			space:   tight(0),
			want:    map[string]string{},
		},
		{
			name:    "above the member limit",
			members: []memberDisk{{dir: "a", bytes: 21*gib + 300<<20}, {dir: "b", bytes: 1 * gib}},
			lim:     diskLimits{memberLimit: 20 * gib},
			space:   roomy,
			want:    map[string]string{"a": "member data directory is 21.3 GiB, above --local-member-disk-limit 20 GiB"},
		},
		{
			name:    "a member on a file system of its own is bounded by it, not by the backend's limit",
			members: []memberDisk{{dir: "b", bytes: 25 * gib, ownFS: true}, {dir: "c", bytes: 25 * gib}},
			lim:     diskLimits{memberLimit: 20 * gib},
			space:   roomy,
			want:    map[string]string{"c": "above --local-member-disk-limit 20 GiB"},
		},
		{
			name:    "at the member limit",
			members: []memberDisk{{dir: "a", bytes: 20 * gib}},
			lim:     diskLimits{memberLimit: 20 * gib},
			space:   roomy,
			want:    map[string]string{},
		},
		{
			name:    "failed already: no second verdict",
			members: []memberDisk{{dir: "a", bytes: 30 * gib, failed: true}},
			lim:     diskLimits{memberLimit: 20 * gib},
			space:   roomy,
			want:    map[string]string{},
		},
		{
			name:    "beyond the walk's bounds",
			members: []memberDisk{{dir: "a", bytes: 1 << 20, err: fmt.Errorf("it holds more than 10 files: %w", errWalkBound)}},
			lim:     diskLimits{memberLimit: 20 * gib},
			space:   roomy,
			want:    map[string]string{"a": "cannot be measured: it holds more than 10 files"},
		},
		{
			name:    "enough free space",
			members: []memberDisk{{dir: "a", bytes: 3 * gib}},
			lim:     diskLimits{minFree: pct5},
			space:   tight(5 * gib),
			want:    map[string]string{},
		},
		{
			name:    "below the floor: the largest member covers it",
			members: []memberDisk{{dir: "a", bytes: 3 * gib}, {dir: "b", bytes: 1 * gib}, {dir: "c", bytes: 2 * gib}},
			lim:     diskLimits{minFree: pct5},
			space:   tight(4 * gib),
			want:    map[string]string{"a": "the file system of --local-data-dir has 4 GiB free, below --local-min-free-disk 5% (5 GiB); the largest members are recycled first, and this one's data directory is 3 GiB"},
		},
		{
			name:    "below the floor: the two largest",
			members: []memberDisk{{dir: "a", bytes: 3 * gib}, {dir: "b", bytes: 1 * gib}, {dir: "c", bytes: 2 * gib}},
			lim:     diskLimits{minFree: pct5},
			space:   tight(1 * gib),
			want:    map[string]string{"a": "below --local-min-free-disk", "c": "this one's data directory is 2 GiB"},
		},
		{
			name:    "below the floor: equal sizes go by name",
			members: []memberDisk{{dir: "b", bytes: 2 * gib}, {dir: "a", bytes: 2 * gib}},
			lim:     diskLimits{minFree: pct5},
			space:   tight(4 * gib),
			want:    map[string]string{"a": "below --local-min-free-disk"},
		},
		{
			name:    "below the floor: more than all members hold",
			members: []memberDisk{{dir: "a", bytes: 1 * gib}, {dir: "b", bytes: 1 * gib}},
			lim:     diskLimits{minFree: pct5},
			space:   tight(0),
			want:    map[string]string{"a": "has 0 B free", "b": "has 0 B free"},
		},
		{
			name:    "below the floor: a member over its limit covers it",
			members: []memberDisk{{dir: "a", bytes: 25 * gib}, {dir: "b", bytes: 10 * gib}},
			lim:     diskLimits{memberLimit: 20 * gib, minFree: pct5},
			space:   tight(1 * gib),
			want:    map[string]string{"a": "above --local-member-disk-limit"},
		},
		{
			name:    "below the floor: a failed member being destroyed covers it",
			members: []memberDisk{{dir: "a", bytes: 5 * gib, failed: true}, {dir: "b", bytes: 10 * gib}},
			lim:     diskLimits{minFree: pct5},
			space:   tight(1 * gib),
			want:    map[string]string{},
		},
		{
			name:    "below a floor in bytes",
			members: []memberDisk{{dir: "a", bytes: 1 * gib}, {dir: "b", bytes: 512 << 20}},
			lim:     diskLimits{minFree: DiskFloor{Bytes: 2 * gib}},
			space:   fsSpace{size: 1000 * gib, avail: gib + 800<<20},
			want:    map[string]string{"a": "has 1.8 GiB free, below --local-min-free-disk 2Gi (2 GiB)"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := diskVerdicts(tt.members, tt.lim, tt.space)
			if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tt.want))) {
				t.Fatalf("failing members %v, want %v", got, tt.want)
			}
			for dir, part := range tt.want {
				if !strings.Contains(got[dir], part) {
					t.Errorf("reason for %s = %q, want it to contain %q", dir, got[dir], part)
				}
			}
		})
	}
}

func TestParseDiskFloor(t *testing.T) {
	for in, want := range map[string]DiskFloor{
		"5%": {Percent: 5}, "0.5%": {Percent: 0.5}, "0%": {}, "0": {},
		"2Gi": {Bytes: 2 * gib}, "500M": {Bytes: 500_000_000},
	} {
		got, err := ParseDiskFloor(in)
		if err != nil || got != want {
			t.Errorf("ParseDiskFloor(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "100%", "-1%", "NaN%", "-2Gi", "lots", "5 %"} {
		if got, err := ParseDiskFloor(in); err == nil {
			t.Errorf("ParseDiskFloor(%q) = %+v, want an error", in, got)
		}
	}
	for _, f := range []DiskFloor{{Percent: 5}, {Percent: 2.5}, {Bytes: 2 * gib}, {}} {
		if back, err := ParseDiskFloor(f.String()); err != nil || back != f {
			t.Errorf("ParseDiskFloor(%q) = %+v, %v; want %+v back", f.String(), back, err, f)
		}
	}
}

// TestDirUsage measures a directory the way a hostile member would lay it
// out: a sparse file claiming a terabyte, a symlink to a large file outside,
// hard links to one file, and trees beyond the walk's bounds.
func TestDirUsage(t *testing.T) {
	bounds := walkBounds{entries: 100, depth: 8}
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(path string, n int) {
		t.Helper()
		if err := os.WriteFile(path, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base, err := dirUsage(dir, bounds)
	if err != nil {
		t.Fatal(err)
	}

	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dir, "a", "b", "data"), 4<<20)
	if err := os.Link(filepath.Join(dir, "a", "b", "data"), filepath.Join(dir, "a", "hardlink")); err != nil {
		t.Fatal(err)
	}
	sparse, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	_ = sparse.Close()
	write(filepath.Join(outside, "big"), 16<<20)
	if err := os.Symlink(filepath.Join(outside, "big"), filepath.Join(dir, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link-to-dir")); err != nil {
		t.Fatal(err)
	}

	got, err := dirUsage(dir, bounds)
	if err != nil {
		t.Fatal(err)
	}
	// The 4 MiB file once, plus directory blocks and symlinks (a few KiB).
	if grew := got - base; grew < 4<<20 || grew > 4<<20+256<<10 {
		t.Errorf("dirUsage grew by %s for a 4 MiB file, a hard link, a sparse 1 TiB file and symlinks to 16 MiB; want 4 MiB and a few KiB", formatBytes(grew))
	}

	t.Run("too many files", func(t *testing.T) {
		d := t.TempDir()
		for i := range bounds.entries + 1 {
			write(filepath.Join(d, strconv.Itoa(i)), 0)
		}
		if _, err := dirUsage(d, bounds); !errors.Is(err, errWalkBound) || !strings.Contains(err.Error(), "more than 100 files") {
			t.Errorf("dirUsage = %v, want a bound error naming 100 files", err)
		}
	})
	t.Run("too deep", func(t *testing.T) {
		d := t.TempDir()
		if err := os.MkdirAll(filepath.Join(d, strings.Repeat("d/", bounds.depth+1)), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := dirUsage(d, bounds); !errors.Is(err, errWalkBound) || !strings.Contains(err.Error(), "more than 8 deep") {
			t.Errorf("dirUsage = %v, want a bound error naming depth 8", err)
		}
		// At the bound it is measured.
		d = t.TempDir()
		if err := os.MkdirAll(filepath.Join(d, strings.Repeat("d/", bounds.depth)), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := dirUsage(d, bounds); err != nil {
			t.Errorf("dirUsage of a tree %d deep: %v", bounds.depth, err)
		}
	})
}

// TestDataRootBelowFloor: while the data root's file system is below its
// floor (here: its whole size), every member directory is judged failed,
// one above its limit for that, and Create refuses a new member.
func TestDataRootBelowFloor(t *testing.T) {
	b := newBackend(t)
	space, err := freeSpace(b.opts.DataRoot)
	if err != nil {
		t.Fatal(err)
	}
	b.opts.MemberDiskLimit = 2 << 20
	b.opts.MinFreeDisk = DiskFloor{Bytes: space.size}
	big, small, m := newMember("big"), newMember("small"), newMember("new")
	for _, f := range []struct {
		m backend.Member
		n int
	}{{big, 3 << 20}, {small, 1 << 20}} {
		dir, n := filepath.Join(b.opts.DataRoot, memberDirName(f.m)), f.n
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data"), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := b.measureDisk()
	if why := got[memberDirName(big)]; !strings.Contains(why, "above --local-member-disk-limit 2 MiB") {
		t.Errorf("verdict on the member above its limit: %q", why)
	}
	if why := got[memberDirName(small)]; !strings.Contains(why, "below --local-min-free-disk") {
		t.Errorf("verdict on the other member: %q", why)
	}
	err = b.Create(t.Context(), m)
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "below --local-min-free-disk") {
		t.Fatalf("Create below the floor = %v, want ErrUnavailable naming the floor", err)
	}
	if _, err := os.Stat(filepath.Join(b.opts.DataRoot, memberDirName(m))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused member left a directory: %v", err)
	}
}

// mountChildEnv makes TestDirUsageStaysOnItsFileSystem the child that
// mounts and measures, in a mount namespace of its own.
const mountChildEnv = "KOBE_DISK_MOUNT_CHILD"

// TestDirUsageStaysOnItsFileSystem: a file system mounted under a member's
// directory (a tmpfs with 8 MiB in it) is not counted.
func TestDirUsageStaysOnItsFileSystem(t *testing.T) {
	if dir := os.Getenv(mountChildEnv); dir != "" {
		mountAndMeasure(t, dir)
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestDirUsageStaysOnItsFileSystem$", "-test.v")
	cmd.Env = append(os.Environ(), mountChildEnv+"="+t.TempDir())
	// A new mount namespace, in a new user namespace unless we are root.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "measured without the mount") {
		t.Fatalf("child in a new mount namespace: %v\n%s", err, out)
	}
}

func mountAndMeasure(t *testing.T, dir string) {
	// Nothing of this namespace's mounts may reach the host's.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "member", "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	base, err := dirUsage(filepath.Join(dir, "member"), defaultWalkBounds)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=16m"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) }()
	if err := os.WriteFile(filepath.Join(mnt, "data"), make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := dirUsage(filepath.Join(dir, "member"), defaultWalkBounds)
	if err != nil {
		t.Fatal(err)
	}
	if got-base >= 1<<20 {
		t.Fatalf("dirUsage counted %s of the tmpfs mounted under the directory", formatBytes(got-base))
	}
	t.Log("measured without the mount")
}

// testDiskLimit runs on a Ready member m without nodes: its etcd runs with
// an explicit quota, and once the holder writes past the member disk
// limit (32 MiB above its size when the test starts), Observe reports it
// Failed with its size and the limit, for good.
func testDiskLimit(t *testing.T, b *Backend, m backend.Member, acc *backend.Access) {
	p := b.paths(m)
	st, err := readState(p)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Processes, func(pr process) bool { return pr.Component == compEtcd })
	info, ok := readProc(st.Processes[max(i, 0)].PID)
	if i < 0 || !ok || !slices.Contains(info.argv, "--quota-backend-bytes="+strconv.Itoa(2<<30)) {
		t.Errorf("etcd runs without --quota-backend-bytes=%d: %v", 2<<30, info.argv)
	}

	size, err := dirUsage(p.dir, defaultWalkBounds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("member data directory: %s", formatBytes(size))
	b.opts.MemberDiskLimit = size + 32<<20
	b.disk.every = 0
	if obs, err := b.Observe(t.Context(), m); err != nil || obs.State != backend.StateReady {
		t.Fatalf("Observe within the limit = %s %q, %v; want Ready", obs.State, obs.Message, err)
	}

	// The holder writes 48 ConfigMaps of 1000 KiB: etcd's database grows
	// by about as much.
	cfg, err := clientcmd.RESTConfigFromKubeConfig(acc.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	filler := strings.Repeat("x", 1000<<10)
	for i := range 48 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fill-" + strconv.Itoa(i)}, Data: map[string]string{"x": filler}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var obs backend.Observation
	testenv.Eventually(t, 30*time.Second, "Observe reports the member Failed for its disk use", func() error {
		obs, err = b.Observe(t.Context(), m)
		if err != nil {
			return err
		}
		if obs.State != backend.StateFailed {
			n, _ := dirUsage(p.dir, defaultWalkBounds)
			return fmt.Errorf("%s %q with %s on disk", obs.State, obs.Message, formatBytes(n))
		}
		return nil
	})
	want := fmt.Sprintf("above --local-member-disk-limit %s", formatBytes(b.opts.MemberDiskLimit))
	if !strings.HasPrefix(obs.Message, "member data directory is ") || !strings.Contains(obs.Message, want) {
		t.Errorf("Failed message %q, want the directory's size and %q", obs.Message, want)
	}
	// Failed for good, also under no limit at all.
	b.opts.MemberDiskLimit = 0
	if obs, err := b.Observe(t.Context(), m); err != nil || obs.State != backend.StateFailed {
		t.Errorf("Observe without a limit after the failure = %s %q, %v; want Failed", obs.State, obs.Message, err)
	}
	// Its logs outlive it, where the message says.
	kept := b.keptLogs(p)
	if !strings.HasSuffix(obs.Message, "; its logs are kept in "+kept) {
		t.Errorf("Failed message %q does not name where its logs are kept (%s)", obs.Message, kept)
	}
	if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
		t.Fatalf("Delete = %v, %v", gone, err)
	}
	if log, err := os.ReadFile(filepath.Join(kept, "logs", compAPIServer+".log")); err != nil || !strings.Contains(string(log), "--- kobe: starting kube-apiserver") {
		t.Errorf("the failed member's API server log was not kept in %s (%v)", kept, err)
	}
}
