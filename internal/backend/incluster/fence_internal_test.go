package incluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestWaitStoppedReadFailures: a pod read that fails for want of time or
// under load (client-go's rate limiter refuses a wait that would pass the
// deadline before the context ends) leaves the pod not proven stopped and
// the fence says so when its time is up; a read the host API server
// refuses for good fails the fence at once.
func TestWaitStoppedReadFailures(t *testing.T) {
	m := member("pool-ci-0", "")
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: podName(m, 0), UID: "pod-uid"}}
	for _, tc := range []struct {
		name    string
		readErr error
		want    string
		// atOnce: the error comes without waiting for the deadline.
		atOnce bool
	}{
		{"the rate limiter, short of time", fmt.Errorf("client rate limiter Wait returned an error: %w", errors.New("rate: Wait(n=1) would exceed context deadline")),
			"still answers in pods [" + pod.Name + "], deleted (their kubelet has not stopped them, or they could not be read: client rate limiter", false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name, errors.New("no RBAC")),
			"reading pod " + pod.Name, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return tc.readErr
				},
			}).Build()
			b := &Backend{opts: Options{Client: c}}
			ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := b.waitStopped(ctx, m, []corev1.Pod{pod}, 6443)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("waitStopped: %v, want an error containing %q", err, tc.want)
			}
			if tc.atOnce && time.Since(start) > 200*time.Millisecond {
				t.Errorf("took %s, want the refusal at once", time.Since(start))
			}
		})
	}
}
