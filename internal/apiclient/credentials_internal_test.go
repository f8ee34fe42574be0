package apiclient

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestServiceAccountTokenPreference: the token projected for kobe is sent
// when it exists; the pod's default token only when it does not; any other
// file never falls back.
func TestServiceAccountTokenPreference(t *testing.T) {
	dir := t.TempDir()
	kobe, def, other := filepath.Join(dir, "kobe", "token"), filepath.Join(dir, "default-token"), filepath.Join(dir, "other")
	if err := os.WriteFile(def, []byte("host-api-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func(path string) (string, error) {
		b, err := readTokenFile(path, kobe, def)
		return string(b), err
	}
	if got, err := read(kobe); err != nil || got != "host-api-token" {
		t.Fatalf("without the projected token: %q, %v; want the default token", got, err)
	}
	if err := os.MkdirAll(filepath.Dir(kobe), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kobe, []byte("kobe-audience-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := read(kobe); err != nil || got != "kobe-audience-token" {
		t.Fatalf("with the projected token: %q, %v; want it", got, err)
	}
	if _, err := read(other); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file that is not the preferred one: %v, want ErrNotExist", err)
	}
	// An unreadable projected token (here a directory) is an error, not a
	// reason to send the host's token.
	unreadable := filepath.Join(dir, "kobe")
	if b, err := readTokenFile(unreadable, unreadable, def); err == nil {
		t.Fatalf("an unreadable projected token fell back to %q", b)
	}
	if DefaultServiceAccountTokenFile != "/var/run/secrets/kobe/token" {
		t.Fatalf("DefaultServiceAccountTokenFile = %s, the path docs/auth.md documents", DefaultServiceAccountTokenFile)
	}
}
