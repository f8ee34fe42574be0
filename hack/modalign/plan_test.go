package main

import (
	"reflect"
	"testing"
)

func TestPlan(t *testing.T) {
	cases := []struct {
		name string
		uses map[string]map[string]use
		want []change
	}{
		{
			name: "one version everywhere: nothing to do",
			uses: map[string]map[string]use{
				".":   {"golang.org/x/net": {Version: "v0.62.0"}},
				"cp":  {"golang.org/x/net": {Version: "v0.62.0"}},
				"cp2": {"only/here": {Version: "v0.1.0"}},
			},
		},
		{
			name: "the lower ones rise to the highest, whichever module has it",
			uses: map[string]map[string]use{
				".":    {"golang.org/x/net": {Version: "v0.62.0"}, "golang.org/x/sys": {Version: "v0.49.0"}},
				"cp":   {"golang.org/x/net": {Version: "v0.57.0"}, "golang.org/x/sys": {Version: "v0.50.0"}},
				"kwok": {"golang.org/x/net": {Version: "v0.51.0"}},
			},
			want: []change{
				{Module: ".", Path: "golang.org/x/sys", From: "v0.49.0", To: "v0.50.0"},
				{Module: "cp", Path: "golang.org/x/net", From: "v0.57.0", To: "v0.62.0"},
				{Module: "kwok", Path: "golang.org/x/net", From: "v0.51.0", To: "v0.62.0"},
			},
		},
		{
			name: "a pseudo-version before a release is lower than the release",
			uses: map[string]map[string]use{
				".":  {"google.golang.org/protobuf": {Version: "v1.36.12"}},
				"cp": {"google.golang.org/protobuf": {Version: "v1.36.12-0.20260120151049-f2248ac996af"}},
			},
			want: []change{
				{Module: "cp", Path: "google.golang.org/protobuf", From: "v1.36.12-0.20260120151049-f2248ac996af", To: "v1.36.12"},
			},
		},
		{
			name: "a replaced dependency is named for an edit of its replace",
			uses: map[string]map[string]use{
				".":  {"k8s.io/api": {Version: "v0.37.3"}},
				"cp": {"k8s.io/api": {Version: "v0.37.2", Replaced: true}},
			},
			want: []change{
				{Module: "cp", Path: "k8s.io/api", From: "v0.37.2", To: "v0.37.3", Replaced: true},
			},
		},
		{
			name: "a dependency of one module only is left alone",
			uses: map[string]map[string]use{
				".":  {"a": {Version: "v1.0.0"}},
				"cp": {"b": {Version: "v2.0.0"}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := plan(tc.uses); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestGetArgsLeaveReplacesOut(t *testing.T) {
	changes := []change{
		{Module: "cp", Path: "golang.org/x/net", To: "v0.62.0"},
		{Module: "cp", Path: "k8s.io/api", To: "v0.37.3", Replaced: true},
		{Module: ".", Path: "golang.org/x/sys", To: "v0.50.0"},
	}
	if got, want := getArgs(changes, "cp"), []string{"golang.org/x/net@v0.62.0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("getArgs(cp) = %v, want %v", got, want)
	}
}

func TestPrefixes(t *testing.T) {
	skip := prefixes{"go.etcd.io/etcd/"}
	for path, want := range map[string]bool{
		"go.etcd.io/etcd/client/v3": true,
		"go.etcd.io/bbolt":          false,
		"golang.org/x/net":          false,
	} {
		if got := skip.match(path); got != want {
			t.Errorf("match(%s) = %v, want %v", path, got, want)
		}
	}
}
