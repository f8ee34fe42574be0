package local

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOrphanImages: an image is swept only when it is a member's and its
// directory is gone.
func TestOrphanImages(t *testing.T) {
	root := t.TempDir()
	const (
		live   = "ns_pool-a-0_0b7b6f8e-0c8d-4a57-9c43-4d7a5c3f2a11"
		orphan = "ns_pool-a-1_5e0c7b4c-0a1d-4ad6-8f0e-2f6c9d1b7e22"
	)
	if err := os.Mkdir(filepath.Join(root, live), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{live + ".disk", orphan + ".disk", "notes.disk", "other-file"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := orphanImages(entries); !slices.Equal(got, []string{orphan}) {
		t.Errorf("orphan images %v, want [%s]", got, orphan)
	}
}
