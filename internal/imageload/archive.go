package imageload

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Bounds on what an archive may hold before anything in it is believed.
// Real archives stay far below: docker save of 64 images of 127 layers is
// about 33 000 entries in the old layout, 8 000 in Docker 25's.
const (
	maxEntries   = 1 << 15
	maxNameBytes = 256
	maxLinkHops  = 8
	// maxJSONBytes bounds one JSON document (manifest.json, index.json,
	// a manifest, an index, a config); maxJSONTotal all those read from
	// one archive, which stay in memory until it is written.
	maxJSONBytes = 4 << 20
	maxJSONTotal = 64 << 20
)

// archive is a tar file read in place: an index of its entries by name,
// whose contents are read at their offsets. No name from it ever becomes
// a path on disk: that is what makes a hostile archive harmless to read.
//
// go-containerregistry's readers are not used for the archive itself:
// pkg/v1/layout needs the layout unpacked on disk, and pkg/v1/tarball
// reads manifest.json and configs whole whatever their size, scans the
// tar again for each file, and gzips every uncompressed layer (docker
// save's) several times over to learn its digest. Its types, parsers,
// pkg/name and its docker-archive writer are used.
type archive struct {
	f       *os.File
	entries map[string]entry
	// link is one link entry's name ("": none), for OCI layouts, which
	// may hold none.
	link string
	// jsonRead counts the bytes readJSON has read (maxJSONTotal).
	jsonRead int64
}

// entry is a regular file's bytes in the tar, or a link to another entry.
type entry struct {
	off, size int64
	link      string // the entry linked to, cleaned; "" for a regular file
}

// openArchive indexes the tar at p. Entries named outside the archive
// (absolute, or with a ".." element), links leading out of it, devices,
// fifos, sparse files and names given twice are ErrNotAnImage.
func openArchive(p string) (*archive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	a := &archive{f: f, entries: map[string]entry{}}
	if err := a.index(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return a, nil
}

func (a *archive) Close() error { return a.f.Close() }

func (a *archive) index() error {
	tr := tar.NewReader(a.f)
	for {
		hdr, err := tr.Next()
		switch {
		case errors.Is(err, io.EOF) && len(a.entries) == 0:
			return notImage("the archive is empty; " + sendInstead)
		case errors.Is(err, io.EOF):
			return a.ended()
		case errors.As(err, new(*fs.PathError)):
			return fmt.Errorf("reading the archive: %w", err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return notImage("the archive is truncated; send all of it")
		case err != nil:
			return notImage("the archive is not a tar (%v); %s", err, sendInstead)
		}
		if err := a.add(hdr); err != nil {
			return err
		}
	}
}

// ended checks the tar ends as tars do, with two zero blocks, not at
// the end of an entry: archive/tar takes a tar cut there for a whole one.
func (a *archive) ended() error {
	end, err := a.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("reading the archive: %w", err)
	}
	var blocks [1024]byte
	if end >= int64(len(blocks)) {
		if _, err := a.f.ReadAt(blocks[:], end-int64(len(blocks))); err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		if blocks == [len(blocks)]byte{} {
			return nil
		}
	}
	return notImage("the archive is truncated; send all of it")
}

// add indexes one entry; the file's offset is at its data.
func (a *archive) add(hdr *tar.Header) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return notImage("the archive holds an entry named %q: %v; an image archive never does", short(hdr.Name), err)
	}
	e := entry{size: hdr.Size}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeXGlobalHeader:
		return nil
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old tars still write TypeRegA
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return notImage("%q is a sparse file; an image archive never holds one", short(name))
			}
		}
		if e.off, err = a.f.Seek(0, io.SeekCurrent); err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
	case tar.TypeSymlink:
		if strings.HasPrefix(hdr.Linkname, "/") {
			return notImage("%q links to %q, outside the archive", short(name), short(hdr.Linkname))
		}
		e.link = path.Join(path.Dir(name), hdr.Linkname)
		if e.link == ".." || strings.HasPrefix(e.link, "../") || e.link == "." {
			return notImage("%q links to %q, outside the archive", short(name), short(hdr.Linkname))
		}
		a.link = name
	case tar.TypeLink:
		if e.link, err = cleanName(hdr.Linkname); err != nil {
			return notImage("%q links to %q: %v", short(name), short(hdr.Linkname), err)
		}
		a.link = name
	default:
		return notImage("%q is a device, fifo or other special file (tar type %q); an image archive holds only files and directories", short(name), hdr.Typeflag)
	}
	if _, dup := a.entries[name]; dup {
		return notImage("the archive holds %q twice", short(name))
	}
	if len(a.entries) == maxEntries {
		return notImage("the archive holds more than %d files; no image archive does", maxEntries)
	}
	a.entries[name] = e
	return nil
}

// cleanName is an entry's name relative to the archive's root, without
// "./": never absolute, never with a ".." element, printable UTF-8.
func cleanName(raw string) (string, error) {
	switch {
	case raw == "":
		return "", errors.New("an empty name")
	case len(raw) > maxNameBytes:
		return "", fmt.Errorf("a name longer than %d bytes", maxNameBytes)
	case strings.HasPrefix(raw, "/"):
		return "", errors.New("an absolute path")
	case !utf8.ValidString(raw):
		return "", errors.New("a name that is not UTF-8")
	case strings.ContainsFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return "", errors.New("a control character or backslash in its name")
	}
	for el := range strings.SplitSeq(raw, "/") {
		if el == ".." {
			return "", errors.New(`a ".." element`)
		}
	}
	return path.Clean(raw), nil
}

// has says whether the archive holds name, as a file or a link.
func (a *archive) has(name string) bool {
	_, ok := a.entries[name]
	return ok
}

// open returns the bytes of the file name refers to, following links
// inside the archive, and that file's name. Its errors say what is wrong
// with name; callers say what name was for.
func (a *archive) open(name string) (*io.SectionReader, string, error) {
	n, err := cleanName(name)
	if err != nil {
		return nil, "", fmt.Errorf("%q is not a name in an archive: %w", short(name), err)
	}
	for range maxLinkHops {
		e, ok := a.entries[n]
		switch {
		case !ok:
			return nil, "", fmt.Errorf("%q is not in the archive", short(name))
		case e.link == "":
			return io.NewSectionReader(a.f, e.off, e.size), n, nil
		}
		n = e.link
	}
	return nil, "", fmt.Errorf("%q is a chain of more than %d links", short(name), maxLinkHops)
}

// readJSON returns the whole of a small file, a JSON document: what says
// which.
func (a *archive) readJSON(name, what string) ([]byte, error) {
	r, _, err := a.open(name)
	if err != nil {
		return nil, notImage("%s: %v", what, err)
	}
	return a.readSmall(r, what)
}

func (a *archive) readSmall(r *io.SectionReader, what string) ([]byte, error) {
	switch {
	case r.Size() > maxJSONBytes:
		return nil, notImage("%s is %d bytes, more than the %d a manifest, index or config may have", what, r.Size(), maxJSONBytes)
	case a.jsonRead+r.Size() > maxJSONTotal:
		return nil, notImage("the archive's manifests and configs are more than %d bytes in all", maxJSONTotal)
	}
	a.jsonRead += r.Size()
	b := make([]byte, r.Size())
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	return b, nil
}

// blobName is where an OCI layout keeps the blob of digest h.
func blobName(h v1.Hash) (string, error) {
	if h.Algorithm != "sha256" || len(h.Hex) != 2*sha256.Size {
		return "", notImage("blob %q is not named by a SHA-256 digest; kobe reads only those", short(h.String()))
	}
	return "blobs/sha256/" + h.Hex, nil
}

// readBlob returns an OCI layout's JSON blob d, what (a manifest, an
// index, a config), checked against its size and digest.
func (a *archive) readBlob(d v1.Descriptor, what string) ([]byte, error) {
	name, err := blobName(d.Digest)
	if err != nil {
		return nil, err
	}
	r, _, err := a.open(name)
	if err != nil {
		return nil, notImage("%s, %s, is not in the archive; export the image with all its blobs", what, d.Digest)
	}
	if r.Size() != d.Size {
		return nil, notImage("%s, %s, is %d bytes; its descriptor says %d", what, d.Digest, r.Size(), d.Size)
	}
	b, err := a.readSmall(r, what)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != d.Digest.Hex {
		return nil, notImage("%s, %s, does not match its digest (its SHA-256 is %x)", what, d.Digest, sum)
	}
	return b, nil
}
