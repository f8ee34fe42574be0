//go:build integration

package testenv_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// TestControlPlaneReportsItsRelease checks that the binaries `make
// controlplane` builds are version-stamped (hack/versions.sh ldflags): an
// unstamped build reports v0.0.0-master+$Format:%H$, which kubectl and Helm's
// kubeVersion checks cannot parse.
func TestControlPlaneReportsItsRelease(t *testing.T) {
	want := "v" + testenv.KubernetesVersion
	major, rest, _ := strings.Cut(testenv.KubernetesVersion, ".")
	minor, _, _ := strings.Cut(rest, ".")

	t.Run("--version", func(t *testing.T) {
		for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			out := runBinary(t, name, "--version")
			if out != "Kubernetes "+want {
				t.Errorf("%s --version = %q, want %q", name, out, "Kubernetes "+want)
			}
		}
		if out := runBinary(t, "etcd", "--version"); !slices.Contains(strings.Split(out, "\n"), "etcd Version: "+version.Etcd) {
			t.Errorf("etcd --version = %q, want version %s", out, version.Etcd)
		}
		if out := runBinary(t, "kwok", "--version"); !strings.HasPrefix(out, "kwok version v") || strings.Contains(out, "v0.0.0") {
			t.Errorf("kwok --version = %q, want its release", out)
		}
	})

	t.Run("kubectl client", func(t *testing.T) {
		// The control-plane dir holds a kubectl only when the machine has none.
		if _, err := os.Stat(filepath.Join(testenv.BinDir(), "kubectl")); err != nil {
			t.Logf("no kubectl built (the machine has one): %v", err)
			return
		}
		var v struct {
			ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		}
		if err := json.Unmarshal([]byte(runBinary(t, "kubectl", "version", "--client", "-o", "json")), &v); err != nil {
			t.Fatal(err)
		}
		if v.ClientVersion.GitVersion != want {
			t.Errorf("kubectl clientVersion = %q, want %q", v.ClientVersion.GitVersion, want)
		}
	})

	env := testenv.Shared(t)
	t.Run("/version", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		info, err := dc.ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if info.GitVersion != want || info.Major != major || info.Minor != minor || info.GitTreeState != "clean" {
			t.Errorf("/version = %+v, want gitVersion %s, major %s, minor %s, gitTreeState clean", info, want, major, minor)
		}
		if strings.Contains(info.GitCommit, "$Format") || strings.HasPrefix(info.BuildDate, "1970") {
			t.Errorf("/version carries a placeholder: gitCommit %q, buildDate %q", info.GitCommit, info.BuildDate)
		}
	})

	t.Run("kubectl version", func(t *testing.T) {
		// Whatever kubectl the tests use must parse the server's version.
		// stdout only: kubectl warns on stderr when it is older than the server.
		out, err := exec.CommandContext(t.Context(), testenv.KubectlPath(t), "--kubeconfig", env.Kubeconfig, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("kubectl version: %v\n%s", err, out)
		}
		var v struct {
			ServerVersion struct{ GitVersion string } `json:"serverVersion"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("kubectl version output: %v\n%s", err, out)
		}
		if v.ServerVersion.GitVersion != want {
			t.Errorf("kubectl sees server %q, want %q", v.ServerVersion.GitVersion, want)
		}
	})
}

func runBinary(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.BinDir(), name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
