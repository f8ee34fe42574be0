//go:build bench

package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// writeKey names one kind of API write as kube-apiserver counts it.
type writeKey struct {
	Group, Resource, Subresource, Verb string
}

func (k writeKey) String() string {
	r := k.Resource
	if k.Group != "" && !strings.HasSuffix(k.Group, "kobe.kunobi.ninja") {
		r = k.Group + "/" + r
	}
	if k.Subresource != "" {
		r += "/" + k.Subresource
	}
	return r + " " + k.Verb
}

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// writeCounts is a snapshot of apiserver_request_total, writes only,
// summed over status codes.
type writeCounts map[writeKey]float64

// apiMetrics reads kube-apiserver's /metrics with the admin REST client.
type apiMetrics struct {
	rest rest.Interface
}

func newAPIMetrics(cfg *rest.Config) (*apiMetrics, error) {
	c := rest.CopyConfig(cfg)
	c.QPS = -1
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("client for /metrics: %w", err)
	}
	return &apiMetrics{rest: cs.CoreV1().RESTClient()}, nil
}

// families fetches and parses /metrics.
func (m *apiMetrics) families(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	raw, err := m.rest.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading kube-apiserver /metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing kube-apiserver /metrics: %w", err)
	}
	return fams, nil
}

// writes snapshots the write counters.
func (m *apiMetrics) writes(ctx context.Context) (writeCounts, error) {
	fams, err := m.families(ctx)
	if err != nil {
		return nil, err
	}
	f, ok := fams["apiserver_request_total"]
	if !ok {
		return nil, fmt.Errorf("kube-apiserver /metrics has no apiserver_request_total")
	}
	out := writeCounts{}
	for _, s := range f.GetMetric() {
		l := labels(s)
		if !writeVerbs[l["verb"]] || l["dry_run"] != "" {
			continue
		}
		out[writeKey{Group: l["group"], Resource: l["resource"], Subresource: l["subresource"], Verb: l["verb"]}] += s.GetCounter().GetValue()
	}
	return out, nil
}

// sub returns after minus before, without zero entries.
func (after writeCounts) sub(before writeCounts) writeCounts {
	out := writeCounts{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// notKobe are writes no kobe component makes: kube-apiserver renews its own
// identity lease (coordination.k8s.io/leases in kube-system) every 10 s.
func notKobe(k writeKey) bool { return k.Group == "coordination.k8s.io" && k.Resource == "leases" }

// criticalPath says whether a write belongs to the hand-out's answer: the
// lease's create and the member's bind (an update or patch of the
// ClusterInstance itself, not its status). Everything else (the lease's
// status copy, Events, the replacement member) may follow the answer.
func criticalPath(k writeKey) bool {
	switch {
	case k.Resource == "clusterleases" && k.Subresource == "" && k.Verb == "POST":
		return true
	case k.Resource == "clusterinstances" && k.Subresource == "" && (k.Verb == "PUT" || k.Verb == "PATCH" || k.Verb == "APPLY"):
		return true
	}
	return false
}

// requestDurations sums apiserver_request_duration_seconds per
// resource/subresource/verb: the number of requests and their total time.
func (m *apiMetrics) requestDurations(ctx context.Context) (map[writeKey][2]float64, error) {
	fams, err := m.families(ctx)
	if err != nil {
		return nil, err
	}
	f, ok := fams["apiserver_request_duration_seconds"]
	if !ok {
		return nil, fmt.Errorf("kube-apiserver /metrics has no apiserver_request_duration_seconds")
	}
	out := map[writeKey][2]float64{}
	for _, s := range f.GetMetric() {
		l := labels(s)
		k := writeKey{Group: l["group"], Resource: l["resource"], Subresource: l["subresource"], Verb: l["verb"]}
		h := s.GetHistogram()
		v := out[k]
		v[0] += float64(h.GetSampleCount())
		v[1] += h.GetSampleSum()
		out[k] = v
	}
	return out, nil
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// operatorMetrics reads gauges from the operator's metrics endpoint.
func operatorMetrics(ctx context.Context, op *operator, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, op.metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the operator's metrics: %w", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing the operator's metrics: %w", err)
	}
	out := make([]float64, len(names))
	for i, n := range names {
		f, ok := fams[n]
		if !ok || len(f.GetMetric()) == 0 {
			return nil, fmt.Errorf("the operator's metrics have no %s", n)
		}
		out[i] = f.GetMetric()[0].GetGauge().GetValue()
	}
	return out, nil
}
