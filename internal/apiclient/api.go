package apiclient

import (
	"context"
	"net/http"
	"net/url"
)

// CreateLease asks for a lease from pool (POST /v1/leases). ttl such as "30m"
// may be empty for the pool's default. The lease comes back Bound (201, with
// its kubeconfig) or Pending (202, with its queue position); see WaitBound.
func (c *Client) CreateLease(ctx context.Context, pool, ttl string) (*Lease, error) {
	var l Lease
	_, err := c.do(ctx, http.MethodPost, "/v1/leases", CreateLeaseRequest{Pool: pool, TTL: ttl}, &l,
		http.StatusCreated, http.StatusAccepted, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// GetLease returns one of the caller's leases (GET /v1/leases/{id}).
func (c *Client) GetLease(ctx context.Context, id string) (*Lease, error) {
	var l Lease
	if _, err := c.do(ctx, http.MethodGet, "/v1/leases/"+url.PathEscape(id), nil, &l, http.StatusOK); err != nil {
		return nil, err
	}
	return &l, nil
}

// ListLeases returns the caller's active leases (GET /v1/leases).
func (c *Client) ListLeases(ctx context.Context) ([]Lease, error) {
	leases := []Lease{}
	if _, err := c.do(ctx, http.MethodGet, "/v1/leases", nil, &leases, http.StatusOK); err != nil {
		return nil, err
	}
	return leases, nil
}

// ReleaseLease ends a lease (DELETE /v1/leases/{id}); releasing an already
// released lease of the caller succeeds.
func (c *Client) ReleaseLease(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/leases/"+url.PathEscape(id), nil, nil,
		http.StatusNoContent, http.StatusOK)
	return err
}

// ExtendLease pushes a lease's expiry back by ttl (PATCH /v1/leases/{id}).
// A refusal (extension limit reached) is an *Error with StatusCode 409.
func (c *Client) ExtendLease(ctx context.Context, id, ttl string) (*ExtendLeaseResponse, error) {
	var r ExtendLeaseResponse
	_, err := c.do(ctx, http.MethodPatch, "/v1/leases/"+url.PathEscape(id), ExtendLeaseRequest{ExtendTTL: ttl}, &r,
		http.StatusOK)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// ListPools returns the pools the caller may use (GET /v1/pools).
func (c *Client) ListPools(ctx context.Context) ([]Pool, error) {
	pools := []Pool{}
	if _, err := c.do(ctx, http.MethodGet, "/v1/pools", nil, &pools, http.StatusOK); err != nil {
		return nil, err
	}
	return pools, nil
}

// GetPool returns one pool (GET /v1/pools/{name}).
func (c *Client) GetPool(ctx context.Context, name string) (*Pool, error) {
	var p Pool
	if _, err := c.do(ctx, http.MethodGet, "/v1/pools/"+url.PathEscape(name), nil, &p, http.StatusOK); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListPoolLeases returns the leases of one pool (GET /v1/pools/{name}/leases);
// Requester is set only on the caller's own.
func (c *Client) ListPoolLeases(ctx context.Context, name string) ([]Lease, error) {
	leases := []Lease{}
	if _, err := c.do(ctx, http.MethodGet, "/v1/pools/"+url.PathEscape(name)+"/leases", nil, &leases, http.StatusOK); err != nil {
		return nil, err
	}
	return leases, nil
}

// Status returns the server's version and auth methods, and its pools when
// the caller is authenticated (GET /v1/status). It works without credentials.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	if _, err := c.do(ctx, http.MethodGet, "/v1/status", nil, &s, http.StatusOK); err != nil {
		return nil, err
	}
	return &s, nil
}

// WhoAmI returns the caller's identity and what its policy allows
// (GET /v1/whoami).
func (c *Client) WhoAmI(ctx context.Context) (*WhoAmI, error) {
	var w WhoAmI
	if _, err := c.do(ctx, http.MethodGet, "/v1/whoami", nil, &w, http.StatusOK); err != nil {
		return nil, err
	}
	return &w, nil
}
