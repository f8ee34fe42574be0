//go:build root

package imageload

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestImportIntoContainerd imports what Normalise writes into a real
// containerd, as the nodes do (ctr -n k8s.io images import FILE), and
// wants ctr to list, complete and unpacked, exactly the references
// Normalise returned. The containerd is the test's own, with its root,
// state and socket in a temporary directory; it is stopped, and its
// mounts checked gone, at the end.
func TestImportIntoContainerd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the root layer runs as root: containerd needs it")
	}
	ctr := startContainerd(t)
	host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	other := v1.Platform{OS: "linux", Architecture: "s390x"}
	imgA, imgB, imgOther := ociImage(t, host), ociImage(t, host), ociImage(t, other)
	base, top := layerTar(t, "base"), layerTar(t, "top")

	for _, tc := range []struct {
		name    string
		archive func(t *testing.T) string
		want    []string
	}{{
		name: "docker-archive, two images, three names",
		archive: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "in.tar")
			refs := map[name.Reference]v1.Image{}
			for s, img := range map[string]v1.Image{"a:1": imgA, "a:latest": imgA, "registry.example:5000/team/b:2": imgB} {
				tag, err := name.NewTag(s)
				if err != nil {
					t.Fatal(err)
				}
				refs[tag] = img
			}
			if err := tarball.MultiRefWriteToFile(p, refs); err != nil {
				t.Fatal(err)
			}
			gzipFile(t, p)
			return p
		},
		want: []string{"docker.io/library/a:1", "docker.io/library/a:latest", "registry.example:5000/team/b:2"},
	}, {
		name: "docker save layout, uncompressed layers, a link",
		archive: func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "in.tar")
			writeTar(t, p, []tarEntry{
				{name: "aaaa/layer.tar", body: base},
				{name: "bbbb/layer.tar", typ: '2', link: "../aaaa/layer.tar"},
				{name: "cccc/layer.tar", body: top},
				{name: "a.json", body: configJSON(t, base)},
				{name: "b.json", body: configJSON(t, base, top)},
				{name: "manifest.json", body: mustJSON(t, tarball.Manifest{
					{Config: "a.json", RepoTags: []string{"saved/a:1"}, Layers: []string{"aaaa/layer.tar"}},
					{Config: "b.json", RepoTags: []string{"saved/b:2"}, Layers: []string{"bbbb/layer.tar", "cccc/layer.tar"}},
				})},
			})
			return p
		},
		want: []string{"docker.io/saved/a:1", "docker.io/saved/b:2"},
	}, {
		name: "OCI multi-platform index",
		archive: func(t *testing.T) string {
			idx := mutate.AppendManifests(empty.Index,
				mutate.IndexAddendum{Add: imgOther, Descriptor: v1.Descriptor{Platform: &other}},
				mutate.IndexAddendum{Add: imgA, Descriptor: v1.Descriptor{Platform: &host}},
			)
			return ociArchive(t, func(p layout.Path) error {
				if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{containerdImageName: "ghcr.io/kunobi/multi:v1", ociRefName: "v1"})); err != nil {
					return err
				}
				return p.AppendImage(imgB, layout.WithAnnotations(map[string]string{ociRefName: "localhost/b:v2"}))
			})
		},
		want: []string{"ghcr.io/kunobi/multi:v1", "localhost/b:v2"},
	}, {
		name: "OCI, a zstd layer and a gzip one",
		archive: func(t *testing.T) string {
			zl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar(t, "zstd"))), nil },
				tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
			if err != nil {
				t.Fatal(err)
			}
			img, err := mutate.AppendLayers(imgA, zl)
			if err != nil {
				t.Fatal(err)
			}
			return ociArchive(t, func(p layout.Path) error {
				return p.AppendImage(img, layout.WithAnnotations(map[string]string{ociRefName: "docker.io/library/z:1"}))
			})
		},
		want: []string{"docker.io/library/z:1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.archive(t)
			out := filepath.Join(t.TempDir(), "out.tar")
			got, err := Normalise(in, out, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Normalise = %q, want %q", got, tc.want)
			}
			before := strings.Fields(ctr(t, "-n", "k8s.io", "images", "ls", "-q"))
			ctr(t, "-n", "k8s.io", "images", "import", out)
			var added []string
			for _, r := range strings.Fields(ctr(t, "-n", "k8s.io", "images", "ls", "-q")) {
				if !slices.Contains(before, r) {
					added = append(added, r)
				}
			}
			slices.Sort(added)
			if !slices.Equal(added, got) {
				t.Errorf("ctr lists %q more, Normalise said %q", added, got)
			}
			// REF TYPE DIGEST STATUS SIZE UNPACKED: every image whole,
			// and unpacked, which checks each layer's diff ID again.
			check := ctr(t, "-n", "k8s.io", "images", "check")
			for _, l := range strings.Split(strings.TrimSpace(check), "\n")[1:] {
				f := strings.Fields(l)
				if len(f) < 2 || !slices.Contains(got, f[0]) {
					continue
				}
				if !strings.Contains(l, "complete") || f[len(f)-1] != "true" {
					t.Errorf("ctr images check: %s", l)
				}
			}
		})
	}
}

// startContainerd runs a containerd of the test's own and returns a
// function that runs ctr against it; it is stopped at the test's end.
func startContainerd(t *testing.T) func(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatal("no containerd on this machine: run make node-deps")
	}
	ctrBin, err := exec.LookPath("ctr")
	if err != nil {
		t.Fatal("no ctr on this machine: run make node-deps")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	config := strings.Join([]string{
		"version = 2",
		"root = " + strconv.Quote(filepath.Join(dir, "root")),
		"state = " + strconv.Quote(filepath.Join(dir, "state")),
		// The CRI is not needed to import, and would want CNI and more.
		`disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]`,
		"[grpc]",
		"  address = " + strconv.Quote(sock),
		"[ttrpc]",
		"  address = " + strconv.Quote(sock+".ttrpc"),
		"[metrics]",
		`  address = ""`,
	}, "\n") + "\n"
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("containerd's log:\n%s", b)
			}
		}
		for _, m := range mountsUnder(t, dir) {
			t.Errorf("containerd left %s mounted", m)
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, ctrBin, append([]string{"--address", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := exec.Command(ctrBin, "--address", sock, "version").Run()
		if err == nil {
			break
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd exited: %v\n%s", errors.Join(waitErr, err), b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd's socket is not up after 30s: %v", err)
		}
	}
	return run
}

// mountsUnder lists the mount points under dir.
func mountsUnder(t *testing.T, dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return nil
	}
	defer func() { _ = f.Close() }()
	var ms []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) > 4 && (fs[4] == dir || strings.HasPrefix(fs[4], dir+"/")) {
			ms = append(ms, fs[4])
		}
	}
	return ms
}
