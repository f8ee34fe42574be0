//go:build integration

package apiserver_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/sshsig/sshsigtest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// maxImageBytes is the package server's --image-load-max-bytes.
const maxImageBytes = 8 << 20

// loads stands for the backends behind the package's server: it records
// what reaches a member. Members of pool noImagesPool have no nodes.
var loads = &loadRecorder{}

// The pools of these tests, which no other test leases from.
const (
	imagesPool   = "images"
	noImagesPool = "images-sim"
)

type loaded struct {
	member string
	images []string
}

type loadRecorder struct {
	mu   sync.Mutex
	seen []loaded
}

func (l *loadRecorder) load(_ context.Context, inst *kobev1.ClusterInstance, archive string) (int, error) {
	if inst.Spec.PoolRef.Name == noImagesPool {
		return 0, backend.ErrNoNodes
	}
	// What reaches a backend is a docker-archive whose images read back.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil {
		return 0, err
	}
	var images []string
	for _, d := range m {
		images = append(images, d.RepoTags...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, loaded{member: inst.Name, images: images})
	return 1, nil
}

// of returns what reached member.
func (l *loadRecorder) of(member string) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]string
	for _, s := range l.seen {
		if s.member == member {
			out = append(out, s.images)
		}
	}
	return out
}

func (l *loadRecorder) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// imageArchive writes a docker-archive of a random image tagged tags and
// returns its path.
func imageArchive(t *testing.T, tags ...string) string {
	t.Helper()
	img, err := random.Image(64<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[name.Reference]v1.Image{}
	for _, tag := range tags {
		ref, err := name.NewTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		refs[ref] = img
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		t.Fatal(err)
	}
	return path
}

func apiClient(t *testing.T, creds apiclient.Credentials) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(fx.url, creds)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// loadFile sends the archive at path with c.LoadImages.
func loadFile(t *testing.T, c *apiclient.Client, id, path string) (*wire.LoadedImages, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return c.LoadImages(t.Context(), id, f, st.Size(), nil)
}

// imagesRequest is a POST of body to lease id's images with the
// Content-Digest of digestOf, signed by creds (nil: none).
func imagesRequest(t *testing.T, creds apiclient.Credentials, id string, body, digestOf []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fx.url+wire.LeaseImagesPath(id), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(digestOf)
	req.Header.Set(wire.ContentDigestHeader, wire.FormatContentDigest(sum))
	switch c := creds.(type) {
	case nil:
	case apiclient.SumCredentials:
		err = c.ApplySum(req, sum)
	default:
		err = creds.Apply(req, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestLoadImages: an archive reaches the member of the caller's own Bound
// lease, and only then, as a docker-archive naming its images; whatever
// is refused is refused before the body is read or before anything
// reaches a member.
func TestLoadImages(t *testing.T) {
	owner := tokenOf("everything")
	l := createLease(t, owner, imagesPool, "10m")
	archive := imageArchive(t, "app:v1", "registry.example:5000/team/app:v2")
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the owner's archive reaches its member, named as containerd names it", func(t *testing.T) {
		got, err := loadFile(t, apiClient(t, owner), l.ID, archive)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"docker.io/library/app:v1", "registry.example:5000/team/app:v2"}
		if got.ID != l.ID || got.ClusterName != l.ClusterName || got.Nodes != 1 || got.Bytes != int64(len(raw)) || !slices.Equal(got.Images, want) {
			t.Fatalf("answer %+v; want lease %s, member %s, 1 node, %d bytes, images %v", got, l.ID, l.ClusterName, len(raw), want)
		}
		seen := loads.of(l.ClusterName)
		if len(seen) != 1 || len(seen[0]) != 2 {
			t.Fatalf("the member received %v", seen)
		}
	})

	// Each refusal below must leave the backends untouched.
	before := loads.count()
	refused := func(t *testing.T, r response, code int, errText, reason string) {
		t.Helper()
		requireReason(t, requireError(t, r, code, errText, ""), reason)
		if n := loads.count(); n != before {
			t.Fatalf("a refused load reached a member (%d loads, %d before)", n, before)
		}
	}

	t.Run("without credentials", func(t *testing.T) {
		r := send(t, imagesRequest(t, nil, l.ID, raw, raw))
		if r.code != http.StatusUnauthorized {
			t.Fatalf("got %s; want 401", r)
		}
	})
	t.Run("another identity's lease is not found", func(t *testing.T) {
		refused(t, send(t, imagesRequest(t, tokenOf("ci-only"), l.ID, raw, raw)), http.StatusNotFound, "lease not found", wire.ReasonLeaseNotFound)
	})
	t.Run("without a Content-Digest", func(t *testing.T) {
		req := imagesRequest(t, owner, l.ID, raw, raw)
		req.Header.Del(wire.ContentDigestHeader)
		refused(t, send(t, req), http.StatusBadRequest, "bad request", wire.ReasonBadRequest)
	})
	t.Run("a body that is not what its digest says", func(t *testing.T) {
		altered := bytes.Clone(raw)
		altered[len(altered)/2] ^= 0xff
		refused(t, send(t, imagesRequest(t, owner, l.ID, altered, raw)), http.StatusBadRequest, "the body does not match its Content-Digest", wire.ReasonDigestMismatch)
	})
	t.Run("a body that is not an image archive", func(t *testing.T) {
		junk := make([]byte, 4096)
		_, _ = rand.Read(junk)
		refused(t, send(t, imagesRequest(t, owner, l.ID, junk, junk)), http.StatusBadRequest, "not an image archive", wire.ReasonNotAnImageArchive)
	})
	t.Run("an archive beyond the server's limit, announced or not", func(t *testing.T) {
		big := make([]byte, maxImageBytes+1)
		refused(t, send(t, imagesRequest(t, owner, l.ID, big, big)), http.StatusRequestEntityTooLarge, "request body too large", wire.ReasonBodyTooLarge)
		req := imagesRequest(t, owner, l.ID, big, big)
		req.ContentLength = -1 // chunked: the limit holds while reading
		req.Body, req.GetBody = io.NopCloser(bytes.NewReader(big)), nil
		refused(t, send(t, req), http.StatusRequestEntityTooLarge, "request body too large", wire.ReasonBodyTooLarge)
	})
	t.Run("a member without nodes", func(t *testing.T) {
		small := createLease(t, owner, noImagesPool, "10m")
		_, err := loadFile(t, apiClient(t, owner), small.ID, archive)
		var apiErr *apiclient.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || apiErr.Reason != wire.ReasonImagesUnsupported {
			t.Fatalf("got %v; want 409 %s", err, wire.ReasonImagesUnsupported)
		}
		requireReleased(t, owner, small.ID)
	})
	t.Run("a released lease", func(t *testing.T) {
		ended := createLease(t, owner, imagesPool, "10m")
		requireReleased(t, owner, ended.ID)
		refused(t, send(t, imagesRequest(t, owner, ended.ID, raw, raw)), http.StatusGone, "lease has ended", wire.ReasonLeaseEnded)
	})
	t.Run("a refused caller's endless body is never read", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			creds apiclient.Credentials
		}{{"anonymous", nil}, {"another identity", tokenOf("ci-only")}} {
			body := &endless{}
			req := imagesRequest(t, tc.creds, l.ID, nil, raw)
			req.Body, req.ContentLength, req.GetBody = io.NopCloser(body), -1, nil
			start := time.Now()
			r, err := roundTrip(req)
			// The server may close while the client still writes: either
			// an answer or a broken connection, soon, with little sent.
			if err == nil && r.code != http.StatusUnauthorized && r.code != http.StatusNotFound {
				t.Fatalf("%s: got %s", tc.name, r)
			}
			if took, sent := time.Since(start), body.n.Load(); took > 10*time.Second || sent > 64<<20 {
				t.Fatalf("%s: the refused upload took %s and sent %d bytes", tc.name, took, sent)
			}
		}
	})
	if loads.count() != before {
		t.Fatal("a refused load reached a member")
	}
}

// TestLoadImagesSigned: an SSH signature covers the archive through its
// Content-Digest: a signed load works, the same request sent again is a
// replay, and a signature cannot be moved to another body.
func TestLoadImagesSigned(t *testing.T) {
	agent := sshsigtest.StartAgent(t)
	agent.Add(fx.sshKeyPath)
	alice := apiclient.SSHAgent{Socket: agent.Socket, KeyFilter: fx.sshAuthorizedKey, Audience: sshAudience}
	l := decode[wire.Lease](t, call(t, alice, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "dev", TTL: "20m"}), http.StatusCreated)
	recordedLease(t, l.ID)
	archive := imageArchive(t, "tool:1.0")
	got, err := loadFile(t, apiClient(t, alice), l.ID, archive)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Images, []string{"docker.io/library/tool:1.0"}) {
		t.Fatalf("loaded %v", got.Images)
	}
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	before := loads.count()

	signed := imagesRequest(t, alice, l.ID, raw, raw)
	if r := send(t, signed); r.code != http.StatusOK {
		t.Fatalf("a signed load: %s", r)
	}
	if r := send(t, signed); r.code != http.StatusUnauthorized {
		t.Fatalf("the same signed load sent again: %s; want 401", r)
	}
	// Another archive under the signed digest: the body fails its digest.
	other, err := os.ReadFile(imageArchive(t, "tool:evil"))
	if err != nil {
		t.Fatal(err)
	}
	moved := imagesRequest(t, alice, l.ID, other, raw)
	if r := send(t, moved); r.code != http.StatusBadRequest {
		t.Fatalf("another body under a signed digest: %s; want 400", r)
	}
	// The other archive's digest in place of the signed one: the
	// signature no longer verifies.
	swapped := imagesRequest(t, alice, l.ID, other, raw)
	sum := sha256.Sum256(other)
	swapped.Header.Set(wire.ContentDigestHeader, wire.FormatContentDigest(sum))
	if r := send(t, swapped); r.code != http.StatusUnauthorized {
		t.Fatalf("a signed request with its digest swapped: %s; want 401", r)
	}
	if n := loads.count(); n != before+1 {
		t.Fatalf("%d loads reached members, want the one signed load", n-before)
	}
}

// TestLoadImagesSlots: loads beyond the server's slots are answered 429
// at once, and a slot is free again once its load ends.
func TestLoadImagesSlots(t *testing.T) {
	owner := tokenOf("everything")
	l := createLease(t, owner, imagesPool, "10m")
	raw, err := os.ReadFile(imageArchive(t, "slow:v1"))
	if err != nil {
		t.Fatal(err)
	}
	// Two uploads that send half and then wait take both slots.
	var writers []*io.PipeWriter
	var wg sync.WaitGroup
	answered := make(chan response, 2)
	for range 2 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		req := imagesRequest(t, owner, l.ID, nil, raw)
		req.Body, req.ContentLength, req.GetBody = pr, int64(len(raw)), nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := roundTrip(req)
			answered <- r
		}()
		go func() { _, _ = pw.Write(raw[:len(raw)/2]) }()
	}
	defer func() {
		for _, w := range writers {
			_ = w.CloseWithError(errors.New("test over"))
		}
		wg.Wait()
	}()
	// On loopback both are in the handler long before a second is over.
	time.Sleep(time.Second)
	r := send(t, imagesRequest(t, owner, l.ID, raw, raw))
	select {
	case h := <-answered:
		t.Fatalf("a held upload was answered while it was sending: %s", h)
	default:
	}
	requireReason(t, requireError(t, r, http.StatusTooManyRequests, "too many image loads", "retry"), wire.ReasonTooManyRequests)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	for _, w := range writers {
		_ = w.CloseWithError(errors.New("caller gave up"))
	}
	wg.Wait()
	writers = nil
	if r := send(t, imagesRequest(t, owner, l.ID, raw, raw)); r.code != http.StatusOK {
		t.Fatalf("a load once the slots are free: %s", r)
	}
}

// endless is a body that never ends, counting what was read of it.
type endless struct{ n atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.n.Add(int64(len(p)))
	return len(p), nil
}

// requireReleased releases lease id of creds.
func requireReleased(t *testing.T, creds apiclient.Credentials, id string) {
	t.Helper()
	if r := call(t, creds, http.MethodDelete, "/v1/leases/"+id, nil); r.code != http.StatusNoContent {
		t.Fatalf("releasing %s: %s", id, r)
	}
}
