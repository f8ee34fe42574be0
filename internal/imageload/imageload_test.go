package imageload

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
)

func TestDockerArchive(t *testing.T) {
	a, b := randomImage(t), randomImage(t)
	for _, tc := range []struct {
		name   string
		images map[string]v1.Image
		gzip   bool
		want   map[string]v1.Image
	}{{
		name:   "one image",
		images: map[string]v1.Image{"app:v1": a},
		want:   map[string]v1.Image{"docker.io/library/app:v1": a},
	}, {
		name: "two images with two tags each",
		images: map[string]v1.Image{
			"app:v1": a, "app:latest": a,
			"registry.example:5000/team/app:v2": b, "localhost/b": b,
		},
		want: map[string]v1.Image{
			"docker.io/library/app:v1": a, "docker.io/library/app:latest": a,
			"registry.example:5000/team/app:v2": b, "localhost/b:latest": b,
		},
	}, {
		name:   "gzip-compressed",
		images: map[string]v1.Image{"ghcr.io/kunobi/app:v1": a},
		gzip:   true,
		want:   map[string]v1.Image{"ghcr.io/kunobi/app:v1": a},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.tar")
			refs := map[name.Reference]v1.Image{}
			for s, img := range tc.images {
				tag, err := name.NewTag(s)
				if err != nil {
					t.Fatal(err)
				}
				refs[tag] = img
			}
			if err := tarball.MultiRefWriteToFile(in, refs); err != nil {
				t.Fatal(err)
			}
			if tc.gzip {
				gzipFile(t, in)
			}
			got, out := normalise(t, in, Options{})
			checkOut(t, out, got, tc.want, true)
			assertFiles(t, dir, "in.tar", "out.tar")
		})
	}
}

// TestDockerSave reads the layout of docker save before Docker 25:
// uncompressed layers in <id>/layer.tar, a layer two images share linked
// from the second to the first, configs in <id>.json. The layers stay
// uncompressed.
func TestDockerSave(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.tar")
	base, top := layerTar(t, "base"), layerTar(t, "top")
	cfgA, cfgB := configJSON(t, base), configJSON(t, base, top)
	writeTar(t, in, []tarEntry{
		{name: "aaaa/", typ: tar.TypeDir},
		{name: "aaaa/layer.tar", body: base},
		{name: "aaaa/VERSION", body: []byte("1.0")},
		{name: "bbbb/", typ: tar.TypeDir},
		{name: "bbbb/layer.tar", typ: tar.TypeSymlink, link: "../aaaa/layer.tar"},
		{name: "cccc/layer.tar", body: top},
		{name: "a.json", body: cfgA},
		{name: "b.json", body: cfgB},
		{name: "manifest.json", body: mustJSON(t, tarball.Manifest{
			{Config: "a.json", RepoTags: []string{"a:1"}, Layers: []string{"aaaa/layer.tar"}},
			{Config: "b.json", RepoTags: []string{"b:2"}, Layers: []string{"bbbb/layer.tar", "cccc/layer.tar"}},
		})},
		{name: "repositories", body: []byte("{}")},
	})
	got, out := normalise(t, in, Options{})
	if want := []string{"docker.io/library/a:1", "docker.io/library/b:2"}; !slices.Equal(got, want) {
		t.Fatalf("references %q, want %q", got, want)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m {
		for _, l := range d.Layers {
			if !strings.HasSuffix(l, ".tar") {
				t.Errorf("layer %s of %v: want it uncompressed, as it came", l, d.RepoTags)
			}
		}
	}
	for _, tc := range []struct {
		ref    string
		cfg    []byte
		layers [][]byte
	}{
		{"docker.io/library/a:1", cfgA, [][]byte{base}},
		{"docker.io/library/b:2", cfgB, [][]byte{base, top}},
	} {
		ref, wantDiffIDs := tc.ref, tc.layers
		img := readOut(t, out, ref)
		raw, err := img.RawConfigFile()
		if err != nil || !bytes.Equal(raw, tc.cfg) {
			t.Errorf("%s: config %s, %v; want the archive's", ref, raw, err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != len(wantDiffIDs) {
			t.Fatalf("%s: %d layers, %v", ref, len(layers), err)
		}
		for i, l := range layers {
			if d, _ := l.DiffID(); d.Hex != sum(wantDiffIDs[i]) {
				t.Errorf("%s layer %d: diff ID %s", ref, i, d)
			}
		}
	}
}

// TestDocker25 reads the tar of Docker 25's docker save: a docker-archive
// and an OCI layout in one; manifest.json is what names the images.
func TestDocker25(t *testing.T) {
	img := ociImage(t, amd64)
	ldir := t.TempDir()
	p, err := layout.Write(ldir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil { // no name: only manifest.json has one
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	d := tarball.Descriptor{Config: "blobs/sha256/" + m.Config.Digest.Hex, RepoTags: []string{"app:v1"}}
	for _, l := range m.Layers {
		d.Layers = append(d.Layers, "blobs/sha256/"+l.Digest.Hex)
	}
	if err := os.WriteFile(filepath.Join(ldir, "manifest.json"), mustJSON(t, tarball.Manifest{d}), 0o600); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "in.tar")
	tarDir(t, ldir, in)
	got, out := normalise(t, in, Options{})
	checkOut(t, out, got, map[string]v1.Image{"docker.io/library/app:v1": img}, false)
}

func TestOCI(t *testing.T) {
	img := ociImage(t, amd64)
	for _, tc := range []struct {
		name string
		ann  map[string]string
		gzip bool
		want string
	}{
		{"io.containerd.image.name", map[string]string{containerdImageName: "docker.io/library/app:v1", ociRefName: "v1"}, false, "docker.io/library/app:v1"},
		{"full ref.name", map[string]string{ociRefName: "registry.example:5000/team/app:v2"}, false, "registry.example:5000/team/app:v2"},
		{"short ref.name with a repository", map[string]string{ociRefName: "app:v3"}, true, "docker.io/library/app:v3"},
		{"tag and digest", map[string]string{containerdImageName: "quay.io/x/app:v4@sha256:" + strings.Repeat("0", 64)}, false, "quay.io/x/app:v4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ociArchive(t, func(p layout.Path) error { return p.AppendImage(img, layout.WithAnnotations(tc.ann)) })
			if tc.gzip {
				gzipFile(t, in)
			}
			got, out := normalise(t, in, Options{})
			checkOut(t, out, got, map[string]v1.Image{tc.want: img}, false)
		})
	}
}

func TestOCIZstdLayer(t *testing.T) {
	raw := layerTar(t, "zstd")
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(ociBase(), l)
	if err != nil {
		t.Fatal(err)
	}
	in := ociArchive(t, func(p layout.Path) error {
		return p.AppendImage(img, layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/z:1"}))
	})
	got, out := normalise(t, in, Options{})
	checkOut(t, out, got, map[string]v1.Image{"docker.io/library/z:1": img}, false)
}

func TestOCIUnnamed(t *testing.T) {
	img := ociImage(t, amd64)
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want string
	}{
		{"ref.name only a tag", map[string]string{ociRefName: "v1"}, `"v1", a tag without a repository`},
		{"no annotation", nil, "neither"},
		{"digest only", map[string]string{containerdImageName: "docker.io/library/app@sha256:" + strings.Repeat("0", 64)}, "by digest only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ociArchive(t, func(p layout.Path) error { return p.AppendImage(img, layout.WithAnnotations(tc.ann)) })
			err := normaliseErr(t, in, Options{}, ErrNotAnImage)
			for _, s := range []string{tc.want, "names no image", "full reference"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

func TestOCIPlatforms(t *testing.T) {
	imgAMD, imgARM := ociImage(t, amd64), ociImage(t, arm64)
	attestation := ociImage(t, v1.Platform{OS: "unknown", Architecture: "unknown"})
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: imgAMD, Descriptor: v1.Descriptor{Platform: &amd64}},
		mutate.IndexAddendum{Add: imgARM, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
		mutate.IndexAddendum{Add: attestation, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}}},
	)
	ann := layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/multi:v1"})
	in := ociArchive(t, func(p layout.Path) error { return p.AppendIndex(idx, ann) })
	for _, tc := range []struct {
		platform v1.Platform
		want     v1.Image
	}{
		{amd64, imgAMD},
		{arm64, imgARM},
		{v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, imgARM},
	} {
		t.Run(tc.platform.String(), func(t *testing.T) {
			got, out := normalise(t, in, Options{Platform: &tc.platform})
			checkOut(t, out, got, map[string]v1.Image{"docker.io/library/multi:v1": tc.want}, false)
		})
	}
	t.Run("absent platform", func(t *testing.T) {
		err := normaliseErr(t, in, Options{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "no image for linux/s390x (it has linux/amd64, linux/arm64/v8, unknown/unknown)") {
			t.Errorf("error %q does not list the platforms", err)
		}
	})
	// An export of one platform of a multi-platform image (ctr export
	// --platform) lists every platform but holds the blobs of one.
	t.Run("blobs of one platform", func(t *testing.T) {
		partial := ociArchive(t, func(p layout.Path) error {
			if err := p.AppendIndex(idx, ann); err != nil {
				return err
			}
			d, err := imgARM.Digest()
			if err != nil {
				return err
			}
			return p.RemoveBlob(d)
		})
		got, out := normalise(t, partial, Options{Platform: &amd64})
		checkOut(t, out, got, map[string]v1.Image{"docker.io/library/multi:v1": imgAMD}, false)
		err := normaliseErr(t, partial, Options{Platform: &arm64}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "the manifest of docker.io/library/multi:v1 for linux/arm64/v8, sha256:") || !strings.Contains(err.Error(), "is not in the archive") {
			t.Errorf("error %q does not say a blob is missing", err)
		}
	})
}

func TestNotAnImage(t *testing.T) {
	img := ociImage(t, amd64)
	valid := ociArchive(t, func(p layout.Path) error {
		return p.AppendImage(img, layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/app:v1"}))
	})
	validBytes, err := os.ReadFile(valid)
	if err != nil {
		t.Fatal(err)
	}
	other := randomImage(t)
	for _, tc := range []struct {
		name string
		data func(t *testing.T) []byte
		want string
	}{
		{"text file", func(*testing.T) []byte { return []byte("this is not an image\n" + strings.Repeat("x", 2000)) }, "not a tar"},
		{"empty file", func(*testing.T) []byte { return nil }, "empty"},
		{"only zero blocks", func(*testing.T) []byte { return make([]byte, 10240) }, "empty"},
		{"truncated tar", func(*testing.T) []byte { return validBytes[:len(validBytes)/2/512*512+100] }, "truncated"},
		{"tar without manifest", func(t *testing.T) []byte {
			return tarBytes(t, []tarEntry{{name: "hello.txt", body: []byte("hi")}, {name: "blobs/", typ: tar.TypeDir}})
		}, "neither a manifest.json"},
		{"index without oci-layout", func(t *testing.T) []byte {
			return tarBytes(t, []tarEntry{{name: "index.json", body: []byte(`{"schemaVersion":2,"manifests":[]}`)}})
		}, "neither a manifest.json"},
		{"zstd archive", func(*testing.T) []byte { return []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0} }, "zstd"},
		{"corrupt gzip", func(t *testing.T) []byte {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(validBytes)
			_ = zw.Close()
			return b.Bytes()[:b.Len()/2]
		}, "not valid gzip"},
		{"manifest.json not JSON", func(t *testing.T) []byte {
			return tarBytes(t, []tarEntry{{name: "manifest.json", body: []byte("{")}})
		}, "not a docker-archive's manifest"},
		{"docker-archive without RepoTags", func(t *testing.T) []byte {
			p := filepath.Join(t.TempDir(), "x.tar")
			d, err := name.NewDigest("app@sha256:" + strings.Repeat("1", 64))
			if err != nil {
				t.Fatal(err)
			}
			if err := tarball.MultiRefWriteToFile(p, map[name.Reference]v1.Image{d: other}); err != nil {
				t.Fatal(err)
			}
			return readFile(t, p)
		}, "has no RepoTags"},
		{"a layer missing", func(t *testing.T) []byte {
			return tarBytes(t, []tarEntry{
				{name: "c.json", body: configJSON(t, []byte("x"))},
				{name: "manifest.json", body: mustJSON(t, tarball.Manifest{{Config: "c.json", RepoTags: []string{"a:1"}, Layers: []string{"l.tar"}}})},
			})
		}, `layer 1 of docker.io/library/a:1: "l.tar" is not in the archive`},
		{"layers and config disagree", func(t *testing.T) []byte {
			return tarBytes(t, []tarEntry{
				{name: "c.json", body: configJSON(t)},
				{name: "l.tar", body: []byte("x")},
				{name: "manifest.json", body: mustJSON(t, tarball.Manifest{{Config: "c.json", RepoTags: []string{"a:1"}, Layers: []string{"l.tar"}}})},
			})
		}, "lists 0 layers, its manifest 1"},
		{"an invalid RepoTag", func(t *testing.T) []byte {
			return tarBytes(t, []tarEntry{
				{name: "c.json", body: configJSON(t)},
				{name: "manifest.json", body: mustJSON(t, tarball.Manifest{{Config: "c.json", RepoTags: []string{"App:V1"}}})},
			})
		}, `tagged "App:V1"`},
		{"a helm chart", func(t *testing.T) []byte {
			chart := mutate.ConfigMediaType(ociBase(), "application/vnd.cncf.helm.config.v1+json")
			return readFile(t, ociArchive(t, func(p layout.Path) error {
				return p.AppendImage(chart, layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/chart:1"}))
			}))
		}, "not a container image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in")
			if err := os.WriteFile(in, tc.data(t), 0o600); err != nil {
				t.Fatal(err)
			}
			err := normaliseErr(t, in, Options{}, ErrNotAnImage)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			assertFiles(t, dir, "in")
		})
	}
}

// TestHostileEntries: entries naming places outside the archive, links
// and special files are refused; nothing is written anywhere.
func TestHostileEntries(t *testing.T) {
	img := ociImage(t, amd64)
	ldir := t.TempDir()
	p, err := layout.Write(ldir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/app:v1"})); err != nil {
		t.Fatal(err)
	}
	var base []tarEntry
	if err := filepath.WalkDir(ldir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(ldir, path)
		base = append(base, tarEntry{name: filepath.ToSlash(rel), body: readFile(t, path)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		evil tarEntry
		want string
	}{
		{"parent", tarEntry{name: "../x", body: []byte("x")}, `".." element`},
		{"parent inside", tarEntry{name: "blobs/../../x", body: []byte("x")}, `".." element`},
		{"absolute", tarEntry{name: "/etc/x", body: []byte("x")}, "absolute path"},
		{"symlink out", tarEntry{name: "blobs/sha256/evil", typ: tar.TypeSymlink, link: "/etc/passwd"}, "outside the archive"},
		{"symlink up", tarEntry{name: "evil", typ: tar.TypeSymlink, link: "../../etc/passwd"}, "outside the archive"},
		{"symlink in an OCI layout", tarEntry{name: "blobs/sha256/link", typ: tar.TypeSymlink, link: cfg.Hex}, "is a link"},
		{"hardlink out", tarEntry{name: "evil", typ: tar.TypeLink, link: "../etc/passwd"}, `".." element`},
		{"hardlink in an OCI layout", tarEntry{name: "blobs/sha256/link", typ: tar.TypeLink, link: "blobs/sha256/" + cfg.Hex}, "is a link"},
		{"device", tarEntry{name: "null", typ: tar.TypeChar}, "special file"},
		{"fifo", tarEntry{name: "fifo", typ: tar.TypeFifo}, "special file"},
		{"twice", tarEntry{name: "./index.json", body: []byte("{}")}, "twice"},
		{"control character", tarEntry{name: "a\nb", body: []byte("x")}, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "sub", "in.tar")
			if err := os.Mkdir(filepath.Dir(in), 0o700); err != nil {
				t.Fatal(err)
			}
			writeTar(t, in, append(slices.Clone(base), tc.evil))
			err := normaliseErr(t, in, Options{}, ErrNotAnImage)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			assertFiles(t, filepath.Dir(in), "in.tar")
			assertFiles(t, dir, "sub")
		})
	}
	t.Run("the same tar, harmless", func(t *testing.T) {
		in := filepath.Join(t.TempDir(), "in.tar")
		writeTar(t, in, base)
		got, out := normalise(t, in, Options{})
		checkOut(t, out, got, map[string]v1.Image{"docker.io/library/app:v1": img}, false)
	})
}

func TestCorruptBlobs(t *testing.T) {
	img := ociImage(t, amd64)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	ann := layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/app:v1"})
	flip := func(h v1.Hash) func(p layout.Path) error {
		return func(p layout.Path) error {
			if err := p.AppendImage(img, ann); err != nil {
				return err
			}
			f := filepath.Join(string(p), "blobs", h.Algorithm, h.Hex)
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xff
			return os.WriteFile(f, b, 0o600)
		}
	}
	t.Run("OCI layer", func(t *testing.T) {
		err := normaliseErr(t, ociArchive(t, flip(m.Layers[1].Digest)), Options{}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "layer 2 of docker.io/library/app:v1 does not match its digest") {
			t.Errorf("error %q does not say which layer", err)
		}
	})
	t.Run("OCI config", func(t *testing.T) {
		err := normaliseErr(t, ociArchive(t, flip(m.Config.Digest)), Options{}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "the config of docker.io/library/app:v1, sha256:") || !strings.Contains(err.Error(), "does not match its digest") {
			t.Errorf("error %q does not say the digest", err)
		}
	})
	t.Run("OCI layer swapped for the other, cut to its size", func(t *testing.T) {
		in := ociArchive(t, func(p layout.Path) error {
			if err := p.AppendImage(img, ann); err != nil {
				return err
			}
			l0, l1 := filepath.Join(string(p), "blobs/sha256", m.Layers[0].Digest.Hex), filepath.Join(string(p), "blobs/sha256", m.Layers[1].Digest.Hex)
			b, err := os.ReadFile(l1)
			if err != nil {
				return err
			}
			same := make([]byte, m.Layers[0].Size) // same size, other bytes
			copy(same, b)
			return os.WriteFile(l0, same, 0o600)
		})
		err := normaliseErr(t, in, Options{}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "layer 1 of docker.io/library/app:v1 does not match its digest") {
			t.Errorf("error %q does not say which layer", err)
		}
	})
	t.Run("docker-archive layer that is not its diff ID", func(t *testing.T) {
		in := filepath.Join(t.TempDir(), "in.tar")
		writeTar(t, in, []tarEntry{
			{name: "c.json", body: configJSON(t, layerTar(t, "said"))},
			{name: "l.tar", body: layerTar(t, "sent")},
			{name: "manifest.json", body: mustJSON(t, tarball.Manifest{{Config: "c.json", RepoTags: []string{"a:1"}, Layers: []string{"l.tar"}}})},
		})
		err := normaliseErr(t, in, Options{}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "layer 1 of docker.io/library/a:1 does not match its diff ID") {
			t.Errorf("error %q does not say the diff ID", err)
		}
	})
	t.Run("docker-archive gzip layer damaged", func(t *testing.T) {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.tar")
		if err := tarball.WriteToFile(in, name.MustParseReference("a:1"), img); err != nil {
			t.Fatal(err)
		}
		b := readFile(t, in)
		i := bytes.Index(b, []byte{0x1f, 0x8b})
		b[i+200] ^= 0xff
		if err := os.WriteFile(in, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_ = normaliseErr(t, in, Options{}, ErrNotAnImage)
		assertFiles(t, dir, "in.tar")
	})
}

func TestLimits(t *testing.T) {
	t.Run("gzip bomb", func(t *testing.T) {
		dir := t.TempDir()
		in := filepath.Join(dir, "in.tar.gz")
		f, err := os.Create(in)
		if err != nil {
			t.Fatal(err)
		}
		zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
		if _, err := io.CopyN(zw, zeros{}, 50<<20); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		err = normaliseErr(t, in, Options{MaxUnpackedBytes: 1 << 20}, ErrTooLarge)
		if !strings.Contains(err.Error(), "the archive, decompressed, would be more than 1048576 bytes") {
			t.Errorf("error %q does not say the limit", err)
		}
		assertFiles(t, dir, "in.tar.gz")
	})
	t.Run("layer bomb", func(t *testing.T) {
		bomb, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			_ = tw.WriteHeader(&tar.Header{Name: "zeros", Size: 50 << 20, Mode: 0o644, Typeflag: tar.TypeReg})
			_, _ = io.CopyN(tw, zeros{}, 50<<20)
			_ = tw.Close()
			return io.NopCloser(&b), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(empty.Image, bomb)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		in := filepath.Join(dir, "in.tar")
		if err := tarball.WriteToFile(in, name.MustParseReference("bomb:1"), img); err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(in); st.Size() > 1<<20 {
			t.Fatalf("the archive is %d bytes", st.Size())
		}
		err = normaliseErr(t, in, Options{MaxUnpackedBytes: 1 << 20}, ErrTooLarge)
		if !strings.Contains(err.Error(), "the layers, decompressed, would be more than") {
			t.Errorf("error %q does not say the limit", err)
		}
	})
	t.Run("output", func(t *testing.T) {
		noise := make([]byte, 64<<10)
		_, _ = rand.Read(noise) // gzip makes it larger
		raw := tarBytes(t, []tarEntry{{name: "noise", body: noise}})
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(empty.Image, l)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		in := filepath.Join(dir, "in.tar")
		if err := tarball.WriteToFile(in, name.MustParseReference("app:1"), img); err != nil {
			t.Fatal(err)
		}
		// The layer decompressed fits; the archive written, with its
		// tar headers and config, does not.
		err = normaliseErr(t, in, Options{MaxUnpackedBytes: int64(len(raw))}, ErrTooLarge)
		if !strings.Contains(err.Error(), "the docker-archive written would be") {
			t.Errorf("error %q does not say the limit", err)
		}
		assertFiles(t, dir, "in.tar")
	})
	t.Run("images", func(t *testing.T) {
		refs := map[name.Reference]v1.Image{}
		for _, s := range []string{"a:1", "b:1", "c:1"} {
			tag, err := name.NewTag(s)
			if err != nil {
				t.Fatal(err)
			}
			refs[tag] = randomImage(t)
		}
		in := filepath.Join(t.TempDir(), "in.tar")
		if err := tarball.MultiRefWriteToFile(in, refs); err != nil {
			t.Fatal(err)
		}
		err := normaliseErr(t, in, Options{MaxImages: 2}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "lists 3 images, more than the 2") {
			t.Errorf("error %q does not say the limit", err)
		}
		if got, _ := normalise(t, in, Options{MaxImages: 3}); len(got) != 3 {
			t.Errorf("references %q", got)
		}
	})
	t.Run("one name, two images", func(t *testing.T) {
		a, b := ociImage(t, amd64), ociImage(t, amd64)
		ann := layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/app:v1"})
		in := ociArchive(t, func(p layout.Path) error {
			if err := p.AppendImage(a, ann); err != nil {
				return err
			}
			return p.AppendImage(b, ann)
		})
		err := normaliseErr(t, in, Options{}, ErrNotAnImage)
		if !strings.Contains(err.Error(), "gives the name docker.io/library/app:v1 to 2 images") {
			t.Errorf("error %q", err)
		}
	})
}

func TestContainerdName(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct{ in, want, err string }{
		{"app:v1", "docker.io/library/app:v1", ""},
		{"app", "docker.io/library/app:latest", ""},
		{"team/app:v1", "docker.io/team/app:v1", ""},
		{"docker.io/app:v1", "docker.io/library/app:v1", ""},
		{"index.docker.io/library/app:v1", "docker.io/library/app:v1", ""},
		{"registry.example:5000/team/app:v2", "registry.example:5000/team/app:v2", ""},
		{"localhost/app:v1", "localhost/app:v1", ""},
		{"localhost:5000/a/b/c:V_1.2-x", "localhost:5000/a/b/c:V_1.2-x", ""},
		{"[::1]:5000/app:v1", "[::1]:5000/app:v1", ""},
		{"app:v1" + digest, "docker.io/library/app:v1", ""},
		{"app" + digest, "", "by digest only"},
		{"registry.example:5000/app" + digest, "", "by digest only"},
		{"App:v1", "", "not a valid reference"},
		{"a//b:v1", "", "not a reference containerd accepts"},
		{"-a:v1", "", "not a reference containerd accepts"},
		{"a..b:v1", "", "not a reference containerd accepts"},
		{"reg_istry.example/a:v1", "", "not a reference containerd accepts"},
		{"app:", "", "not a valid reference"},
		{"app:" + strings.Repeat("t", 129), "", "not a valid reference"},
		{strings.Repeat("a/", 200) + "a:v1", "", "between 1 and 255 characters"},
		{"registry.example/" + strings.Repeat("a", 250) + ":v1", "", "not a reference containerd accepts"},
		{"", "", "not a valid reference"},
	} {
		got, err := containerdName(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("containerdName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("containerdName(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
		}
	}
}

func TestReceive(t *testing.T) {
	body := bytes.Repeat([]byte("kobe"), 1000)
	good := sha256.Sum256(body)
	for _, tc := range []struct {
		name  string
		limit int64
		want  [sha256.Size]byte
		err   error
	}{
		{"exactly the limit", int64(len(body)), good, nil},
		{"under the limit", 1 << 20, good, nil},
		{"one byte over", int64(len(body)) - 1, good, ErrTooLarge},
		{"another digest", int64(len(body)), sha256.Sum256([]byte("other")), ErrDigestMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, n, err := Receive(bytes.NewReader(body), tc.limit, tc.want, dir)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Receive: %v, want %v", err, tc.err)
			}
			if tc.err != nil {
				if p != "" {
					t.Errorf("path %q on error", p)
				}
				if errors.Is(err, ErrTooLarge) && (n != tc.limit+1 || !strings.Contains(err.Error(), fmt.Sprint(tc.limit))) {
					t.Errorf("read %d bytes, error %q; want %d and the limit said", n, err, tc.limit+1)
				}
				assertFiles(t, dir)
				return
			}
			if n != int64(len(body)) || !bytes.Equal(readFile(t, p), body) || filepath.Dir(p) != dir {
				t.Errorf("Receive = %q, %d; want the body in %s", p, n, dir)
			}
		})
	}
	t.Run("a body that fails", func(t *testing.T) {
		dir := t.TempDir()
		boom := errors.New("connection reset")
		_, _, err := Receive(io.MultiReader(bytes.NewReader(body), errReader{boom}), 1<<20, good, dir)
		if !errors.Is(err, boom) {
			t.Errorf("Receive: %v", err)
		}
		assertFiles(t, dir)
	})
}

// FuzzNormalise: whatever the archive, Normalise fails with one of its
// errors or writes a docker-archive go-containerregistry reads, and
// leaves nothing behind.
func FuzzNormalise(f *testing.F) {
	img, err := mutate.AppendLayers(ociBase(), mustLayer(layerTar(f, "fuzz")))
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	docker := filepath.Join(dir, "docker.tar")
	if err := tarball.WriteToFile(docker, name.MustParseReference("app:v1"), img); err != nil {
		f.Fatal(err)
	}
	f.Add(readFile(f, docker))
	ldir := filepath.Join(dir, "layout")
	p, err := layout.Write(ldir, empty.Index)
	if err != nil {
		f.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{containerdImageName: "docker.io/library/app:v1"})); err != nil {
		f.Fatal(err)
	}
	oci := filepath.Join(dir, "oci.tar")
	tarDir(f, ldir, oci)
	f.Add(readFile(f, oci))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
		if err := os.WriteFile(in, data, 0o600); err != nil {
			t.Fatal(err)
		}
		refs, err := Normalise(in, out, Options{MaxUnpackedBytes: 8 << 20, MaxImages: 4})
		if err != nil {
			if !errors.Is(err, ErrNotAnImage) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Normalise: %v", err)
			}
			assertFiles(t, dir, "in")
			return
		}
		for _, r := range refs {
			img := readOut(t, out, r)
			if _, err := img.Digest(); err != nil {
				t.Fatalf("%s: %v", r, err)
			}
		}
		assertFiles(t, dir, "in", "out")
	})
}

// normalise runs Normalise from in to out.tar beside it and fails t on
// an error.
func normalise(t *testing.T, in string, opts Options) ([]string, string) {
	t.Helper()
	out := filepath.Join(filepath.Dir(in), "out.tar")
	got, err := Normalise(in, out, opts)
	if err != nil {
		t.Fatalf("Normalise: %v", err)
	}
	return got, out
}

// normaliseErr runs Normalise from in and wants an error that is want;
// out must not be left behind.
func normaliseErr(t *testing.T, in string, opts Options, want error) error {
	t.Helper()
	out := filepath.Join(filepath.Dir(in), "out.tar")
	_ = os.Remove(out) // an earlier run's
	got, err := Normalise(in, out, opts)
	if !errors.Is(err, want) {
		t.Fatalf("Normalise = %q, %v; want %v", got, err, want)
	}
	if _, serr := os.Stat(out); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("%s left behind (%v)", out, serr)
	}
	t.Logf("error: %v", err)
	return err
}

// checkOut wants out to be a docker-archive holding want by their names,
// which Normalise returned as refs; sameDigest: the image read back is
// the very image (a docker-archive's own manifest), not only its config
// and layers.
func checkOut(t *testing.T, out string, refs []string, want map[string]v1.Image, sameDigest bool) {
	t.Helper()
	var names []string
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(refs, names) {
		t.Fatalf("references %q, want %q", refs, names)
	}
	for _, ref := range refs {
		got, img := readOut(t, out, ref), want[ref]
		if sameDigest {
			gd, err1 := got.Digest()
			wd, err2 := img.Digest()
			if err1 != nil || err2 != nil || gd != wd {
				t.Errorf("%s: digest %s (%v), want %s (%v)", ref, gd, err1, wd, err2)
			}
		}
		gc, err1 := got.ConfigName()
		wc, err2 := img.ConfigName()
		if err1 != nil || err2 != nil || gc != wc {
			t.Errorf("%s: config %s (%v), want %s (%v)", ref, gc, err1, wc, err2)
		}
		gl, err1 := got.Layers()
		wl, err2 := img.Layers()
		if err1 != nil || err2 != nil || len(gl) != len(wl) {
			t.Fatalf("%s: %d layers (%v), want %d (%v)", ref, len(gl), err1, len(wl), err2)
		}
		for i := range gl {
			gd, _ := gl[i].Digest()
			wd, _ := wl[i].Digest()
			gdiff, _ := gl[i].DiffID()
			wdiff, _ := wl[i].DiffID()
			if gd != wd || gdiff != wdiff {
				t.Errorf("%s layer %d: %s (diff ID %s), want %s (%s)", ref, i, gd, gdiff, wd, wdiff)
			}
			// Reading a layer back checks it matches the config.
			rc, err := gl[i].Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			h, _, err := v1.SHA256(rc)
			_ = rc.Close()
			if err != nil || h != wdiff {
				t.Errorf("%s layer %d unpacks to %s (%v), want %s", ref, i, h, err, wdiff)
			}
		}
	}
}

func readOut(t testing.TB, out, ref string) v1.Image {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("reading %s from %s: %v", ref, out, err)
	}
	return img
}

// assertFiles wants dir to hold exactly names.
func assertFiles(t testing.TB, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// ociBase is an empty OCI image.
func ociBase() v1.Image {
	return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
}

// ociImage is an OCI image of two random gzip layers for platform p.
func ociImage(t testing.TB, p v1.Platform) v1.Image {
	t.Helper()
	var ls []v1.Layer
	for range 2 {
		l, err := random.Layer(2048, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	img, err := mutate.AppendLayers(ociBase(), ls...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// ociArchive writes an OCI layout with fill and returns a tar of it.
func ociArchive(t testing.TB, fill func(layout.Path) error) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(p); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "in.tar")
	tarDir(t, string(p), in)
	return in
}

// tarDir writes a tar of dir's files at p, named as `tar -C dir .` does.
func tarDir(t testing.TB, dir, p string) {
	t.Helper()
	var es []tarEntry
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = "./" + filepath.ToSlash(rel)
		if d.IsDir() {
			es = append(es, tarEntry{name: rel + "/", typ: tar.TypeDir})
			return nil
		}
		es = append(es, tarEntry{name: rel, body: readFile(t, path)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	writeTar(t, p, es)
}

type tarEntry struct {
	name, link string
	typ        byte
	body       []byte
}

func tarBytes(t testing.TB, es []tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeTar(t testing.TB, p string, es []tarEntry) {
	t.Helper()
	if err := os.WriteFile(p, tarBytes(t, es), 0o600); err != nil {
		t.Fatal(err)
	}
}

func gzipFile(t testing.TB, p string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(readFile(t, p)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// layerTar is an uncompressed layer holding one file that says s.
func layerTar(t testing.TB, s string) []byte {
	t.Helper()
	return tarBytes(t, []tarEntry{{name: s + ".txt", body: []byte(strings.Repeat(s+"\n", 1000))}})
}

func mustLayer(raw []byte) v1.Layer {
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		panic(err)
	}
	return l
}

// configJSON is a linux/amd64 config of uncompressed layers.
func configJSON(t testing.TB, layers ...[]byte) []byte {
	t.Helper()
	cfg := v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{}}}
	for _, l := range layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, v1.Hash{Algorithm: "sha256", Hex: sum(l)})
	}
	return mustJSON(t, cfg)
}

func sum(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
