package version

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The generated constants must name the versions the control-plane modules
// require: `make generate` writes them, this catches a go.mod edited without it.
func TestConstantsMatchControlPlaneModules(t *testing.T) {
	for _, tc := range []struct {
		module, path, want string
	}{
		{"kubernetes", "k8s.io/kubernetes", Kubernetes},
		{"etcd", "go.etcd.io/etcd/server/v3", Etcd},
	} {
		t.Run(tc.module, func(t *testing.T) {
			gomod, err := os.ReadFile(filepath.Join("..", "..", "hack", "controlplane", tc.module, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			re := regexp.MustCompile(`(?m)^(?:require\s+|\s+)` + regexp.QuoteMeta(tc.path) + `\s+v(\S+)`)
			m := re.FindSubmatch(gomod)
			if m == nil {
				t.Fatalf("hack/controlplane/%s/go.mod does not require %s", tc.module, tc.path)
			}
			if got := string(m[1]); got != tc.want {
				t.Errorf("hack/controlplane/%s/go.mod requires %s v%s, the generated constant says %q: run `make generate`", tc.module, tc.path, got, tc.want)
			}
		})
	}
}
