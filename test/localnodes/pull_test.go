//go:build root

package localnodes

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// pushImage pushes an image no node holds (testapp's, with a layer of
// random bytes added) to registry as app:v1, and returns its reference
// and manifest digest.
func pushImage(t *testing.T, registry string) (ref, digest string) {
	t.Helper()
	dir := t.TempDir()
	if err := untar(filepath.Join(imageDir, testappArchive), dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		t.Fatalf("%s has no image: %v", testappArchive, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := random.Layer(64<<10, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, extra); err != nil {
		t.Fatal(err)
	}
	ref = registry + "/app:v1"
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref, d.String()
}

// untar extracts the regular files and directories of the tar archive at
// path into dir.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(out, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
				return err
			}
			w, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// pulledPod runs image with imagePullPolicy Always.
func pulledPod(image string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pulled"},"spec":{"terminationGracePeriodSeconds":0,` +
		`"containers":[{"name":"c","image":"` + image + `","imagePullPolicy":"Always","args":["hold","600"]}]}}`
}

// pullsOverEgress (issue 43): a pod of a member whose pool grants egress
// pulls an image by tag from a registry beyond the machine (the outside
// namespace's, at a public address) and runs it; the same pod in a member
// without egress never gets it. Both pools name the registry in
// registryMirrors, with its plain-HTTP endpoint.
func pullsOverEgress(t *testing.T, withEgress, without *workload, out *outside) {
	ref, digest := pushImage(t, out.registry)
	manifest := writeFile(t, pulledPod(ref))
	for _, w := range []*workload{withEgress, without} {
		t.Cleanup(func() {
			_, _ = testenv.Kubectl(t, w.kubeconfig, "delete", "pod", "pulled", "--grace-period=0", "--ignore-not-found")
		})
		if out, err := testenv.Kubectl(t, w.kubeconfig, "create", "-f", manifest); err != nil {
			t.Fatalf("%s: %v\n%s", w.pool, err, out)
		}
	}
	began := time.Now()
	testenv.Eventually(t, 2*time.Minute, "the pulled pod of "+withEgress.pool+" to run", func() error {
		phase, err := testenv.KubectlStdout(t, withEgress.kubeconfig, "get", "pod", "pulled", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(phase, "Running") {
			return errors.New(phase)
		}
		return nil
	})
	t.Logf("%s pulled by tag and running %v after the pod was created", ref, time.Since(began).Round(time.Millisecond))
	imageID, err := testenv.KubectlStdout(t, withEgress.kubeconfig, "get", "pod", "pulled", "-o", "jsonpath={.status.containerStatuses[0].imageID}")
	if err != nil || !strings.HasSuffix(imageID, digest) {
		t.Errorf("the pod runs image %q (%v), want the pushed %s", imageID, err, digest)
	}
	testenv.Eventually(t, time.Minute, "the pull of "+without.pool+" to fail", func() error {
		state, err := testenv.KubectlStdout(t, without.kubeconfig, "get", "pod", "pulled", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}")
		if err != nil {
			return err
		}
		if strings.HasPrefix(state, "Running") {
			t.Fatalf("%s's pod pulled %s without egress", without.pool, ref)
		}
		if !strings.Contains(state, "ErrImagePull") && !strings.Contains(state, "ImagePullBackOff") {
			return fmt.Errorf("state %q", state)
		}
		return nil
	})
}
