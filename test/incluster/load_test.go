//go:build root

package incluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/test/testimage"
)

// loadsOnEveryNode (issue 43): `kobe load -` with an OCI archive,
// gzip-compressed, on its standard input (as a build pipes it) puts the
// image into the containerd of every node pod of the lease's member,
// through the host API server's exec, and a pod on each node runs it
// without a registry.
func (f *fixture) loadsOnEveryNode(t *testing.T, leaseID, kc string, nodes []string) {
	const ref = "kobe.test/loaded:v1"
	archive := testimage.OCIArchive(t, testimage.Unique(t, testappArchive()), ref, true)
	in, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.cli, "load", leaseID, "-", "--ca-file", f.caFile)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+f.apiURL, "KOBE_TOKEN="+f.token, "KOBE_CONFIG="+filepath.Join(f.work, "kobe-config.yaml"))
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &out, &errOut
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("kobe load: %v\n%s%s", err, out.String(), errOut.String())
	}
	t.Logf("kobe load - of a gzip OCI archive into %d node pods in %v: %s", len(nodes), time.Since(began).Round(time.Millisecond), strings.TrimSpace(out.String()))

	for _, n := range nodes {
		pod := "loaded-" + n[strings.LastIndex(n, "-")+1:]
		manifest := filepath.Join(t.TempDir(), pod+".json")
		spec := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + pod + `"},"spec":{"nodeName":"` + n + `","terminationGracePeriodSeconds":0,` +
			`"containers":[{"name":"c","image":"` + ref + `","imagePullPolicy":"IfNotPresent","args":["hold","600"]}]}}`
		if err := os.WriteFile(manifest, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := testenv.Kubectl(t, kc, "create", "-f", manifest); err != nil {
			t.Fatalf("%s: %v\n%s", pod, err, out)
		}
		t.Cleanup(func() { _, _ = testenv.Kubectl(t, kc, "delete", "pod", pod, "--grace-period=0", "--ignore-not-found") })
		testenv.Eventually(t, time.Minute, "the loaded image's pod on "+n+" to run", func() error {
			state, err := testenv.KubectlStdout(t, kc, "get", "pod", pod, "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}")
			if err != nil {
				return err
			}
			if !strings.HasPrefix(state, "Running") {
				return errors.New(state)
			}
			return nil
		})
	}
}
