package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kunobi-ninja/kobe"

// pkg is what the rules need to know of one package of the module.
type pkg struct {
	ImportPath string
	Imports    []string // direct imports of its non-test files
	Deps       []string // every package it depends on, transitively
}

// rule forbids some packages (From) to depend on others (Forbidden). With
// Transitive the whole dependency closure counts, else direct imports only.
type rule struct {
	Name       string
	From       func(path string) bool
	Forbidden  func(dep, from string) bool
	Transitive bool
}

// Shared helpers every reconciler uses; not controllers themselves.
var controllerHelpers = []string{
	module + "/internal/controller/patch",
	module + "/internal/controller/conditions",
	module + "/internal/controller/deps",
	module + "/internal/controller/pacing",
	module + "/internal/controller/seen",
	module + "/internal/controller/ownwrites",
}

// isController reports whether path is a controller of one reconciled kind.
func isController(path string) bool {
	rest, ok := strings.CutPrefix(path, module+"/internal/controller/")
	return ok && rest != "" && !slices.Contains(controllerHelpers, path)
}

func under(prefix string) func(string) bool {
	return func(p string) bool { return p == module+"/"+prefix || strings.HasPrefix(p, module+"/"+prefix+"/") }
}

func clientSide(dep, _ string) bool {
	return strings.HasPrefix(dep, "k8s.io/client-go/") || strings.HasPrefix(dep, "sigs.k8s.io/controller-runtime")
}

// controllerOf names the controller a package belongs to ("" when none).
func controllerOf(path string) string {
	rest, ok := strings.CutPrefix(path, module+"/internal/controller/")
	if !ok || !isController(path) {
		return ""
	}
	kind, _, _ := strings.Cut(rest, "/")
	return kind
}

// isTestKit reports whether path is test tooling: internal/testenv and
// its packages, the packages under test/ (suites and the attacks they share,
// such as test/hostile), and the test kits kobe names "<something>test"
// (apiclienttest, sshsigtest, nodetest, admissiontest).
func isTestKit(path string) bool {
	if under("internal/testenv")(path) || under("test")(path) {
		return true
	}
	rest, ok := strings.CutPrefix(path, module+"/")
	last := rest[strings.LastIndex(rest, "/")+1:]
	return ok && last != "test" && strings.HasSuffix(last, "test")
}

// leaves import nothing of kobe: formats, crypto and helpers that the rest
// builds on. Each imported no kobe package when the rule was written.
var leaves = []string{
	"internal/addressguard",
	"internal/clusterdns",
	"internal/controller/conditions",
	"internal/controller/deps",
	"internal/controller/ownwrites",
	"internal/controller/pacing",
	"internal/controller/patch",
	"internal/controller/seen",
	"internal/credentials/pki",
	"internal/identity",
	"internal/leadership",
	"internal/login",
	"internal/metrics",
	"internal/node",
	"internal/retention",
	"internal/sshsig",
	"internal/truncate",
	"internal/version",
	"internal/wire",
}

func isLeaf(path string) bool {
	return slices.ContainsFunc(leaves, func(l string) bool { return path == module+"/"+l })
}

// backends are the member backends; internal/backend (the interface) and
// internal/backend/incluster (machinery shared by in-cluster backends) are
// not backends.
var backends = []string{"local", "kubernetes", "sim"}

// backendOf names the backend a package belongs to ("" when none).
func backendOf(path string) string {
	for _, b := range backends {
		if under("internal/backend/" + b)(path) {
			return b
		}
	}
	return ""
}

// runsControllers reports whether dep is controller-runtime's operator
// machinery (a manager, controllers, webhooks), as opposed to its client.
func runsControllers(dep, _ string) bool {
	const cr = "sigs.k8s.io/controller-runtime"
	if dep == cr || dep == cr+"/pkg/cache" {
		return true
	}
	for _, p := range []string{"manager", "builder", "controller", "reconcile", "webhook"} {
		if dep == cr+"/pkg/"+p || strings.HasPrefix(dep, cr+"/pkg/"+p+"/") {
			return true
		}
	}
	return false
}

var rules = []rule{
	{
		Name: "no package below the controllers imports a controller",
		From: func(p string) bool {
			return strings.HasPrefix(p, module+"/internal/") && !strings.HasPrefix(p, module+"/internal/controller/")
		},
		Forbidden: func(dep, _ string) bool { return isController(dep) },
	},
	{
		Name: "a controller imports no other controller",
		From: isController,
		Forbidden: func(dep, from string) bool {
			return isController(dep) && controllerOf(dep) != controllerOf(from)
		},
	},
	{
		Name:       "the HTTP API depends on no controller",
		From:       under("internal/apiserver"),
		Forbidden:  func(dep, _ string) bool { return isController(dep) },
		Transitive: true,
	},
	{
		Name:       "the pool planner is pure: no client-go, no controller-runtime",
		From:       under("internal/pool"),
		Forbidden:  clientSide,
		Transitive: true,
	},
	{
		Name:       "the lease domain is pure: no client-go, no controller-runtime",
		From:       under("internal/lease"),
		Forbidden:  clientSide,
		Transitive: true,
	},
	{
		Name: "the API types import nothing of kobe and no client",
		From: under("api"),
		Forbidden: func(dep, from string) bool {
			return (strings.HasPrefix(dep, module+"/") && !strings.HasPrefix(dep, module+"/api/")) || clientSide(dep, from)
		},
		Transitive: true,
	},
	{
		// Today no package outside the test kits imports one, so the
		// rule names no exception.
		Name:       "no test kit in production code: only test kits depend on internal/testenv or another test kit",
		From:       func(p string) bool { return !isTestKit(p) },
		Forbidden:  func(dep, _ string) bool { return isTestKit(dep) },
		Transitive: true,
	},
	{
		Name:      "leaf packages import nothing of kobe",
		From:      isLeaf,
		Forbidden: func(dep, _ string) bool { return strings.HasPrefix(dep, module+"/") },
	},
	{
		Name: "a backend depends on no other backend (internal/backend and incluster are shared)",
		From: func(p string) bool { return under("internal/backend")(p) && p != module+"/internal/backend" },
		Forbidden: func(dep, from string) bool {
			b := backendOf(dep)
			return b != "" && b != backendOf(from)
		},
		Transitive: true,
	},
	{
		// The CLI's way to kobe is the HTTP API. (kobe admin does use the
		// host cluster's kubeconfig with a controller-runtime client, and
		// the CLI reads kubeconfigs with client-go's clientcmd, so
		// internal/cli itself may use both; see the next rule.)
		Name: "the API client speaks HTTP only: no client-go, no controller-runtime",
		From: func(p string) bool {
			return under("internal/apiclient")(p) || under("internal/wire")(p) || under("internal/sshsig")(p)
		},
		Forbidden:  clientSide,
		Transitive: true,
	},
	{
		Name:       "the CLI runs no controller: no controller-runtime manager, controller, cache or webhook",
		From:       func(p string) bool { return under("internal/cli")(p) || under("cmd/kobe")(p) },
		Forbidden:  runsControllers,
		Transitive: true,
	},
}

// violations lists, per rule and package, the dependencies that break it.
func violations(pkgs []pkg, rules []rule) []string {
	var out []string
	for _, r := range rules {
		for _, p := range pkgs {
			if !r.From(p.ImportPath) {
				continue
			}
			deps := p.Imports
			if r.Transitive {
				deps = p.Deps
			}
			var bad []string
			for _, d := range deps {
				if r.Forbidden(d, p.ImportPath) {
					bad = append(bad, d)
				}
			}
			if len(bad) > 0 {
				more := ""
				if len(bad) > 3 {
					more = fmt.Sprintf(" (and %d more)", len(bad)-3)
					bad = bad[:3]
				}
				out = append(out, fmt.Sprintf("%s: %s depends on %s%s", r.Name, p.ImportPath, strings.Join(bad, ", "), more))
			}
		}
	}
	return out
}

// The checker itself must catch what it is meant to catch.
func TestRulesCatchViolations(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	cases := []struct {
		name string
		pkg  pkg
		want int
	}{
		{"apiserver imports a controller", pkg{ImportPath: m("internal/apiserver"), Imports: []string{m("internal/controller/clusterlease")}, Deps: []string{m("internal/controller/clusterlease")}}, 2},
		{"apiserver reaches a controller through another package", pkg{ImportPath: m("internal/apiserver"), Deps: []string{m("internal/controller/clusterpool")}}, 1},
		{"binding imports a controller", pkg{ImportPath: m("internal/binding"), Imports: []string{m("internal/controller/clusterinstance")}}, 1},
		{"controller imports another controller", pkg{ImportPath: m("internal/controller/clusterpool"), Imports: []string{m("internal/controller/clusterinstance")}}, 1},
		{"controller imports its own subpackage", pkg{ImportPath: m("internal/controller/clusterpool"), Imports: []string{m("internal/controller/clusterpool/sub")}}, 0},
		{"controller imports the shared helpers", pkg{ImportPath: m("internal/controller/clusterpool"), Imports: controllerHelpers}, 0},
		{"helpers are not controllers", pkg{ImportPath: m("internal/apiserver"), Imports: controllerHelpers, Deps: controllerHelpers}, 0},
		{"planner reaches client-go", pkg{ImportPath: m("internal/pool"), Deps: []string{"k8s.io/client-go/rest"}}, 1},
		{"planner uses apimachinery", pkg{ImportPath: m("internal/pool"), Deps: []string{"k8s.io/apimachinery/pkg/api/meta"}}, 0},
		{"lease domain reaches controller-runtime", pkg{ImportPath: m("internal/lease"), Deps: []string{"sigs.k8s.io/controller-runtime/pkg/client"}}, 1},
		{"api imports internal", pkg{ImportPath: m("api/v1alpha1"), Deps: []string{m("internal/lease")}}, 1},
		{"cmd may import controllers", pkg{ImportPath: m("cmd/kobe-operator"), Imports: []string{m("internal/controller/clusterpool")}}, 0},
		{"production code imports the test kit", pkg{ImportPath: m("internal/binding"), Deps: []string{m("internal/testenv")}}, 1},
		{"production code reaches a test kit's subpackage", pkg{ImportPath: m("cmd/kobe-operator"), Deps: []string{m("internal/testenv/kobesuite")}}, 1},
		{"production code imports another test kit", pkg{ImportPath: m("internal/apiserver"), Deps: []string{m("internal/sshsig/sshsigtest")}}, 1},
		{"a test kit uses the test kit", pkg{ImportPath: m("internal/testenv/kobesuite"), Deps: []string{m("internal/testenv"), m("internal/apiclient/apiclienttest")}}, 0},
		{"a suite's shared attacks use the test kit", pkg{ImportPath: m("test/hostile"), Deps: []string{m("internal/testenv")}}, 0},
		{"production code imports a suite's attacks", pkg{ImportPath: m("internal/lease"), Deps: []string{m("test/hostile")}}, 1},
		{"a leaf imports kobe", pkg{ImportPath: m("internal/credentials/pki"), Imports: []string{m("internal/backend")}}, 1},
		{"a leaf imports outside kobe", pkg{ImportPath: m("internal/sshsig"), Imports: []string{"golang.org/x/crypto/ssh"}}, 0},
		{"a backend imports another", pkg{ImportPath: m("internal/backend/local"), Deps: []string{m("internal/backend/kubernetes")}}, 1},
		{"a backend reaches another's subpackage", pkg{ImportPath: m("internal/backend/sim"), Deps: []string{m("internal/backend/local/sub")}}, 1},
		{"the shared machinery imports a backend", pkg{ImportPath: m("internal/backend/incluster"), Deps: []string{m("internal/backend/kubernetes")}}, 1},
		{"a backend uses the shared packages and its own", pkg{ImportPath: m("internal/backend/kubernetes"), Deps: []string{m("internal/backend"), m("internal/backend/incluster"), m("internal/backend/kubernetes/sub")}}, 0},
		{"the API client reaches client-go", pkg{ImportPath: m("internal/apiclient"), Deps: []string{"k8s.io/client-go/rest"}}, 1},
		{"the CLI runs a manager", pkg{ImportPath: m("internal/cli"), Deps: []string{"sigs.k8s.io/controller-runtime/pkg/manager"}}, 1},
		{"the CLI's binary reaches controller-runtime's root", pkg{ImportPath: m("cmd/kobe"), Deps: []string{"sigs.k8s.io/controller-runtime"}}, 1},
		{"the operator's binary is not the CLI", pkg{ImportPath: m("cmd/kobe-operator"), Deps: []string{"sigs.k8s.io/controller-runtime/pkg/manager"}}, 0},
		{"the CLI uses a client for kobe admin", pkg{ImportPath: m("internal/cli"), Deps: []string{"sigs.k8s.io/controller-runtime/pkg/client", "sigs.k8s.io/controller-runtime/pkg/cache/cacheapi", "k8s.io/client-go/tools/clientcmd"}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := violations([]pkg{tc.pkg}, rules); len(got) != tc.want {
				t.Fatalf("got %d violations, want %d: %v", len(got), tc.want, got)
			}
		})
	}
}

// TestImportRules checks the real dependency graph of the module.
func TestImportRules(t *testing.T) {
	pkgs, err := listModule()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"internal/apiserver", "internal/pool", "internal/lease", "api/v1alpha1", "internal/cli", "cmd/kobe", "internal/apiclient", "internal/testenv"}
	for _, b := range backends {
		want = append(want, "internal/backend/"+b)
	}
	want = append(want, leaves...)
	for _, want := range want {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == module+"/"+want }) {
			t.Fatalf("package %s not found: the rules would check nothing", want)
		}
	}
	for _, v := range violations(pkgs, rules) {
		t.Error(v)
	}
}

// listModule asks the go command for every package of the module with its
// imports and dependencies.
func listModule() ([]pkg, error) {
	// The test runs in test/arch; ./... is the module from its root.
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}
