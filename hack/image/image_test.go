package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// repoRoot is kobe's repository, two levels up from hack/image.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// TestOperatorImage builds the operator image twice with `make image` into
// separate directories and checks that both are the same, byte for byte,
// and that the image holds the static operator binary and nothing else,
// run as a non-root user.
func TestOperatorImage(t *testing.T) {
	root := repoRoot(t)
	// The commit's values are read once and passed to both builds, so that
	// a commit landing between them (as in a shared work tree) does not
	// count as a difference; hack/image-reproducible.sh checks the whole
	// chain from two clones.
	rev, created := git(t, root, "rev-parse", "HEAD"), git(t, root, "log", "-1", "--format=%ct")
	vars := []string{"VERSION=test-" + rev[:12], "REVISION=" + rev, "IMAGE_CREATED=" + created}
	var tarballs []string
	for _, dir := range []string{t.TempDir(), t.TempDir()} {
		start := time.Now()
		args := append([]string{"--no-print-directory", "-C", root, "image", "IMAGE_DIR=" + dir}, vars...)
		cmd := exec.CommandContext(t.Context(), "make", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make image: %v\n%s", err, out)
		}
		t.Logf("make image IMAGE_DIR=%s: %v", dir, time.Since(start).Round(time.Millisecond))
		tarballs = append(tarballs, filepath.Join(dir, "kobe-operator.tar"))
	}

	sums := make([][32]byte, len(tarballs))
	for i, p := range tarballs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(b)
	}
	if sums[0] != sums[1] {
		t.Errorf("the two tarballs differ: %x, %x", sums[0], sums[1])
	}
	a, err := Inspect(tarballs[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := Inspect(tarballs[1])
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Fatalf("digests differ: %s, %s", a.Digest, b.Digest)
	}
	t.Logf("digest %s", a.Digest)

	if a.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", a.User)
	}
	if !slices.Equal(a.Entrypoint, []string{"/kobe-operator"}) {
		t.Errorf("entrypoint %q, want [/kobe-operator]", a.Entrypoint)
	}
	want := []FileInfo{{Path: "/kobe-operator", Type: string(tar.TypeReg), Mode: "0755", Owner: "0:0", Size: a.Files[0].Size}}
	if a.Layers != 1 || !slices.Equal(a.Files, want) {
		t.Errorf("layers %d, files %+v; want one layer holding only /kobe-operator (0755, root-owned)", a.Layers, a.Files)
	}
	for _, f := range a.Files {
		if base := path.Base(f.Path); slices.Contains([]string{"sh", "bash", "ash", "busybox"}, base) {
			t.Errorf("the image has a shell: %s", f.Path)
		}
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/kunobi-ninja/kobe",
		"org.opencontainers.image.revision": rev,
		"org.opencontainers.image.version":  "test-" + rev[:12],
	} {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, a.Labels[k], v)
		}
	}
	if a.Created.Unix() != mustAtoi(t, created) {
		t.Errorf("created %v, want the commit's time %s", a.Created, created)
	}

	// The binary is static: no program interpreter (dynamic loader).
	bin := extractFile(t, tarballs[0], "kobe-operator")
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/kobe-operator is dynamically linked")
		}
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// extractFile returns one file of the image's layer.
func extractFile(t *testing.T, tarPath, name string) []byte {
	t.Helper()
	img, cleanup, err := Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var data []byte
	err = forEachEntry(tar.NewReader(rc), func(h *tar.Header, r io.Reader) error {
		if h.Name == name {
			data, err = io.ReadAll(r)
		}
		return err
	})
	if err != nil || data == nil {
		t.Fatalf("%s in %s: %v (found: %v)", name, tarPath, err, data != nil)
	}
	return data
}

// testSpec is a small image of two files, one in a directory.
func testSpec(t *testing.T) Spec {
	dir := t.TempDir()
	for n, c := range map[string]string{"a": "#!/bin/false\n", "b": "data"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return Spec{
		Name: "kobe.local/test:v1",
		Files: []LayerFile{{Source: filepath.Join(dir, "b"), Path: "/etc/kobe/b", Mode: 0o644}, {Path: "/bin/a", Link: "../a"},
			{Source: filepath.Join(dir, "a"), Path: "/a", Mode: 0o755}},
		Entrypoint: []string{"/a"},
		User:       "65532:65532",
		Labels:     map[string]string{"x": "y"},
		OS:         "linux", Arch: "arm64",
		Created: time.Unix(1700000000, 0).UTC(),
	}
}

// TestBuild checks the layer's entries (sorted, parents added, modes and
// owners fixed), both output formats, and that the digest follows the
// content and the time but not the name.
func TestBuild(t *testing.T) {
	spec := testSpec(t)
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	oci, docker := filepath.Join(dir, "oci.tar"), filepath.Join(dir, "docker.tar")
	if err := WriteOCI(oci, spec.Name, img); err != nil {
		t.Fatal(err)
	}
	if err := WriteDocker(docker, spec.Name, img); err != nil {
		t.Fatal(err)
	}
	info, err := Inspect(oci)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if info.Digest != d.String() || info.Platform != "linux/arm64" || info.User != "65532:65532" || info.Labels["x"] != "y" {
		t.Errorf("inspect = %+v, want digest %s, linux/arm64, user 65532:65532, label x=y", info, d)
	}
	var paths []string
	for _, f := range info.Files {
		paths = append(paths, f.Path+" "+f.Type+" "+f.Mode+" "+f.Owner)
	}
	want := []string{"/a 0 0755 0:0", "/bin 5 0755 0:0", "/bin/a 2 0777 0:0", "/etc 5 0755 0:0", "/etc/kobe 5 0755 0:0", "/etc/kobe/b 0 0644 0:0"}
	if !slices.Equal(paths, want) {
		t.Errorf("files %q, want %q", paths, want)
	}
	// A docker-archive holds the same config and layer.
	dinfo, err := Inspect(docker)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dinfo.Files, info.Files) || dinfo.User != info.User || !dinfo.Created.Equal(info.Created) {
		t.Errorf("docker-archive differs: %+v vs %+v", dinfo, info)
	}

	digest := func(s Spec) string {
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	same := spec
	same.Name = "elsewhere.example/other:v2"
	slices.Reverse(same.Files)
	if digest(same) != d.String() {
		t.Errorf("the name or the order of --file changed the digest")
	}
	later := spec
	later.Created = spec.Created.Add(time.Second)
	if digest(later) == d.String() {
		t.Errorf("a different creation time gave the same digest")
	}
	other := spec
	other.Files = slices.Clone(spec.Files)
	other.Files[0].Mode = 0o600
	if digest(other) == d.String() {
		t.Errorf("a different file mode gave the same digest")
	}
}

// TestPush pushes to a registry served in this process, reads the image
// back from it, and checks that an unreachable registry fails clearly.
func TestPush(t *testing.T) {
	spec := testSpec(t)
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteOCI(tarPath, spec.Name, img); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ref := u.Host + "/kobe/test:v1"
	d, err := Push(t.Context(), tarPath, ref, true)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if d != want {
		t.Errorf("pushed %s, want %s", d, want)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	if gd, _ := got.Digest(); gd != want {
		t.Errorf("the registry serves %s, want %s", gd, want)
	}

	// A port nobody listens on, on this machine.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err = Push(ctx, tarPath, closed+"/kobe/test:v1", true)
	if err == nil || !strings.Contains(err.Error(), "registry "+closed+" is not reachable") {
		t.Errorf("push to %s: %v, want a 'not reachable' error", closed, err)
	}
}
