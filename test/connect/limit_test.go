//go:build heavy

package connect

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// watches holds open proxied watches of one lease.
type watches struct {
	t      *testing.T
	client *http.Client
	url    string
	mu     sync.Mutex
	open   []context.CancelFunc
}

// openOne starts a watch and returns its status once the headers arrive;
// a 200 stays open until closed.
func (w *watches) openOne() (int, string) {
	ctx, cancel := context.WithCancel(w.t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		cancel()
		return 0, err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(b)
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	w.mu.Lock()
	w.open = append(w.open, cancel)
	w.mu.Unlock()
	return resp.StatusCode, ""
}

// closeN cancels n open watches (their callers leave).
func (w *watches) closeN(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range n {
		w.open[len(w.open)-1]()
		w.open = w.open[:len(w.open)-1]
	}
}

// TestConnectLimit: proxied requests have their own in-flight limit. With
// more watches open through the proxy than the lease API admits requests
// (its limit is 200), the lease API still answers; the proxy answers 429
// beyond its own limit; and requests whose callers leave give their slots
// back.
func TestConnectLimit(t *testing.T) {
	l, _ := lease(t, "10m")
	defer release(t, l.ID)
	cert := leaseCert(t, l)
	w := &watches{t: t, client: s.client(&cert), url: s.APIURL + "/connect/" + l.ID + "/api/v1/namespaces/default/configmaps?watch=1"}
	defer func() { w.closeN(len(w.open)) }()

	var wg sync.WaitGroup
	errs := make(chan string, connectLimit)
	for range connectLimit {
		wg.Go(func() {
			if code, body := w.openOne(); code != http.StatusOK {
				errs <- fmt.Sprintf("%d %s", code, body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("opening %d watches through the proxy: %s", connectLimit, e)
	}
	t.Logf("%d watches open through the proxy", len(w.open))

	for _, p := range []string{"/v1/leases", "/v1/pools", "/v1/leases/" + l.ID} {
		if code, b := api(t, http.MethodGet, p, nil); code != http.StatusOK {
			t.Errorf("GET %s with %d proxied watches open: %d %s", p, connectLimit, code, b)
		}
	}
	code, body := w.openOne()
	refusedWith(t, "one watch beyond the connect limit", code, []byte(body), http.StatusTooManyRequests)

	// Callers that leave give their slots back, and no more than theirs.
	w.closeN(5)
	testenv.Eventually(t, 10*time.Second, "a slot to be given back", func() error {
		if code, body := w.openOne(); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	for range 4 {
		if code, body := w.openOne(); code != http.StatusOK {
			t.Fatalf("refilling the slots of cancelled watches: %d %s", code, body)
		}
	}
	code, body = w.openOne()
	refusedWith(t, "beyond the limit again", code, []byte(body), http.StatusTooManyRequests)

	// Requests cancelled before the member answers give theirs back too.
	w.closeN(len(w.open))
	for range 50 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
		if resp, err := w.client.Do(req); err == nil {
			resp.Body.Close()
		}
		cancel()
	}
	testenv.Eventually(t, 10*time.Second, "every slot to be free", func() error {
		n := len(w.open)
		for range connectLimit - n {
			if code, body := w.openOne(); code != http.StatusOK {
				return fmt.Errorf("after %d of %d: %d %s", len(w.open), connectLimit, code, body)
			}
		}
		return nil
	})
}
