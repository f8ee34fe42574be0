package incluster

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// A member is proven destroyed (cleanupMode VerifiedDestroy) by the UIDs of
// its host objects: Manifest records them while the member is Ready, and
// Verify, after Delete, looks each one up by name. An object that is not
// found, or that is found with another UID, is gone: the API server never
// gives two objects one UID. Every read goes through Options.Client, which
// reads live (no cache that could still hold a deleted object, or not yet
// hold a new one).

var _ backend.Verifier = (*Backend)(nil)

// Kind and name of the Check that proves the member's client CA gone.
const (
	checkKindCredentials = "Credentials"
	checkNameClientCA    = "member client CA"
)

// Manifest implements backend.Verifier: every host object of the member
// (those Delete deletes), as its kind, "<namespace>/<name>" and UID, sorted
// by kind and then name.
func (b *Backend) Manifest(ctx context.Context, m backend.Member) ([]kobev1.ManifestResource, error) {
	objs, err := b.memberObjects(ctx, m)
	if err != nil {
		return nil, err
	}
	out := make([]kobev1.ManifestResource, 0, len(objs))
	for _, o := range objs {
		out = append(out, manifestEntry(o))
	}
	sortManifest(out)
	return out, nil
}

// Verify implements backend.Verifier: one Check per manifest entry, in
// order; then one for each object of the member found now that the
// manifest lacks; last, one proving the member's PKI Secret (its client CA,
// which signs lease credentials) gone. An API error other than NotFound
// returns no checks: nothing was proven.
func (b *Backend) Verify(ctx context.Context, m backend.Member, manifest []kobev1.ManifestResource) ([]backend.Check, error) {
	checks := make([]backend.Check, 0, len(manifest)+1)
	recorded := map[types.UID]bool{}
	for _, r := range manifest {
		if r.ID != "" {
			recorded[types.UID(r.ID)] = true
		}
		c, err := b.verifyResource(ctx, r)
		if err != nil {
			return nil, err
		}
		checks = append(checks, c)
	}

	left, err := b.memberObjects(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("verifying member %s: %w", m.Name, err)
	}
	var extra []backend.Check
	for _, o := range left {
		if recorded[o.GetUID()] {
			continue // checked above, by name and UID
		}
		extra = append(extra, backend.Check{
			ManifestResource: manifestEntry(o),
			Absent:           false,
			Detail:           "found after teardown, not in the creation manifest" + deletingNote(o),
		})
	}
	sort.SliceStable(extra, func(i, j int) bool { return lessResource(extra[i].ManifestResource, extra[j].ManifestResource) })
	checks = append(checks, extra...)

	ca, err := b.verifyClientCA(ctx, m, manifest)
	if err != nil {
		return nil, err
	}
	return append(checks, ca), nil
}

// verifyResource checks one manifest entry.
func (b *Backend) verifyResource(ctx context.Context, r kobev1.ManifestResource) (backend.Check, error) {
	c := backend.Check{ManifestResource: r}
	obj := newObjectOfKind(r.Kind)
	if obj == nil {
		c.Detail = fmt.Sprintf("kind %q is not a host object kind of this backend: it cannot check it", r.Kind)
		return c, nil
	}
	namespace, name, ok := strings.Cut(r.Name, "/")
	if !ok || namespace == "" || name == "" {
		c.Detail = fmt.Sprintf("name %q is not <namespace>/<name>: it cannot check it", r.Name)
		return c, nil
	}
	err := b.opts.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		c.Absent = true
		c.Detail = fmt.Sprintf("%s %s not found on the host cluster", r.Kind, r.Name)
	case err != nil:
		return c, fmt.Errorf("verifying %s %s: %w", r.Kind, r.Name, err)
	case r.ID == "":
		c.Detail = fmt.Sprintf("%s %s exists (UID %s) and no UID was recorded to tell it from a re-creation", r.Kind, r.Name, obj.GetUID())
	case string(obj.GetUID()) != r.ID:
		c.Absent = true
		c.Detail = fmt.Sprintf("%s %s re-created with another UID (%s); the recorded one is gone", r.Kind, r.Name, obj.GetUID())
	default:
		c.Detail = fmt.Sprintf("%s %s still there with the recorded UID%s", r.Kind, r.Name, deletingNote(obj))
	}
	return c, nil
}

// verifyClientCA checks that the member's PKI Secret, which holds its client
// CA, is gone: not found, or found with a UID that is neither the recorded
// Secret's nor owned by the member (someone else's object of that name).
func (b *Backend) verifyClientCA(ctx context.Context, m backend.Member, manifest []kobev1.ManifestResource) (backend.Check, error) {
	key := types.NamespacedName{Namespace: m.Namespace, Name: secretName(m)}
	c := backend.Check{ManifestResource: kobev1.ManifestResource{Kind: checkKindCredentials, Name: checkNameClientCA}}
	for _, r := range manifest {
		if r.Kind == "Secret" && r.Name == key.String() {
			c.ID = r.ID
		}
	}
	sec := &corev1.Secret{}
	err := b.opts.Client.Get(ctx, key, sec)
	switch {
	case apierrors.IsNotFound(err):
		c.Absent = true
		c.Detail = fmt.Sprintf("PKI Secret %s, which held the client CA, not found", key)
	case err != nil:
		return c, fmt.Errorf("verifying the client CA of member %s (Secret %s): %w", m.Name, key, err)
	case (c.ID != "" && string(sec.UID) == c.ID) || ownedBy(sec, m):
		c.Detail = fmt.Sprintf("PKI Secret %s, which holds the client CA, still there (UID %s)%s", key, sec.UID, deletingNote(sec))
	default:
		c.Absent = true
		c.Detail = fmt.Sprintf("PKI Secret %s re-created with another UID (%s), not the member's; the one that held the client CA is gone", key, sec.UID)
	}
	return c, nil
}

// deletingNote says whether o is being deleted.
func deletingNote(o client.Object) string {
	if ts := o.GetDeletionTimestamp(); ts != nil {
		return fmt.Sprintf(" (deletionTimestamp %s)", ts.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return " (no deletionTimestamp)"
}

// manifestEntry is o as a manifest resource.
func manifestEntry(o client.Object) kobev1.ManifestResource {
	return kobev1.ManifestResource{Kind: kindOf(o), Name: o.GetNamespace() + "/" + o.GetName(), ID: string(o.GetUID())}
}

func sortManifest(rs []kobev1.ManifestResource) {
	sort.SliceStable(rs, func(i, j int) bool { return lessResource(rs[i], rs[j]) })
}

func lessResource(a, b kobev1.ManifestResource) bool {
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.ID < b.ID
}

// kindOf is the kind of one of the member's host objects (typed objects
// read through the client carry no TypeMeta).
func kindOf(o client.Object) string {
	switch o.(type) {
	case *corev1.Pod:
		return "Pod"
	case *corev1.Service:
		return "Service"
	case *corev1.Secret:
		return "Secret"
	case *networkingv1.NetworkPolicy:
		return "NetworkPolicy"
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget"
	}
	return fmt.Sprintf("%T", o)
}

// newObjectOfKind is an empty object of a kind the member is made of, or
// nil for any other kind.
func newObjectOfKind(kind string) client.Object {
	switch kind {
	case "Pod":
		return &corev1.Pod{}
	case "Service":
		return &corev1.Service{}
	case "Secret":
		return &corev1.Secret{}
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	}
	return nil
}
