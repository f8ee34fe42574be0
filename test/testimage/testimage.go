// Package testimage makes images for the tests that put images into
// members (pulls from a registry, kobe load): testapp's image made unique,
// and archives of it in the formats users send.
package testimage

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Unique is the image of the OCI layout archive at archive (make
// image-testapp's testapp.tar) with a layer of random bytes added: an
// image no node holds and no registry serves.
func Unique(t testing.TB, archive string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	if err := untar(archive, dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		t.Fatalf("%s has no image: %v", archive, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := random.Layer(64<<10, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, extra); err != nil {
		t.Fatal(err)
	}
	return img
}

// OCIArchive writes img as an OCI image layout archive named ref (the
// io.containerd.image.name annotation, as `docker save` of Docker 25 and
// buildah write it), gzip-compressed when compress, and returns its path.
func OCIArchive(t testing.TB, img v1.Image, ref string, compress bool) string {
	t.Helper()
	dir := t.TempDir()
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add:        img,
		Descriptor: v1.Descriptor{Annotations: map[string]string{"io.containerd.image.name": ref}},
	})
	if _, err := layout.Write(dir, idx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "image.oci.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var w io.Writer = f
	var zw *gzip.Writer
	if compress {
		zw = gzip.NewWriter(f)
		w = zw
	}
	tw := tar.NewWriter(w)
	err = tw.AddFS(os.DirFS(dir))
	if err == nil {
		err = tw.Close()
	}
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// untar extracts the regular files and directories of the tar archive at
// path into dir.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(out, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
				return err
			}
			w, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}
