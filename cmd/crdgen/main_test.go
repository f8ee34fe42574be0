//go:build integration

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// wantCRDs are kobe's kinds; a new kind must be added here on purpose.
var wantCRDs = []string{
	"accesspolicies.kobe.kunobi.ninja",
	"bootstrapconfigs.kobe.kunobi.ninja",
	"clusterinstances.kobe.kunobi.ninja",
	"clusterleases.kobe.kunobi.ninja",
	"clusterpools.kobe.kunobi.ninja",
}

func TestRunPrintsEveryCRDOnce(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !bytes.HasPrefix(out.Bytes(), []byte("---\napiVersion: apiextensions.k8s.io/v1\n")) {
		t.Errorf("stream does not start with a document marker and a CRD: %q", out.String()[:min(80, out.Len())])
	}
	if n := strings.Count(out.String(), "---\n"); n != len(wantCRDs) {
		t.Errorf("stream has %d document markers, want %d", n, len(wantCRDs))
	}

	var got []string
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		err := dec.Decode(&crd)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding document %d: %v", len(got)+1, err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Spec.Group != "kobe.kunobi.ninja" {
			t.Errorf("document %d is %s of group %q, want a kobe.kunobi.ninja CustomResourceDefinition", len(got)+1, crd.Kind, crd.Spec.Group)
		}
		got = append(got, crd.Name)
	}
	if !slices.Equal(got, wantCRDs) {
		t.Errorf("CRDs in stream order = %v, want %v (sorted, each once)", got, wantCRDs)
	}
}

// TestPipeIntoKubectlInstallsCRDs runs `crdgen | kubectl apply -f -` against a
// control plane that starts without any CRD.
func TestPipeIntoKubectlInstallsCRDs(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "crdgen")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build crdgen: %v\n%s", err, out)
	}
	kubeconfig := startBareControlPlane(t)
	kubectl := func(args ...string) *exec.Cmd {
		args = append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(kubeconfig), "cache")}, args...)
		return exec.CommandContext(t.Context(), "kubectl", args...)
	}

	if out, err := kubectl("get", "crd", "-o", "name").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("control plane should start without CRDs: err=%v, out=%s", err, out)
	}

	gen := exec.CommandContext(t.Context(), bin)
	apply := kubectl("apply", "-f", "-")
	pipe, err := gen.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	apply.Stdin = pipe
	var genErr, applyOut bytes.Buffer
	gen.Stderr = &genErr
	apply.Stdout, apply.Stderr = &applyOut, &applyOut
	if err := gen.Start(); err != nil {
		t.Fatalf("starting crdgen: %v", err)
	}
	applyErr := apply.Run()
	if err := gen.Wait(); err != nil {
		t.Fatalf("crdgen: %v\n%s", err, genErr.String())
	}
	if applyErr != nil {
		t.Fatalf("kubectl apply -f -: %v\n%s", applyErr, applyOut.String())
	}
	for _, name := range wantCRDs {
		if want := "customresourcedefinition.apiextensions.k8s.io/" + name + " created"; !strings.Contains(applyOut.String(), want) {
			t.Errorf("kubectl apply output lacks %q:\n%s", want, applyOut.String())
		}
	}

	out, err := kubectl("get", "crd", "-o", "name").Output()
	if err != nil {
		t.Fatalf("kubectl get crd: %v", err)
	}
	var got []string
	for _, l := range strings.Fields(string(out)) {
		got = append(got, strings.TrimPrefix(l, "customresourcedefinition.apiextensions.k8s.io/"))
	}
	slices.Sort(got)
	if !slices.Equal(got, wantCRDs) {
		t.Errorf("kubectl get crd = %v, want %v", got, wantCRDs)
	}

	waitArgs := []string{"wait", "--for", "condition=established", "--timeout", "60s"}
	for _, name := range wantCRDs {
		waitArgs = append(waitArgs, "crd/"+name)
	}
	if out, err := kubectl(waitArgs...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl wait established: %v\n%s", err, out)
	}
	// Established means served: the kinds are usable right away.
	if out, err := kubectl("get", "clusterpools,clusterinstances,clusterleases,accesspolicies,bootstrapconfigs", "-A").CombinedOutput(); err != nil {
		t.Fatalf("listing kobe kinds after install: %v\n%s", err, out)
	}
}

// startBareControlPlane starts etcd and kube-apiserver with no CRDs and
// returns the path of an admin kubeconfig.
func startBareControlPlane(t *testing.T) string {
	t.Helper()
	te := &envtest.Environment{BinaryAssetsDirectory: testenv.BinDir()}
	if _, err := te.Start(); err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := te.Stop(); err != nil {
			t.Logf("stopping control plane: %v", err)
		}
	})
	user, err := te.ControlPlane.AddUser(envtest.User{Name: "crdgen-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("adding admin user: %v", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("rendering kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatalf("writing kubeconfig: %v", err)
	}
	return path
}
