// Package v1alpha1 holds the kobe.kunobi.ninja/v1alpha1 API: ClusterPool,
// ClusterInstance, ClusterLease, AccessPolicy and BootstrapConfig. It imports
// only apimachinery and controller-runtime so that clients can depend on it.
//
// +kubebuilder:object:generate=true
// +groupName=kobe.kunobi.ninja
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of every kobe kind.
	GroupVersion = schema.GroupVersion{Group: "kobe.kunobi.ninja", Version: "v1alpha1"}

	// SchemeBuilder registers the kobe kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kobe kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme

	// knownTypes are the kinds of this group version, registered by each
	// <kind>_types.go.
	knownTypes []runtime.Object
)

func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
