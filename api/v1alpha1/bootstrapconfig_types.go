package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BootstrapConfigSpec is a bundle applied to a member before it is Ready:
// manifests applied in lexical order of their names, or a Job that runs real
// tooling against the member.
// +kubebuilder:validation:XValidation:rule="has(self.manifests) != has(self.job)",message="set exactly one of manifests or job"
type BootstrapConfigSpec struct {
	// manifests are applied in lexical order of their names.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Manifests []BootstrapManifest `json:"manifests,omitempty"`

	// job runs an image with the member's kubeconfig mounted.
	// +optional
	Job *BootstrapJob `json:"job,omitempty"`

	// parameters the bundle takes. A pool passes their values in
	// bootstraps[].parameters; $(params.NAME) in a string value of the
	// manifests is replaced by the value ($$(params.NAME) is kept as the
	// literal text $(params.NAME)). $(member.name), $(member.namespace) and
	// $(pool.name) are always defined.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Parameters []BootstrapParameter `json:"parameters,omitempty"`
}

// BootstrapParameter is one parameter of a bundle.
type BootstrapParameter struct {
	// name of the parameter, as in $(params.NAME).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// default is the value when a pool passes none; without a default a
	// pool must pass a value.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Default *string `json:"default,omitempty"`

	// description says what the parameter is for.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// BootstrapRef names a BootstrapConfig of the pool's namespace and the
// values of its parameters.
type BootstrapRef struct {
	// name of the BootstrapConfig.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// parameters are the values of the bundle's parameters, by name. A
	// name the bundle does not declare fails the member (a typo must not
	// go unnoticed).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z_][A-Za-z0-9_]*$') && size(k) <= 63)",message="parameter names are letters, digits and underscores, not starting with a digit, at most 63 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(self[k]) <= 4096)",message="parameter values are at most 4096 characters"
	Parameters map[string]string `json:"parameters,omitempty"`
}

// BootstrapManifest is one named YAML document stream.
type BootstrapManifest struct {
	// name orders the manifest among its siblings.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// content is YAML, possibly several documents.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262144
	Content string `json:"content"`
}

// BootstrapJob is a container run to completion against a member.
type BootstrapJob struct {
	// image to run.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// command overrides the image's entrypoint.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Command []string `json:"command,omitempty"`

	// args to the command.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Args []string `json:"args,omitempty"`

	// timeout for the job to complete.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="timeout must be greater than zero"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// BootstrapConfigStatus is what the operator observed of the bundle.
type BootstrapConfigStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions of the bundle.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BootstrapConfig is a reusable bundle that warms pool members up to the
// state tests need (GitOps controllers, CRDs, dependencies).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bootcfg,categories=kobe
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BootstrapConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the bundle.
	// +required
	Spec BootstrapConfigSpec `json:"spec"`

	// status is the observed bundle.
	// +optional
	Status BootstrapConfigStatus `json:"status,omitempty"`
}

// BootstrapConfigList is a list of BootstrapConfigs.
// +kubebuilder:object:root=true
type BootstrapConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BootstrapConfig `json:"items"`
}

func init() {
	register(&BootstrapConfig{}, &BootstrapConfigList{})
}
