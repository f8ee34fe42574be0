package imageload

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

var (
	// ErrTooLarge is an archive, or something it unpacks to, beyond a
	// limit; the message says which limit.
	ErrTooLarge = errors.New("image archive too large")
	// ErrDigestMismatch is a body whose SHA-256 is not the one announced.
	ErrDigestMismatch = errors.New("image archive does not match its digest")
	// ErrNotAnImage is an archive that is not one Normalise reads, is
	// damaged, or names no image; the message says what is wrong and what
	// to send instead.
	ErrNotAnImage = errors.New("not an image archive")
)

// Receive copies body into a new file in dir, at most limit bytes, and
// checks its SHA-256 against want. Errors: ErrTooLarge (wrapped, with the
// limit in the message) when body holds more than limit bytes (it stops
// reading at limit+1); ErrDigestMismatch when the bytes are not what want
// says; any other is body's or the disk's. The file is removed on any
// error. It returns the file's path and the bytes read.
func Receive(body io.Reader, limit int64, want [sha256.Size]byte, dir string) (path string, n int64, err error) {
	limit = max(limit, 0)
	f, err := os.CreateTemp(dir, "image-*.tar")
	if err != nil {
		return "", 0, fmt.Errorf("receiving the archive: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(body, min(limit, math.MaxInt64-1)+1))
	switch {
	case err != nil:
		return "", n, fmt.Errorf("receiving the archive: %w", err)
	case n > limit:
		return "", n, fmt.Errorf("%w: the archive is larger than %d bytes", ErrTooLarge, limit)
	}
	if err = f.Close(); err != nil {
		return "", n, fmt.Errorf("receiving the archive: %w", err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		err = fmt.Errorf("%w: its SHA-256 is %x, the request said %x", ErrDigestMismatch, got, want)
		return "", n, err
	}
	return f.Name(), n, nil
}
