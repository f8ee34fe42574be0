//go:build heavy

package ha

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// timings are the replicas' leader-election flags.
type timings struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// testTimings are short enough to measure a failover in seconds and long
// enough that a leader on a busy 2-core machine keeps renewing: a renewal
// has renewDeadline to succeed, retried every retryPeriod.
var testTimings = timings{leaseDuration: 8 * time.Second, renewDeadline: 6 * time.Second, retryPeriod: time.Second}

// policy is a token AccessPolicy of the cluster's namespace; its token is
// made up by startCluster.
type policy struct {
	name, identity string
	// rules default to every pool with nothing else set.
	rules []kobev1.AccessRule
}

// clusterOptions configure startCluster; the zero value is two replicas
// and one policy "ha" (identity "ha-ci") for every pool.
type clusterOptions struct {
	policies []policy
	// args are extra flags for every replica.
	args []string
	// timings default to testTimings.
	timings timings
}

// cluster is one namespace served by two kobe-operator replicas.
type cluster struct {
	ns string
	// token is the first policy's bearer token; tokens holds each policy's
	// by name.
	token   string
	tokens  map[string]string
	timings timings
	args    []string
	dir     string

	mu sync.Mutex
	// replicas are the current processes, by slot (r0, r1).
	replicas []*operatorproc.Process
	// started counts the processes started per slot, so that a restarted
	// replica writes a log of its own.
	started []int
}

// startCluster makes a namespace with the policies, starts replicas r0 and
// r1 and waits until both serve the API. At cleanup the replicas get
// SIGTERM; if the test failed, their logs' tails are printed.
func startCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	if len(o.policies) == 0 {
		o.policies = []policy{{name: "ha", identity: "ha-ci"}}
	}
	if o.timings == (timings{}) {
		o.timings = testTimings
	}
	c := &cluster{
		ns: suite.env.NewNamespace(t), tokens: map[string]string{}, timings: o.timings, args: o.args,
		dir: testDir(t), replicas: make([]*operatorproc.Process, 2), started: make([]int, 2),
	}
	ctx := t.Context()
	for i, p := range o.policies {
		token := fmt.Sprintf("ha-%s-%d", p.name, time.Now().UnixNano())
		rules := p.rules
		if len(rules) == 0 {
			rules = []kobev1.AccessRule{{Pools: []string{"*"}}}
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: p.name + "-token", Namespace: c.ns}, StringData: map[string]string{"token": token}}
		pol := &kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: c.ns},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: secret.Name}}},
				Identity: p.identity,
				Rules:    rules,
			},
		}
		for _, obj := range []client.Object{secret, pol} {
			if err := suite.env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
			}
		}
		c.tokens[p.name] = token
		if i == 0 {
			c.token = token
		}
	}
	t.Cleanup(func() {
		for _, r := range c.all() {
			if err := r.Stop(); err != nil {
				t.Errorf("%v", err)
			}
			if t.Failed() {
				t.Logf("%s log tail:\n%s", r.Name, r.Tail(6000))
			}
		}
	})
	for i := range c.replicas {
		c.start(t, i)
	}
	for i := range c.replicas {
		c.waitServing(t, i)
	}
	return c
}

// testDir is where a test's replicas keep their logs: a temporary
// directory, or $KOBE_HA_LOG_DIR/<test> when set, which is kept.
func testDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("KOBE_HA_LOG_DIR")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// binaryFor returns a symlink to the operator binary named after slot i:
// client-go derives the user agent, and so the managedFields manager of
// every write, from the name the process was started as.
func (c *cluster) binaryFor(t *testing.T, i int) string {
	t.Helper()
	link := filepath.Join(c.dir, replicaManager(i))
	if _, err := os.Lstat(link); err == nil {
		return link
	}
	if err := os.Symlink(suite.binary, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// replicaManager is the managedFields manager of slot i's writes.
func replicaManager(i int) string { return fmt.Sprintf("kobe-operator-r%d", i) }

// start starts a process in slot i (a first start or a restart) and returns
// at once; see waitServing.
func (c *cluster) start(t *testing.T, i int) *operatorproc.Process {
	t.Helper()
	c.mu.Lock()
	c.started[i]++
	name := fmt.Sprintf("r%d", i)
	if c.started[i] > 1 {
		name = fmt.Sprintf("r%d-%d", i, c.started[i])
	}
	c.mu.Unlock()
	args := append([]string{
		"--leader-elect",
		"--leader-elect-lease-duration", c.timings.leaseDuration.String(),
		"--leader-elect-renew-deadline", c.timings.renewDeadline.String(),
		"--leader-elect-retry-period", c.timings.retryPeriod.String(),
		"--enable-sim-backend",
		"--disable-local-backend",
		"--lease-retention", "1h",
		// The load of TestFailoverUnderLoad holds more leases per owner
		// than the default cap; limit_test sets its own.
		"--default-max-concurrent-leases", "0",
	}, c.args...)
	p, err := operatorproc.Start(operatorproc.Options{
		Binary: c.binaryFor(t, i), Kubeconfig: suite.env.Kubeconfig, Namespace: c.ns,
		Dir: c.dir, Name: name, Args: args,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.replicas[i] = p
	c.mu.Unlock()
	return p
}

// waitServing waits until slot i's API answers /readyz with 200.
func (c *cluster) waitServing(t *testing.T, i int) {
	t.Helper()
	if err := c.replica(i).WaitReady(t.Context(), 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

// replica is slot i's current process.
func (c *cluster) replica(i int) *operatorproc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replicas[i]
}

// all is every process started, current ones last, for cleanup.
func (c *cluster) all() []*operatorproc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*operatorproc.Process(nil), c.replicas...)
}

// acquiredMarker is what client-go's leader elector logs once it holds the
// lease.
const acquiredMarker = "Successfully acquired lease"

// leader waits until exactly one live replica has acquired the leader
// lease and returns its slot and the other's. Two live replicas that both
// say so fail the test: leadership is exclusive.
func (c *cluster) leader(t *testing.T) (lead, follow int) {
	t.Helper()
	testenv.Eventually(t, 3*c.timings.leaseDuration+30*time.Second, "one replica to lead", func() error {
		var leaders []int
		for i := range c.replicas {
			r := c.replica(i)
			if r.Alive() == nil && r.LogContains(acquiredMarker) {
				leaders = append(leaders, i)
			}
		}
		switch len(leaders) {
		case 1:
			lead, follow = leaders[0], 1-leaders[0]
			return nil
		case 0:
			return fmt.Errorf("no live replica logged %q", acquiredMarker)
		default:
			t.Fatalf("both replicas lead at once:\nr0:\n%s\nr1:\n%s", c.replica(0).Tail(3000), c.replica(1).Tail(3000))
			return nil
		}
	})
	return lead, follow
}

// createSimPool creates a fixed sim pool of size members that become Ready
// readyAfter after their creation.
func (c *cluster) createSimPool(t *testing.T, name string, size int32, readyAfter time.Duration) *kobev1.ClusterPool {
	t.Helper()
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns},
		Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To(size),
			TTL:  &metav1.Duration{Duration: 30 * time.Minute},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendSim,
				Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: readyAfter}}},
		},
	}
	if err := suite.env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pool %s: %v", name, err)
	}
	return p
}

// waitPoolReady waits until the pool has at least n warm members: Ready,
// unclaimed and not being deleted, as the API server shows them (the pool's
// status may lag).
func (c *cluster) waitPoolReady(t *testing.T, name string, n int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("pool %s to have %d warm members", name, n), func() error {
		var l kobev1.ClusterInstanceList
		if err := suite.env.Client.List(t.Context(), &l, client.InNamespace(c.ns), client.MatchingLabels{kobev1.LabelPool: name}); err != nil {
			return err
		}
		warm := 0
		for _, m := range l.Items {
			if m.Status.Phase == kobev1.InstanceReady && m.Spec.LeaseRef == nil && m.DeletionTimestamp == nil {
				warm++
			}
		}
		if warm < n {
			return fmt.Errorf("%d of %d members warm", warm, len(l.Items))
		}
		return nil
	})
}

// do calls the lease API of slot i with token (none when empty) and body
// (JSON-encoded when not nil), bounded by 30 s. It returns transport
// errors, for callers that expect a replica to die under them.
func (c *cluster) do(ctx context.Context, i int, method, path, token string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.replica(i).APIURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// call is do that fails the test on a transport error.
func (c *cluster) call(t *testing.T, i int, method, path, token string, body any) (int, []byte) {
	t.Helper()
	code, b, err := c.do(t.Context(), i, method, path, token, body)
	if err != nil {
		t.Fatalf("%s %s on r%d: %v", method, path, i, err)
	}
	return code, b
}

// members lists the namespace's members, read from the API server.
func (c *cluster) members(t *testing.T) []kobev1.ClusterInstance {
	t.Helper()
	var l kobev1.ClusterInstanceList
	if err := suite.env.Client.List(t.Context(), &l, client.InNamespace(c.ns)); err != nil {
		t.Fatalf("listing members: %v", err)
	}
	return l.Items
}

// leases lists the namespace's leases, read from the API server.
func (c *cluster) leases(t *testing.T) []kobev1.ClusterLease {
	t.Helper()
	var l kobev1.ClusterLeaseList
	if err := suite.env.Client.List(t.Context(), &l, client.InNamespace(c.ns)); err != nil {
		t.Fatalf("listing leases: %v", err)
	}
	return l.Items
}

// replicaWrites returns, for obj as read from the API server, the
// managedFields entries written by slot i, as "operation subresource" strings
// with the top-level fields they own.
func replicaWrites(obj client.Object, i int) []string {
	var out []string
	for _, e := range obj.GetManagedFields() {
		if e.Manager != replicaManager(i) {
			continue
		}
		fields := ""
		if e.FieldsV1 != nil {
			fields = e.FieldsV1.GetRawString()
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", e.Operation, e.Subresource, fields)))
	}
	return out
}

// errNotYet is a poll's "not yet" when there is nothing more to say.
var errNotYet = errors.New("not yet")

// errStatus is a poll's "not yet" for an HTTP status code.
func errStatus(code int) error { return fmt.Errorf("answered %d", code) }
