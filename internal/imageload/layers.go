package imageload

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const (
	// maxLayers bounds one image's layers; Docker stops at 127.
	maxLayers = 256
	// maxZstdWindow bounds the memory a zstd layer may ask to decompress
	// (zstd's own default bound is 512 MiB); zstd writes windows of 8 MiB
	// or less but with --long or --ultra.
	maxZstdWindow = 64 << 20
)

// blobInfo is what reading a layer's blob found.
type blobInfo struct {
	digest    v1.Hash // of the blob as it is
	size      int64
	diffID    v1.Hash // of the blob decompressed
	mediaType types.MediaType
	// bad is why it does not decompress; nil: it does.
	bad error
}

// builder reads every layer once, checks it, and makes the images to
// write.
type builder struct {
	a      *archive
	seen   map[string]blobInfo // by blob
	layers *budget             // the layers decompressed
}

// build checks img's layers against its manifest and config and returns
// the image to write: its config and its layers' blobs as they are (a
// docker-archive holds gzip, zstd and uncompressed layers alike; ctr
// finds out which each is), read again, and checked again, as they are
// written.
func (b *builder) build(img *image) (v1.Image, error) {
	what := img.names[0]
	sum := sha256.Sum256(img.config)
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.DockerManifestSchema2,
		Config:        v1.Descriptor{MediaType: types.DockerConfigJSON, Size: int64(len(img.config)), Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}},
	}
	out := &outImage{config: img.config, layers: map[v1.Hash]*outLayer{}}
	for i, l := range img.layers {
		info, err := b.inspect(l.blob, what)
		if err != nil {
			return nil, err
		}
		if l.size >= 0 && (info.digest != l.digest || info.size != l.size) {
			return nil, notImage("layer %d of %s does not match its digest: the manifest says %s, the blob's SHA-256 is %s", i+1, what, l.digest, info.digest)
		}
		if info.bad != nil {
			return nil, info.bad
		}
		if info.diffID != l.diffID {
			return nil, notImage("layer %d of %s does not match its diff ID: the config says %s, the layer decompressed is %s", i+1, what, l.diffID, info.diffID)
		}
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: info.mediaType, Size: info.size, Digest: info.digest})
		out.layers[info.digest] = &outLayer{a: b.a, blob: l.blob, info: info}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	out.manifest = raw
	return partial.CompressedToImage(out)
}

// inspect reads a layer's blob once: its digest and size as it is, its
// compression, and its diff ID, decompressed within b.layers.
func (b *builder) inspect(blob, what string) (blobInfo, error) {
	if info, ok := b.seen[blob]; ok {
		return info, nil
	}
	r, _, err := b.a.open(blob)
	if err != nil {
		return blobInfo{}, notImage("a layer of %s: %v", what, err)
	}
	raw := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(fileReader{r}, raw), 64<<10)
	magic, _ := br.Peek(4) // a short blob is not compressed
	info := blobInfo{size: r.Size(), mediaType: types.DockerUncompressedLayer}
	var dec io.Reader // nil: the blob is the layer
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		info.mediaType = types.DockerLayer
		zr, err := gzip.NewReader(br)
		if err != nil {
			info.bad = notImage("a layer of %s is not valid gzip (%v)", what, err)
			break
		}
		dec = zr
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		info.mediaType = types.OCILayerZStd
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return blobInfo{}, fmt.Errorf("reading a zstd layer: %w", err)
		}
		defer zr.Close()
		dec = zr
	}
	diff := sha256.New()
	if dec == nil && info.bad == nil {
		_, err = io.Copy(io.Discard, budgetReader{r: br, b: b.layers})
	} else if dec != nil {
		_, err = io.Copy(diff, budgetReader{r: dec, b: b.layers})
	}
	switch {
	case errors.Is(err, ErrTooLarge):
		return blobInfo{}, err
	case errors.As(err, new(*readError)):
		return blobInfo{}, fmt.Errorf("reading a layer of %s: %w", what, err)
	case err != nil:
		// Said once the digest is known: a blob that is not what its
		// digest says is the more telling error.
		info.bad = notImage("a layer of %s does not decompress (%v)", what, err)
	}
	// The digest is of the whole blob, whatever follows the compressed
	// stream.
	if _, err := io.Copy(io.Discard, br); err != nil {
		return blobInfo{}, fmt.Errorf("reading a layer of %s: %w", what, err)
	}
	info.digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(raw.Sum(nil))}
	info.diffID = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(diff.Sum(nil))}
	if dec == nil {
		info.diffID = info.digest
	}
	b.seen[blob] = info
	return info, nil
}

// fileReader tells the errors of reading the archive's file (the disk's)
// from those of what is read (the archive's): it makes them readErrors.
type fileReader struct{ r io.Reader }

func (f fileReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &readError{err: err}
	}
	return n, err
}

type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// outImage is an image as written: its config and a Docker manifest of its
// layers' blobs as read (partial.CompressedImageCore).
type outImage struct {
	config, manifest []byte
	layers           map[v1.Hash]*outLayer
}

func (i *outImage) RawConfigFile() ([]byte, error)      { return i.config, nil }
func (i *outImage) MediaType() (types.MediaType, error) { return types.DockerManifestSchema2, nil }
func (i *outImage) RawManifest() ([]byte, error)        { return i.manifest, nil }
func (i *outImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := i.layers[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("no layer %s", h)
}

// outLayer is a layer's blob as written (partial.CompressedLayer).
type outLayer struct {
	a    *archive
	blob string
	info blobInfo
}

func (l *outLayer) Digest() (v1.Hash, error)            { return l.info.digest, nil }
func (l *outLayer) Size() (int64, error)                { return l.info.size, nil }
func (l *outLayer) MediaType() (types.MediaType, error) { return l.info.mediaType, nil }

// Compressed returns the blob as it is, checked against its digest as it
// is read: the last read fails rather than end a blob that changed.
func (l *outLayer) Compressed() (io.ReadCloser, error) {
	r, _, err := l.a.open(l.blob)
	if err != nil {
		return nil, notImage("layer %s: %v", l.info.digest, err)
	}
	return io.NopCloser(&checked{r: r, h: sha256.New(), want: l.info.digest}), nil
}

type checked struct {
	r    io.Reader
	h    hash.Hash
	want v1.Hash
}

func (c *checked) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	if errors.Is(err, io.EOF) && hex.EncodeToString(c.h.Sum(nil)) != c.want.Hex {
		return n, notImage("layer %s changed while it was written", c.want)
	}
	return n, err
}
