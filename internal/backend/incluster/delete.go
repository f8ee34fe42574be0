package incluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// kinds are the host object kinds a member is made of, pods first so that
// the control plane stops before its Secret goes, and the NetworkPolicy
// last: it must outlive the pods (Delete).
var kinds = []struct {
	name    string
	newList func() client.ObjectList
	items   func(client.ObjectList) []client.Object
}{
	{"Pod", func() client.ObjectList { return &corev1.PodList{} }, func(l client.ObjectList) []client.Object {
		return objects(l.(*corev1.PodList).Items)
	}},
	{"PodDisruptionBudget", func() client.ObjectList { return &policyv1.PodDisruptionBudgetList{} }, func(l client.ObjectList) []client.Object {
		return objects(l.(*policyv1.PodDisruptionBudgetList).Items)
	}},
	{"Service", func() client.ObjectList { return &corev1.ServiceList{} }, func(l client.ObjectList) []client.Object {
		return objects(l.(*corev1.ServiceList).Items)
	}},
	{"Secret", func() client.ObjectList { return &corev1.SecretList{} }, func(l client.ObjectList) []client.Object {
		return objects(l.(*corev1.SecretList).Items)
	}},
	{"NetworkPolicy", func() client.ObjectList { return &networkingv1.NetworkPolicyList{} }, func(l client.ObjectList) []client.Object {
		return objects(l.(*networkingv1.NetworkPolicyList).Items)
	}},
}

// objects turns a slice of API objects into client.Objects.
func objects[T any, PT interface {
	*T
	client.Object
}](items []T) []client.Object {
	out := make([]client.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// Delete implements backend.Backend: it deletes every object of the member
// it finds (by the member-UID label, and by name where the name is the
// member's and the object is owned by it), each with a UID precondition so
// that an object re-created under the same name by someone else survives.
// gone is true only once a fresh look finds none left; pods are given a
// grace of one second (deleteGrace).
//
// The NetworkPolicy goes last: only in a pass whose live list finds no pod
// of the member, so that a pod slow to die, or one whose delete failed,
// never runs unfiltered. When the first pass's pods are gone at once, the
// policy goes in a second pass of the same call.
func (b *Backend) Delete(ctx context.Context, m backend.Member) (bool, error) {
	objs, err := b.memberObjects(ctx, m)
	if err != nil {
		return false, err
	}
	if len(objs) == 0 {
		return true, nil
	}
	heldBack, err := b.deleteMemberObjects(ctx, objs)
	if err != nil {
		return false, err
	}
	left, err := b.memberObjects(ctx, m)
	if err != nil {
		return false, err
	}
	if heldBack && len(left) > 0 && !slices.ContainsFunc(left, isPod) {
		if _, err := b.deleteMemberObjects(ctx, left); err != nil {
			return false, err
		}
		if left, err = b.memberObjects(ctx, m); err != nil {
			return false, err
		}
	}
	return len(left) == 0, nil
}

// deleteMemberObjects deletes the objects of one member that are not being
// deleted already, except its NetworkPolicies while any of objs is a pod
// (heldBack says it kept one).
func (b *Backend) deleteMemberObjects(ctx context.Context, objs []client.Object) (heldBack bool, err error) {
	podsLeft := slices.ContainsFunc(objs, isPod)
	var errs []error
	for _, o := range objs {
		if o.GetDeletionTimestamp() != nil {
			continue
		}
		if podsLeft && isPolicy(o) {
			heldBack = true
			continue
		}
		if err := b.deleteObject(ctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	return heldBack, errors.Join(errs...)
}

func isPod(o client.Object) bool {
	_, ok := o.(*corev1.Pod)
	return ok
}

func isPolicy(o client.Object) bool {
	_, ok := o.(*networkingv1.NetworkPolicy)
	return ok
}

// deleteObject deletes one object, fenced by its UID, in the background.
func (b *Backend) deleteObject(ctx context.Context, o client.Object) error {
	uid := o.GetUID()
	opts := []client.DeleteOption{client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground)}
	if _, isPod := o.(*corev1.Pod); isPod {
		opts = append(opts, client.GracePeriodSeconds(deleteGrace))
	}
	err := b.opts.Client.Delete(ctx, o, opts...)
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Conflict: the UID differs, the object is someone else's now.
		return nil
	}
	return fmt.Errorf("deleting %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
}

// memberObjects lists every host object of the member: by label, plus the
// objects at the member's own names that are owned by it (should a label
// have been stripped).
func (b *Backend) memberObjects(ctx context.Context, m backend.Member) ([]client.Object, error) {
	seen := map[types.UID]bool{}
	var out []client.Object
	for _, k := range kinds {
		l := k.newList()
		if err := b.opts.Client.List(ctx, l, client.InNamespace(m.Namespace), client.MatchingLabels{LabelMemberUID: string(m.UID)}); err != nil {
			return nil, fmt.Errorf("listing %ss of member %s: %w", k.name, m.Name, err)
		}
		for _, o := range k.items(l) {
			if !seen[o.GetUID()] {
				seen[o.GetUID()] = true
				out = append(out, o)
			}
		}
	}
	byName := []client.Object{&corev1.Service{}, &corev1.Service{}, &corev1.Secret{}, &networkingv1.NetworkPolicy{}, &policyv1.PodDisruptionBudget{}, &corev1.Pod{}}
	names := []string{serviceName(m), EgressServiceName(m), secretName(m), policyName(m), pdbName(m), podName(m, 0)}
	for i, o := range byName {
		err := b.opts.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: names[i]}, o)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %T %s of member %s: %w", o, names[i], m.Name, err)
		}
		if !seen[o.GetUID()] && ownedByUID(o, m.UID) {
			seen[o.GetUID()] = true
			out = append(out, o)
		}
	}
	return out, nil
}

// ownedByUID says whether an owner reference of o names uid.
func ownedByUID(o client.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// Sweep implements backend.Sweeper: every object in Options.Namespace that
// carries this backend's labels and a member UID owned rejects is deleted
// (UID preconditions). removed lists "<Kind> <namespace>/<name>" of each.
// Objects in other namespaces are never looked at. As in Delete, a member's
// NetworkPolicy goes only once a live list finds none of its pods: in a
// second pass when they went in the first, else in a later sweep.
func (b *Backend) Sweep(ctx context.Context, owned backend.OwnedFunc) ([]string, error) {
	var removed []string
	var errs []error
	for pass := range 2 {
		found, podsLeft, err := b.unowned(ctx, owned)
		errs = append(errs, err)
		heldBack := false
		for _, f := range found {
			if pass > 0 && !isPolicy(f.obj) {
				continue // the first pass tried it
			}
			if isPolicy(f.obj) && (podsLeft == nil || podsLeft[f.obj.GetLabels()[LabelMemberUID]]) {
				heldBack = true
				continue
			}
			if err := b.deleteObject(ctx, f.obj); err != nil {
				errs = append(errs, err)
				continue
			}
			b.opts.Log.Info("Removed host object of a member nobody owns", "object", f.desc, "memberUID", f.obj.GetLabels()[LabelMemberUID])
			removed = append(removed, f.desc)
		}
		if !heldBack {
			break
		}
	}
	return removed, errors.Join(errs...)
}

// Leaks implements backend.LeakFinder: what Sweep would delete, deleting
// nothing.
func (b *Backend) Leaks(ctx context.Context, owned backend.OwnedFunc) ([]string, error) {
	found, _, err := b.unowned(ctx, owned)
	out := make([]string, 0, len(found))
	for _, f := range found {
		out = append(out, f.desc)
	}
	return out, err
}

// unownedObject is a host object of a member nobody owns.
type unownedObject struct {
	obj  client.Object
	desc string // "<Kind> <namespace>/<name>"
}

// unowned lists the objects in Options.Namespace that carry this backend's
// labels and a member UID owned rejects, and are not being deleted already.
// podsLeft holds the member UIDs of those that have a pod, being deleted or
// not; it is nil when the pods could not be listed.
func (b *Backend) unowned(ctx context.Context, owned backend.OwnedFunc) (out []unownedObject, podsLeft map[string]bool, err error) {
	var errs []error
	verdict := map[string]bool{}
	podsLeft = map[string]bool{}
	for _, k := range kinds {
		l := k.newList()
		err := b.opts.Client.List(ctx, l, client.InNamespace(b.opts.Namespace),
			client.MatchingLabels{LabelManagedBy: ManagedBy, LabelBackend: string(b.opts.Type)}, client.HasLabels{LabelMemberUID})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing %ss in %s: %w", k.name, b.opts.Namespace, err))
			if k.name == "Pod" {
				podsLeft = nil // unknown: no policy may go
			}
			continue
		}
		items := k.items(l)
		sort.Slice(items, func(i, j int) bool { return items[i].GetName() < items[j].GetName() })
		for _, o := range items {
			uid := o.GetLabels()[LabelMemberUID]
			keep, known := verdict[uid]
			if !known {
				keep = owned(o.GetNamespace(), types.UID(uid))
				verdict[uid] = keep
			}
			if keep {
				continue
			}
			if isPod(o) {
				podsLeft[uid] = true
			}
			if o.GetDeletionTimestamp() != nil {
				continue
			}
			out = append(out, unownedObject{obj: o, desc: fmt.Sprintf("%s %s/%s", k.name, o.GetNamespace(), o.GetName())})
		}
	}
	return out, podsLeft, errors.Join(errs...)
}
