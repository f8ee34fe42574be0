//go:build integration

package action

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestReleaseWorkflowMakeTargets: every make command the release workflow
// runs names targets and variables the Makefile has (make -n, nothing
// built), and the workflow pushes the images a released operator runs by
// default: its own and the node pods' (DefaultNodeImage), with the
// release's tag. A renamed target would otherwise fail only on a tag push.
func TestReleaseWorkflowMakeTargets(t *testing.T) {
	root := testenv.RepoRoot()
	raw, err := os.ReadFile(filepath.Join(root, ".github/workflows/release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Name string `json:"name"`
				Run  string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("release.yml: %v", err)
	}
	vars := map[string]string{"VERSION": "v9.9.9", "REGISTRY": "ghcr.io/example"}
	var makes []string
	for _, job := range wf.Jobs {
		for _, step := range job.Steps {
			for _, line := range strings.Split(step.Run, "\n") {
				if line = strings.TrimSpace(line); strings.HasPrefix(line, "make ") {
					makes = append(makes, os.Expand(line, func(k string) string { return vars[k] }))
				}
			}
		}
	}
	for _, want := range []string{"make push ", "make push-node "} {
		found := false
		for _, m := range makes {
			found = found || (strings.HasPrefix(m, want) && strings.Contains(m, `TAG="v9.9.9"`))
		}
		if !found {
			t.Errorf("the release workflow runs no %q with the release's TAG; its make commands: %q", strings.TrimSpace(want), makes)
		}
	}
	for _, m := range makes {
		args := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(m, "make "), `"`, ""))
		cmd := exec.Command("make", append([]string{"-n", "--no-print-directory"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s (as make -n): %v\n%s", m, err, out)
		}
	}
}
