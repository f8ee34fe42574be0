package incluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

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

// fenceWait bounds how long a fence waits for the member's API server to
// stop (a kubelet that does not act would hold it forever); fencePoll is
// how often it looks, and fenceDial how long a probe connection may take.
const (
	fenceWait = 10 * time.Second
	fencePoll = 100 * time.Millisecond
	fenceDial = 250 * time.Millisecond
)

// Fence implements backend.Fencer: it deletes every pod of the member
// (control plane and nodes) with a grace of fenceGrace, each fenced by its
// UID, then waits until each control-plane pod is gone or its API port
// refuses connections: the API server, the only judge of the lease's
// certificate and of tokens minted inside, closes its listener on the
// kubelet's SIGTERM, and that may come seconds after the delete on a busy
// node; a caller that answers a release after Fence knows access ended.
// Node pods are not waited for. An operator that cannot reach pod
// addresses (run outside the host cluster) cannot tell and does not wait.
// An error when the API server still answers after fenceWait or at ctx's
// end. Pods are never made twice (AnnotationPodsCreated), so nothing brings
// the API server back; the holder has no access to the host objects. The
// Service, the NetworkPolicy and the PKI Secret are left to Delete: the
// pods must stop before their policy goes.
func (b *Backend) Fence(ctx context.Context, m backend.Member) error {
	pods, err := b.memberPods(ctx, m)
	if err != nil {
		return err
	}
	var errs []error
	var servers []corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Labels[LabelComponent] != ComponentNode {
			servers = append(servers, *p)
		}
		if g := p.DeletionGracePeriodSeconds; p.DeletionTimestamp != nil && g != nil && *g <= fenceGrace {
			continue // going already, as fast
		}
		uid := p.UID
		err := b.opts.Client.Delete(ctx, p, client.Preconditions{UID: &uid}, client.GracePeriodSeconds(fenceGrace))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting pod %s/%s of member %s: %w", p.Namespace, p.Name, m.Name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	port := int32(0)
	if b.opts.Template != nil {
		if set, err := b.opts.Template.Settings(m); err == nil {
			port = set.APIPort
		}
	}
	return b.waitStopped(ctx, m, servers, port)
}

// waitStopped waits, for at most fenceWait, until each of pods is gone
// (or another pod has its name) or refuses connections on port.
func (b *Backend) waitStopped(ctx context.Context, m backend.Member, pods []corev1.Pod, port int32) error {
	if len(pods) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, fenceWait)
	defer cancel()
	tick := time.NewTicker(fencePoll)
	defer tick.Stop()
	var lastReadErr error
	for {
		var left []string
		for i := range pods {
			got := &corev1.Pod{}
			err := b.opts.Client.Get(ctx, client.ObjectKeyFromObject(&pods[i]), got)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil && refusedForGood(err):
				return fmt.Errorf("reading pod %s of member %s: %w", pods[i].Name, m.Name, err)
			case err != nil:
				// Not proven stopped. A read can fail for want of time
				// before the context says so (client-go's rate limiter
				// refuses a wait that would pass the deadline): try again
				// until the time is up.
				lastReadErr = err
				left = append(left, pods[i].Name)
			case got.UID == pods[i].UID && answers(ctx, got, port):
				left = append(left, pods[i].Name)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if lastReadErr != nil {
				return fmt.Errorf("the API server of member %s still answers in pods %v, deleted (their kubelet has not stopped them, or they could not be read: %w): %w", m.Name, left, lastReadErr, ctx.Err())
			}
			return fmt.Errorf("the API server of member %s still answers in pods %v, deleted (their kubelet has not stopped them): %w", m.Name, left, ctx.Err())
		case <-tick.C:
		}
	}
}

// refusedForGood tells a read error that trying again will not fix (the
// host API server refused the operator's request itself) from one of time
// or load.
func refusedForGood(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsInvalid(err)
}

// answers tells whether p takes connections on port at its pod IP. A pod
// without an address, a refusal and an address this process cannot reach
// all count as no.
func answers(ctx context.Context, p *corev1.Pod, port int32) bool {
	if p.Status.PodIP == "" || port == 0 {
		return false
	}
	d := net.Dialer{Timeout: fenceDial}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))))
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
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
