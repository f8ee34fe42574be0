//go:build root

package incluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/test/hostile"
	"github.com/kunobi-ninja/kobe/test/outside"
)

const (
	nodePoolName = "with-node"
	// nodeImage is make image-node's default name.
	nodeImage = "kobe.local/kobe-node:v1"
)

// TestLeasedMemberWithANode is a member with node pods through the
// operator: a pool of the kubernetes backend with nodes: 2 (the node image
// of make image-node, imported, never pulled) reaches READY 1 with the
// operator's readiness gates; `kobe lease` returns a kubeconfig through the
// connect proxy with which kubectl sees both nodes Ready, runs a pod of the
// pause image the node image carries (Ready, its log readable), resolves
// Services by name, binds a claim of the default StorageClass, reaches a
// pod on the other node by pod IP and through a Service (the pod overlay),
// is refused a privileged pod by Pod Security, and cannot point the overlay
// at any other address nor have a node forward a pod's forged source
// address (overlayHostile); reaches a pod through pods/ and
// services/proxy, and cannot aim the API server at anything else through
// forged pod, EndpointSlice, webhook or Node addresses
// (egressThroughNodePods); its pods' DNS reaches no resolver outside the
// member (dnsStaysInside); deleting the pool leaves no host object (the
// egress Service included), and the machine is as before.
func TestLeasedMemberWithANode(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	f.token = fmt.Sprintf("nodes-%d", time.Now().UnixNano())
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "nodes-token", Namespace: namespace}, StringData: map[string]string{"token": f.token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "nodes", Namespace: namespace},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "nodes-token"}}},
				Identity: "nodes-e2e",
				Rules:    []kobev1.AccessRule{{Pools: []string{"*"}, MaxTTL: &metav1.Duration{Duration: time.Hour}, MaxConcurrentLeases: ptr.To[int32](2)}},
			},
		},
		&kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: nodePoolName, Namespace: namespace},
			Spec: kobev1.ClusterPoolSpec{
				Size: ptr.To[int32](1),
				TTL:  &metav1.Duration{Duration: 30 * time.Minute},
				Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes, Kubernetes: &kobev1.KubernetesBackendSpec{
					Nodes:  ptr.To[int32](2),
					Images: &kobev1.KubernetesImages{Node: nodeImage, PullPolicy: corev1.PullNever},
				}},
				Access: &kobev1.AccessSpec{Mode: kobev1.AccessProxy},
				// The outside registry (pull_test.go), over plain HTTP,
				// granted to the member's egress.
				Cluster: kobev1.ClusterTemplate{
					RegistryMirrors: []kobev1.RegistryMirror{{Registry: outside.PublicIP + ":5000", Endpoints: []string{"http://" + outside.PublicIP + ":5000"}}},
					Egress:          &kobev1.EgressSpec{AllowCIDRs: []string{outside.PublicIP + "/32"}},
				},
			},
		},
	} {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	began := time.Now()
	testenv.Eventually(t, memberDeadline, "pool "+nodePoolName+" READY 1", func() error {
		var p kobev1.ClusterPool
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: nodePoolName}, &p); err != nil {
			return err
		}
		if p.Status.Ready < 1 {
			return fmt.Errorf("phase %s, %d Ready; conditions %v", p.Status.Phase, p.Status.Ready, conditionSummary(p.Status.Conditions))
		}
		return nil
	})
	t.Logf("pool with a node READY 1 in %v", time.Since(began).Round(time.Millisecond))

	l, kc := f.lease(t, nodePoolName)
	out, err := testenv.Kubectl(t, kc, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err, out)
	}
	f1 := strings.Fields(out)
	if len(f1) != 4 || !strings.HasSuffix(f1[0], "-node-0") || f1[1] != "True" || !strings.HasSuffix(f1[2], "-node-1") || f1[3] != "True" {
		t.Fatalf("the member's nodes through the proxy: %q, want node-0 and node-1, Ready", out)
	}
	nodes := []string{f1[0], f1[2]}
	objs, err := f.hostObjects(ctx, "kobe.kunobi.ninja/pool="+nodePoolName)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(objs, func(o string) bool { return strings.HasPrefix(o, "Service/") && strings.HasSuffix(o, "-egress") }) {
		t.Errorf("the member has no egress Service: %v", objs)
	}
	f.startRelay(t, kc, nodes[0])
	spoofer := f.startSpoofer(t, kc, nodes[0])

	pod := filepath.Join(f.work, "pause.yaml")
	if err := os.WriteFile(pod, []byte(pausePod), 0o600); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if out, err := testenv.Kubectl(t, kc, "apply", "-f", pod); err != nil {
		t.Fatal(out, err)
	}
	if out, err := testenv.Kubectl(t, kc, "wait", "--for=condition=Ready", "--timeout=20s", "pod/pause"); err != nil {
		t.Fatal(out, err)
	}
	t.Logf("a pod applied through the proxy Ready in %v", time.Since(began).Round(time.Millisecond))
	if out, err := testenv.Kubectl(t, kc, "logs", "pause"); err != nil {
		t.Errorf("kubectl logs through the proxy: %v: %s", err, out)
	}
	began = time.Now()
	workload := filepath.Join(f.work, "dns-and-storage.yaml")
	if err := os.WriteFile(workload, []byte(dnsAndStorage), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(t, kc, "apply", "-f", workload); err != nil {
		t.Fatal(out, err)
	}
	if out, err := testenv.Kubectl(t, kc, "wait", "--for=condition=Complete", "--timeout=60s", "job/resolve"); err != nil {
		logs, _ := testenv.Kubectl(t, kc, "logs", "job/resolve")
		t.Errorf("Service names do not resolve in the node pod's member: %v %s\n%s", err, out, logs)
	}
	if out, err := testenv.Kubectl(t, kc, "wait", "--for=condition=Ready", "--timeout=60s", "pod/store"); err != nil {
		desc, _ := testenv.Kubectl(t, kc, "describe", "pvc,pod")
		t.Errorf("a pod with a claim of the default StorageClass: %v %s\n%s", err, out, desc)
	}
	if phase, _ := testenv.Kubectl(t, kc, "get", "pvc", "data", "-o", "jsonpath={.status.phase}"); phase != "Bound" {
		t.Errorf("claim data is %q, want Bound", phase)
	}
	t.Logf("names resolved and a claim bound in %v", time.Since(began).Round(time.Millisecond))
	f.crossNode(t, kc, nodes)
	// The hostile suite's ways around Pod Security, through the proxy on
	// the node pods of the kubernetes backend: each must be refused.
	t.Run("Pod Security holds", func(t *testing.T) {
		hostile.PodSecurityHolds(t, hostile.Target{Kubeconfig: kc, Image: "kobe.local/pause:v1", RunningPod: "pause", Node: nodes[0]})
	})
	t.Run("network volumes are refused", func(t *testing.T) {
		hostile.NetworkVolumesRefused(t, hostile.Target{Kubeconfig: kc, Image: "kobe.local/pause:v1"})
	})

	f.overlayHostile(t, kc, nodes, spoofer)
	f.egressThroughNodePods(t, kc)
	f.dnsStaysInside(t, kc, nodes)
	t.Run("a pod pulls an image by tag from a registry its pool's egress grants", func(t *testing.T) {
		f.pullsOverEgress(t, kc)
	})
	t.Run("kobe load puts an image on every node of the member", func(t *testing.T) {
		f.loadsOnEveryNode(t, l.ID, kc, nodes)
	})
	t.Run("a holder at their member's limits leaves the host cluster alone", func(t *testing.T) {
		f.noisyNeighbour(t, kc, nodes)
	})

	began = time.Now()
	if out, errOut, err := f.kobe(t, "release", l.ID); err != nil {
		t.Fatalf("kobe release: %v\n%s%s", err, out, errOut)
	}
	if err := f.c.Delete(ctx, &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: nodePoolName, Namespace: namespace}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the pool and every host object with kobe's labels gone", func() error {
		var p kobev1.ClusterPool
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: nodePoolName}, &p); err == nil {
			return fmt.Errorf("pool still there: phase %s", p.Status.Phase)
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		objs, err := f.hostObjects(ctx, kobev1.LabelMemberUID)
		if err != nil {
			return err
		}
		if len(objs) > 0 {
			return fmt.Errorf("%w: %v", errStillThere, objs)
		}
		return nil
	})
	t.Logf("released, the pool deleted and its host objects gone in %v", time.Since(began).Round(time.Millisecond))
}

// pausePod runs the pause image every node image carries; baseline admits it.
const pausePod = `apiVersion: v1
kind: Pod
metadata:
  name: pause
  namespace: default
spec:
  containers:
  - name: pause
    image: kobe.local/pause:v1
    imagePullPolicy: Never
    resources:
      limits: {memory: 32Mi}
`

// dnsAndStorage is what a chart's workload expects of the member: a Job
// that resolves Services by name through the cluster DNS (the CoreDNS
// image's probe, which the node image carries), and a pod whose claim of
// the default StorageClass binds.
const dnsAndStorage = `apiVersion: batch/v1
kind: Job
metadata:
  name: resolve
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: ` + clusterdns.Image + `
        imagePullPolicy: Never
        command: [/coredns, probe, kubernetes.default, kube-dns.kube-system.svc.cluster.local]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: store
spec:
  containers:
  - name: pause
    image: kobe.local/pause:v1
    imagePullPolicy: Never
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data}
`
