//go:build root

package incluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
	"github.com/kunobi-ninja/kobe/test/outside"
	"github.com/kunobi-ninja/kobe/test/testimage"
)

// pullsOverEgress (issue 43): a pod of a kubernetes member pulls an image
// by tag from a registry beyond the machine (the outside namespace's, at a
// public address its pool's egress.allowCIDRs grants, named in its
// registryMirrors with a plain-HTTP endpoint) into its node pod's
// containerd, and runs it. The refusal without that egress is the
// member's NetworkPolicy's, which this test host's bridge CNI does not
// enforce (networkPolicyNotEnforced): test/localnodes checks it on local
// members, where kobe's own nftables rules enforce it.
func (f *fixture) pullsOverEgress(t *testing.T, kc string) {
	out := outside.Start(t, filepath.Join(filepath.Dir(testappArchive()), "rootfs", "testapp"))
	defer out.Stop()
	// The host cluster drops its pods' packets bound off the machine
	// (hostcluster.EgressChain); the outside namespace is on it.
	allow := []string{hostcluster.EgressChain, "-d", outside.PublicIP + "/32", "-j", "RETURN"}
	if b, err := exec.Command("iptables", append([]string{"-w", "-I"}, allow...)...).CombinedOutput(); err != nil {
		t.Fatalf("letting the host cluster's pods reach %s: %v %s", outside.PublicIP, err, b)
	}
	defer func() { _ = exec.Command("iptables", append([]string{"-w", "-D"}, allow...)...).Run() }()
	img := testimage.Unique(t, testappArchive())
	ref := out.Registry + "/app:v1"
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "pulled.json")
	spec := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pulled"},"spec":{"terminationGracePeriodSeconds":0,` +
		`"containers":[{"name":"c","image":"` + ref + `","imagePullPolicy":"Always","args":["hold","600"]}]}}`
	if err := os.WriteFile(manifest, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if out, err := testenv.Kubectl(t, kc, "create", "-f", manifest); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	defer func() {
		_, _ = testenv.Kubectl(t, kc, "delete", "pod", "pulled", "--grace-period=0", "--ignore-not-found")
	}()
	testenv.Eventually(t, 2*time.Minute, "the pulled pod to run", func() error {
		state, err := testenv.KubectlStdout(t, kc, "get", "pod", "pulled", "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message}")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(state, "Running") {
			return errors.New(state)
		}
		return nil
	})
	t.Logf("%s pulled by tag into a node pod and running %v after the pod was created", ref, time.Since(began).Round(time.Millisecond))
	imageID, err := testenv.KubectlStdout(t, kc, "get", "pod", "pulled", "-o", "jsonpath={.status.containerStatuses[0].imageID}")
	if err != nil || !strings.HasSuffix(imageID, digest.String()) {
		t.Errorf("the pod runs image %q (%v), want the pushed %s", imageID, err, digest)
	}
}
