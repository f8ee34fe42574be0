package apiclient

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// SumCredentials are Credentials that cover the body they sign (SSH
// signatures): for a streamed body they sign its SHA-256 instead. Credentials
// that are not SumCredentials ignore the body.
type SumCredentials interface {
	ApplySum(req *http.Request, bodySum [sha256.Size]byte) error
}

// LoadImages loads an image archive (docker-archive or OCI, plain or
// gzip-compressed) into every node of a lease's member
// (POST /v1/leases/{id}/images); id may be the lease's alias. archive is
// read twice, once to hash it and once to send it, and must hold size bytes
// from its start. progress, when non-nil, is told how many bytes have been
// sent so far. The exchange has no timeout of its own: a large archive takes
// as long as it takes to send and import; ctx bounds it.
func (c *Client) LoadImages(ctx context.Context, id string, archive io.ReadSeeker, size int64, progress func(sent int64)) (*wire.LoadedImages, error) {
	h := sha256.New()
	if n, err := io.Copy(h, archive); err != nil {
		return nil, fmt.Errorf("reading the archive: %w", err)
	} else if n != size {
		return nil, fmt.Errorf("reading the archive: %d bytes, not %d", n, size)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if _, err := archive.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("reading the archive again: %w", err)
	}
	u := c.endpoint.JoinPath(wire.LeaseImagesPath(id))
	var body io.Reader = archive
	if progress != nil {
		body = &progressReader{r: archive, report: progress}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("building POST %s: %w", u, err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", wire.ImagesContentType)
	req.Header.Set(wire.ContentDigestHeader, wire.FormatContentDigest(sum))
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if sc, ok := c.creds.(SumCredentials); ok {
		err = sc.ApplySum(req, sum)
	} else {
		err = c.creds.Apply(req, nil)
	}
	if err != nil {
		return nil, &credentialsError{err: fmt.Errorf("authenticating POST %s: %w", u, err)}
	}
	hc := *c.http
	hc.Timeout = 0
	var out wire.LoadedImages
	if _, err := c.exchange(&hc, req, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// progressReader tells report the bytes read so far.
type progressReader struct {
	r      io.Reader
	n      int64
	report func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.report(p.n)
	return n, err
}
