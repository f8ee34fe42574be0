package local

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// Kubernetes versions (docs/backends.md, "Kubernetes versions"): BinDir is
// the default version's directory, bin/controlplane/<version> as `make
// controlplane` builds it. When its name is a version, every sibling
// directory named like a version that holds kube-apiserver is another
// version the backend builds (`make controlplane-versions
// K8S_EXTRA_VERSIONS=...`), and NodeBinDir's sibling of the same name holds
// its kubelet and kube-proxy. A member runs the binaries of its pool's
// cluster.version; no version, the default; a version without a directory
// is refused, never replaced by another. Directories of versions older than
// podsecurity.MinKubernetesMinor are not offered: their API servers cannot
// load the member's static admission policies.

// versionDirName is a directory name that is a Kubernetes version.
var versionDirName = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// defaultVersion is the version of BinDir: its name when that is a
// version, else the one kobe's control plane is built at.
func (b *Backend) defaultVersion() string {
	if base := filepath.Base(b.opts.BinDir); versionDirName.MatchString(base) {
		return base
	}
	return version.Kubernetes
}

// versions lists the Kubernetes versions whose control-plane binaries are
// on the host, the default first, the others newest first. Read from disk
// each time: a version built while the operator runs is offered at once.
func (b *Backend) versions() []string {
	def := b.defaultVersion()
	out := []string{def}
	if !versionDirName.MatchString(filepath.Base(b.opts.BinDir)) {
		return out
	}
	entries, err := os.ReadDir(filepath.Dir(b.opts.BinDir))
	if err != nil {
		return out
	}
	var more []string
	for _, e := range entries {
		v := e.Name()
		if v == def || !e.IsDir() || !versionDirName.MatchString(v) {
			continue
		}
		if _, err := podsecurity.APIServerFlags(v); err != nil {
			continue // too old to hold a lease holder to the member's Pod Security
		}
		if fi, err := os.Stat(filepath.Join(filepath.Dir(b.opts.BinDir), v, compAPIServer)); err == nil && fi.Mode().IsRegular() {
			more = append(more, v)
		}
	}
	slices.SortFunc(more, func(a, c string) int { return semver.Compare("v"+c, "v"+a) })
	return append(out, more...)
}

// memberVersion is the Kubernetes version member m runs: its
// cluster.version (with or without a leading v), or the default. A version
// whose binaries are not on the host wraps backend.ErrUnavailable.
func (b *Backend) memberVersion(m backend.Member) (string, error) {
	v := strings.TrimPrefix(m.Spec.Cluster.Version, "v")
	if v == "" {
		return b.defaultVersion(), nil
	}
	have := b.versions()
	if slices.Contains(have, v) {
		return v, nil
	}
	why := fmt.Sprintf("build it with `make controlplane-versions K8S_EXTRA_VERSIONS=%s`", v)
	if !versionDirName.MatchString(v) {
		why = "not a Kubernetes version x.y.z"
	} else if _, err := podsecurity.APIServerFlags(v); err != nil {
		why = err.Error()
	}
	return "", fmt.Errorf("%w: spec.cluster.version %q: this host has the control plane of %s (%s)",
		backend.ErrUnavailable, m.Spec.Cluster.Version, strings.Join(have, ", "), why)
}

// versionOrDefault is v, or the default version when v is empty (a state
// file from before versions were recorded).
func (b *Backend) versionOrDefault(v string) string {
	if v == "" {
		return b.defaultVersion()
	}
	return v
}

// binDir holds the control-plane binaries of version v ("" or the
// default: BinDir).
func (b *Backend) binDir(v string) string {
	if v == "" || v == b.defaultVersion() {
		return b.opts.BinDir
	}
	return filepath.Join(filepath.Dir(b.opts.BinDir), v)
}

// nodeBinDir holds kubelet and kube-proxy of version v ("" or the
// default: NodeBinDir).
func (b *Backend) nodeBinDir(v string) string {
	if v == "" || v == b.defaultVersion() {
		return b.opts.NodeBinDir
	}
	return filepath.Join(filepath.Dir(b.opts.NodeBinDir), v)
}
