package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is one image: a single layer of files on an empty base.
type Spec struct {
	Name       string // full reference, e.g. ghcr.io/kunobi-ninja/kobe-operator:v1
	Files      []LayerFile
	Entrypoint []string
	User       string
	Labels     map[string]string
	OS, Arch   string
	Created    time.Time // config time and every file's mtime
}

// LayerFile is a file of the layer: Source on this machine, Path in the
// image; or, when Link is set, a symbolic link at Path to Link (no Source).
type LayerFile struct {
	Source string
	Path   string
	Mode   int64
	Link   string
}

// Build assembles the image. Nothing in it depends on when, where or by whom
// it was built: entries are sorted, owned by root, timed at spec.Created.
func Build(spec Spec) (v1.Image, error) {
	layer, err := buildLayer(spec.Files, spec.Created)
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: spec.Created},
			CreatedBy: "kobe hack/image",
			Comment:   "static files only",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = spec.OS, spec.Arch
	cf.Created = v1.Time{Time: spec.Created}
	cf.Config = v1.Config{
		User:       spec.User,
		Entrypoint: spec.Entrypoint,
		Labels:     spec.Labels,
		WorkingDir: "/",
	}
	return mutate.ConfigFile(img, cf)
}

// buildLayer writes the layer's tar: each file and its parent directories,
// sorted by path, with fixed owners and times.
func buildLayer(files []LayerFile, mtime time.Time) (v1.Layer, error) {
	type entry struct {
		hdr  *tar.Header
		data []byte
	}
	entries := map[string]entry{}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean(f.Path), "/")
		if _, dup := entries[p]; dup || p == "" || p == "." {
			return nil, fmt.Errorf("layer path %q given twice or empty", f.Path)
		}
		if f.Link != "" {
			entries[p] = entry{hdr: &tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: f.Link, Mode: 0o777}}
		} else {
			data, err := os.ReadFile(f.Source)
			if err != nil {
				return nil, err
			}
			entries[p] = entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: p, Size: int64(len(data)), Mode: f.Mode}, data: data}
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := entries[d+"/"]; !ok {
				entries[d+"/"] = entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		e.hdr.ModTime, e.hdr.Format = mtime, tar.FormatPAX
		if err := tw.WriteHeader(e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteOCI writes img as an OCI image layout packed in a tar, the format
// `ctr images import` and `crane push` take. The index names the image
// both ways containerd reads (its own annotation, and the OCI ref name).
func WriteOCI(out, ref string, img v1.Image) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("--name %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(out), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          r.Name(),
		"org.opencontainers.image.ref.name": r.Identifier(),
	})); err != nil {
		return err
	}
	return writeFileAtomic(out, func(w io.Writer) error { return tarDir(w, dir) })
}

// WriteDocker writes img as a docker-archive (`docker save`'s format).
func WriteDocker(out, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("--name %q: %w", ref, err)
	}
	return writeFileAtomic(out, func(w io.Writer) error { return tarball.Write(tag, img, w) })
}

// tarDir packs dir in lexical order with fixed owners, modes and times, so
// the tarball is as reproducible as the image in it.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func writeFileAtomic(out string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".image-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone after the rename
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}

// Open reads a tarball that WriteOCI or WriteDocker wrote. The returned
// cleanup removes the unpacked layout; call it when done with the image.
func Open(tarPath string) (v1.Image, func(), error) {
	isOCI, err := tarHas(tarPath, "oci-layout")
	if err != nil {
		return nil, nil, err
	}
	if !isOCI {
		img, err := tarball.ImageFromPath(tarPath, nil)
		return img, func() {}, err
	}
	dir, err := os.MkdirTemp("", "kobe-image-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	img, err := openOCI(tarPath, dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return img, cleanup, nil
}

func openOCI(tarPath, dir string) (v1.Image, error) {
	if err := untar(tarPath, dir); err != nil {
		return nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(im.Manifests) != 1 {
		return nil, fmt.Errorf("%s: want one image in the index, found %d", tarPath, len(im.Manifests))
	}
	return idx.Image(im.Manifests[0].Digest)
}

func tarHas(tarPath, want string) (bool, error) {
	found := false
	err := eachTarEntry(tarPath, func(h *tar.Header, _ io.Reader) error {
		if path.Clean(h.Name) == want {
			found = true
		}
		return nil
	})
	return found, err
}

func untar(tarPath, dir string) error {
	return eachTarEntry(tarPath, func(h *tar.Header, r io.Reader) error {
		p := path.Clean(h.Name)
		if !fs.ValidPath(p) {
			return fmt.Errorf("%s: bad entry %q", tarPath, h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		switch h.Typeflag {
		case tar.TypeDir:
			return os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.Create(target)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, r); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		default:
			return fmt.Errorf("%s: unexpected entry %q of type %c", tarPath, h.Name, h.Typeflag)
		}
	})
}

func eachTarEntry(tarPath string, fn func(*tar.Header, io.Reader) error) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	return forEachEntry(tar.NewReader(f), fn)
}

func forEachEntry(tr *tar.Reader, fn func(*tar.Header, io.Reader) error) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}

// Info is what `kobe-image inspect` prints.
type Info struct {
	Digest     string            `json:"digest"`
	MediaType  string            `json:"mediaType"`
	Platform   string            `json:"platform"`
	Created    time.Time         `json:"created"`
	User       string            `json:"user"`
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        []string          `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Layers     int               `json:"layers"`
	Files      []FileInfo        `json:"files"`
}

// FileInfo is one entry of a layer.
type FileInfo struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Mode  string `json:"mode"`
	Owner string `json:"owner"`
	Size  int64  `json:"size"`
}

// Inspect reads a tarball's image: digest, config and every layer's entries.
func Inspect(tarPath string) (*Info, error) {
	img, cleanup, err := Open(tarPath)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	info := &Info{
		Digest: d.String(), MediaType: string(mt), Platform: cf.OS + "/" + cf.Architecture,
		Created: cf.Created.UTC(), User: cf.Config.User, Entrypoint: cf.Config.Entrypoint,
		Cmd: cf.Config.Cmd, Env: cf.Config.Env, Labels: cf.Config.Labels, Layers: len(layers),
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		err = forEachEntry(tar.NewReader(rc), func(h *tar.Header, _ io.Reader) error {
			info.Files = append(info.Files, FileInfo{
				Path: "/" + strings.TrimSuffix(path.Clean(h.Name), "/"), Type: string(h.Typeflag),
				Mode: fmt.Sprintf("%04o", h.Mode), Owner: fmt.Sprintf("%d:%d", h.Uid, h.Gid), Size: h.Size,
			})
			return nil
		})
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(info.Files, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return info, nil
}

// Push uploads the tarball's image to ref with the local Docker credentials
// (or none). An unreachable registry fails within the context's deadline
// with an error that says so.
func Push(ctx context.Context, tarPath, ref string, insecure bool) (v1.Hash, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("--ref %q: %w", ref, err)
	}
	img, cleanup, err := Open(tarPath)
	if err != nil {
		return v1.Hash{}, err
	}
	defer cleanup()
	d, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	err = remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err == nil {
		return d, nil
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, context.DeadlineExceeded) {
		return v1.Hash{}, fmt.Errorf("registry %s is not reachable (set REGISTRY to one this machine can reach): %w", r.Context().RegistryStr(), err)
	}
	return v1.Hash{}, fmt.Errorf("pushing %s: %w", r, err)
}
