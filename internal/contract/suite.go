package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// pollTimeout bounds how long a read-only case waits for a server whose
// reads come from a cache to see the suite's own earlier writes.
const pollTimeout = 15 * time.Second

// Shape is the JSON shape of a successful answer.
type Shape string

// The shapes of the contract's answers.
const (
	ShapeNone   Shape = "empty body"
	ShapeLease  Shape = "lease object"
	ShapeLeases Shape = "array of lease objects"
	ShapePool   Shape = "pool object"
	ShapePools  Shape = "array of pool objects"
	ShapeStatus Shape = "status object"
	ShapeExtend Shape = "extend answer"
	ShapeError  Shape = "error object"
)

// Case is one row of the contract: a request on a route under a condition,
// and the status, reason and JSON shape it must answer.
type Case struct {
	// Route is "METHOD /path/{param}".
	Route string
	// Condition says what makes this case.
	Condition string
	// Status is the HTTP status the server must answer.
	Status int
	// Reason is the error body's reason (errors only).
	Reason string
	// Shape of the answer; errors are always ShapeError.
	Shape Shape

	// send prepares what the case needs and sends its request.
	send func(s *suite) (response, error)
	// check, when set, checks the decoded answer beyond status and shape.
	check func(s *suite, r response) error
	// poll repeats a read-only case until it passes or pollTimeout ends.
	poll bool
}

// Run checks target against every case of Cases, in order: later cases use
// leases that earlier ones made.
func Run(t *testing.T, target Target) {
	s := &suite{tg: target, http: &http.Client{Timeout: 30 * time.Second}}
	for _, c := range Cases() {
		t.Run(c.Route+" "+c.Condition, func(t *testing.T) {
			if err := s.run(t.Context(), c); err != nil {
				t.Fatalf("%s (%s): %v", c.Route, c.Condition, err)
			}
		})
	}
}

func (s *suite) run(ctx context.Context, c Case) error {
	attempt := func() error {
		r, err := c.send(s)
		if err != nil {
			return fmt.Errorf("preparing or sending the request: %w", err)
		}
		return s.verify(c, r)
	}
	if !c.poll {
		return attempt()
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, pollTimeout, true, func(context.Context) (bool, error) {
		last = attempt()
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("still failing after %s: %w", pollTimeout, last)
	}
	return err
}

// verify checks status, headers, shape and the case's own check.
func (s *suite) verify(c Case, r response) error {
	if r.code != c.Status {
		return fmt.Errorf("got %s; want HTTP %d %s", r, c.Status, c.Reason)
	}
	if c.Status >= 400 {
		if err := checkError(r, c.Reason); err != nil {
			return err
		}
	} else if err := checkShape(c.Shape, r); err != nil {
		return err
	}
	if c.check != nil {
		return c.check(s, r)
	}
	return nil
}

// checkError checks the error body and the Retry-After of 429 and 503.
func checkError(r response, reason string) error {
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("error answer with Content-Type %q, want application/json: %s", ct, r)
	}
	m, err := object(r.body)
	if err != nil {
		return fmt.Errorf("error body: %w: %s", err, r)
	}
	if err := fields(m, "error", map[string]kind{"error": str, "detail": str, "reason": str}, nil); err != nil {
		return fmt.Errorf("%w: %s", err, r)
	}
	if m["error"] == "" || m["detail"] == "" {
		return fmt.Errorf("error and detail must not be empty: %s", r)
	}
	if m["reason"] != reason {
		return fmt.Errorf("reason %q, want %q: %s", m["reason"], reason, r)
	}
	switch r.code {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		secs, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || secs <= 0 {
			return fmt.Errorf("HTTP %d with Retry-After %q, want a positive number of seconds", r.code, r.header.Get("Retry-After"))
		}
		if r.code == http.StatusServiceUnavailable && r.header.Get("Retry-After") != wire.UnavailableRetryAfter {
			return fmt.Errorf("503 with Retry-After %q, want %s", r.header.Get("Retry-After"), wire.UnavailableRetryAfter)
		}
	}
	return nil
}

// suite is the state the cases share: the target and the leases made so far.
type suite struct {
	tg   Target
	http *http.Client

	// bound is Allowed's Bound lease in ReadyPool, alias boundAlias.
	bound *wire.Lease
	// otherBound is Other's Bound lease in ReadyPool, also alias boundAlias.
	otherBound *wire.Lease
	// pending are Allowed's Pending leases in EmptyPool, oldest first;
	// released ones are removed.
	pending []wire.Lease
	// limited is Limited's one lease.
	limited *wire.Lease
}

// response is one answer.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) String() string {
	b := strings.TrimSpace(string(r.body))
	const limit = 600
	if len(b) > limit {
		b = b[:limit] + "..."
	}
	return fmt.Sprintf("HTTP %d %s", r.code, b)
}

// do sends method path with body (JSON-encoded unless it is []byte; none
// when nil), authenticated by creds (none when nil).
func (s *suite) do(creds apiclient.Credentials, method, path string, body any) (response, error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return response{}, err
		}
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, strings.TrimRight(s.tg.URL, "/")+path, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Accept", "application/json")
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if creds != nil {
		if err := creds.Apply(req, raw); err != nil {
			return response{}, fmt.Errorf("applying credentials: %w", err)
		}
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return response{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("reading the answer: %w", err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}, nil
}

// create leases with req and requires want (201 or 202).
func (s *suite) create(creds apiclient.Credentials, req wire.CreateLeaseRequest, want int) (*wire.Lease, error) {
	r, err := s.do(creds, http.MethodPost, "/v1/leases", req)
	if err != nil {
		return nil, err
	}
	if r.code != want {
		return nil, fmt.Errorf("leasing %+v: got %s, want HTTP %d", req, r, want)
	}
	var l wire.Lease
	if err := json.Unmarshal(r.body, &l); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r, err)
	}
	return &l, nil
}

// get reads a lease as creds.
func (s *suite) get(creds apiclient.Credentials, ref string) (response, *wire.Lease, error) {
	r, err := s.do(creds, http.MethodGet, "/v1/leases/"+ref, nil)
	if err != nil || r.code != http.StatusOK {
		return r, nil, err
	}
	var l wire.Lease
	if err := json.Unmarshal(r.body, &l); err != nil {
		return r, nil, fmt.Errorf("decoding %s: %w", r, err)
	}
	return r, &l, nil
}

// waitVisible waits until creds can read lease id, so that a server that
// reads a cache has seen it before the next step.
func (s *suite) waitVisible(creds apiclient.Credentials, id string) error {
	var last response
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true, func(context.Context) (bool, error) {
		r, l, err := s.get(creds, id)
		last = r
		return err == nil && l != nil, nil
	})
	if err != nil {
		return fmt.Errorf("lease %s not readable within %s (last %s): %w", id, pollTimeout, last, err)
	}
	return nil
}

// boundLease is Allowed's Bound lease with alias boundAlias, made once.
func (s *suite) boundLease() (*wire.Lease, error) {
	if s.bound != nil {
		return s.bound, nil
	}
	return nil, errors.New("the first POST case did not make Allowed's bound lease")
}

// freshBound makes a new Bound lease of Allowed in ReadyPool.
func (s *suite) freshBound(alias string) (*wire.Lease, error) {
	l, err := s.create(s.tg.Allowed, wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, TTL: "10m", Alias: alias}, http.StatusCreated)
	if err != nil {
		return nil, err
	}
	return l, s.waitVisible(s.tg.Allowed, l.ID)
}

// firstPending is Allowed's oldest Pending lease.
func (s *suite) firstPending() (*wire.Lease, error) {
	if len(s.pending) == 0 {
		return nil, errors.New("the POST cases did not make Allowed's pending leases")
	}
	return &s.pending[0], nil
}

// decodeLeases decodes an array of leases.
func decodeLeases(r response) ([]wire.Lease, error) {
	var ls []wire.Lease
	if err := json.Unmarshal(r.body, &ls); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r, err)
	}
	return ls, nil
}

func decodeLease(r response) (*wire.Lease, error) {
	var l wire.Lease
	if err := json.Unmarshal(r.body, &l); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r, err)
	}
	return &l, nil
}

func findLease(ls []wire.Lease, id string) *wire.Lease {
	for i := range ls {
		if ls[i].ID == id {
			return &ls[i]
		}
	}
	return nil
}

// requirePositions checks that ls shows each of Allowed's pending leases
// with its live queue position (1, 2, ...).
func (s *suite) requirePositions(ls []wire.Lease) error {
	for i, p := range s.pending {
		got := findLease(ls, p.ID)
		if got == nil {
			return fmt.Errorf("pending lease %s missing from %v", p.ID, leaseIDs(ls))
		}
		if got.Phase != wire.PhasePending || got.QueuePosition != i+1 {
			return fmt.Errorf("pending lease %s: phase %s queue_position %d, want Pending at %d", p.ID, got.Phase, got.QueuePosition, i+1)
		}
	}
	return nil
}

func leaseIDs(ls []wire.Lease) []string {
	out := make([]string, len(ls))
	for i := range ls {
		out[i] = ls[i].ID
	}
	return out
}

// jsonInto decodes the answer into v.
func jsonInto(r response, v any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return fmt.Errorf("decoding %s: %w", r, err)
	}
	return nil
}

// eventually repeats cond until it passes or pollTimeout ends.
func (s *suite) eventually(cond func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("still failing after %s: %w", pollTimeout, last)
	}
	return err
}

// requireNotListed checks, eventually, that GET /v1/leases no longer
// shows lease id.
func (s *suite) requireNotListed(id string) error {
	return s.eventually(func() error {
		r, err := s.do(s.tg.Allowed, http.MethodGet, "/v1/leases", nil)
		if err != nil {
			return err
		}
		ls, err := decodeLeases(r)
		if err != nil {
			return err
		}
		if findLease(ls, id) != nil {
			return fmt.Errorf("released lease %s still listed as active", id)
		}
		return nil
	})
}
