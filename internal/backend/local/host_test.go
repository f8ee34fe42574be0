package local

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestHostIsHostnameAndBoot: a backend names its host by host name and the
// kernel's boot ID, so that a member is tied to one boot of one machine.
func TestHostIsHostnameAndBoot(t *testing.T) {
	b, err := New(Options{DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	boot, err := os.ReadFile(bootIDFile)
	if err != nil {
		t.Fatal(err)
	}
	want := name + "/" + strings.TrimSpace(string(boot))
	if got := b.Host(); got != want {
		t.Errorf("Host() = %q, want %q", got, want)
	}
	if !regexp.MustCompile(`/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(b.Host()) {
		t.Errorf("Host() = %q does not end in a boot ID", b.Host())
	}

	other, err := New(Options{DataRoot: t.TempDir(), Host: "elsewhere/0000"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	if other.Host() != "elsewhere/0000" {
		t.Errorf("Options.Host not honoured: %q", other.Host())
	}
}
