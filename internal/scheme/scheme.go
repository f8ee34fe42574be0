// Package scheme builds the runtime.Scheme kobe's binaries and tests use:
// the built-in Kubernetes kinds plus kobe.kunobi.ninja/v1alpha1.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// New returns a scheme with the built-in kinds and kobe's kinds.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kobev1.AddToScheme(s))
	return s
}
