// Package apiwrites counts the writes kube-apiserver served, from its own
// apiserver_request_total, for tests and benchmarks that hold kobe to a
// write budget: every write kobe makes lands on the host's API server that
// its users' other workloads share.
package apiwrites

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Key names one kind of API write as kube-apiserver counts it.
type Key struct {
	Group, Resource, Subresource, Verb string
}

func (k Key) String() string {
	r := k.Resource
	if k.Group != "" && !strings.HasSuffix(k.Group, "kobe.kunobi.ninja") {
		r = k.Group + "/" + r
	}
	if k.Subresource != "" {
		r += "/" + k.Subresource
	}
	return r + " " + k.Verb
}

// Verbs are the verbs of apiserver_request_total that change state.
var Verbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// Counts is a snapshot of apiserver_request_total, writes only, summed over
// status codes.
type Counts map[Key]float64

// NotKobe says whether no kobe component makes such a write: kube-apiserver
// renews its own identity lease (coordination.k8s.io/leases in kube-system)
// every 10 s.
func NotKobe(k Key) bool { return k.Group == "coordination.k8s.io" && k.Resource == "leases" }

// Client is a REST client for kube-apiserver's /metrics, from an admin
// configuration, without client-side rate limits.
func Client(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.QPS = -1
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("client for /metrics: %w", err)
	}
	return cs.CoreV1().RESTClient(), nil
}

// Families fetches and parses kube-apiserver's /metrics.
func Families(ctx context.Context, c rest.Interface) (map[string]*dto.MetricFamily, error) {
	raw, err := c.Get().AbsPath("/metrics").DoRaw(ctx)
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

// Read snapshots the write counters.
func Read(ctx context.Context, c rest.Interface) (Counts, error) {
	fams, err := Families(ctx, c)
	if err != nil {
		return nil, err
	}
	f, ok := fams["apiserver_request_total"]
	if !ok {
		return nil, fmt.Errorf("kube-apiserver /metrics has no apiserver_request_total")
	}
	out := Counts{}
	for _, s := range f.GetMetric() {
		l := Labels(s)
		if !Verbs[l["verb"]] || l["dry_run"] != "" {
			continue
		}
		out[Key{Group: l["group"], Resource: l["resource"], Subresource: l["subresource"], Verb: l["verb"]}] += s.GetCounter().GetValue()
	}
	return out, nil
}

// Sub returns after minus before, without zero entries.
func (after Counts) Sub(before Counts) Counts {
	out := Counts{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Kobe is the total of the writes kobe makes (NotKobe left out).
func (c Counts) Kobe() float64 {
	var n float64
	for k, v := range c {
		if !NotKobe(k) {
			n += v
		}
	}
	return n
}

// String lists the counts, one "key: n" per line, sorted.
func (c Counts) String() string {
	lines := make([]string, 0, len(c))
	for k, v := range c {
		lines = append(lines, fmt.Sprintf("%s: %g", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Labels are a sample's labels by name.
func Labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
