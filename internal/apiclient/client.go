package apiclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	// maxResponseBytes bounds what the client reads from one answer.
	maxResponseBytes = 8 << 20
	// defaultTimeout bounds one HTTP exchange; callers bound whole
	// operations with their context.
	defaultTimeout = 30 * time.Second
)

// Client calls one kobe API endpoint with one set of credentials. It is safe
// for concurrent use.
type Client struct {
	endpoint  *url.URL
	creds     Credentials
	http      *http.Client
	userAgent string
	now       func() time.Time
	// pollBackoff paces WaitBound.
	pollBackoff wait.Backoff
	// leaseWait is how long WaitBound asks the server to hold each poll
	// while the lease is Pending (leaseWaitFor).
	leaseWait time.Duration
}

// Option configures a Client.
type Option func(*options)

type options struct {
	caFile     string
	insecure   bool
	timeout    time.Duration
	httpClient *http.Client
	userAgent  string
}

// WithCAFile trusts only the PEM CA certificates in path for the endpoint's
// TLS certificate (like kubectl's certificate-authority).
func WithCAFile(path string) Option { return func(o *options) { o.caFile = path } }

// WithInsecureSkipTLSVerify skips TLS certificate verification. For tests
// and first contact only: anyone on the path can read the credentials.
func WithInsecureSkipTLSVerify(skip bool) Option { return func(o *options) { o.insecure = skip } }

// WithTimeout bounds each HTTP exchange (default 30s); zero means no bound.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithHTTPClient uses c as is; WithCAFile, WithInsecureSkipTLSVerify and
// WithTimeout are then ignored.
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(o *options) { o.userAgent = ua } }

// New returns a client of the kobe API at endpoint (e.g.
// "https://kobe.example.com", optionally with a path prefix). A nil creds
// sends no credentials.
func New(endpoint string, creds Credentials, opts ...Option) (*Client, error) {
	u, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	o := options{timeout: defaultTimeout, userAgent: "kobe-apiclient"}
	for _, opt := range opts {
		opt(&o)
	}
	if creds == nil {
		creds = Anonymous{}
	}
	hc := o.httpClient
	if hc == nil {
		hc, err = newHTTPClient(o)
		if err != nil {
			return nil, err
		}
	}
	return &Client{endpoint: u, creds: creds, http: hc, userAgent: o.userAgent, now: time.Now, pollBackoff: waitBackoff,
		leaseWait: leaseWaitFor(hc.Timeout)}, nil
}

// ParseEndpoint checks that endpoint is an absolute http(s) URL without
// query or fragment and returns it without a trailing slash.
func ParseEndpoint(endpoint string) (*url.URL, error) {
	if strings.TrimSpace(endpoint) == "" {
		return nil, errors.New("endpoint is empty")
	}
	u, err := url.Parse(strings.TrimSpace(endpoint))
	if err != nil {
		return nil, fmt.Errorf("endpoint %q is not a URL: %w", endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("endpoint %q must start with https:// or http://", endpoint)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("endpoint %q has no host", endpoint)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("endpoint %q must not have a query or fragment", endpoint)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

func newHTTPClient(o options) (*http.Client, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if o.caFile != "" || o.insecure {
		tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.caFile != "" {
			pem, err := os.ReadFile(o.caFile)
			if err != nil {
				return nil, fmt.Errorf("reading CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s holds no PEM certificate", o.caFile)
			}
			tlsConfig.RootCAs = pool
		}
		tlsConfig.InsecureSkipVerify = o.insecure //nolint:gosec // explicit user choice
		transport.TLSClientConfig = tlsConfig
	}
	return &http.Client{Transport: transport, Timeout: o.timeout}, nil
}

// Endpoint is the API's base URL.
func (c *Client) Endpoint() string { return c.endpoint.String() }

// do sends one request to path, which may end in "?" and an encoded query.
// in, when non-nil, is encoded as the JSON body; out, when non-nil,
// receives the decoded JSON answer. Any status outside wantStatus is an
// *Error.
func (c *Client) do(ctx context.Context, method, path string, in, out any, wantStatus ...int) (int, error) {
	path, query, _ := strings.Cut(path, "?")
	u := c.endpoint.JoinPath(path)
	u.RawQuery = query
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return 0, fmt.Errorf("encoding %s %s request: %w", method, path, err)
		}
	}
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return 0, fmt.Errorf("building %s %s: %w", method, u, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if err := c.creds.Apply(req, body); err != nil {
		return 0, &credentialsError{err: fmt.Errorf("authenticating %s %s: %w", method, u, err)}
	}

	return c.exchange(c.http, req, out, wantStatus...)
}

// exchange sends req with hc and decodes the answer as do describes.
func (c *Client) exchange(hc *http.Client, req *http.Request, out any, wantStatus ...int) (int, error) {
	method, u := req.Method, req.URL
	resp, err := hc.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return 0, fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading answer: %w", method, u, err)
	}

	ok := false
	for _, s := range wantStatus {
		ok = ok || resp.StatusCode == s
	}
	if !ok {
		return resp.StatusCode, c.decodeError(resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decoding answer (HTTP %d): %w", method, u, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, nil
}

func (c *Client) decodeError(resp *http.Response, data []byte) error {
	apiErr := &Error{}
	if err := json.Unmarshal(data, &apiErr.ErrorBody); err != nil || apiErr.Message == "" {
		// Not our JSON: a proxy, a load balancer or another server answered.
		apiErr.ErrorBody = wire.ErrorBody{Message: strings.ToLower(http.StatusText(resp.StatusCode)), Detail: snippet(data)}
		if apiErr.Message == "" {
			apiErr.Message = "unexpected answer"
		}
	}
	apiErr.StatusCode = resp.StatusCode
	apiErr.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), c.now())
	return apiErr
}

// snippet is the first line of a non-JSON body, shortened for an error message.
func snippet(data []byte) string {
	s := strings.TrimSpace(string(data))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	const limit = 200
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return s
}
