//go:build bench

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// apiClient calls the operator's lease API as a token caller.
type apiClient struct {
	url   string
	token string
	http  *http.Client
}

func (b *bench) client(op *operator, conns int) *apiClient {
	return &apiClient{url: op.apiURL, token: b.token, http: &http.Client{
		Timeout:   2 * time.Minute,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns},
	}}
}

func (c *apiClient) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// lease asks for a lease and returns it with the time from request to
// answer. A Bound answer must carry a kubeconfig; a Pending one is returned
// with pending set, anything else is an error.
func (c *apiClient) lease(ctx context.Context, pool string) (l wire.Lease, took time.Duration, pending bool, err error) {
	start := time.Now()
	code, body, err := c.do(ctx, http.MethodPost, "/v1/leases", []byte(`{"pool":"`+pool+`","ttl":"30m"}`))
	took = time.Since(start)
	if err != nil {
		return l, took, false, err
	}
	if code != http.StatusCreated && code != http.StatusAccepted {
		return l, took, false, fmt.Errorf("POST /v1/leases: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return l, took, false, fmt.Errorf("decoding lease %s: %w", body, err)
	}
	if l.Phase == wire.PhasePending {
		return l, took, true, nil
	}
	if code != http.StatusCreated || l.Phase != wire.PhaseBound || l.Kubeconfig == "" || l.ClusterName == "" {
		return l, took, false, fmt.Errorf("not a Bound lease with a kubeconfig: %d %s", code, body)
	}
	return l, took, false, nil
}

// boundWait is how long each of waitBound's GETs asks the server to hold
// its answer while the lease is Pending, as kobe lease does.
const boundWait = 15 * time.Second

// waitBound asks for a Pending lease until it is Bound with a kubeconfig,
// as the CLI does (apiclient.WaitBound): GET ?wait=15s, which the server
// answers as soon as the lease is bound; an answer it did not hold (too
// many waiting) is followed by another 50 ms later.
func (c *apiClient) waitBound(ctx context.Context, id string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		asked := time.Now()
		code, body, err := c.do(ctx, http.MethodGet, "/v1/leases/"+id+"?"+wire.LeaseWaitParam+"="+boundWait.String(), nil)
		if err != nil {
			return err
		}
		var l wire.Lease
		if code == http.StatusOK && json.Unmarshal(body, &l) == nil && l.Phase == wire.PhaseBound && l.Kubeconfig != "" {
			return nil
		}
		if code != http.StatusOK || l.Phase != wire.PhasePending {
			return fmt.Errorf("lease %s: %d %s", id, code, body)
		}
		if time.Since(asked) >= boundWait*9/10 {
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lease %s still Pending: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// release ends a lease (204).
func (c *apiClient) release(ctx context.Context, id string) error {
	code, body, err := c.do(ctx, http.MethodDelete, "/v1/leases/"+id, nil)
	if err != nil {
		return err
	}
	if code != http.StatusNoContent {
		return fmt.Errorf("DELETE /v1/leases/%s: %d %s", id, code, body)
	}
	return nil
}

// percentiles of durations, in milliseconds (nearest rank).
func percentiles(d []time.Duration, ps ...float64) []float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	out := make([]float64, len(ps))
	for i, p := range ps {
		if len(s) == 0 {
			continue
		}
		idx := int(float64(len(s))*p+0.999999) - 1
		idx = max(0, min(idx, len(s)-1))
		out[i] = float64(s[idx].Microseconds()) / 1000
	}
	return out
}
