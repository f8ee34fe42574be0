//go:build root

package localnodes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// loadedPod runs image with imagePullPolicy IfNotPresent: it runs only
// where a node holds the image (no registry serves it).
func loadedPod(image string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"loaded"},"spec":{"terminationGracePeriodSeconds":0,` +
		`"containers":[{"name":"c","image":"` + image + `","imagePullPolicy":"IfNotPresent","args":["hold","600"]}]}}`
}

// loadsIntoItsMember (issue 43): `kobe load` puts an image built here (as
// `docker save` writes it) into the node of the lease's member, where a
// pod runs it without any registry, and into no other member.
func loadsIntoItsMember(t *testing.T, w, other *workload) {
	img := uniqueImage(t)
	const ref = "kobe.test/loaded:v1"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "loaded.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	out, errOut, err := s.Kobe(t, 2*time.Minute, "load", w.lease.ID, archive)
	if err != nil {
		t.Fatalf("kobe load: %v\n%s%s", err, out, errOut)
	}
	t.Logf("kobe load of %s returned in %v: %s", ref, time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
	if !strings.Contains(out, "docker.io/"+ref) && !strings.Contains(out, ref) {
		t.Errorf("kobe load's output does not name %s:\n%s", ref, out)
	}

	manifest := writeFile(t, loadedPod(ref))
	for _, m := range []*workload{w, other} {
		t.Cleanup(func() {
			_, _ = testenv.Kubectl(t, m.kubeconfig, "delete", "pod", "loaded", "--grace-period=0", "--ignore-not-found")
		})
		if out, err := testenv.Kubectl(t, m.kubeconfig, "create", "-f", manifest); err != nil {
			t.Fatalf("%s: %v\n%s", m.pool, err, out)
		}
	}
	testenv.Eventually(t, time.Minute, "the loaded image's pod of "+w.pool+" to run", func() error {
		state, err := testenv.KubectlStdout(t, w.kubeconfig, "get", "pod", "loaded", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(state, "Running") {
			return errors.New(state)
		}
		return nil
	})
	imageID, err := testenv.KubectlStdout(t, w.kubeconfig, "get", "pod", "loaded", "-o", "jsonpath={.status.containerStatuses[0].imageID}")
	if err != nil || !strings.Contains(imageID, strings.TrimPrefix(digest.String(), "sha256:")) {
		// containerd names a loaded image by its config's digest or the
		// manifest's; either must be this image's.
		cfg, _ := img.ConfigName()
		if !strings.Contains(imageID, strings.TrimPrefix(cfg.String(), "sha256:")) {
			t.Errorf("the pod runs image %q (%v), want the loaded %s (config %s)", imageID, err, digest, cfg)
		}
	}
	// The other member never got it: its pod waits for a pull that cannot
	// succeed.
	testenv.Eventually(t, time.Minute, "the pod of "+other.pool+" to fail its pull", func() error {
		state, err := testenv.KubectlStdout(t, other.kubeconfig, "get", "pod", "loaded", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}")
		if err != nil {
			return err
		}
		if strings.HasPrefix(state, "Running") {
			t.Fatalf("%s runs %s, which was loaded into %s only", other.pool, ref, w.pool)
		}
		if !strings.Contains(state, "ErrImagePull") && !strings.Contains(state, "ImagePullBackOff") {
			return fmt.Errorf("state %q", state)
		}
		return nil
	})

	// Refused: a file that is not an image archive, with a message that
	// says what to send.
	junk := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(junk, []byte("not an image\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := s.Kobe(t, time.Minute, "load", w.lease.ID, junk); err == nil || !strings.Contains(errOut, "not an image archive") {
		t.Errorf("kobe load of a text file: %v\n%s%s", err, out, errOut)
	}
}
