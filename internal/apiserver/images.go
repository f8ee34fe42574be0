package apiserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/kunobi-ninja/kobe/internal/imageload"
	"github.com/kunobi-ninja/kobe/internal/truncate"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Defaults of the image loads' Options.
const (
	// DefaultMaxImageBytes bounds one archive (413 beyond it).
	DefaultMaxImageBytes = 1 << 30
	// DefaultMaxImageLoads bounds the loads served at once (429 beyond):
	// each holds up to three times its archive on disk while it runs
	// (the upload, a gzip archive unpacked, the copy the nodes import).
	DefaultMaxImageLoads = 2
	// imageIdleTimeout is how long an upload may send nothing before it is
	// cut: a caller that stalls holds one of few load slots.
	imageIdleTimeout = 30 * time.Second
)

// loadImages: POST /v1/leases/{id}/images (kobe load). The body, an image
// archive, is streamed, never buffered in memory: the caller is
// authenticated from the headers and the Content-Digest the signature
// covers, the lease is checked, and only then is the body read, to disk,
// within MaxImageBytes and against that digest. The archive is rewritten
// as one docker-archive (imageload.Normalise) and imported into every node
// of the lease's member.
func (s *Server) loadImages(w http.ResponseWriter, r *http.Request) {
	// Whatever happens, nothing more is read after the answer: a refused
	// upload's rest is never drained.
	w.Header().Set("Connection", "close")
	select {
	case s.imageLoads <- struct{}{}:
		defer func() { <-s.imageLoads }()
	default:
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, wire.ReasonTooManyRequests, "too many image loads",
			"the server is loading "+strconv.Itoa(cap(s.imageLoads))+" archives; retry in a few seconds")
		return
	}
	sum, err := wire.ParseContentDigest(r.Header.Get(wire.ContentDigestHeader))
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: %w", errBadRequest, err))
		return
	}
	p, err := s.opts.Auth.AuthenticateSum(r.Context(), r, sum)
	if err != nil {
		s.opts.Log.Info("Request refused", append(requestKV(r), "reason", truncate.Log(err.Error(), maxLoggedReason))...)
		writeAuthError(w, err)
		return
	}
	id := r.PathValue("id")
	if _, _, err := s.leases.BoundMember(r.Context(), p, id); err != nil {
		s.fail(w, r, err)
		return
	}
	limit := s.opts.MaxImageBytes
	if r.ContentLength > limit {
		s.fail(w, r, fmt.Errorf("%w: the archive is %d bytes; this server takes at most %d", errBodyTooLarge, r.ContentLength, limit))
		return
	}
	received, n, err := imageload.Receive(&idleReader{r: r.Body, rc: http.NewResponseController(w)}, limit, sum, s.opts.ImageDir)
	if err != nil {
		s.fail(w, r, imageError(err, limit))
		return
	}
	defer func() { _ = os.Remove(received) }()
	normalised := received + ".docker.tar"
	images, err := imageload.Normalise(received, normalised, imageload.Options{MaxUnpackedBytes: limit})
	defer func() { _ = os.Remove(normalised) }()
	if err != nil {
		s.fail(w, r, imageError(err, limit))
		return
	}
	_ = os.Remove(received) // only the normalised archive is needed now
	l, inst, nodes, err := s.leases.LoadImages(r.Context(), p, id, normalised, images)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.LoadedImages{ID: l.Name, ClusterName: inst.Name, Images: images, Nodes: nodes, Bytes: n})
}

// imageError maps imageload's errors to the API's.
func imageError(err error, limit int64) error {
	switch {
	case errors.Is(err, imageload.ErrTooLarge):
		return fmt.Errorf("%w: %w (this server takes archives of at most %d bytes, unpacked)", errBodyTooLarge, err, limit)
	case errors.Is(err, imageload.ErrDigestMismatch):
		return fmt.Errorf("%w: %w", errDigestMismatch, err)
	case errors.Is(err, imageload.ErrNotAnImage):
		return fmt.Errorf("%w: %w", errNotAnImage, err)
	}
	return err
}

var (
	errDigestMismatch = errors.New("the body does not match its Content-Digest")
	errNotAnImage     = errors.New("not an image archive")
)

// idleReader cuts a body that sends nothing for imageIdleTimeout: each
// read pushes the connection's read deadline forward.
type idleReader struct {
	r  io.Reader
	rc *http.ResponseController
}

func (i *idleReader) Read(p []byte) (int, error) {
	// Recorders in tests have no connection to set a deadline on.
	_ = i.rc.SetReadDeadline(time.Now().Add(imageIdleTimeout))
	return i.r.Read(p)
}
