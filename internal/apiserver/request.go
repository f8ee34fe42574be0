package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// readBody reads the request body; the body limit middleware has already
// bounded it.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: the body could not be read: %w", errBadRequest, err)
	}
	return body, nil
}

// decodeCreate decodes the body of POST /v1/leases (see wire.DecodeCreateLease).
func decodeCreate(r *http.Request) (leaseservice.CreateRequest, error) {
	body, err := readBody(r)
	if err != nil {
		return leaseservice.CreateRequest{}, err
	}
	req, err := wire.DecodeCreateLease(body)
	if err != nil {
		return leaseservice.CreateRequest{}, err
	}
	return leaseservice.CreateRequest{Pool: req.Pool, Alias: req.Alias, TTL: req.TTL, CleanupMode: kobev1.CleanupMode(req.CleanupMode),
		HeartbeatTimeout: req.HeartbeatTimeout}, nil
}

// decodeExtend decodes the body of PATCH /v1/leases/{id} (see wire.DecodeExtendLease).
func decodeExtend(r *http.Request) (time.Duration, error) {
	body, err := readBody(r)
	if err != nil {
		return 0, err
	}
	return wire.DecodeExtendLease(body)
}
