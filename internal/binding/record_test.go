package binding_test

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
)

// TestRecordAndElect: a lease's bind is the member that names it; with two
// (a claim applied after its binder gave up) and no status copy, Record
// refuses to choose and Elect takes the earliest.
func TestRecordAndElect(t *testing.T) {
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "l", UID: "l-uid"}}
	at := func(s int) *metav1.Time { t := metav1.NewTime(time.Unix(1_700_000_000+int64(s), 0)); return &t }
	m := func(name string, ref *kobev1.LeaseBinding) kobev1.ClusterInstance {
		return kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name)}, Spec: kobev1.ClusterInstanceSpec{LeaseRef: ref}}
	}
	other := m("x", &kobev1.LeaseBinding{Name: "other", UID: "other-uid", BoundAt: at(0)})
	late := m("b", &kobev1.LeaseBinding{Name: "l", UID: "l-uid", BoundAt: at(5)})
	early := m("c", &kobev1.LeaseBinding{Name: "l", UID: "l-uid", BoundAt: at(1)})
	sameName := m("y", &kobev1.LeaseBinding{Name: "l", UID: "old-incarnation", BoundAt: at(0)})

	if got := binding.Record([]kobev1.ClusterInstance{other, late, sameName}, l); got == nil || got.Name != "b" {
		t.Errorf("Record with one member naming the lease = %v, want b", got)
	}
	if got := binding.Record([]kobev1.ClusterInstance{late, early}, l); got != nil {
		t.Errorf("Record with two members naming the lease and no status copy = %s, want none", got.Name)
	}
	if got := binding.Elect([]kobev1.ClusterInstance{late, early, other}, l); got == nil || got.Name != "c" {
		t.Errorf("Elect = %v, want the earliest bind c", got)
	}
	withCopy := l.DeepCopy()
	withCopy.Status.InstanceRef = &kobev1.ObjectRef{Name: "b", UID: late.UID}
	if got := binding.Record([]kobev1.ClusterInstance{late, early}, withCopy); got == nil || got.Name != "b" {
		t.Errorf("Record with a status copy naming b = %v, want b", got)
	}
	forged := l.DeepCopy()
	forged.Status.InstanceRef = &kobev1.ObjectRef{Name: "x", UID: other.UID}
	if got := binding.Record([]kobev1.ClusterInstance{other, late}, forged); got != nil {
		t.Errorf("Record with a status naming a member of another lease = %s, want none", got.Name)
	}
	if binding.Elect([]kobev1.ClusterInstance{other, sameName}, l) != nil {
		t.Error("Elect picked a member that names another lease (or another incarnation)")
	}

	rec := l.DeepCopy()
	binding.RecordBound(rec, &early, 30*time.Minute)
	if rec.Status.Phase != kobev1.LeaseBound || !rec.Status.BoundAt.Equal(early.Spec.LeaseRef.BoundAt) ||
		rec.Status.ExpiresAt.Sub(early.Spec.LeaseRef.BoundAt.Time) != 30*time.Minute || rec.Status.InstanceRef.UID != early.UID {
		t.Errorf("RecordBound: %+v", rec.Status)
	}
	if err := errors.New("x"); !binding.Uncertain(err) {
		t.Error("a transport error is not uncertain")
	}
}
