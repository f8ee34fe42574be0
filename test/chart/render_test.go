package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "../../charts/kobe"

// testNamespace is the release namespace of every render.
const testNamespace = "kobe-system"

// rendered is one render of the chart: its objects by kind and name, and its
// notes.
type rendered struct {
	objs  []*unstructured.Unstructured
	notes string
}

// render renders the chart as `helm template kobe charts/kobe -n
// kobe-system` would with vals, schema validation included.
func render(t *testing.T, vals map[string]any) (*rendered, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	inst := action.NewInstall(action.NewConfiguration())
	inst.DryRunStrategy = action.DryRunClient
	inst.Replace = true
	inst.ReleaseName = "kobe"
	inst.Namespace = testNamespace
	kv, err := common.ParseKubeVersion("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	inst.KubeVersion = kv
	r, err := inst.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	rel, ok := r.(*release.Release)
	if !ok {
		t.Fatalf("release is a %T", r)
	}
	out := &rendered{notes: rel.Info.Notes}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rel.Manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the rendered manifest: %v\n%s", err, rel.Manifest)
		}
		if m == nil {
			continue
		}
		out.objs = append(out.objs, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// mustRender renders and fails the test on an error.
func mustRender(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	r, err := render(t, vals)
	if err != nil {
		t.Fatalf("rendering with %v: %v", vals, err)
	}
	return r
}

// valuesFile reads a values file as `helm install -f` reads it.
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	opts := values.Options{ValueFiles: []string{filepath.Join("testdata", name)}}
	v, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return v
}

// find returns the objects of kind, and fails the test unless there are
// exactly want of them (want < 0: any number).
func (r *rendered) find(t *testing.T, kind string, want int) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range r.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	if want >= 0 && len(out) != want {
		t.Fatalf("%d %s rendered, want %d (kinds: %s)", len(out), kind, want, r.kinds())
	}
	return out
}

func (r *rendered) kinds() string {
	var b bytes.Buffer
	for _, o := range r.objs {
		fmt.Fprintf(&b, "%s/%s ", o.GetKind(), o.GetName())
	}
	return b.String()
}

// typed converts the one object of kind into out.
func (r *rendered) typed(t *testing.T, kind string, out any) {
	t.Helper()
	o := r.find(t, kind, 1)[0]
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s %s does not convert to %T (an unknown or misplaced field?): %v", kind, o.GetName(), out, err)
	}
}
