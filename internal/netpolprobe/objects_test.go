package netpolprobe

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A run's objects belong to the operator's pod when it is known, so that
// a run cut short by helm uninstall or a killed leader is collected with
// that pod; without an owner they carry none (the next run's cleanup
// removes them).
func TestObjectsOwner(t *testing.T) {
	owner := &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "kobe-abc", UID: "u-1"}
	for _, tc := range []struct {
		owner *metav1.OwnerReference
		want  int
	}{{owner, 1}, {nil, 0}} {
		o := objects{namespace: "kobe", run: "r1", image: "etcd:1", deadline: time.Minute, owner: tc.owner}
		for _, obj := range []client.Object{o.policy(), o.listener()} {
			refs := obj.GetOwnerReferences()
			if len(refs) != tc.want || tc.want == 1 && (refs[0].UID != "u-1" || refs[0].Kind != "Pod") {
				t.Errorf("%T %s owners %+v, want %d (%v)", obj, obj.GetGenerateName(), refs, tc.want, tc.owner)
			}
			if obj.GetNamespace() != "kobe" || obj.GetLabels()[LabelRun] != "r1" {
				t.Errorf("%T metadata %+v", obj, obj)
			}
		}
	}
}
