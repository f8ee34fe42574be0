package patch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// StaleRequeue is how soon a reconcile whose write met a newer object runs
// again, deciding from a fresh read.
const StaleRequeue = time.Second

// Object is a kind whose status carries observedGeneration (every kobe kind,
// see api/v1alpha1/status.go).
type Object interface {
	client.Object
	SetObservedGeneration(int64)
}

// Helper holds one reconcile's object and the snapshot its writes are
// computed against. Create it right after Get, defer Finish, and never copy
// it.
type Helper struct {
	c      client.Client
	obj    Object
	before Object
	gone   bool
	stale  bool
	// keep: status changes are not written (KeepStatus).
	keep bool
}

// New snapshots obj, as just read, for c's writes.
func New(c client.Client, obj Object) *Helper {
	h := &Helper{c: c, obj: obj}
	h.Snapshot()
	return h
}

// Snapshot takes a new base for the next writes. Call it after writing obj
// by other means (an Update, a Patch of your own); the status changes made
// since the last snapshot are then no longer seen as changes.
func (h *Helper) Snapshot() {
	h.before = h.obj.DeepCopyObject().(Object)
}

// Base is the object as of the last snapshot: what the next status write
// is computed against. Callers must not change it.
func (h *Helper) Base() Object { return h.before }

// Gone reports whether the object no longer exists (a write found it gone,
// or the last finalizer was removed); nothing is written after that.
func (h *Helper) Gone() bool { return h.gone }

// Stale reports whether a write met a newer object; the reconcile should end
// and decide again from a fresh read. Nothing is written after that.
func (h *Helper) Stale() bool { return h.stale }

// MarkStale records that a read found the object newer than the state the
// reconcile decided from: nothing more is written, and Finish asks to run
// again shortly, as after a write that met a newer object.
func (h *Helper) MarkStale() { h.stale = true }

// Done reports whether the reconcile must stop writing: the object is gone
// or the state it decided from is stale.
func (h *Helper) Done() bool { return h.gone || h.stale }

// KeepStatus makes the status as the API holds it final for this
// reconcile: changes made to it in memory are not written, by Status,
// Finish or RemoveFinalizer. For a reconcile that deleted the object itself,
// or ends it at once: a status write there is a write nobody reads (and,
// fenced by a resourceVersion the delete changed, a conflict).
func (h *Helper) KeepStatus() { h.keep = true }

// Status writes the object's status if it changed since the snapshot,
// setting status.observedGeneration to metadata.generation first. The write
// is a merge patch fenced by the snapshot's resourceVersion: conditions are a
// list that a merge patch replaces whole, so an unfenced write could drop a
// condition someone else just set. NotFound marks the helper Gone and
// Conflict marks it Stale; neither is an error. After a successful write the
// object (now the server's answer) is the new snapshot.
func (h *Helper) Status(ctx context.Context) error {
	if h.Done() || h.keep {
		return nil
	}
	h.obj.SetObservedGeneration(h.obj.GetGeneration())
	// The patch is computed once (both objects marshalled, then diffed;
	// computing it again to send was 4% of the operator's CPU under load)
	// and sent as computed.
	fenced := client.MergeFromWithOptions(h.before, client.MergeFromWithOptimisticLock{})
	data, err := fenced.Data(h.obj)
	if err != nil {
		return fmt.Errorf("computing the status patch of %s: %w", client.ObjectKeyFromObject(h.obj), err)
	}
	if changed, err := touchesStatus(data); err != nil || !changed {
		return err
	}
	err = h.c.Status().Patch(ctx, h.obj, client.RawPatch(fenced.Type(), data))
	if err := h.classify(err); err != nil {
		return fmt.Errorf("patching status of %s: %w", client.ObjectKeyFromObject(h.obj), err)
	}
	if !h.Done() {
		h.Snapshot()
	}
	return nil
}

// Finish is Reconcile's deferred last step:
//
//	defer func() { res, retErr = h.Finish(ctx, res, retErr) }()
//
// It writes the status and joins its error to the reconcile's; when a write
// met a newer object and nothing failed, it asks to run again shortly and
// logs why at V(1), so a reconcile that keeps meeting conflicts is visible.
func (h *Helper) Finish(ctx context.Context, res ctrl.Result, err error) (ctrl.Result, error) {
	err = errors.Join(err, h.Status(ctx))
	if h.stale && err == nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Object changed meanwhile; deciding again", "after", StaleRequeue)
		if res.RequeueAfter <= 0 || res.RequeueAfter > StaleRequeue {
			res.RequeueAfter = StaleRequeue
		}
	}
	return res, err
}

// AddFinalizer adds finalizer f with a fenced patch if it is missing. Call it
// before changing the status: the server's answer replaces the object.
func (h *Helper) AddFinalizer(ctx context.Context, f string) error {
	if h.Done() || !controllerutil.AddFinalizer(h.obj, f) {
		return nil
	}
	if err := h.patch(ctx); err != nil {
		return fmt.Errorf("adding finalizer %s to %s: %w", f, client.ObjectKeyFromObject(h.obj), err)
	}
	return nil
}

// RemoveFinalizer writes the status (so the story ends on the object), then
// removes finalizer f with a fenced patch. Once removed, the helper is Gone:
// the object may be deleted at once and nothing more is written.
func (h *Helper) RemoveFinalizer(ctx context.Context, f string) error {
	if err := h.Status(ctx); err != nil || h.Done() {
		return err
	}
	if !controllerutil.RemoveFinalizer(h.obj, f) {
		return nil
	}
	if err := h.patch(ctx); err != nil {
		return fmt.Errorf("removing finalizer %s from %s: %w", f, client.ObjectKeyFromObject(h.obj), err)
	}
	if !h.stale {
		h.gone = true
	}
	return nil
}

// patch writes metadata and spec changes made since the snapshot, fenced.
func (h *Helper) patch(ctx context.Context) error {
	err := h.c.Patch(ctx, h.obj, client.MergeFromWithOptions(h.before, client.MergeFromWithOptimisticLock{}))
	if err := h.classify(err); err != nil {
		return err
	}
	if !h.Done() {
		h.Snapshot()
	}
	return nil
}

// classify turns NotFound into Gone and Conflict into Stale.
func (h *Helper) classify(err error) error {
	switch {
	case apierrors.IsNotFound(err):
		h.gone = true
	case apierrors.IsConflict(err):
		h.stale = true
	default:
		return err
	}
	return nil
}

// touchesStatus reports whether a merge patch changes status: comparing the
// JSON each side would send is exact and kind-agnostic.
func touchesStatus(data []byte) (bool, error) {
	var diff map[string]json.RawMessage
	if err := json.Unmarshal(data, &diff); err != nil {
		return false, fmt.Errorf("reading the status patch: %w", err)
	}
	_, ok := diff["status"]
	return ok, nil
}
