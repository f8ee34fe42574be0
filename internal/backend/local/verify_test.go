//go:build heavy

package local

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// TestVerifiedDestroy records a real member's creation manifest (all
// present while it runs), keeps its directory alive with an immutable file
// (chattr +i) so that the teardown fails and the proof names the
// directory, then removes the obstacle: the teardown succeeds and every
// recorded resource is proven absent. One member for both halves: each
// real member costs seconds.
func TestVerifiedDestroy(t *testing.T) {
	b := newBackend(t)
	m := newMember("verified")
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, m, backend.StateReady, readyDeadline)
	manifest, err := b.Manifest(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range manifest {
		kinds[r.Kind]++
		if r.Kind == KindProcess && !strings.Contains(r.ID, "@") {
			t.Errorf("process %s recorded without its start time: %q", r.Name, r.ID)
		}
	}
	if kinds[KindProcess] < 2 || kinds[KindPort] != 1 || kinds[KindPath] != 1 {
		t.Fatalf("manifest %+v: want the etcd and kube-apiserver processes, the API port and the data directory", manifest)
	}
	running, err := b.Verify(t.Context(), m, manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range running[:len(manifest)] {
		if c.Absent {
			t.Errorf("running member: %s %s reported absent (%s)", c.Kind, c.Name, c.Detail)
		}
	}

	dir := b.paths(m).dir
	stuck := dir + "/admission.yaml"
	immutable(t, stuck)
	gone, err := b.Delete(t.Context(), m)
	if gone || err == nil {
		t.Fatalf("Delete with an immutable file in the directory = %v, %v; want an error", gone, err)
	}
	checks, err := b.Verify(t.Context(), m, manifest)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(checks, func(c backend.Check) bool { return c.Kind == KindPath })
	if i < 0 || checks[i].Absent {
		t.Fatalf("the data directory held by an immutable file is reported absent: %+v", checks)
	}
	for _, c := range checks {
		if c.Kind == KindProcess && !c.Absent {
			t.Errorf("process %s survived the teardown: %s", c.Name, c.Detail)
		}
	}

	mutable(t, stuck)
	if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
		t.Fatalf("Delete after the obstacle was removed = %v, %v", gone, err)
	}
	checks, err = b.Verify(t.Context(), m, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != len(manifest) {
		t.Errorf("Verify after the teardown returned %d checks for %d recorded resources: %+v", len(checks), len(manifest), checks)
	}
	for _, c := range checks {
		if !c.Absent {
			t.Errorf("%s %s not proven absent after the retry: %s", c.Kind, c.Name, c.Detail)
		}
	}
}

func TestVerifyRefusesWhatItCannotCheck(t *testing.T) {
	b := newBackend(t)
	m := newMember("unknown-kind")
	checks, err := b.Verify(t.Context(), m, []kobev1.ManifestResource{{Kind: "Pod", Name: "ns/p", ID: "uid"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 1 || checks[0].Absent {
		t.Errorf("a kind the backend cannot check was proven absent: %+v", checks)
	}
	if _, err := b.Verify(t.Context(), m, []kobev1.ManifestResource{{Kind: KindProcess, Name: "etcd", ID: "12"}}); err == nil {
		t.Error("a process id without its start time was accepted")
	}
}

// immutable sets the immutable attribute on path (chattr +i): not even
// root can remove it. mutable clears it; a test that sets it must clear it
// in its Cleanup too, or the data root cannot be removed.
func immutable(t testing.TB, path string) {
	t.Helper()
	chattr(t, "+i", path)
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
}

// mutable clears the immutable attribute immutable set.
func mutable(t testing.TB, path string) {
	t.Helper()
	chattr(t, "-i", path)
}

func chattr(t testing.TB, flag, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", flag, path).CombinedOutput(); err != nil {
		t.Fatalf("chattr %s %s: %v: %s", flag, path, err, out)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", path, err))
	}
}
