package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// tarOf packs files (name, content, in order) into a tar archive.
func tarOf(t *testing.T, files ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i+1 < len(files); i += 2 {
		if err := tw.WriteHeader(&tar.Header{Name: files[i], Mode: 0o644, Size: int64(len(files[i+1]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// dockerArchive is what `docker save` writes for tags, without real layers.
func dockerArchive(t *testing.T, tags ...string) []byte {
	t.Helper()
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": tags, "Layers": []string{"layer.tar"}}})
	if err != nil {
		t.Fatal(err)
	}
	return tarOf(t, "config.json", "{}", "layer.tar", "not really a layer", "manifest.json", string(manifest))
}

// ociArchive is a gzip-compressed OCI archive of one image called name.
func ociArchive(t *testing.T, name string) []byte {
	t.Helper()
	index := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
		`"annotations":{"io.containerd.image.name":"` + name + `"}}]}`
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	if _, err := gz.Write(tarOf(t, "oci-layout", `{"imageLayoutVersion":"1.0.0"}`, "index.json", index)); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kobeIn runs the CLI in-process with stdin as its standard input.
func kobeIn(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Execute(t.Context(), args, IOStreams{In: stdin, Out: &out, ErrOut: &errOut})
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// imageRequests counts the archives sent to srv, accepted or not.
func imageRequests(srv *apiclienttest.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r, "POST /v1/leases/") && strings.HasSuffix(r, "/images") {
			n++
		}
	}
	return n
}

const firstLease = "lease-000000000001"

func TestLoadFile(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithMemberNodes(3))
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small")
	data := dockerArchive(t, "app:dev", "example.com/team/db:v1")
	path := writeFile(t, t.TempDir(), "app.tar", data)

	r := mustKobe(t, "load", firstLease, path)
	want := "Loaded " + path + " (" + formatBytes(int64(len(data))) + " in 0s) into lease " + firstLease +
		" (cluster pool-ci-small-0): 2 images on 3 nodes\n  app:dev\n  example.com/team/db:v1\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	if r.stderr != "" {
		t.Errorf("stderr is not a terminal: no progress expected, got %q", r.stderr)
	}
	loads := srv.Loads()
	if len(loads) != 1 || loads[0].Lease != firstLease || !bytes.Equal(loads[0].Body, data) {
		t.Fatalf("loads %+v", loads)
	}
	// The digest is the body's: the fake refuses any other, and the header
	// the client sent is the archive's SHA-256.
	if got, want := loads[0].ContentDigest, wire.FormatContentDigest(sha256.Sum256(data)); got != want {
		t.Errorf("Content-Digest %q, want %q", got, want)
	}
}

func TestLoadStdin(t *testing.T) {
	e := newTestEnv(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small", "--alias", "ci-1")
	data := ociArchive(t, "docker.io/library/app:dev")

	r := kobeIn(t, bytes.NewReader(data), "load", "ci-1", "-")
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	if !strings.HasPrefix(r.stdout, "Loaded standard input (") ||
		!strings.Contains(r.stdout, "into lease "+firstLease+" (cluster pool-ci-small-0): 1 image on 1 node\n  docker.io/library/app:dev\n") {
		t.Errorf("%s", r)
	}
	if loads := srv.Loads(); len(loads) != 1 || !bytes.Equal(loads[0].Body, data) {
		t.Errorf("the server got %d archives, want the one on stdin", len(loads))
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temporary files left in TMPDIR: %v", left)
	}

	r = kobeIn(t, strings.NewReader(""), "load", "ci-1", "-")
	if r.code != 1 || !strings.Contains(r.stderr, "error: standard input is empty: pipe an archive into it, e.g. docker save IMAGE | kobe load LEASE -") {
		t.Errorf("empty stdin: %s", r)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temporary files left in TMPDIR after an empty stdin: %v", left)
	}
	if n := imageRequests(srv); n != 1 {
		t.Errorf("%d image requests, want only the first run's", n)
	}
}

func TestLoadTwoArchives(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small", "--alias", "ci-1")
	dir := t.TempDir()
	app := writeFile(t, dir, "app.tar", dockerArchive(t, "app:dev"))
	db := writeFile(t, dir, "db.tar.gz", ociArchive(t, "db:v1"))
	stdin := ociArchive(t, "cache:v2")

	r := kobeIn(t, bytes.NewReader(stdin), "load", "ci-1", app, "-", db, "-o", "json")
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	var out []wire.LoadedImages
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r)
	}
	var images [][]string
	for _, l := range out {
		images = append(images, l.Images)
		if l.ID != firstLease || l.ClusterName != "pool-ci-small-0" || l.Nodes != 1 || l.Bytes == 0 {
			t.Errorf("answer %+v", l)
		}
	}
	if want := [][]string{{"app:dev"}, {"cache:v2"}, {"db:v1"}}; !slices.EqualFunc(images, want, slices.Equal) {
		t.Errorf("images %v, want %v in the order given", images, want)
	}
	if loads := srv.Loads(); len(loads) != 3 || !bytes.Equal(loads[1].Body, stdin) {
		t.Errorf("the server got %d archives", len(loads))
	}
}

func TestLoadRefusedLocally(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small")
	dir := t.TempDir()
	good := writeFile(t, dir, "app.tar", dockerArchive(t, "app:dev"))
	empty := writeFile(t, dir, "empty.tar", nil)
	missing := filepath.Join(dir, "missing.tar")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a missing file", []string{firstLease, good, missing}, "error: archive " + missing + " does not exist: make it with docker save IMAGE -o " + missing},
		{"a directory", []string{firstLease, dir}, "error: archive " + dir + " is a directory, not an archive"},
		{"an empty file", []string{firstLease, good, empty}, "error: " + empty + " is empty: make it with docker save IMAGE -o " + empty + "\n"},
		{"stdin twice", []string{firstLease, "-", "-"}, "error: standard input (-) holds one archive"},
		{"no archive", []string{firstLease}, "kobe load expects a lease ID and at least one archive"},
		{"a bad lease reference", []string{"../x", good}, `"../x" is neither a lease ID`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := kobeIn(t, bytes.NewReader(dockerArchive(t, "x:1")), append([]string{"load"}, tc.args...)...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("want exit 1 and %q: %s", tc.want, r)
			}
		})
	}
	if n := imageRequests(srv); n != 0 {
		t.Errorf("%d archives sent; a local error must stop the command before any request", n)
	}

	// Checked before the configuration is even read.
	t.Setenv("KOBE_ENDPOINT", "")
	r := kobe(t, "load", firstLease, empty)
	if want := "error: " + empty + " is empty"; r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("without an endpoint: want exit 1 and %q: %s", want, r)
	}
}

func TestLoadServerErrors(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small")
	dir := t.TempDir()
	good := writeFile(t, dir, "app.tar", dockerArchive(t, "app:dev"))
	notTar := writeFile(t, dir, "notes.txt", []byte("these are not the images you are looking for\n"))
	big := writeFile(t, dir, "big.tar", bytes.Repeat([]byte{'x'}, apiclienttest.MaxImageBytes+1))

	r := kobe(t, "load", firstLease, notTar, good)
	for _, want := range []string{
		"error: loading " + notTar + " into lease " + firstLease + ": not an image archive: the body is not a tar archive",
		"(HTTP 400, NotAnImageArchive)\nnot sent: " + good + "\n",
		"hint: make one with `docker save IMAGE -o FILE`, `podman save -o FILE IMAGE`, or `skopeo copy docker://IMAGE docker-archive:FILE`",
	} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("not a tar: want exit 1 and %q: %s", want, r)
		}
	}
	if len(srv.Loads()) != 0 || imageRequests(srv) != 1 {
		t.Errorf("kobe must stop at the first archive refused: %v", srv.Requests())
	}

	r = kobe(t, "load", firstLease, big)
	want := "hint: the server's limit: an image archive must be at most 1048576 bytes; save fewer images per archive"
	if r.code != 1 || !strings.Contains(r.stderr, "(HTTP 413, BodyTooLarge)") || !strings.Contains(r.stderr, want) {
		t.Errorf("too large: want exit 1 and %q: %s", want, r)
	}

	r = kobe(t, "load", "lease-0000000000ff", good, "-o", "json")
	if r.code != 1 || r.stdout != "[]\n" || !strings.Contains(r.stderr, "(HTTP 404, LeaseNotFound)") || !strings.Contains(r.stderr, "hint: `kobe leases` lists your leases") {
		t.Errorf("unknown lease with -o json: want [] and the error: %s", r)
	}

	mustKobe(t, "release", firstLease)
	r = kobe(t, "load", firstLease, good)
	if r.code != 1 || !strings.Contains(r.stderr, "(HTTP 410, LeaseEnded)") || !strings.Contains(r.stderr, "hint: the lease has ended") {
		t.Errorf("ended lease: %s", r)
	}

	srv.Lock()
	srv.MemberNodes = 0
	srv.Unlock()
	mustKobe(t, "lease", "ci-small")
	r = kobe(t, "load", "lease-000000000002", good)
	if r.code != 1 || !strings.Contains(r.stderr, "(HTTP 409, ImagesUnsupported)") || !strings.Contains(r.stderr, "hint: this lease's cluster has no nodes") {
		t.Errorf("member without nodes: %s", r)
	}
}

// TestLoadFakeChecksDigest proves that the fake's digest check, which
// TestLoadFile relies on, refuses a body that is not what its header says.
func TestLoadFakeChecksDigest(t *testing.T) {
	srv := apiclienttest.New(t)
	c, err := apiclient.New(srv.URL, apiclient.BearerToken(apiclienttest.Token))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.CreateLease(t.Context(), wire.CreateLeaseRequest{Pool: "ci-small"})
	if err != nil {
		t.Fatal(err)
	}
	data := dockerArchive(t, "app:dev")
	for _, tc := range []struct {
		name, digest, reason string
	}{
		{"another body's digest", wire.FormatContentDigest(sha256.Sum256([]byte("other"))), wire.ReasonDigestMismatch},
		{"no digest", "", wire.ReasonBadRequest},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+wire.LeaseImagesPath(l.ID), bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiclienttest.Token)
		if tc.digest != "" {
			req.Header.Set(wire.ContentDigestHeader, tc.digest)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body wire.ErrorBody
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || body.Reason != tc.reason {
			t.Errorf("%s: HTTP %d %+v (%v), want 400 %s", tc.name, resp.StatusCode, body, err, tc.reason)
		}
	}
	if len(srv.Loads()) != 0 {
		t.Errorf("the fake accepted a body that does not match its digest")
	}
	hinted := &loadError{archive: "app.tar", lease: l.ID, err: &apiclient.Error{StatusCode: http.StatusBadRequest,
		ErrorBody: wire.ErrorBody{Message: "digest mismatch", Reason: wire.ReasonDigestMismatch}}}
	if h := hint(hinted); !strings.Contains(h, "the archive changed while kobe sent it") {
		t.Errorf("DigestMismatch hint %q", h)
	}
}

// TestLoadProgressOnTerminal draws progress when standard error is a
// terminal (a pseudo-terminal here), and erases it before the result.
func TestLoadProgressOnTerminal(t *testing.T) {
	e := newTestEnv(t)
	t.Setenv("TERM", "xterm")
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small")
	path := writeFile(t, t.TempDir(), "app.tar", dockerArchive(t, "app:dev"))

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	defer func() { _ = ptmx.Close() }()
	drawn := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(ptmx) // until the terminal is closed (EIO)
		drawn <- b
	}()
	var out bytes.Buffer
	code := Execute(t.Context(), []string{"load", firstLease, path}, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: tty})
	_ = tty.Close()
	got := string(<-drawn)
	if code != 0 || !strings.HasPrefix(out.String(), "Loaded "+path) {
		t.Fatalf("exit %d, stdout %q, terminal %q", code, out.String(), got)
	}
	if !strings.HasPrefix(got, "\r\033[K"+path+": hashing ") || !strings.Contains(got, " sent") || !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("terminal got %q: want the hashing line, the sent line, and the line erased", got)
	}
}

// TestLoadStdinTerminal refuses to wait for an archive typed at a terminal.
func TestLoadStdinTerminal(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	defer func() { _ = ptmx.Close(); _ = tty.Close() }()
	r := kobeIn(t, tty, "load", firstLease, "-")
	if want := "error: standard input is a terminal, not an archive: pipe one in"; r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("want exit 1 and %q: %s", want, r)
	}
}

func TestLoadProgress(t *testing.T) {
	clock := time.Date(2026, 4, 9, 14, 30, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	var b bytes.Buffer
	const mib = 1 << 20
	p := &progress{w: &b, name: "app.tar", total: 100 * mib, draw: true, now: now}
	p.begin()
	if got := b.String(); got != "\r\033[Kapp.tar: hashing 100 MiB" {
		t.Errorf("begin drew %q", got)
	}
	// Four chunks within one interval of the last redraw: no redraw.
	for i := int64(1); i <= 4; i++ {
		clock = clock.Add(10 * time.Millisecond)
		p.update(i * mib)
	}
	if n := strings.Count(b.String(), "\r"); n != 1 {
		t.Errorf("%d redraws within %s, want none after begin: %q", n-1, progressInterval, b.String())
	}
	clock = clock.Add(progressInterval)
	p.update(25 * mib)
	last := b.String()[strings.LastIndex(b.String(), "\r"):]
	// The rate counts from the first chunk: 25 MiB in 280ms.
	if want := "\r\033[Kapp.tar: 25 MiB / 100 MiB (25%), 89.3 MiB/s"; last != want {
		t.Errorf("progress line %q, want %q", last, want)
	}
	clock = clock.Add(time.Millisecond)
	p.update(100 * mib) // the last chunk is drawn at once
	last = b.String()[strings.LastIndex(b.String(), "\r"):]
	if !strings.HasPrefix(last, "\r\033[Kapp.tar: 100 MiB sent, ") || !strings.HasSuffix(last, "/s; the nodes are importing it") {
		t.Errorf("final line %q", last)
	}
	p.end()
	clock = clock.Add(time.Second)
	p.update(100 * mib) // the transport may still report after the answer
	if !strings.HasSuffix(b.String(), "the nodes are importing it\r\033[K") {
		t.Errorf("end must erase the line and nothing may follow: %q", b.String())
	}

	var quiet bytes.Buffer
	p = &progress{w: &quiet, name: "app.tar", total: 100, draw: false, now: now}
	p.begin()
	p.update(50)
	p.update(100)
	p.end()
	if quiet.Len() != 0 {
		t.Errorf("without a terminal progress printed %q", quiet.String())
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 5 << 30: "5 GiB", 1<<20 + 1: "1 MiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
