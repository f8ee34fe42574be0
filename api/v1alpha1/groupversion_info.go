// Package v1alpha1 holds the kobe.kunobi.ninja/v1alpha1 API: ClusterPool,
// ClusterInstance, ClusterLease, AccessPolicy and BootstrapConfig. It imports
// only apimachinery and controller-runtime so that clients can depend on it.
//
// +kubebuilder:object:generate=true
// +groupName=kobe.kunobi.ninja
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every kobe kind.
	GroupVersion = schema.GroupVersion{Group: "kobe.kunobi.ninja", Version: "v1alpha1"}

	// SchemeBuilder registers the kobe kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kobe kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
