package incluster

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

var _ backend.Fencer = (*Backend)(nil)

// fenceGrace is the grace a fence deletes the member's pods with: the
// kubelet sends SIGTERM at once (kube-apiserver then stops taking
// connections) and SIGKILL a second later. 0 would not be faster: it only
// removes the pod from the API before the kubelet has stopped anything.
const fenceGrace int64 = 1

// Fence implements backend.Fencer: it deletes every pod of the member
// (control plane and nodes) with a grace of fenceGrace, each fenced by its
// UID. Pods are never made twice (AnnotationPodsCreated), so nothing brings
// the API server back; the holder has no access to the host objects. The
// Service, the NetworkPolicy and the PKI Secret are left to Delete: the pods
// must stop before their policy goes.
func (b *Backend) Fence(ctx context.Context, m backend.Member) error {
	pods, err := b.memberPods(ctx, m)
	if err != nil {
		return err
	}
	var errs []error
	for i := range pods {
		p := &pods[i]
		if g := p.DeletionGracePeriodSeconds; p.DeletionTimestamp != nil && g != nil && *g <= fenceGrace {
			continue // going already, as fast
		}
		uid := p.UID
		err := b.opts.Client.Delete(ctx, p, client.Preconditions{UID: &uid}, client.GracePeriodSeconds(fenceGrace))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting pod %s/%s of member %s: %w", p.Namespace, p.Name, m.Name, err))
		}
	}
	return errors.Join(errs...)
}

// memberPods lists the member's pods by its UID label, plus its first
// control-plane pod by name should that label be missing.
func (b *Backend) memberPods(ctx context.Context, m backend.Member) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := b.opts.Client.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingLabels{LabelMemberUID: string(m.UID)}); err != nil {
		return nil, fmt.Errorf("listing the pods of member %s: %w", m.Name, err)
	}
	pods := list.Items
	first := corev1.Pod{}
	err := b.opts.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: podName(m, 0)}, &first)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading pod %s of member %s: %w", podName(m, 0), m.Name, err)
	case ownedBy(&first, m) && first.Labels[LabelMemberUID] != string(m.UID):
		pods = append(pods, first)
	}
	return pods, nil
}
