package release

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// chartDir is charts/kobe, two levels up from test/chart/release.
const chartDir = "../../../charts/kobe"

// created is a fixed commit time for the archives and manifests.
var created = time.Unix(1796082109, 0)

func TestChartVersion(t *testing.T) {
	for _, tc := range []struct{ release, want string }{
		{"v0.2.0", "0.2.0"},
		{"0.2.0", "0.2.0"},
		{"v1.2.3-rc.1", "1.2.3-rc.1"},
		{"v0.2.0-3-gabc1234", "0.2.0-3-gabc1234"},
		{"v0.2.0-3-gabc1234-dirty", "0.2.0-3-gabc1234-dirty"},
		// git describe --always without tags: a commit hash, perhaps dirty.
		{"8a32880", "0.0.0-dev-8a32880"},
		{"0123456-dirty", "0.0.0-dev-0123456-dirty"},
		{"dev", "0.0.0-dev-dev"},
		{"v1.2", "0.0.0-dev-v1-2"},
	} {
		got, err := ChartVersion(tc.release)
		if err != nil || got != tc.want {
			t.Errorf("ChartVersion(%q) = %q, %v; want %q", tc.release, got, err, tc.want)
		}
	}
	if _, err := ChartVersion(""); err == nil {
		t.Error("ChartVersion(\"\") succeeded, want an error")
	}
}

// TestPackage packages the chart twice into separate directories: the same
// bytes, named kobe-<chart version>.tgz, with the release's versions, every
// entry at the commit's time, and every file of the chart directory in it.
func TestPackage(t *testing.T) {
	const version = "v0.3.1-2-gdeadbee"
	var archives [2][]byte
	for i := range archives {
		out := t.TempDir()
		path, err := Package(PackageOptions{ChartDir: chartDir, Version: version, OutDir: out, Created: created})
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := ArchivePath(out, version); path != want || filepath.Base(path) != "kobe-0.3.1-2-gdeadbee.tgz" {
			t.Fatalf("archive at %s, want %s (kobe-0.3.1-2-gdeadbee.tgz)", path, want)
		}
		if archives[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Fatalf("two packages of one chart differ: sha256 %x and %x", sha256.Sum256(archives[0]), sha256.Sum256(archives[1]))
	}
	ch, err := loader.LoadArchive(bytes.NewReader(archives[0]))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Name != ChartName || ch.Metadata.Version != "0.3.1-2-gdeadbee" || ch.Metadata.AppVersion != version {
		t.Errorf("metadata name %q version %q appVersion %q, want kobe, 0.3.1-2-gdeadbee, %s", ch.Metadata.Name, ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	if !ch.ModTime.Equal(created) {
		t.Errorf("Chart.yaml timed %s, want the commit's time %s", ch.ModTime, created)
	}
	for _, f := range append(ch.Templates, ch.Files...) {
		if !f.ModTime.Equal(created) {
			t.Errorf("%s timed %s, want %s", f.Name, f.ModTime, created)
		}
	}
	// Every file of the chart's directory is in the archive.
	dir, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	inArchive := map[string][]byte{}
	for _, f := range append(ch.Templates, ch.Files...) {
		inArchive[f.Name] = f.Data
	}
	for _, f := range append(dir.Templates, dir.Files...) {
		if got, ok := inArchive[f.Name]; !ok || !bytes.Equal(got, f.Data) {
			t.Errorf("%s: in archive %v, same content %v", f.Name, ok, bytes.Equal(got, f.Data))
		}
	}
	if len(ch.Templates) == 0 || ch.Schema == nil || len(dir.Templates) != len(ch.Templates) || len(dir.Files) != len(ch.Files) {
		t.Errorf("archive has %d templates, %d files, schema %v; the directory %d and %d", len(ch.Templates), len(ch.Files), ch.Schema != nil, len(dir.Templates), len(dir.Files))
	}
}

// TestPushPull pushes the packaged chart to an in-process OCI registry,
// pulls it back as `helm pull oci://` does, and compares: the same archive
// bytes and layer digest, the same metadata; a second push of the same
// archive gives the same manifest digest.
func TestPushPull(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")

	const version = "v0.4.0"
	out := t.TempDir()
	archive, err := Package(PackageOptions{ChartDir: chartDir, Version: version, OutDir: out, Created: created})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	opts := PushOptions{Archive: archive, To: "oci://" + host + "/charts/", PlainHTTP: true, Created: created, Timeout: 30 * time.Second}
	pushed, err := Push(opts)
	if err != nil {
		t.Fatal(err)
	}
	wantRef := host + "/charts/kobe:0.4.0"
	if pushed.Ref != wantRef {
		t.Errorf("pushed to %s, want %s", pushed.Ref, wantRef)
	}
	if want := fmt.Sprintf("sha256:%x", sha256.Sum256(data)); pushed.ChartDigest != want {
		t.Errorf("chart layer %s, want the archive's sha256 %s", pushed.ChartDigest, want)
	}

	pulled, got, err := Pull(wantRef, true, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if pulled.ManifestDigest != pushed.ManifestDigest || pulled.ChartDigest != pushed.ChartDigest {
		t.Errorf("pulled manifest %s chart %s, pushed %s and %s", pulled.ManifestDigest, pulled.ChartDigest, pushed.ManifestDigest, pushed.ChartDigest)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("pulled archive (%d bytes) differs from the pushed one (%d bytes)", len(got), len(data))
	}
	if pulled.Meta.Name != "kobe" || pulled.Meta.Version != "0.4.0" || pulled.Meta.AppVersion != version {
		t.Errorf("pulled metadata %s %s appVersion %s, want kobe 0.4.0 appVersion %s", pulled.Meta.Name, pulled.Meta.Version, pulled.Meta.AppVersion, version)
	}

	again, err := Push(opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.ManifestDigest != pushed.ManifestDigest {
		t.Errorf("a second push of the same archive made manifest %s, the first %s", again.ManifestDigest, pushed.ManifestDigest)
	}
}

// TestPushUnreachable: a registry where nothing listens is named as not
// reachable, quickly; a malformed registry path is refused before any
// request.
func TestPushUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()

	archive, err := Package(PackageOptions{ChartDir: chartDir, Version: "v0.4.0", OutDir: t.TempDir(), Created: created})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Push(PushOptions{Archive: archive, To: "oci://" + closed + "/charts", Created: created, Timeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "registry "+closed+" is not reachable") {
		t.Errorf("push to %s: %v, want a 'registry %s is not reachable' error", closed, err, closed)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the unreachable registry's error took %s", d)
	}
	for _, to := range []string{closed + "/charts", "https://" + closed + "/charts", "oci://"} {
		_, err := Push(PushOptions{Archive: archive, To: to, Created: created})
		if err == nil || !strings.Contains(err.Error(), "want oci://REGISTRY/PATH") {
			t.Errorf("push to %q: %v, want a 'want oci://REGISTRY/PATH' error", to, err)
		}
	}
	_, err = Push(PushOptions{Archive: filepath.Join(t.TempDir(), "kobe-0.4.0.tgz"), To: "oci://" + closed + "/charts"})
	if err == nil || !strings.Contains(err.Error(), "run make chart-package first") {
		t.Errorf("push of a missing archive: %v, want a hint to run make chart-package", err)
	}
}
