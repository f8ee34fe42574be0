// Package bootstrap applies BootstrapConfig bundles of manifests to a
// member: the documents of each bundle's manifests, in lexical order of the
// manifests' names, server-side applied with kobe's field manager. Applying
// is idempotent, so a member's controller can apply again after a restart
// or a failover without keeping anything in memory.
package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// FieldManager owns what kobe applies to a member.
const FieldManager = "kobe-bootstrap"

// Object is one document of a bundle, with where it came from.
type Object struct {
	*unstructured.Unstructured
	// Source is "<bundle>/<manifest>#<document>" (documents count from 1).
	Source string
}

// InvalidError is a bundle that can never be applied as it is: a document
// that does not parse or names no kind, an object the member refuses, a kind
// nothing defines. Only a change to the bundle helps.
type InvalidError struct {
	Source string
	Err    error
}

func (e *InvalidError) Error() string { return e.Source + ": " + e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// ErrWaiting: an object's kind is defined by a CustomResourceDefinition of
// the bundles that the member does not serve yet; apply again shortly.
var ErrWaiting = errors.New("waiting for a CustomResourceDefinition of the bundles to be served")

// Documents returns the objects of bc's manifests, manifests in lexical order
// of their names, documents in their order; empty documents are skipped.
// The references in their string values are replaced by vals (Resolve);
// nil vals substitutes nothing.
func Documents(bc *kobev1.BootstrapConfig, vals Values) ([]Object, error) {
	manifests := slices.Clone(bc.Spec.Manifests)
	slices.SortFunc(manifests, func(a, b kobev1.BootstrapManifest) int { return strings.Compare(a.Name, b.Name) })
	var out []Object
	for _, m := range manifests {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(m.Content)), 4096)
		for doc := 1; ; doc++ {
			source := fmt.Sprintf("%s/%s#%d", bc.Name, m.Name, doc)
			var raw map[string]any
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, &InvalidError{Source: source, Err: fmt.Errorf("not YAML or JSON: %w", err)}
			}
			if len(raw) == 0 {
				continue
			}
			if vals != nil {
				if _, err := substitute(raw, vals); err != nil {
					return nil, &InvalidError{Source: source, Err: err}
				}
			}
			u := &unstructured.Unstructured{Object: raw}
			switch {
			case u.GetAPIVersion() == "" || u.GetKind() == "":
				return nil, &InvalidError{Source: source, Err: errors.New("apiVersion and kind are required")}
			case u.GetName() == "":
				return nil, &InvalidError{Source: source, Err: fmt.Errorf("%s has no metadata.name (generateName cannot be applied)", u.GetKind())}
			case strings.HasSuffix(u.GetKind(), "List"):
				return nil, &InvalidError{Source: source, Err: fmt.Errorf("%s: list the items as documents of their own", u.GetKind())}
			}
			out = append(out, Object{Unstructured: u, Source: source})
		}
	}
	return out, nil
}

// Apply server-side applies objs, in order, to the member cfg reaches.
// It returns an *InvalidError when an object can never be applied, an error
// wrapping ErrWaiting when a kind defined by one of objs is not served yet,
// and any other error when the member could not be reached.
func Apply(ctx context.Context, cfg *rest.Config, objs []Object) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("building an HTTP client for the member: %w", err)
	}
	defer hc.CloseIdleConnections()
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("building a discovery client for the member: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("building a client for the member: %w", err)
	}
	defined := definedKinds(objs)
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset() // a CRD applied just before may be served by now
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if meta.IsNoMatchError(err) {
			if defined[gvk.GroupKind()] {
				return fmt.Errorf("%s: %s %s: %w", o.Source, gvk.GroupKind(), o.GetName(), ErrWaiting)
			}
			return &InvalidError{Source: o.Source, Err: fmt.Errorf("the member serves no %s, and no CustomResourceDefinition of the bundles defines it", gvk)}
		}
		if err != nil {
			return fmt.Errorf("%s: finding the API of %s: %w", o.Source, gvk, err)
		}
		ri := dynamic.ResourceInterface(dyn.Resource(mapping.Resource))
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		_, err = ri.Apply(ctx, o.GetName(), o.Unstructured, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		switch {
		case err == nil:
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			return &InvalidError{Source: o.Source, Err: fmt.Errorf("the member refused %s %s: %w", gvk.Kind, o.GetName(), err)}
		case apierrors.IsNotFound(err) && o.GetNamespace() != "":
			// The namespace is missing: a bundle must create it first.
			return &InvalidError{Source: o.Source, Err: fmt.Errorf("%s %s: namespace %s does not exist (create it in an earlier document)", gvk.Kind, o.GetName(), o.GetNamespace())}
		default:
			return fmt.Errorf("%s: applying %s %s: %w", o.Source, gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

// definedKinds are the kinds the CustomResourceDefinitions among objs define.
func definedKinds(objs []Object) map[schema.GroupKind]bool {
	out := map[schema.GroupKind]bool{}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" || !strings.HasPrefix(o.GetAPIVersion(), "apiextensions.k8s.io/") {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		out[schema.GroupKind{Group: group, Kind: kind}] = true
	}
	return out
}
