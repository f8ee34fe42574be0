package testenv

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// WidgetsCRD defines widgets.example.com/v1 Widget, a namespaced kind with
// any content: the CRD of the bootstrap bundles in tests, whose objects
// must wait until the member serves it.
const WidgetsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// MemberOfLease is the member whose leaseRef names lease: the bind itself.
// A lease's status is a copy the API writes after its answer, so a test
// that reads it the moment `kobe lease` returns may find it empty.
func MemberOfLease(ctx context.Context, c client.Reader, namespace, lease string) (*kobev1.ClusterInstance, error) {
	var list kobev1.ClusterInstanceList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelLease: lease}); err != nil {
		return nil, fmt.Errorf("listing the member of lease %s: %w", lease, err)
	}
	for i := range list.Items {
		if ref := list.Items[i].Spec.LeaseRef; ref != nil && ref.Name == lease {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no member names lease %s", lease)
}
