package auth

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InstallationAudience is the default SSH audience of the kobe serving
// namespace: "kobe:<namespace>:<namespace UID>". Every replica computes the
// same value, it survives restarts and upgrades, and it differs between
// clusters and between installations in namespaces of the same name (a
// namespace deleted and created again is a new installation, whose users
// pin the new audience after confirming it).
func InstallationAudience(ctx context.Context, r client.Reader, namespace string) (string, error) {
	var ns corev1.Namespace
	if err := r.Get(ctx, types.NamespacedName{Name: namespace}, &ns); err != nil {
		return "", fmt.Errorf("reading namespace %s to derive the SSH audience (or set --api-audience): %w", namespace, err)
	}
	return "kobe:" + namespace + ":" + string(ns.UID), nil
}
