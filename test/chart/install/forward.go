package install

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Forward listens on listen (a loopback address, e.g. 127.0.0.1:8090) and
// relays each TCP connection to the ClusterIP and port of the Service
// ns/name, which the machine reaches through kube-proxy's rules (the host
// cluster routes the Service range on the machine). Unlike `kubectl
// port-forward svc/...`, which picks one pod, every connection goes through
// the Service: kube-proxy picks a Ready endpoint, so it survives a rollout.
// TLS passes through end to end: the chart's self-signed certificate names
// 127.0.0.1, so callers verify it at the relay's address.
//
// It returns the address it listens on; the relay stops with ctx.
func Forward(ctx context.Context, cs kubernetes.Interface, ns, name, listen string) (string, error) {
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.ClusterIP == "" {
		return "", fmt.Errorf("the Service %s/%s: want one port and a ClusterIP, have %v on %q", ns, name, svc.Spec.Ports, svc.Spec.ClusterIP)
	}
	target := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return "", err
	}
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go relay(ctx, in, target)
		}
	}()
	return l.Addr().String(), nil
}

// relay copies in to a new connection to target and back, until both
// sides are done or ctx ends.
func relay(ctx context.Context, in net.Conn, target string) {
	defer func() { _ = in.Close() }()
	var d net.Dialer
	out, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return
	}
	defer func() { _ = out.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = in.Close(); _ = out.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil && !errors.Is(err, net.ErrClosed) {
			_ = dst.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	go half(out, in)
	go half(in, out)
	wg.Wait()
}

// CA reads ca.crt of the Secret ns/name (the chart's api.tls Secret), as
// the chart README's `kubectl get secret ... -o jsonpath='{.data.ca\.crt}'`
// does, and fails unless it holds a PEM certificate.
func CA(ctx context.Context, cs kubernetes.Interface, ns, name string) ([]byte, error) {
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ca := s.Data["ca.crt"]
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the Secret %s/%s: its ca.crt holds no PEM certificate", ns, name)
	}
	return ca, nil
}

// HTTPClient is a client that trusts only ca (PEM), as the CLI does with
// --ca-file.
func HTTPClient(ca []byte) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
}

// WaitAPI waits until the kobe API at endpoint (https) answers 200 on
// /readyz with a certificate that ca verifies: kube-proxy programs a new
// Service's rules a moment after its endpoints are Ready.
func WaitAPI(ctx context.Context, endpoint string, ca []byte, within time.Duration) error {
	hc := HTTPClient(ca)
	return poll(ctx, within, func() error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s/readyz: %s", endpoint, resp.Status)
		}
		return nil
	})
}
