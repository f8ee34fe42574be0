package main

import (
	"fmt"
	"slices"
	"sort"

	"golang.org/x/mod/semver"
)

// use is the version of one dependency that one of the repository's modules
// builds with.
type use struct {
	Version string
	// Replaced: the module's go.mod pins it with a replace directive, which
	// go get cannot raise; the replace has to be edited.
	Replaced bool
}

// change raises one dependency of one module to the version the others use.
type change struct {
	Module string // the repository module's directory
	Path   string // the dependency's module path
	From   string
	To     string
	// Replaced: see use.Replaced; the change is an edit of the replace.
	Replaced bool
}

func (c change) String() string {
	how := "go get " + c.Path + "@" + c.To
	if c.Replaced {
		how = "edit its replace of " + c.Path + " to " + c.To
	}
	return fmt.Sprintf("%s: %s %s, another module builds %s: %s", c.Module, c.Path, c.From, c.To, how)
}

// plan returns the changes that put every dependency which provides packages
// to the builds of two or more of the repository's modules at one version,
// the highest any of them uses: only then does Go's build cache compile
// such a package once for all of them. uses maps a module's directory to
// its dependencies. Changes are sorted by module, then path.
func plan(uses map[string]map[string]use) []change {
	highest := map[string]string{}
	count := map[string]int{}
	for _, deps := range uses {
		for path, u := range deps {
			count[path]++
			if h, ok := highest[path]; !ok || semver.Compare(u.Version, h) > 0 {
				highest[path] = u.Version
			}
		}
	}
	var changes []change
	for module, deps := range uses {
		for path, u := range deps {
			if count[path] < 2 || semver.Compare(u.Version, highest[path]) >= 0 {
				continue
			}
			changes = append(changes, change{Module: module, Path: path, From: u.Version, To: highest[path], Replaced: u.Replaced})
		}
	}
	sort.Slice(changes, func(i, j int) bool {
		a, b := changes[i], changes[j]
		if a.Module != b.Module {
			return a.Module < b.Module
		}
		return a.Path < b.Path
	})
	return changes
}

// getArgs are the go get arguments of one module's changes; changes to a
// replaced dependency are not among them.
func getArgs(changes []change, module string) []string {
	var args []string
	for _, c := range changes {
		if c.Module == module && !c.Replaced {
			args = append(args, c.Path+"@"+c.To)
		}
	}
	return slices.Clip(args)
}
