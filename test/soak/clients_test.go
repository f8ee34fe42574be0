//go:build soak

package soak

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// What a client does: mostly short holds released at once; one lease in
// shortEvery is given a short TTL and left to expire.
const (
	longTTL     = 2 * time.Minute
	shortEvery  = 4
	shortTTLMin = 10 * time.Second
	// afterExpiry is how long past expiresAt a client holding a short lease
	// looks at it again: past the 5 s the soak allows.
	afterExpiry = 6 * time.Second
	// callTimeout bounds one HTTP call: a frozen replica answers nothing.
	callTimeout = 10 * time.Second
	// giveUp bounds the retries of one POST, GET loop or DELETE.
	giveUp = 3 * time.Minute
)

// soakClient leases and releases through both replicas' HTTP API.
type soakClient struct {
	id    int
	token string
	pool  string
	ns    string
	reps  *replicas
	rec   *recorder
	http  *http.Client
	rng   *rand.Rand
	calls int
}

// run cycles until stop is closed, finishing the cycle under way.
func (c *soakClient) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		c.cycle()
	}
}

// cycle is one lease: asked, got (at once or after Pending), checked, then
// released or left to expire.
func (c *soakClient) cycle() {
	short := c.rng.IntN(shortEvery) == 0
	ttl := longTTL
	if short {
		ttl = shortTTLMin + time.Duration(c.rng.IntN(10))*time.Second
	}
	start := time.Now()
	l, pending, err := c.lease(ttl)
	if err != nil {
		c.rec.note(func(r *recorder) { r.errs[err.Error()]++ })
		time.Sleep(time.Second)
		return
	}
	c.rec.note(func(r *recorder) {
		r.handouts = append(r.handouts, handout{start: start, took: time.Since(start), pending: pending})
	})
	c.granted(l)
	if short {
		c.holdPastExpiry(l)
		return
	}
	time.Sleep(500*time.Millisecond + time.Duration(c.rng.IntN(2500))*time.Millisecond)
	c.look(l.ID)
	c.release(l.ID)
}

// errRefused is a POST the API refused (counted, not a violation).
var errRefused = errors.New("refused")

// lease POSTs until a replica answers, and follows a Pending answer until
// Bound.
func (c *soakClient) lease(ttl time.Duration) (wire.Lease, bool, error) {
	body := wire.CreateLeaseRequest{Pool: c.pool, TTL: ttl.String()}
	deadline := time.Now().Add(giveUp)
	for time.Now().Before(deadline) {
		code, b, err := c.call(http.MethodPost, "/v1/leases", body)
		if err != nil {
			c.rec.note(func(r *recorder) { r.postsCut++ })
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var l wire.Lease
		switch code {
		case http.StatusCreated:
			return l, false, json.Unmarshal(b, &l)
		case http.StatusAccepted:
			if err := json.Unmarshal(b, &l); err != nil {
				return l, true, err
			}
			c.rec.do(func(ch *Checker) { ch.ClientPending(time.Now(), l.ID) })
			l, err := c.waitBound(l.ID)
			return l, true, err
		default:
			var e wire.ErrorBody
			_ = json.Unmarshal(b, &e)
			c.rec.note(func(r *recorder) { r.refused[fmt.Sprintf("%d %s", code, e.Reason)]++ })
			return l, false, errRefused
		}
	}
	return wire.Lease{}, false, errors.New("no replica answered a POST within 3m")
}

// pendingWait is how long each of waitBound's GETs asks the server to hold
// its answer while the lease is Pending (wire.LeaseWaitParam), within
// callTimeout.
const pendingWait = 5 * time.Second

// waitBound GETs a Pending lease until Bound (up to giveUp), as kobe lease
// does: each GET asks the server to answer once the lease is bound, and
// they are 250 ms apart.
func (c *soakClient) waitBound(id string) (wire.Lease, error) {
	deadline := time.Now().Add(giveUp)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		code, b, err := c.call(http.MethodGet, "/v1/leases/"+id+"?"+wire.LeaseWaitParam+"="+pendingWait.String(), nil)
		if err != nil || code != http.StatusOK {
			continue
		}
		var l wire.Lease
		if err := json.Unmarshal(b, &l); err != nil {
			return l, err
		}
		switch l.Phase {
		case wire.PhaseBound:
			if l.Kubeconfig != "" {
				return l, nil
			}
		case wire.PhasePending:
		default:
			return l, fmt.Errorf("ended %s while Pending", l.Phase)
		}
	}
	return wire.Lease{}, errors.New("still Pending after 3m")
}

// granted checks a kubeconfig handed out: the member it names, read live,
// and its certificate.
func (c *soakClient) granted(l wire.Lease) {
	g := Grant{Lease: l.ID, Member: l.ClusterName}
	if l.ExpiresAt != nil {
		g.ExpiresAt = *l.ExpiresAt
	}
	g.KubeconfigMember, g.CertNotAfter = parseKubeconfig(l.Kubeconfig)
	_ = testenv.Poll(context.Background(), 30*time.Second, func() error {
		var m kobev1.ClusterInstance
		err := suite.env.Client.Get(context.Background(), types.NamespacedName{Namespace: c.ns, Name: l.ClusterName}, &m)
		switch {
		case apierrors.IsNotFound(err):
			g.MemberRead = true
		case err != nil:
			return err
		default:
			g.MemberRead, g.MemberFound = true, true
			if m.Spec.LeaseRef != nil {
				g.MemberLeaseRef = m.Spec.LeaseRef.Name
			}
		}
		return nil
	})
	c.rec.do(func(ch *Checker) { ch.ClientGranted(time.Now(), g) })
}

// parseKubeconfig returns the cluster of the current context and the
// client certificate's NotAfter (zero values when unreadable: the checker
// then reports the mismatch).
func parseKubeconfig(kc string) (string, time.Time) {
	cfg, err := clientcmd.Load([]byte(kc))
	if err != nil {
		return "", time.Time{}
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		return "", time.Time{}
	}
	var notAfter time.Time
	if ai := cfg.AuthInfos[ctx.AuthInfo]; ai != nil {
		if blk, _ := pem.Decode(ai.ClientCertificateData); blk != nil {
			if cert, err := x509.ParseCertificate(blk.Bytes); err == nil {
				notAfter = cert.NotAfter
			}
		}
	}
	return ctx.Cluster, notAfter
}

// look GETs a held lease and tells the checker what it saw.
func (c *soakClient) look(id string) {
	code, b, err := c.call(http.MethodGet, "/v1/leases/"+id, nil)
	if err != nil {
		return
	}
	var l wire.Lease
	if code == http.StatusOK {
		_ = json.Unmarshal(b, &l)
	}
	now := time.Now()
	c.rec.do(func(ch *Checker) {
		ch.ClientSaw(now, id, Seen{Code: code, Phase: l.Phase, Kubeconfig: l.Kubeconfig != ""})
	})
}

// holdPastExpiry keeps a short lease unreleased: a look half-way, and one
// afterExpiry past its expiresAt, when it must no longer be usable.
func (c *soakClient) holdPastExpiry(l wire.Lease) {
	if l.ExpiresAt == nil {
		return
	}
	time.Sleep(time.Until(*l.ExpiresAt) / 2)
	c.look(l.ID)
	time.Sleep(time.Until(l.ExpiresAt.Add(afterExpiry)))
	c.look(l.ID)
}

// release DELETEs the lease, on either replica, until one answers other
// than 5xx.
func (c *soakClient) release(id string) {
	c.rec.do(func(ch *Checker) { ch.ClientReleased(time.Now(), id) })
	deadline := time.Now().Add(giveUp)
	for time.Now().Before(deadline) {
		code, _, err := c.call(http.MethodDelete, "/v1/leases/"+id, nil)
		if err != nil || code >= 500 {
			// No answer, or the API server was away: try again, as a
			// client that wants its member gone would.
			if err == nil {
				c.rec.note(func(r *recorder) { r.releaseKO[code]++ })
			}
			time.Sleep(500 * time.Millisecond)
			continue
		}
		if code != http.StatusNoContent {
			c.rec.note(func(r *recorder) { r.releaseKO[code]++ })
		}
		return
	}
}

// call makes one HTTP call to a replica, alternating between the two, as a
// Service in front of both would.
func (c *soakClient) call(method, path string, body any) (int, []byte, error) {
	c.calls++
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.reps.url((c.id+c.calls)%2)+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
