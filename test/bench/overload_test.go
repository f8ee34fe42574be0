//go:build bench

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

const overloadWaves = 5

// measureOverload starts an operator with --api-max-in-flight N and
//   - storms it overloadWaves times with -bench.overload-requests
//     concurrent GET /v1/leases (authenticated), counting answers by code;
//   - holds requests open: as many concurrent POST /v1/leases whose body
//     never arrives. The API reads a body before a request takes a slot
//     (docs/auth.md, slow bodies), so every one of them is asked for its body and none holds
//     a slot: 20 further GETs must all be served meanwhile;
//
// while a prober GETs /healthz on the probe port every 5 ms, whose latency
// is reported.
func measureOverload(ctx context.Context, b *bench, _ int) (figures, error) {
	limit := *flagMaxInFlight
	_, op, err := b.operatorIn(ctx, "overload", "--api-max-in-flight", fmt.Sprint(limit))
	if err != nil {
		return nil, err
	}
	defer op.stop()
	out := figures{"overload.limit": float64(limit), "overload.requests": float64(*flagOverloadReqs)}

	probe := newProber(op.probeURL + "/healthz")
	codes, err := b.storm(ctx, op, *flagOverloadReqs, overloadWaves)
	healthz := probe.stop()
	if err != nil {
		return nil, err
	}
	if probe.failures > 0 {
		return nil, fmt.Errorf("/healthz failed %d times during the storm: %w", probe.failures, probe.lastErr)
	}
	var other int
	for code, n := range codes {
		switch code {
		case http.StatusOK, http.StatusTooManyRequests:
		default:
			other += n
		}
	}
	if other > 0 {
		return nil, fmt.Errorf("storm answers other than 200 and 429: %v", codes)
	}
	out["overload.storm.served"] = float64(codes[http.StatusOK]) / overloadWaves
	out["overload.storm.rejected"] = float64(codes[http.StatusTooManyRequests]) / overloadWaves
	p := percentiles(healthz, 0.5, 0.99, 1)
	out["overload.storm.healthz_p50_ms"], out["overload.storm.healthz_p99_ms"], out["overload.storm.healthz_max_ms"] = p[0], p[1], p[2]
	out["overload.storm.healthz_n"] = float64(len(healthz))

	probe = newProber(op.probeURL + "/healthz")
	held, rejected, extra, err := b.hold(ctx, op, *flagOverloadReqs)
	healthz = probe.stop()
	if err != nil {
		return nil, err
	}
	if probe.failures > 0 {
		return nil, fmt.Errorf("/healthz failed %d times while requests were held: %w", probe.failures, probe.lastErr)
	}
	if held != *flagOverloadReqs || rejected != 0 {
		return nil, fmt.Errorf("of %d requests waiting for their bodies %d were asked for it and %d refused with 429; "+
			"the API reads bodies before taking a slot, so all should have been asked", *flagOverloadReqs, held, rejected)
	}
	if extra != 20 {
		return nil, fmt.Errorf("while %d requests waited for their bodies only %d of 20 further requests were served: they hold slots",
			held, extra)
	}
	// Requests waiting for their bodies hold no slot (overload.hold.in_flight
	// is therefore not reported any more).
	out["overload.hold.waiting_body"] = float64(held)
	out["overload.hold.rejected"] = float64(rejected)
	out["overload.hold.extra_served"] = float64(extra)
	p = percentiles(healthz, 0.5, 0.99, 1)
	out["overload.hold.healthz_p50_ms"], out["overload.hold.healthz_p99_ms"], out["overload.hold.healthz_max_ms"] = p[0], p[1], p[2]
	return out, op.alive()
}

// storm sends n concurrent GET /v1/leases, waves times, and counts the
// answers by status code. Each request has its own connection.
func (b *bench) storm(ctx context.Context, op *operator, n, waves int) (map[int]int, error) {
	c := b.client(op, n)
	c.http.Transport.(*http.Transport).MaxConnsPerHost = 0
	codes := map[int]int{}
	var mu sync.Mutex
	var errs []error
	for range waves {
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				<-gate
				code, _, err := c.do(ctx, http.MethodGet, "/v1/leases", nil)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				codes[code]++
			})
		}
		close(gate)
		wg.Wait()
		// Close the connections, so each wave opens n new ones.
		c.http.CloseIdleConnections()
	}
	if err := errors.Join(op.alive(), errors.Join(errs...)); err != nil {
		return nil, fmt.Errorf("storm: %d requests failed: %w", len(errs), err)
	}
	return codes, nil
}

// hold opens n connections, each sending POST /v1/leases headers with
// "Expect: 100-continue" and a body that never comes. The API reads the
// body before the request takes an in-flight slot: the server answers "100
// Continue" and the request waits for its body (up to the API's body read
// timeout) without a slot; a 429 would mean it was refused a slot instead.
// It returns the requests asked for their body, those refused, and how
// many of 20 further GET /v1/leases were served while they were held.
func (b *bench) hold(ctx context.Context, op *operator, n int) (held, rejected, extra int, err error) {
	u, err := url.Parse(op.apiURL)
	if err != nil {
		return 0, 0, 0, err
	}
	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range conns {
		if conns[i], err = net.Dial("tcp", u.Host); err != nil {
			return 0, 0, 0, fmt.Errorf("connection %d: %w", i, err)
		}
	}
	head := "POST /v1/leases HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: Bearer " + b.token +
		"\r\nContent-Type: application/json\r\nContent-Length: 64\r\nExpect: 100-continue\r\n\r\n"
	var (
		nHeld, nRejected atomic.Int64
		mu               sync.Mutex
		errs             []error
		wg               sync.WaitGroup
	)
	settle := time.Now().Add(5 * time.Second)
	for _, conn := range conns {
		wg.Go(func() {
			if _, err := conn.Write([]byte(head)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			_ = conn.SetReadDeadline(settle)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			switch {
			case err == nil && resp.StatusCode == http.StatusContinue:
				// The handler asked for the body: admitted, in flight.
				nHeld.Add(1)
			case err != nil:
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			case resp.StatusCode == http.StatusTooManyRequests:
				nRejected.Add(1)
				resp.Body.Close()
			default:
				mu.Lock()
				errs = append(errs, fmt.Errorf("a held request was answered %s", resp.Status))
				mu.Unlock()
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, 0, fmt.Errorf("holding requests: %w", err)
	}
	// The held requests are still waiting for their bodies (within the
	// API's 10 s body read timeout): ask for more.
	c := b.client(op, 20)
	for range 20 {
		code, _, err := c.do(ctx, http.MethodGet, "/v1/leases", nil)
		if err != nil {
			return 0, 0, 0, err
		}
		if code == http.StatusOK {
			extra++
		}
	}
	return int(nHeld.Load()), int(nRejected.Load()), extra, op.alive()
}

// prober GETs a URL every 5 ms until stopped and records the latencies.
type prober struct {
	stopc    chan struct{}
	done     chan struct{}
	lat      []time.Duration
	failures int
	lastErr  error
}

func newProber(u string) *prober {
	p := &prober{stopc: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stopc:
				return
			case <-time.After(5 * time.Millisecond):
			}
			t0 := time.Now()
			resp, err := hc.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s answered %s", u, resp.Status)
				}
			}
			if err != nil {
				p.failures++
				p.lastErr = err
				continue
			}
			p.lat = append(p.lat, time.Since(t0))
		}
	}()
	return p
}

func (p *prober) stop() []time.Duration {
	close(p.stopc)
	<-p.done
	return p.lat
}
