package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
)

// maxExecOutput bounds what a command's output may hold in memory: an
// import says what it imported and, on failure, why.
const maxExecOutput = 64 << 10

// podExec runs commands in host pods through the host API server's
// pods/exec (WebSocket, falling back to SPDY on API servers before 1.30).
type podExec struct {
	cfg    *rest.Config
	client rest.Interface
}

var _ incluster.PodExec = (*podExec)(nil)

// newPodExec builds a PodExec from the operator's host config.
func newPodExec(cfg *rest.Config) (*podExec, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("building a client for pods/exec: %w", err)
	}
	return &podExec{cfg: c, client: rc}, nil
}

// Exec runs command in the container, stdin streamed to it; it returns
// the command's output (standard output, then standard error), at most
// maxExecOutput bytes of each.
func (e *podExec) Exec(ctx context.Context, namespace, pod, container string, command []string, stdin io.Reader) ([]byte, error) {
	req := e.client.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container, Command: command, Stdin: stdin != nil, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(e.cfg, http.MethodGet, req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("exec in pod %s/%s: %w", namespace, pod, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.cfg, http.MethodPost, req.URL())
	if err != nil {
		return nil, fmt.Errorf("exec in pod %s/%s: %w", namespace, pod, err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return nil, fmt.Errorf("exec in pod %s/%s: %w", namespace, pod, err)
	}
	var stdout, stderr boundedBuffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	out := append(stdout.Bytes(), stderr.Bytes()...)
	if err != nil {
		return out, fmt.Errorf("exec in pod %s/%s: %w", namespace, pod, err)
	}
	return out, nil
}

// boundedBuffer keeps the first maxExecOutput bytes written and drops
// the rest, so that a command's output cannot grow the operator.
type boundedBuffer struct{ bytes.Buffer }

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := maxExecOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
