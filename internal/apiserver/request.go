package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// decodeBody decodes the request's JSON object strictly: unknown fields are
// refused, naming the field, so that a typo ("tll") is an error rather than
// a silently ignored setting. The wire types declare every field a client
// may send, alias and profile included.
func decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("%w: the body could not be read: %w", errBadRequest, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("%w: the body is empty; send a JSON object", errBadRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: the body is not valid JSON for this route: %w", errBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: the body has data after the JSON object", errBadRequest)
	}
	return nil
}

// decodeCreate decodes the body of POST /v1/leases.
func decodeCreate(r *http.Request) (leaseservice.CreateRequest, error) {
	var body wire.CreateLeaseRequest
	if err := decodeBody(r, &body); err != nil {
		return leaseservice.CreateRequest{}, err
	}
	if body.Pool != "" && body.Profile != "" && body.Pool != body.Profile {
		return leaseservice.CreateRequest{}, fmt.Errorf("%w: pool and profile are synonyms; send one, or the same value in both", errBadRequest)
	}
	req := leaseservice.CreateRequest{Pool: body.PoolName(), Alias: body.Alias}
	if body.TTL != "" {
		d, err := parseTTL("ttl", body.TTL)
		if err != nil {
			return leaseservice.CreateRequest{}, err
		}
		req.TTL = d
	}
	return req, nil
}

// decodeExtend decodes the body of PATCH /v1/leases/{id}: the extension,
// 0 when extend_ttl is empty (the lease's own TTL).
func decodeExtend(r *http.Request) (time.Duration, error) {
	var body wire.ExtendLeaseRequest
	if err := decodeBody(r, &body); err != nil {
		return 0, err
	}
	if body.ExtendTTL == "" {
		return 0, nil
	}
	return parseTTL("extend_ttl", body.ExtendTTL)
}

// parseTTL parses a duration of at least a second such as "30m". field
// names the JSON field for the error message.
func parseTTL(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a duration; use a value such as \"30m\" or \"1h30m\"", errBadRequest, field, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%w: %s must be greater than zero, got %q", errBadRequest, field, v)
	}
	if d < time.Second {
		return 0, fmt.Errorf("%w: %s must be at least 1s, got %q", errBadRequest, field, v)
	}
	return d, nil
}
