// Command modalign keeps the repository's Go modules (kobe's own and the
// ones under hack/ and test/ that build the control plane, kwok, the tools,
// the chart tests) on one version of every dependency they share, so that a
// package they all build (k8s.io/client-go, x/net, protobuf...) is compiled
// once into Go's build cache instead of once per module: on a cold machine
// that is minutes of the test control plane's build.
//
//	modalign -check DIR...   exits 1 naming each dependency that differs
//	modalign DIR...          raises the lower ones (go get, go mod tidy)
//
// Only dependencies that provide packages to the modules' builds count
// (go list -deps -test over ./... with every build tag of the repository;
// -e, since tools.go files import commands);
// a module's go.mod may list others at any version.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// tags are every build tag the repository's files use, so that each
// layer's packages count.
const tags = "tools,integration,e2e,heavy,root,bench,soak"

// maxRounds bounds apply: go get may raise further dependencies, which the
// next round aligns; versions only rise, so this ends.
const maxRounds = 5

func main() {
	check := flag.Bool("check", false, "only report dependencies whose versions differ; exit 1 if any")
	var skip prefixes
	flag.Var(&skip, "skip", "a module path prefix whose modules are left out (repeatable): one that moves with a release another module pins")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: modalign [-check] MODULE_DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*check, skip, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modalign:", err)
		os.Exit(1)
	}
}

func run(check bool, skip prefixes, dirs []string) error {
	for round := 1; ; round++ {
		uses := map[string]map[string]use{}
		for _, dir := range dirs {
			deps, err := list(dir)
			if err != nil {
				return err
			}
			for path := range deps {
				if skip.match(path) {
					delete(deps, path)
				}
			}
			uses[dir] = deps
		}
		changes := plan(uses)
		if len(changes) == 0 {
			return nil
		}
		if check {
			for _, c := range changes {
				fmt.Fprintln(os.Stderr, c)
			}
			return fmt.Errorf("%d dependencies differ between the modules: run 'make align-modules' and commit the result", len(changes))
		}
		if round > maxRounds {
			return fmt.Errorf("still %d differences after %d rounds, first: %s", len(changes), maxRounds, changes[0])
		}
		for _, c := range changes {
			if c.Replaced {
				return fmt.Errorf("%s", c)
			}
		}
		for _, dir := range dirs {
			args := getArgs(changes, dir)
			if len(args) == 0 {
				continue
			}
			fmt.Fprintf(os.Stderr, "%s: go get %s\n", dir, strings.Join(args, " "))
			if err := goCmd(dir, append([]string{"get"}, args...)...); err != nil {
				return err
			}
			if err := goCmd(dir, "mod", "tidy"); err != nil {
				return err
			}
		}
	}
}

// prefixes is a repeatable flag of module path prefixes.
type prefixes []string

func (p *prefixes) String() string { return strings.Join(*p, ",") }

func (p *prefixes) Set(v string) error {
	*p = append(*p, v)
	return nil
}

func (p prefixes) match(path string) bool {
	for _, prefix := range p {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// list returns the dependencies that provide packages to the module in dir.
func list(dir string) (map[string]use, error) {
	const format = `{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{with .Replace}} {{.Path}} {{.Version}}{{end}}{{end}}{{end}}`
	cmd := exec.Command("go", "list", "-e", "-deps", "-test", "-tags", tags, "-f", format, "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	deps := map[string]use{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch len(f) {
		case 2: // path version
			deps[f[0]] = use{Version: f[1]}
		case 4: // path version replacementPath replacementVersion
			deps[f[2]] = use{Version: f[3], Replaced: true}
		case 3: // replaced by a directory: the repository's own code
		}
	}
	return deps, sc.Err()
}

func goCmd(dir string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s in %s: %w", strings.Join(args, " "), dir, err)
	}
	return nil
}
