//go:build root

package localnodes

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/test/outside"
	"github.com/kunobi-ninja/kobe/test/testimage"
)

// uniqueImage is testapp's image with a layer of random bytes added: an
// image no node holds.
func uniqueImage(t *testing.T) v1.Image {
	t.Helper()
	return testimage.Unique(t, filepath.Join(imageDir, testappArchive))
}

// pushImage pushes a uniqueImage to registry as app:v1, and returns its
// reference and manifest digest.
func pushImage(t *testing.T, registry string) (ref, digest string) {
	t.Helper()
	img := uniqueImage(t)
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
func pullsOverEgress(t *testing.T, withEgress, without *workload, out *outside.Outside) {
	ref, digest := pushImage(t, out.Registry)
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
