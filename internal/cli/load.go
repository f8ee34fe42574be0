package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// stdinArchive is the ARCHIVE argument that names standard input.
const stdinArchive = "-"

// LoadOptions are the options of `kobe load`.
type LoadOptions struct {
	Lease    string
	Archives []string
	Output   string

	flags   *ConfigFlags
	streams IOStreams
	now     func() time.Time
}

// NewCmdLoad returns `kobe load ID ARCHIVE...`.
func NewCmdLoad(flags *ConfigFlags, streams IOStreams) *cobra.Command {
	o := &LoadOptions{flags: flags, streams: streams, now: time.Now}
	cmd := &cobra.Command{
		Use:   "load ID|ALIAS ARCHIVE...",
		Short: "Load container images you built into a lease's cluster",
		Long: `Load image archives into every node of one of your Bound leases, so that
its pods run images you built without pushing them to a registry. An
ARCHIVE is what 'docker save IMAGE -o FILE' or 'podman save' writes, or an
OCI archive, plain or gzip-compressed; '-' reads one from standard input
(copied to a temporary file in $TMPDIR first). Archives are sent one after
the other; kobe stops at the first that fails.

Pods use a loaded image only with imagePullPolicy IfNotPresent or Never. An
image tagged :latest (or untagged) defaults to Always and is pulled again,
so tag yours with something else (app:dev).

A lease whose cluster has no nodes (a sim member) cannot take images.`,
		Example: `  docker save app:dev | kobe load ci-1 -
  kobe load "$KOBE_LEASE_ID" app.tar db.tar.gz
  kobe load lease-a1b2c3d4e5f6 app.tar -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return fmt.Errorf("%s expects a lease ID and at least one archive (a file, or - for standard input), got %d argument(s)\nRun '%s --help' for usage",
					cmd.CommandPath(), len(args), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Lease, o.Archives = args[0], args[1:]
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	addOutputFlag(cmd, &o.Output)
	return cmd
}

// Validate checks the options, and that every archive file exists and
// holds something, without calling the API.
func (o *LoadOptions) Validate() error {
	if err := validateLeaseRef(o.Lease); err != nil {
		return err
	}
	if err := validateOutput(o.Output); err != nil {
		return err
	}
	stdin := 0
	for _, path := range o.Archives {
		if path == stdinArchive {
			stdin++
			continue
		}
		if err := checkArchivePath(path); err != nil {
			return err
		}
	}
	switch {
	case stdin > 1:
		return errors.New("standard input (-) holds one archive: give - once, and the other archives as files")
	case stdin == 1 && isTerminal(o.streams.In):
		return errors.New("standard input is a terminal, not an archive: pipe one in, e.g. docker save IMAGE | kobe load LEASE -")
	}
	return nil
}

// checkArchivePath says what is wrong with an archive file before anything
// is sent. A pipe or a device (<(docker save IMAGE)) passes: it is read
// into a temporary file and checked then.
func checkArchivePath(path string) error {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("archive %s does not exist: make it with docker save IMAGE -o %s", path, path)
	case err != nil:
		return fmt.Errorf("reading archive: %w", err)
	case info.IsDir():
		return fmt.Errorf("archive %s is a directory, not an archive: make one with docker save IMAGE -o FILE", path)
	case info.Mode().IsRegular() && info.Size() == 0:
		return emptyArchiveError(path)
	}
	return nil
}

func emptyArchiveError(name string) error {
	if name == stdinArchive {
		return errors.New("standard input is empty: pipe an archive into it, e.g. docker save IMAGE | kobe load LEASE -")
	}
	return fmt.Errorf("%s is empty: make it with docker save IMAGE -o %s", name, name)
}

// Run opens (or reads in) every archive, then sends them one by one. With
// -o json it prints the answers it got, also when one fails.
func (o *LoadOptions) Run(ctx context.Context) error {
	c, _, err := o.flags.NewClient(o.streams.ErrOut, true)
	if err != nil {
		return err
	}
	archives, err := o.openArchives(ctx)
	defer func() {
		for _, a := range archives {
			a.close()
		}
	}()
	if err != nil {
		return err
	}
	loaded := []wire.LoadedImages{}
	for i, a := range archives {
		r, err := o.load(ctx, c, a)
		if err != nil {
			if rest := archives[i+1:]; len(rest) > 0 {
				names := make([]string, len(rest))
				for j, b := range rest {
					names[j] = b.name
				}
				err = fmt.Errorf("%w\nnot sent: %s", err, strings.Join(names, ", "))
			}
			if o.Output == OutputJSON {
				if perr := printJSON(o.streams.Out, loaded); perr != nil {
					return errors.Join(err, perr)
				}
			}
			return err
		}
		loaded = append(loaded, *r)
	}
	if o.Output == OutputJSON {
		return printJSON(o.streams.Out, loaded)
	}
	return nil
}

// archive is one archive to send: an open file at offset 0 and its size.
type archive struct {
	// name is the argument as given, or "standard input".
	name string
	file *os.File
	size int64
	// temp is set for a copy in a temporary file, removed by close.
	temp bool
}

func (a *archive) close() {
	_ = a.file.Close()
	if a.temp {
		_ = os.Remove(a.file.Name())
	}
}

// openArchives opens every archive before the first is sent, so that a
// missing or empty one stops the command before any request. Standard
// input, a pipe or a device is copied to a temporary file: the client reads
// an archive twice, once to hash it and once to send it. The archives opened
// are returned also with an error, to be closed.
func (o *LoadOptions) openArchives(ctx context.Context) ([]*archive, error) {
	var out []*archive
	for _, path := range o.Archives {
		a, err := o.openArchive(ctx, path)
		if err != nil {
			return out, err
		}
		out = append(out, a)
		if a.size == 0 {
			return out, emptyArchiveError(path)
		}
	}
	return out, nil
}

func (o *LoadOptions) openArchive(ctx context.Context, path string) (*archive, error) {
	if path == stdinArchive {
		f, n, err := spool(ctx, o.streams.In)
		if err != nil {
			return nil, fmt.Errorf("reading the archive from standard input: %w", err)
		}
		return &archive{name: "standard input", file: f, size: n, temp: true}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading archive: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("reading archive: %w", err)
	}
	if info.Mode().IsRegular() {
		return &archive{name: path, file: f, size: info.Size()}, nil
	}
	defer func() { _ = f.Close() }()
	tmp, n, err := spool(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("reading archive %s: %w", path, err)
	}
	return &archive{name: path, file: tmp, size: n, temp: true}, nil
}

// spool copies r into a new temporary file, rewound, and returns its size.
// On an error the file is already removed.
func spool(ctx context.Context, r io.Reader) (*os.File, int64, error) {
	f, err := os.CreateTemp("", "kobe-load-*.tar")
	if err != nil {
		return nil, 0, err
	}
	n, err := io.Copy(f, ctxReader{ctx: ctx, r: r})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, 0, err
	}
	return f, n, nil
}

// ctxReader stops reading once ctx is done (Ctrl-C while a pipe still
// writes).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := context.Cause(c.ctx); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// load sends one archive and prints what it loaded (unless -o json).
func (o *LoadOptions) load(ctx context.Context, c *apiclient.Client, a *archive) (*wire.LoadedImages, error) {
	start := o.now()
	p := &progress{w: o.streams.ErrOut, name: a.name, total: a.size, now: o.now,
		draw: isTerminal(o.streams.ErrOut) && o.flags.getenv("TERM") != "dumb"}
	p.begin()
	r, err := c.LoadImages(ctx, o.Lease, a.file, a.size, p.update)
	p.end()
	if err != nil {
		return nil, &loadError{archive: a.name, lease: o.Lease, err: err}
	}
	if o.Output == OutputJSON {
		return r, nil
	}
	lease := r.ID
	if lease == "" {
		lease = o.Lease
	}
	pr := &printer{w: o.streams.Out}
	pr.printf("Loaded %s (%s in %s) into lease %s (cluster %s): %s on %s\n",
		a.name, formatBytes(a.size), humanDuration(o.now().Sub(start)), lease, dash(r.ClusterName),
		plural(len(r.Images), "image"), plural(r.Nodes, "node"))
	for _, img := range r.Images {
		pr.printf("  %s\n", img)
	}
	return r, pr.err
}

// loadError is an archive the server did not load; hint says what to do
// about the reasons particular to loading.
type loadError struct {
	archive, lease string
	err            error
}

func (e *loadError) Error() string {
	return fmt.Sprintf("loading %s into lease %s: %v", e.archive, e.lease, e.err)
}

func (e *loadError) Unwrap() error { return e.err }

func (e *loadError) hint() string {
	var apiErr *apiclient.Error
	if !errors.As(e.err, &apiErr) {
		return ""
	}
	switch apiErr.Reason {
	case wire.ReasonNotAnImageArchive:
		return "make one with `docker save IMAGE -o FILE`, `podman save -o FILE IMAGE`, or `skopeo copy docker://IMAGE docker-archive:FILE` (gzip-compressed is fine)"
	case wire.ReasonBodyTooLarge:
		limit := "the server refuses an archive this large"
		if apiErr.Detail != "" {
			limit = "the server's limit: " + apiErr.Detail
		}
		return limit + "; save fewer images per archive (one docker save per image)"
	case wire.ReasonDigestMismatch:
		return "the archive changed while kobe sent it, or something on the way altered it: make sure nothing writes the file, and try again"
	case wire.ReasonImagesUnsupported:
		return "this lease's cluster has no nodes to load images into (a sim member, or a member without nodes): lease from a pool whose members have nodes (docs/nodes.md)"
	case wire.ReasonLeaseNotBound:
		return "the lease has no cluster yet: wait until it is Bound (`kobe leases` shows its phase), then load"
	case wire.ReasonLeaseEnded:
		return "the lease has ended and its cluster is gone: lease a new one and load the images into it"
	case wire.ReasonLeaseNotFound:
		return "`kobe leases` lists your leases"
	case wire.ReasonNotFound, wire.ReasonMethodNotAllowed:
		return "this kobe server cannot load images yet (no POST /v1/leases/{id}/images): upgrade the operator"
	}
	if apiErr.StatusCode == http.StatusRequestEntityTooLarge {
		// A proxy in front of the API with a body limit of its own.
		return "something between kobe and its API refuses a body this large (a proxy's body limit?): save fewer images per archive, or compress it (docker save IMAGE | gzip)"
	}
	return ""
}

// progressInterval is how often the progress line is redrawn, at most.
const progressInterval = 250 * time.Millisecond

// progress draws on a terminal how much of an archive has been sent: the
// bytes sent of the total, the percentage and the rate, redrawn at most
// every progressInterval on one line that end erases. Without draw it
// prints nothing (CI logs stay clean). update may be called from the HTTP
// client's goroutines, even after the request has returned.
type progress struct {
	w     io.Writer
	name  string
	total int64
	draw  bool
	now   func() time.Time

	mu    sync.Mutex
	start time.Time // of the first byte sent
	drawn time.Time // of the last redraw
	sent  int64
	ended bool
}

// begin shows the archive being hashed, before any byte is sent.
func (p *progress) begin() {
	if !p.draw {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawn = p.now()
	warnf(p.w, "\r\033[K%s: hashing %s", p.name, formatBytes(p.total))
}

// update is the client's progress callback.
func (p *progress) update(sent int64) {
	if !p.draw {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.ended || sent < p.sent {
		return
	}
	if p.start.IsZero() {
		p.start = now
	}
	done := sent >= p.total && p.sent < p.total
	p.sent = sent
	if !done && now.Sub(p.drawn) < progressInterval {
		return
	}
	p.drawn = now
	warnf(p.w, "\r\033[K%s", p.line(now))
}

// line is the progress line: "app.tar: 12.5 MiB / 50 MiB (25%), 4.2 MiB/s".
func (p *progress) line(now time.Time) string {
	rate := ""
	if d := now.Sub(p.start); d > 0 {
		rate = ", " + formatBytes(int64(float64(p.sent)/d.Seconds())) + "/s"
	}
	if p.sent >= p.total {
		return fmt.Sprintf("%s: %s sent%s; the nodes are importing it", p.name, formatBytes(p.total), rate)
	}
	pct := 0
	if p.total > 0 {
		pct = int(p.sent * 100 / p.total)
	}
	return fmt.Sprintf("%s: %s / %s (%d%%)%s", p.name, formatBytes(p.sent), formatBytes(p.total), pct, rate)
}

// end erases the progress line; later updates draw nothing.
func (p *progress) end() {
	if !p.draw {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	warnf(p.w, "\r\033[K")
}

// isTerminal reports whether s is a file open on a terminal.
func isTerminal(s any) bool {
	f, ok := s.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// formatBytes renders n in binary units: "512 B", "1.5 KiB", "2 GiB".
func formatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + " " + units[i]
}

// plural renders "1 node", "3 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
