package testenv

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
