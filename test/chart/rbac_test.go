package chart

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// docRule is one row of the RBAC table in charts/kobe/README.md.
type docRule struct {
	kind, group, resource string
	verbs                 []string
	// names is set for a rule that names its objects ("only the release's").
	names bool
}

// documentedRules reads the README's RBAC table: the rules the chart must
// render, no more and no fewer.
func documentedRules(t *testing.T) []docRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "<!-- rbac-table -->")
	table, _, ok2 := strings.Cut(table, "<!-- /rbac-table -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- rbac-table --> ... <!-- /rbac-table -->")
	}
	var out []docRule
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[2:] {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 5 {
			t.Fatalf("RBAC row %q has %d cells, want 5", line, len(cells))
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		group := cells[1]
		if group == "(core)" {
			group = ""
		}
		resource, qualifier, _ := strings.Cut(cells[2], " (")
		var verbs []string
		for _, v := range strings.Split(cells[3], ",") {
			verbs = append(verbs, strings.TrimSpace(v))
		}
		if cells[4] == "" {
			t.Errorf("RBAC row %q gives no reason", line)
		}
		out = append(out, docRule{kind: cells[0], group: group, resource: resource, verbs: verbs, names: qualifier != ""})
	}
	return out
}

// checkRBAC: the Role and ClusterRole hold exactly the documented rules
// (but the rules of the absent resources, which these values do not
// render), bound to the chart's
// ServiceAccount; a rule naming objects names the release's namespace only.
func checkRBAC(t *testing.T, r *rendered, absent ...string) {
	t.Helper()
	var role rbacv1.Role
	r.typed(t, "Role", &role)
	var cr rbacv1.ClusterRole
	r.typed(t, "ClusterRole", &cr)
	rendered := map[string][]rbacv1.PolicyRule{"Role": role.Rules, "ClusterRole": cr.Rules}
	for _, rule := range append(slices.Clone(role.Rules), cr.Rules...) {
		if len(rule.APIGroups) != 1 || len(rule.Resources) != 1 || len(rule.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: want one group and one resource per rule, as the README lists them", rule)
		}
		if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
			t.Errorf("rule %+v has a wildcard", rule)
		}
	}
	matched := map[string]int{}
	for _, d := range documentedRules(t) {
		if slices.Contains(absent, d.resource) {
			continue
		}
		i := slices.IndexFunc(rendered[d.kind], func(p rbacv1.PolicyRule) bool {
			return reflect.DeepEqual(p.APIGroups, []string{d.group}) && reflect.DeepEqual(p.Resources, []string{d.resource})
		})
		if i < 0 {
			t.Errorf("%s rule %s/%s is documented, not rendered", d.kind, d.group, d.resource)
			continue
		}
		p := rendered[d.kind][i]
		matched[d.kind]++
		if !reflect.DeepEqual(p.Verbs, d.verbs) {
			t.Errorf("%s %s/%s: rendered verbs %v, documented %v", d.kind, d.group, d.resource, p.Verbs, d.verbs)
		}
		if want := []string(nil); d.names {
			want = []string{testNamespace}
			if !reflect.DeepEqual(p.ResourceNames, want) {
				t.Errorf("%s %s/%s names %v, want %v", d.kind, d.group, d.resource, p.ResourceNames, want)
			}
		} else if len(p.ResourceNames) > 0 {
			t.Errorf("%s %s/%s names %v, documented for all", d.kind, d.group, d.resource, p.ResourceNames)
		}
	}
	for kind, rules := range rendered {
		if matched[kind] != len(rules) {
			t.Errorf("%s has %d rules, %d of them documented: %+v", kind, len(rules), matched[kind], rules)
		}
	}
	if role.Namespace != testNamespace {
		t.Errorf("Role in namespace %q", role.Namespace)
	}

	var rb rbacv1.RoleBinding
	r.typed(t, "RoleBinding", &rb)
	var crb rbacv1.ClusterRoleBinding
	r.typed(t, "ClusterRoleBinding", &crb)
	sa := r.find(t, "ServiceAccount", 1)[0]
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.GetName(), Namespace: testNamespace}}
	if !reflect.DeepEqual(rb.Subjects, want) || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding %+v -> %+v, want %+v -> Role %s", rb.Subjects, rb.RoleRef, want, role.Name)
	}
	if !reflect.DeepEqual(crb.Subjects, want) || crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != cr.Name {
		t.Errorf("ClusterRoleBinding %+v -> %+v, want %+v -> ClusterRole %s", crb.Subjects, crb.RoleRef, want, cr.Name)
	}
	if !strings.Contains(cr.Name, testNamespace) {
		t.Errorf("ClusterRole %q does not carry the namespace: two installations would collide", cr.Name)
	}
}
