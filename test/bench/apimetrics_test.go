//go:build bench

package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/kunobi-ninja/kobe/internal/testenv/apiwrites"
)

// The write counts of package apiwrites, under the names this package
// used before it was shared.
type (
	writeKey    = apiwrites.Key
	writeCounts = apiwrites.Counts
)

var writeVerbs = apiwrites.Verbs

func notKobe(k writeKey) bool { return apiwrites.NotKobe(k) }

// apiMetrics reads kube-apiserver's /metrics with the admin REST client.
type apiMetrics struct {
	rest rest.Interface
}

func newAPIMetrics(cfg *rest.Config) (*apiMetrics, error) {
	c, err := apiwrites.Client(cfg)
	if err != nil {
		return nil, err
	}
	return &apiMetrics{rest: c}, nil
}

// families fetches and parses /metrics.
func (m *apiMetrics) families(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	return apiwrites.Families(ctx, m.rest)
}

// writes snapshots the write counters.
func (m *apiMetrics) writes(ctx context.Context) (writeCounts, error) {
	return apiwrites.Read(ctx, m.rest)
}

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

func labels(m *dto.Metric) map[string]string { return apiwrites.Labels(m) }

// operatorFamilies reads the operator's metrics endpoint.
func operatorFamilies(ctx context.Context, op *operator) (map[string]*dto.MetricFamily, error) {
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
	return fams, nil
}

// handoutPhases reads kobe_handout_phase_seconds: per phase, how many
// hand-outs it timed and their total seconds.
func handoutPhases(ctx context.Context, op *operator) (map[string][2]float64, error) {
	fams, err := operatorFamilies(ctx, op)
	if err != nil {
		return nil, err
	}
	out := map[string][2]float64{}
	if f, ok := fams["kobe_handout_phase_seconds"]; ok {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			out[labels(m)["phase"]] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
		}
	}
	return out, nil
}

// operatorMetrics reads gauges from the operator's metrics endpoint.
func operatorMetrics(ctx context.Context, op *operator, names ...string) ([]float64, error) {
	fams, err := operatorFamilies(ctx, op)
	if err != nil {
		return nil, err
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

// controllerLoad tells, for the scale log, how far behind each controller
// of the operator is: its workqueue's depth, reconciles by result, and the
// mean reconcile time so far (controller-runtime's own metrics).
func controllerLoad(ctx context.Context, op *operator) string {
	fams, err := operatorFamilies(ctx, op)
	if err != nil {
		return err.Error()
	}
	type load struct {
		depth, total, errs, requeueAfter, secs, count float64
	}
	by := map[string]*load{}
	get := func(name string) *load {
		if by[name] == nil {
			by[name] = &load{}
		}
		return by[name]
	}
	for _, m := range fams["workqueue_depth"].GetMetric() {
		get(labels(m)["name"]).depth += m.GetGauge().GetValue()
	}
	for _, m := range fams["controller_runtime_reconcile_total"].GetMetric() {
		l, v := get(labels(m)["controller"]), m.GetCounter().GetValue()
		l.total += v
		switch labels(m)["result"] {
		case "error":
			l.errs += v
		case "requeue_after":
			l.requeueAfter += v
		}
	}
	for _, m := range fams["controller_runtime_reconcile_time_seconds"].GetMetric() {
		l := get(labels(m)["controller"])
		l.secs += m.GetHistogram().GetSampleSum()
		l.count += float64(m.GetHistogram().GetSampleCount())
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(by)) {
		l := by[name]
		if l.total == 0 && l.depth == 0 {
			continue
		}
		mean := 0.0
		if l.count > 0 {
			mean = 1000 * l.secs / l.count
		}
		parts = append(parts, fmt.Sprintf("%s: queue %.0f, %.0f reconciles (%.0f errors, %.0f requeued after a time), mean %.0f ms",
			name, l.depth, l.total, l.errs, l.requeueAfter, mean))
	}
	return strings.Join(parts, "; ")
}
