//go:build integration

package action

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestReleaseArchives builds the release for this machine's platform a
// second time (beside the shared one): the same bytes and SHA256SUMS, which
// `sha256sum --check` accepts (and refuses once an archive changes); one
// entry, kobe, 0755, owned 0:0, timed at SOURCE_DATE_EPOCH; the binary
// static and stamped with VERSION.
func TestReleaseArchives(t *testing.T) {
	asset := "kobe_" + release + "_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
	root, err := sharedRelease()
	if err != nil {
		t.Fatal(err)
	}
	dirs := [2]string{filepath.Join(root, release), t.TempDir()}
	if err := buildRelease(dirs[1], release); err != nil {
		t.Fatal(err)
	}
	read := func(dir, name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, name := range []string{asset, "SHA256SUMS"} {
		if !bytes.Equal(read(dirs[0], name), read(dirs[1], name)) {
			t.Errorf("%s differs between two builds of one commit", name)
		}
	}
	if sums := strings.TrimSpace(string(read(dirs[0], "SHA256SUMS"))); len(strings.Split(sums, "\n")) != 1 || !strings.HasSuffix(sums, "  "+asset) {
		t.Errorf("SHA256SUMS is %q, want one line for %s", sums, asset)
	}
	check := func(dir string) (string, error) {
		c := exec.Command("sha256sum", "--check", "SHA256SUMS")
		c.Dir = dir
		out, err := c.CombinedOutput()
		return string(out), err
	}
	if out, err := check(dirs[0]); err != nil || !strings.Contains(out, asset+": OK") {
		t.Errorf("sha256sum --check: %v\n%s", err, out)
	}

	gz, err := gzip.NewReader(bytes.NewReader(read(dirs[0], asset)))
	if err != nil {
		t.Fatal(err)
	}
	if !gz.ModTime.IsZero() || gz.Name != "" {
		t.Errorf("gzip header holds name %q and time %s, want neither", gz.Name, gz.ModTime)
	}
	tr := tar.NewReader(gz)
	var names []string
	var bin []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name != "kobe" || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(releaseEpoch, 0)) {
			t.Errorf("entry %s mode %o owner %d:%d time %s, want kobe 0755 0:0 at %s", h.Name, h.Mode, h.Uid, h.Gid, h.ModTime, time.Unix(releaseEpoch, 0))
		}
		if bin, err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	if len(names) != 1 {
		t.Fatalf("archive entries %q, want only kobe", names)
	}
	kobe := filepath.Join(t.TempDir(), "kobe")
	if err := os.WriteFile(kobe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kobe, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "kobe "+release+" (") {
		t.Errorf("kobe version: %v, %q; want kobe %s", err, out, release)
	}
	if runtime.GOOS == "linux" {
		// Static: no program interpreter.
		f, err := elf.Open(kobe)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a program interpreter: not static", kobe)
			}
		}
	}

	// A changed archive no longer matches.
	b := read(dirs[1], asset)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(filepath.Join(dirs[1], asset), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := check(dirs[1]); err == nil || !strings.Contains(out, asset+": FAILED") {
		t.Errorf("sha256sum --check of a changed archive: %v\n%s", err, out)
	}
}
