// Package release packages charts/kobe for a kobe release and pushes it to
// an OCI registry, with Helm v4 as a library (`make chart-package`,
// `make chart-push`, docs/releases.md). It holds no template or RBAC logic:
// the chart's own tests are the package above.
package release

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"
)

// ChartName is the chart's name, and so the OCI repository under the
// registry path (oci://REGISTRY/charts/kobe).
const ChartName = "kobe"

// notSemver is what a chart version may not hold in a pre-release part.
var notSemver = regexp.MustCompile(`[^0-9A-Za-z-]+`)

// ChartVersion is the chart version of a kobe release version: the tag
// without its "v" (v0.2.0 -> 0.2.0, v0.2.0-3-gabc1234 -> 0.2.0-3-gabc1234).
// A version that is no SemVer (git describe of a tree without tags gives a
// commit hash, perhaps with -dirty) becomes 0.0.0-dev-<it>, so that every
// build can be packaged and sorts below every release.
func ChartVersion(release string) (string, error) {
	if release == "" {
		return "", errors.New("no release version given")
	}
	v := strings.TrimPrefix(release, "v")
	if _, err := semver.StrictNewVersion(v); err == nil {
		return v, nil
	}
	return "0.0.0-dev-" + strings.Trim(notSemver.ReplaceAllString(release, "-"), "-"), nil
}

// PackageOptions says what to package and where.
type PackageOptions struct {
	// ChartDir is the chart's directory (charts/kobe).
	ChartDir string
	// Version is the kobe release version (make's VERSION): it becomes the
	// chart's appVersion (the image tag the chart runs by default) as it is,
	// and its version through ChartVersion.
	Version string
	// OutDir receives kobe-<chart version>.tgz.
	OutDir string
	// Created times every entry of the archive (the commit's time), so one
	// commit gives one archive, byte for byte.
	Created time.Time
}

// Package writes the chart archive and returns its path.
func Package(o PackageOptions) (string, error) {
	cv, err := ChartVersion(o.Version)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return "", err
	}
	p := action.NewPackage()
	p.Version, p.AppVersion, p.Destination = cv, o.Version, o.OutDir
	created := o.Created.UTC()
	p.SourceDateEpoch = &created
	path, err := p.Run(o.ChartDir, nil)
	if err != nil {
		return "", fmt.Errorf("packaging %s as version %s: %w", o.ChartDir, cv, err)
	}
	return path, nil
}

// ArchivePath is where Package puts the archive of release version v.
func ArchivePath(outDir, v string) (string, error) {
	cv, err := ChartVersion(v)
	if err != nil {
		return "", err
	}
	return filepath.Join(outDir, ChartName+"-"+cv+".tgz"), nil
}

// PushOptions says what to push where.
type PushOptions struct {
	// Archive is a chart archive written by Package.
	Archive string
	// To is the registry path, oci://REGISTRY/charts; the chart lands at
	// To/<chart name>:<chart version>.
	To string
	// PlainHTTP talks HTTP instead of HTTPS to the registry.
	PlainHTTP bool
	// Created is the manifest's org.opencontainers.image.created (the
	// commit's time): one archive gives one manifest digest.
	Created time.Time
	// Timeout bounds each request to the registry (default 2 minutes).
	Timeout time.Duration
}

// Pushed is what a push left in the registry.
type Pushed struct {
	Ref            string // host/path/kobe:<chart version>
	ManifestDigest string
	ChartDigest    string // the archive's layer
	Meta           *chart.Metadata
}

// Push uploads the archive as an OCI artifact (Helm's media types), using
// Helm's and Docker's stored registry credentials, if any.
func Push(o PushOptions) (*Pushed, error) {
	data, err := os.ReadFile(o.Archive)
	if err != nil {
		return nil, fmt.Errorf("reading the chart archive (run make chart-package first): %w", err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", o.Archive, err)
	}
	host, ref, err := chartRef(o.To, ch.Metadata)
	if err != nil {
		return nil, err
	}
	c, err := newClient(o.PlainHTTP, o.Timeout)
	if err != nil {
		return nil, err
	}
	res, err := c.Push(data, ref, registry.PushOptCreationTime(o.Created.UTC().Format(time.RFC3339)))
	if err != nil {
		return nil, reachable(host, fmt.Errorf("pushing %s to %s: %w", filepath.Base(o.Archive), ref, err))
	}
	return &Pushed{Ref: res.Ref, ManifestDigest: res.Manifest.Digest, ChartDigest: res.Chart.Digest, Meta: res.Chart.Meta}, nil
}

// Pull fetches ref (host/path/kobe:<version>) as `helm pull oci://...`
// would, returning the archive's bytes with the digests.
func Pull(ref string, plainHTTP bool, timeout time.Duration) (*Pushed, []byte, error) {
	c, err := newClient(plainHTTP, timeout)
	if err != nil {
		return nil, nil, err
	}
	res, err := c.Pull(ref, registry.PullOptWithChart(true))
	if err != nil {
		return nil, nil, reachable(strings.SplitN(ref, "/", 2)[0], fmt.Errorf("pulling %s: %w", ref, err))
	}
	return &Pushed{Ref: res.Ref, ManifestDigest: res.Manifest.Digest, ChartDigest: res.Chart.Digest, Meta: res.Chart.Meta}, res.Chart.Data, nil
}

// chartRef turns oci://host/path and the chart's metadata into the host and
// host/path/name:version.
func chartRef(to string, meta *chart.Metadata) (host, ref string, err error) {
	rest, ok := strings.CutPrefix(to, registry.OCIScheme+"://")
	if !ok || rest == "" {
		return "", "", fmt.Errorf("registry path %q: want oci://REGISTRY/PATH, e.g. oci://ghcr.io/kunobi-ninja/charts", to)
	}
	rest = strings.TrimSuffix(rest, "/")
	host = strings.SplitN(rest, "/", 2)[0]
	// A tag may not hold "+": Helm's convention writes build metadata with "_".
	return host, rest + "/" + meta.Name + ":" + strings.ReplaceAll(meta.Version, "+", "_"), nil
}

func newClient(plainHTTP bool, timeout time.Duration) (*registry.Client, error) {
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	opts := []registry.ClientOption{registry.ClientOptHTTPClient(&http.Client{Timeout: timeout, Transport: registry.NewTransport(false)})}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the registry client: %w", err)
	}
	return c, nil
}

// reachable names an unreachable registry plainly: Helm's own error is a
// transport error several wrappings deep.
func reachable(host string, err error) error {
	// Dial errors (refused, no route, no such host) and timeouts; not every
	// error of the transport (an EOF from a registry that answered is not).
	var opErr *net.OpError
	var netErr net.Error
	if errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return fmt.Errorf("registry %s is not reachable (set REGISTRY to one this machine can reach): %w", host, err)
	}
	return err
}
