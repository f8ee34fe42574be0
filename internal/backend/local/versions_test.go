package local

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// versionTree makes <root>/controlplane/<v>/kube-apiserver and
// <root>/node/<v>/ for each version, and returns a backend whose BinDir and
// NodeBinDir are def's.
func versionTree(t *testing.T, def string, versions ...string) *Backend {
	t.Helper()
	root := t.TempDir()
	for _, v := range append([]string{def}, versions...) {
		for _, d := range []string{filepath.Join(root, "controlplane", v), filepath.Join(root, "node", v)} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(root, "controlplane", v, compAPIServer), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := New(Options{BinDir: filepath.Join(root, "controlplane", def), NodeBinDir: filepath.Join(root, "node", def), DataRoot: filepath.Join(root, "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func TestVersions(t *testing.T) {
	b := versionTree(t, "1.37.2", "1.36.3", "1.38.10", "1.36.12", "1.35.10")
	// Not versions: a directory without kube-apiserver, a file, a name
	// that is no version; 1.35.10 is too old (no static admission
	// policies).
	cp := filepath.Dir(b.opts.BinDir)
	for _, d := range []string{"1.34.0", "latest", "1.33"} {
		if err := os.MkdirAll(filepath.Join(cp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cp, "latest", compAPIServer), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp, "1.32.0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"1.37.2", "1.38.10", "1.36.12", "1.36.3"}
	if got := b.Capabilities().KubernetesVersions; !slices.Equal(got, want) {
		t.Errorf("KubernetesVersions = %v, want %v (the default first, then newest first)", got, want)
	}
	member := func(v string) backend.Member {
		return backend.Member{Spec: kobev1.ClusterInstanceSpec{Cluster: kobev1.ClusterTemplate{Version: v}}}
	}
	for _, tc := range []struct{ version, want, dir, nodeDir string }{
		{"", "1.37.2", b.opts.BinDir, b.opts.NodeBinDir},
		{"v1.37.2", "1.37.2", b.opts.BinDir, b.opts.NodeBinDir},
		{"1.36.3", "1.36.3", filepath.Join(cp, "1.36.3"), filepath.Join(filepath.Dir(b.opts.NodeBinDir), "1.36.3")},
		{"v1.38.10", "1.38.10", filepath.Join(cp, "1.38.10"), filepath.Join(filepath.Dir(b.opts.NodeBinDir), "1.38.10")},
	} {
		v, err := b.memberVersion(member(tc.version))
		if err != nil || v != tc.want || b.binDir(v) != tc.dir || b.nodeBinDir(v) != tc.nodeDir {
			t.Errorf("cluster.version %q: %q, %v, dirs %s %s; want %s in %s and %s", tc.version, v, err, b.binDir(v), b.nodeBinDir(v), tc.want, tc.dir, tc.nodeDir)
		}
	}
	for v, why := range map[string]string{
		"1.36.0": "make controlplane-versions K8S_EXTRA_VERSIONS=1.36.0", "v1.39.0": "K8S_EXTRA_VERSIONS=1.39.0",
		"1.35.10": "cannot load the static admission policies", "latest": "not a Kubernetes version", "1.36": "not a Kubernetes version",
		"../1.36.3": "not a Kubernetes version",
	} {
		_, err := b.memberVersion(member(v))
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "1.37.2, 1.38.10, 1.36.12, 1.36.3") || !strings.Contains(err.Error(), why) {
			t.Errorf("cluster.version %q = %v, want ErrUnavailable naming the versions there are and %q", v, err, why)
		}
	}
}

// A BinDir whose name is no version is the one version kobe's control
// plane is built at, and has no siblings.
func TestVersionsOfAPlainBinDir(t *testing.T) {
	b := versionTree(t, "bin", "1.36.3")
	if got := b.Capabilities().KubernetesVersions; len(got) != 1 || got[0] != b.defaultVersion() || got[0] == "bin" {
		t.Errorf("KubernetesVersions = %v", got)
	}
	if v, err := b.memberVersion(backend.Member{Spec: kobev1.ClusterInstanceSpec{Cluster: kobev1.ClusterTemplate{Version: "1.36.3"}}}); err == nil {
		t.Errorf("a sibling of a plain BinDir was taken for version %s", v)
	}
}

func TestDefaultNodes(t *testing.T) {
	b := versionTree(t, "1.37.2", "1.36.3")
	spec := func(v string) *kobev1.ClusterPoolSpec {
		return &kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}, Cluster: kobev1.ClusterTemplate{Version: v}}
	}
	if n, why := b.DefaultNodes(spec("")); n != 0 || why != "this operator's --local-default-nodes is 0" {
		t.Errorf("the zero Options: %d, %q; want no node and whose choice it is", n, why)
	}
	b.opts.DefaultNodes = backend.NodesDefault{Count: 2}
	if n, why := b.DefaultNodes(spec("")); n != 2 || why != "" {
		t.Errorf("a count of 2: %d, %q", n, why)
	}
	// Auto on a host that lacks what nodes need (this tree has no kubelet;
	// not root: not even that far): none, and what is missing.
	b.opts.DefaultNodes = backend.NodesDefault{Auto: true}
	want := map[string]string{"": "make node", "v1.36.3": "K8S_EXTRA_VERSIONS=1.36.3"}
	for v, how := range want {
		n, why := b.DefaultNodes(spec(v))
		if os.Geteuid() != 0 {
			how = "run as root"
		}
		if n != 0 || !strings.Contains(why, how) || strings.HasPrefix(why, backend.ErrUnavailable.Error()) {
			t.Errorf("auto, version %q: %d, %q; want none, saying %q", v, n, why, how)
		}
	}
}
