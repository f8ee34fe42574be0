package imageload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
)

// DefaultMaxImages is Options.MaxImages when it is 0.
const DefaultMaxImages = 64

// maxNames bounds the names of all an archive's images together.
const maxNames = 1024

// Options bound and steer Normalise.
type Options struct {
	// Platform picks the image of an index that holds one per platform;
	// nil: linux/runtime.GOARCH. An image listed on its own is taken
	// whatever its platform.
	Platform *v1.Platform
	// MaxUnpackedBytes bounds, each on its own: a gzip-compressed archive
	// once decompressed, the images' layers once decompressed (all of
	// them, each blob once), and the file written. Beyond any is
	// ErrTooLarge. 0: no bound.
	MaxUnpackedBytes int64
	// MaxImages bounds the images of one archive (ErrNotAnImage beyond
	// it); 0: DefaultMaxImages.
	MaxImages int
}

// Normalise reads the archive at in, a docker-archive (docker save /
// podman save: manifest.json at the root; also Docker 25's, whose tar
// holds index.json and oci-layout besides) or an OCI image layout archive
// (oci-layout, index.json, blobs/sha256/...), either of them plain or
// gzip-compressed, and writes at out one docker-archive holding every
// named image of it, for the given platform where an index holds several.
// It returns the images' references as containerd names them, fully
// qualified ("docker.io/library/app:v1"), sorted and unique.
//
// An archive that is not one of those, is damaged (a blob that does not
// match its digest, a layer that does not match its diff ID), or names no
// image (an OCI index whose entries carry neither io.containerd.image.name
// nor a full reference in org.opencontainers.image.ref.name, a
// docker-archive without RepoTags) is ErrNotAnImage, with a message that
// says what is wrong and what to send instead; a bound of opts passed is
// ErrTooLarge; any other error is the disk's. out is written once all the
// rest is checked, and removed if writing it fails; temporary files go
// beside it and are removed.
func Normalise(in, out string, opts Options) ([]string, error) {
	if opts.MaxImages <= 0 {
		opts.MaxImages = DefaultMaxImages
	}
	want := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if opts.Platform != nil {
		want = *opts.Platform
	}
	plain, done, err := decompressed(in, filepath.Dir(out), opts.MaxUnpackedBytes)
	if err != nil {
		return nil, err
	}
	defer done()
	a, err := openArchive(plain)
	if err != nil {
		return nil, err
	}
	defer func() { _ = a.Close() }()
	imgs, err := a.images(want, opts.MaxImages)
	if err != nil {
		return nil, err
	}
	b := builder{a: a, seen: map[string]blobInfo{}, layers: &budget{what: "the layers, decompressed,", limit: opts.MaxUnpackedBytes}}
	refs := map[name.Reference]v1.Image{}
	var names []string
	for _, img := range imgs {
		v, err := b.build(img)
		if err != nil {
			return nil, err
		}
		for _, n := range img.names {
			t, err := name.NewTag(n)
			if err != nil { // containerdName parsed it already
				return nil, notImage("%q: %v", n, err)
			}
			refs[t] = v
			names = append(names, n)
		}
	}
	if err := write(out, refs, opts.MaxUnpackedBytes); err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// image is one image of the archive as its manifest and config describe
// it, before its layers are read.
type image struct {
	names []string
	// key tells images apart: two entries with one key are one image.
	key    string
	config []byte
	layers []layer
}

// layer is one layer of an image, as its manifest and config describe it.
type layer struct {
	blob   string  // its file in the archive, links followed
	diffID v1.Hash // what the config says it unpacks to
	// digest and size are what an OCI manifest says the blob is; size is
	// -1 in a docker-archive, which says neither.
	digest v1.Hash
	size   int64
}

// images finds the named images of the archive, for the platform want
// where an index holds one per platform.
func (a *archive) images(want v1.Platform, maxImages int) ([]*image, error) {
	var (
		imgs    []*image
		unnamed []string
		hint    string
		err     error
	)
	switch {
	case a.has("manifest.json"):
		imgs, unnamed, err = a.dockerImages(maxImages)
		hint = "save images by name (docker save app:v1), not by ID"
	case a.has("index.json") && a.has("oci-layout"):
		if a.link != "" {
			return nil, notImage("%q is a link; an OCI layout holds only files and directories", short(a.link))
		}
		imgs, unnamed, err = a.ociImages(want, maxImages)
		hint = "name each image of index.json with an " + containerdImageName + " or " + ociRefName + " annotation holding a full reference such as docker.io/library/app:v1, or send `docker save app:v1` instead"
	default:
		return nil, notImage("the archive holds neither a manifest.json (a docker-archive) nor an oci-layout and an index.json (an OCI layout); " + sendInstead)
	}
	if err != nil {
		return nil, err
	}
	if len(imgs) == 0 {
		if len(unnamed) > 3 {
			unnamed = append(unnamed[:3], fmt.Sprintf("and %d more", len(unnamed)-3))
		}
		return nil, notImage("the archive names no image (%s); %s", strings.Join(unnamed, "; "), hint)
	}
	return merge(imgs, maxImages)
}

// merge makes one image of the entries with one key, and refuses a name
// given to two images.
func merge(imgs []*image, maxImages int) ([]*image, error) {
	var (
		out   []*image
		byKey = map[string]*image{}
		owner = map[string]string{} // name -> key
	)
	for _, img := range imgs {
		m, ok := byKey[img.key]
		if !ok {
			m = &image{key: img.key, config: img.config, layers: img.layers}
			byKey[img.key] = m
			out = append(out, m)
		}
		for _, n := range img.names {
			switch k, ok := owner[n]; {
			case !ok:
				owner[n] = img.key
				m.names = append(m.names, n)
			case k != img.key:
				return nil, notImage("the archive gives the name %s to two different images; give each its own", n)
			}
		}
	}
	switch {
	case len(out) > maxImages:
		return nil, notImage("the archive holds %d images, more than the %d one load may hold; load them in several archives", len(out), maxImages)
	case len(owner) > maxNames:
		return nil, notImage("the archive gives its images %d names, more than the %d one load may hold", len(owner), maxNames)
	}
	return out, nil
}

// decompressed returns the path of the archive at in as a tar: in itself,
// or, when in is gzip-compressed, a temporary file in dir holding it
// decompressed, within limit bytes. done removes what it made.
func decompressed(in, dir string, limit int64) (p string, done func(), err error) {
	f, err := os.Open(in)
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = f.Close() }()
	br := bufio.NewReader(f)
	magic, _ := br.Peek(6) // shorter than 6 bytes: not compressed, and not a tar either
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "", nil, notImage("the archive is zstd-compressed; send it plain or gzip-compressed")
	case bytes.HasPrefix(magic, []byte("BZh")), bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return "", nil, notImage("the archive is bzip2- or xz-compressed; send it plain or gzip-compressed")
	default:
		return in, func() {}, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return "", nil, notImage("the archive is not valid gzip (%v); %s", err, sendInstead)
	}
	tmp, err := os.CreateTemp(dir, ".imageload-*.tar")
	if err != nil {
		return "", nil, fmt.Errorf("decompressing the archive: %w", err)
	}
	done = func() { _ = os.Remove(tmp.Name()) }
	src := &readErr{r: zr}
	_, err = io.Copy(tmp, budgetReader{r: src, b: &budget{what: "the archive, decompressed,", limit: limit}})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err == nil:
		return tmp.Name(), done, nil
	case errors.Is(err, ErrTooLarge):
	case src.err != nil:
		err = notImage("the archive is not valid gzip (%v); send all of it, or send it uncompressed", src.err)
	default:
		err = fmt.Errorf("decompressing the archive: %w", err)
	}
	done()
	return "", nil, err
}

// write writes the images of refs at out as a docker-archive of at most
// limit bytes (0: any), and removes out on any error.
func write(out string, refs map[name.Reference]v1.Image, limit int64) (err error) {
	size, err := tarball.CalculateSize(refs)
	switch {
	case err != nil:
		return fmt.Errorf("sizing the docker-archive: %w", err)
	case limit > 0 && size > limit:
		return fmt.Errorf("%w: the docker-archive written would be %d bytes, more than %d", ErrTooLarge, size, limit)
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing the docker-archive: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(out)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = tarball.MultiRefWrite(refs, budgetWriter{w: bw, b: &budget{what: "the docker-archive written", limit: limit}}); err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return fmt.Errorf("writing the docker-archive: %w", err)
	}
	return nil
}

// budget is a bound on bytes that several reads or writes count against.
type budget struct {
	what        string
	limit, used int64 // limit 0: none
}

func (b *budget) take(n int) error {
	b.used += int64(n)
	if b.limit > 0 && b.used > b.limit {
		return fmt.Errorf("%w: %s would be more than %d bytes", ErrTooLarge, b.what, b.limit)
	}
	return nil
}

// budgetReader reads at most one byte beyond its budget, then fails.
type budgetReader struct {
	r io.Reader
	b *budget
}

func (r budgetReader) Read(p []byte) (int, error) {
	if r.b.limit > 0 {
		p = p[:min(int64(len(p)), max(r.b.limit-r.b.used, 0)+1)]
	}
	n, err := r.r.Read(p)
	if err := r.b.take(n); err != nil {
		return n, err
	}
	return n, err
}

// budgetWriter writes nothing beyond its budget.
type budgetWriter struct {
	w io.Writer
	b *budget
}

func (w budgetWriter) Write(p []byte) (int, error) {
	if err := w.b.take(len(p)); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}

// readErr remembers its reader's error, to tell it from the writer's.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		r.err = err
	}
	return n, err
}
