package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// CreateLease asks for a lease (POST /v1/leases): req.Pool names the pool;
// req.TTL such as "30m" may be empty for the pool's default; req.Alias, when
// set, names the lease for the caller's later calls. The lease comes back
// Bound (201, with its kubeconfig) or Pending (202, with its queue
// position); see WaitBound.
func (c *Client) CreateLease(ctx context.Context, req wire.CreateLeaseRequest) (*wire.Lease, error) {
	var l wire.Lease
	_, err := c.do(ctx, http.MethodPost, "/v1/leases", req, &l,
		http.StatusCreated, http.StatusAccepted, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// GetLease returns one of the caller's leases (GET /v1/leases/{id}); id may
// be the lease's alias.
func (c *Client) GetLease(ctx context.Context, id string) (*wire.Lease, error) {
	return c.getLease(ctx, id, 0)
}

// getLease is GetLease asking the server to hold its answer for up to hold
// while the lease is Pending (wire.LeaseWaitParam); 0 asks for no wait.
func (c *Client) getLease(ctx context.Context, id string, hold time.Duration) (*wire.Lease, error) {
	path := "/v1/leases/" + url.PathEscape(id)
	if hold > 0 {
		path += "?" + url.Values{wire.LeaseWaitParam: {hold.String()}}.Encode()
	}
	var l wire.Lease
	if _, err := c.do(ctx, http.MethodGet, path, nil, &l, http.StatusOK); err != nil {
		return nil, err
	}
	return &l, nil
}

// Heartbeat tells the server the lease's holder is alive
// (POST /v1/leases/{id}/heartbeat) and returns the lease, with
// HeartbeatEndsAt, without its kubeconfig.
func (c *Client) Heartbeat(ctx context.Context, id string) (*wire.Lease, error) {
	var l wire.Lease
	if _, err := c.do(ctx, http.MethodPost, "/v1/leases/"+url.PathEscape(id)+"/heartbeat", nil, &l, http.StatusOK); err != nil {
		return nil, err
	}
	return &l, nil
}

// ListLeases returns the caller's active leases (GET /v1/leases).
func (c *Client) ListLeases(ctx context.Context) ([]wire.Lease, error) {
	return c.ListLeasesOf(ctx, wire.LeaseFilter{})
}

// ListLeasesOf returns the caller's active leases that f keeps
// (GET /v1/leases?alias=&pool=).
func (c *Client) ListLeasesOf(ctx context.Context, f wire.LeaseFilter) ([]wire.Lease, error) {
	path := "/v1/leases"
	if q := f.Query().Encode(); q != "" {
		path += "?" + q
	}
	leases := []wire.Lease{}
	if _, err := c.do(ctx, http.MethodGet, path, nil, &leases, http.StatusOK); err != nil {
		return nil, err
	}
	return leases, nil
}

// ReleaseLease ends a lease (DELETE /v1/leases/{id}); id may be the lease's
// alias. Releasing a lease the caller does not hold (already released, gone,
// never existed) succeeds too: the server does not say which.
func (c *Client) ReleaseLease(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(id), nil, nil,
		http.StatusNoContent, http.StatusOK)
	return err
}

// ExtendLease pushes a lease's expiry back by ttl (PATCH /v1/leases/{id});
// id may be the lease's alias. A refusal is an *Error with StatusCode 409
// and Reason wire.ReasonExtensionLimitReached or wire.ReasonExtensionRefused.
func (c *Client) ExtendLease(ctx context.Context, id, ttl string) (*wire.ExtendLeaseResponse, error) {
	var r wire.ExtendLeaseResponse
	_, err := c.do(ctx, http.MethodPatch, "/v1/leases/"+url.PathEscape(id), wire.ExtendLeaseRequest{ExtendTTL: ttl}, &r,
		http.StatusOK)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ListPools returns the pools the caller may use (GET /v1/pools).
func (c *Client) ListPools(ctx context.Context) ([]wire.Pool, error) {
	pools := []wire.Pool{}
	if _, err := c.do(ctx, http.MethodGet, "/v1/pools", nil, &pools, http.StatusOK); err != nil {
		return nil, err
	}
	return pools, nil
}

// GetPool returns one pool (GET /v1/pools/{name}).
func (c *Client) GetPool(ctx context.Context, name string) (*wire.Pool, error) {
	var p wire.Pool
	if _, err := c.do(ctx, http.MethodGet, "/v1/pools/"+url.PathEscape(name), nil, &p, http.StatusOK); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListPoolLeases returns the leases of one pool (GET /v1/pools/{name}/leases);
// Requester is set only on the caller's own.
func (c *Client) ListPoolLeases(ctx context.Context, name string) ([]wire.Lease, error) {
	leases := []wire.Lease{}
	if _, err := c.do(ctx, http.MethodGet, "/v1/pools/"+url.PathEscape(name)+"/leases", nil, &leases, http.StatusOK); err != nil {
		return nil, err
	}
	return leases, nil
}

// Status returns the server's version and auth methods, and its pools when
// the caller is authenticated (GET /v1/status). It works without credentials.
func (c *Client) Status(ctx context.Context) (*wire.Status, error) {
	var s wire.Status
	if _, err := c.do(ctx, http.MethodGet, "/v1/status", nil, &s, http.StatusOK); err != nil {
		return nil, err
	}
	return &s, nil
}

// WhoAmI returns the caller's identity and what its policy allows
// (GET /v1/whoami).
func (c *Client) WhoAmI(ctx context.Context) (*wire.WhoAmI, error) {
	var w wire.WhoAmI
	if _, err := c.do(ctx, http.MethodGet, "/v1/whoami", nil, &w, http.StatusOK); err != nil {
		return nil, err
	}
	return &w, nil
}
