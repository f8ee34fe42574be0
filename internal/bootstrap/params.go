package bootstrap

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Values are what the references of a bundle resolve to, by reference:
// "params.NAME", "member.name", "member.namespace", "pool.name".
type Values map[string]string

// Member names the member a bundle is applied to: the built-in references.
type Member struct {
	Name, Namespace, Pool string
}

// Resolve merges the values a pool passes to bundle bc (ref.Parameters)
// with the bundle's defaults. A value for a parameter bc does not declare,
// or a parameter without a default that the pool does not pass, is an
// *InvalidError: only a change to the pool or the bundle helps.
func Resolve(bc *kobev1.BootstrapConfig, ref kobev1.BootstrapRef, m Member) (Values, error) {
	vals := Values{"member.name": m.Name, "member.namespace": m.Namespace, "pool.name": m.Pool}
	declared := make(map[string]bool, len(bc.Spec.Parameters))
	var missing []string
	for _, p := range bc.Spec.Parameters {
		declared[p.Name] = true
		switch v, ok := ref.Parameters[p.Name]; {
		case ok:
			vals["params."+p.Name] = v
		case p.Default != nil:
			vals["params."+p.Name] = *p.Default
		default:
			missing = append(missing, p.Name)
		}
	}
	var unknown []string
	for name := range ref.Parameters {
		if !declared[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	slices.Sort(missing)
	switch {
	case len(unknown) > 0:
		return nil, &InvalidError{Source: bc.Name, Err: fmt.Errorf("the pool passes parameters %s, which the bundle does not declare", strings.Join(unknown, ", "))}
	case len(missing) > 0:
		return nil, &InvalidError{Source: bc.Name, Err: fmt.Errorf("parameters %s have no default and the pool passes no value", strings.Join(missing, ", "))}
	}
	return vals, nil
}

// reference is $(params.NAME), $(member.name|namespace) or $(pool.name),
// with the "$" doubled when escaped. Any other $(...) (a container's
// $(VAR), which Kubernetes expands) is left alone.
var reference = regexp.MustCompile(`\$?\$\((params\.[A-Za-z_][A-Za-z0-9_]*|member\.[A-Za-z_][A-Za-z0-9_]*|pool\.[A-Za-z_][A-Za-z0-9_]*)\)`)

// expand substitutes the references in s; an undefined one is an error.
func expand(s string, vals Values) (string, error) {
	if !strings.Contains(s, "$(") {
		return s, nil
	}
	var undefined []string
	out := reference.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, "$$") {
			return m[1:] // escaped: the literal reference
		}
		name := m[2 : len(m)-1]
		v, ok := vals[name]
		if !ok {
			undefined = append(undefined, name)
		}
		return v
	})
	if len(undefined) > 0 {
		return "", fmt.Errorf("$(%s) is not defined (declare it in spec.parameters and pass it from the pool)", undefined[0])
	}
	return out, nil
}

// substitute expands the references in every string value of v, in place;
// keys are never touched, so a value can never add a field or a document.
func substitute(v any, vals Values) (any, error) {
	switch t := v.(type) {
	case string:
		return expand(t, vals)
	case map[string]any:
		for k, e := range t {
			x, err := substitute(e, vals)
			if err != nil {
				return nil, err
			}
			t[k] = x
		}
	case []any:
		for i, e := range t {
			x, err := substitute(e, vals)
			if err != nil {
				return nil, err
			}
			t[i] = x
		}
	}
	return v, nil
}
