package node

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// apiServerReady waits until the member's API server answers /readyz with
// kubelet's credentials. The local backend starts a node beside etcd and
// kube-apiserver, so that containerd and the image imports overlap the API
// server's start: kubelet and kube-proxy then start against a server that
// answers, instead of registering through their own back-off (kubelet's
// grows to 7 s between attempts).
func (a *Agent) apiServerReady(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", a.cfg.KubeletKubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubelet's kubeconfig: %w", err)
	}
	cfg.Timeout = time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	began := time.Now()
	err = a.waitFor(ctx, "the member's API server", 5*time.Minute, func() bool {
		var code int
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Raw()
		return err == nil && code == 200 && string(body) == "ok"
	})
	if err == nil {
		a.log.Printf("the member's API server is ready (waited %s)", time.Since(began).Round(time.Millisecond))
	}
	return err
}
