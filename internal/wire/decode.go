package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrMalformed marks a request body that is not what its route accepts; the
// API answers it with 400 and ReasonBadRequest. The decoders live here,
// beside the types they fill and away from the server's dependencies, so
// that fuzzing them builds only this package.
var ErrMalformed = errors.New("bad request")

// DecodeStrict decodes one JSON object into v. Unknown fields are refused,
// naming the field, so that a typo ("tll") is an error rather than a
// silently ignored setting; so are an empty body and data after the object.
func DecodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("%w: the body is empty; send a JSON object", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: the body is not valid JSON for this route: %w", ErrMalformed, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: the body has data after the JSON object", ErrMalformed)
	}
	return nil
}

// CreateLease is a checked POST /v1/leases body.
type CreateLease struct {
	Pool  string
	Alias string
	// TTL is 0 when the body names none (the pool's default applies).
	TTL time.Duration
	// CleanupMode is CleanupStandard or CleanupVerifiedDestroy; "" means
	// Standard.
	CleanupMode string
	// HeartbeatTimeout is 0 when the body names none (no heartbeats).
	HeartbeatTimeout time.Duration
}

// Bounds of CreateLeaseRequest.HeartbeatTimeout.
const (
	MinHeartbeatTimeout = 10 * time.Second
	MaxHeartbeatTimeout = 24 * time.Hour
)

// Cleanup modes of CreateLeaseRequest.CleanupMode.
const (
	CleanupStandard        = "Standard"
	CleanupVerifiedDestroy = "VerifiedDestroy"
)

// DecodeCreateLease decodes and checks the body of POST /v1/leases. The
// alias and pool names are checked later, by the service, against the
// rules of their own.
func DecodeCreateLease(body []byte) (CreateLease, error) {
	var req CreateLeaseRequest
	if err := DecodeStrict(body, &req); err != nil {
		return CreateLease{}, err
	}
	if req.Pool != "" && req.Profile != "" && req.Pool != req.Profile {
		return CreateLease{}, fmt.Errorf("%w: pool and profile are synonyms; send one, or the same value in both", ErrMalformed)
	}
	out := CreateLease{Pool: req.PoolName(), Alias: req.Alias, CleanupMode: req.CleanupMode}
	switch req.CleanupMode {
	case "", CleanupStandard, CleanupVerifiedDestroy:
	default:
		return CreateLease{}, fmt.Errorf("%w: cleanupMode must be %s or %s, got %q", ErrMalformed, CleanupStandard, CleanupVerifiedDestroy, req.CleanupMode)
	}
	if req.TTL != "" {
		d, err := ParseTTL("ttl", req.TTL)
		if err != nil {
			return CreateLease{}, err
		}
		out.TTL = d
	}
	if req.HeartbeatTimeout != "" {
		d, err := ParseTTL("heartbeat_timeout", req.HeartbeatTimeout)
		if err != nil {
			return CreateLease{}, err
		}
		if d < MinHeartbeatTimeout || d > MaxHeartbeatTimeout {
			return CreateLease{}, fmt.Errorf("%w: heartbeat_timeout must be between %s and %s, got %s", ErrMalformed, MinHeartbeatTimeout, MaxHeartbeatTimeout, req.HeartbeatTimeout)
		}
		out.HeartbeatTimeout = d
	}
	return out, nil
}

// DecodeExtendLease decodes the body of PATCH /v1/leases/{id}: the
// extension, 0 when extend_ttl is empty (the lease's own TTL).
func DecodeExtendLease(body []byte) (time.Duration, error) {
	var req ExtendLeaseRequest
	if err := DecodeStrict(body, &req); err != nil {
		return 0, err
	}
	if req.ExtendTTL == "" {
		return 0, nil
	}
	return ParseTTL("extend_ttl", req.ExtendTTL)
}

// ParseTTL parses a duration of at least a second such as "30m". field
// names the JSON field for the error message.
func ParseTTL(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not a duration; use a value such as \"30m\" or \"1h30m\"", ErrMalformed, field, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%w: %s must be greater than zero, got %q", ErrMalformed, field, v)
	}
	if d < time.Second {
		return 0, fmt.Errorf("%w: %s must be at least 1s, got %q", ErrMalformed, field, v)
	}
	return d, nil
}
