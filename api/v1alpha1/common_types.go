package v1alpha1

import "k8s.io/apimachinery/pkg/types"

// DurationPattern accepts Go duration strings such as "30m", "1h30m" or "90s".
// Lease and pool durations are written the way people say them, never in
// nanoseconds. A CEL rule that compares such a duration first checks this
// pattern ("!self.matches(...) || duration(self) > ..."), so that a malformed
// value is reported once, by the pattern, and not again as a CEL type
// conversion error.
const DurationPattern = `^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`

// ObjectRef names another kobe object in the same namespace and pins it by
// UID, so that a reference cannot silently follow a deleted-and-recreated
// object of the same name.
type ObjectRef struct {
	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid of the referenced object.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid,omitempty"`
}

// LocalRef names an object in the same namespace.
type LocalRef struct {
	// name of the referenced object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}
