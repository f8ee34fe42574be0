package gates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// The gates on what a test needs in the member (CRDExists, DeploymentReady)
// and on a URL (URLHealthy). Each decides from one read, nothing from
// memory, and says what is missing.

// crdEstablished passes when the CustomResourceDefinition exists and is
// Established (its API is served).
func crdEstablished(ctx context.Context, cs *kubernetes.Clientset, g *kobev1.CRDGate) error {
	if g == nil || g.Name == "" {
		return errors.New("the gate names no CustomResourceDefinition (crd.name)")
	}
	raw, err := cs.Discovery().RESTClient().Get().
		AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", g.Name).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("CustomResourceDefinition %s does not exist yet", g.Name)
	}
	if err != nil {
		return fmt.Errorf("getting CustomResourceDefinition %s: %w", g.Name, err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("decoding CustomResourceDefinition %s: %w", g.Name, err)
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			if c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("CustomResourceDefinition %s is not Established: %s: %s", g.Name, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("CustomResourceDefinition %s is not Established yet", g.Name)
}

// deploymentRolledOut passes when the Deployment's controller has observed
// its latest spec and every desired replica is updated and available, with
// no old replica left: what `kubectl rollout status` waits for.
func deploymentRolledOut(ctx context.Context, cs *kubernetes.Clientset, g *kobev1.DeploymentGate) error {
	if g == nil || g.Namespace == "" || g.Name == "" {
		return errors.New("the gate names no Deployment (deployment.namespace and deployment.name)")
	}
	d, err := cs.AppsV1().Deployments(g.Namespace).Get(ctx, g.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the Deployment %s/%s does not exist yet", g.Namespace, g.Name)
	}
	if err != nil {
		return fmt.Errorf("getting Deployment %s/%s: %w", g.Namespace, g.Name, err)
	}
	return rolledOut(d)
}

// rolledOut judges a Deployment's status.
func rolledOut(d *appsv1.Deployment) error {
	id := d.Namespace + "/" + d.Name
	if d.Status.ObservedGeneration < d.Generation {
		return fmt.Errorf("the Deployment %s: its controller has not yet observed generation %d", id, d.Generation)
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return fmt.Errorf("the Deployment %s exceeded its progress deadline: %s", id, c.Message)
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	switch {
	case st.UpdatedReplicas < want:
		return fmt.Errorf("the Deployment %s: %d of %d replicas updated", id, st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Errorf("the Deployment %s: %d old replicas still running", id, st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < want:
		return fmt.Errorf("the Deployment %s: %d of %d replicas available", id, st.AvailableReplicas, want)
	}
	return nil
}

// maxHealthBody bounds what URLHealthy reads of an answer (only to let the
// connection be reused; the body is not judged).
const maxHealthBody = 64 << 10

// urlHealthy passes when GET rawURL answers 2xx within timeout. Messages
// carry the URL without its password.
func urlHealthy(ctx context.Context, rawURL string, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("url is not an absolute http or https URL")
	}
	shown := u.Redacted()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", shown, err)
	}
	req.Header.Set("User-Agent", "kobe-operator/gates")
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return fmt.Errorf("GET %s: %w", shown, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHealthBody))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s answered %s", shown, resp.Status)
	}
	return nil
}
