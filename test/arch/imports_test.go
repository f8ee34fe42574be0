package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
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
	for _, want := range []string{"internal/apiserver", "internal/pool", "internal/lease", "api/v1alpha1"} {
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
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
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
