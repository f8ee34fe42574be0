package hostile

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Listener is a TCP listener beyond the member that counts the connections
// it accepts. The caller shows that something can reach it (a control), so
// that its silence means something.
type Listener struct {
	Addr  string // host:port
	Conns func() int64
}

// forgedName names every object APIServerStaysInside makes.
const forgedName = "hostile-forged"

// APIServerStaysInside: a lease holder cannot aim the member's API server
// at an address outside the member (issue 24, item 2). It writes what
// would make the API server dial ln: a Node whose InternalIP is ln's
// address, a pod whose status says it runs there, a Service without
// selector whose EndpointSlice and Endpoints name it, an admission webhook
// through that Service and one by URL, and an APIService through that
// Service; then uses each (nodes/, pods/ and services/proxy, a ConfigMap
// the webhooks see, the aggregated group). A backend may refuse a forgery
// at admission (local members: their API server runs in the operator
// host's network) or admit it and refuse the dial (kubernetes members: the
// API server's egress goes through a proxy that knows the member's
// addresses): either way every use fails and ln accepts no connection.
func APIServerStaysInside(t *testing.T, tg Target, ln Listener) {
	host, port, err := net.SplitHostPort(ln.Addr)
	if err != nil {
		t.Fatal(err)
	}
	kc := tg.Kubeconfig
	// client-go, not kubectl get --raw, which drops the kubeconfig
	// server's path (/connect/<lease> of a Proxy lease).
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	before := ln.Conns()
	admitted := func(what string, manifest string) bool {
		t.Helper()
		out, err := testenv.Kubectl(t, kc, "create", "-f", file(t, manifest))
		if err != nil {
			t.Logf("%s refused at admission: %s", what, firstLine(out))
			return false
		}
		t.Logf("%s admitted: its use must fail", what)
		return true
	}
	// mustFail: a use of a forgery must fail; with refusal, by the
	// member's egress refusal, which the API server's Status (the body)
	// carries.
	mustFail := func(what string, refusal bool, b []byte, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s answered: %.200s", what, b)
			return
		}
		if refusal && tg.EgressRefusal != "" && !strings.Contains(string(b)+err.Error(), tg.EgressRefusal) {
			t.Errorf("%s failed otherwise than by the member's egress refusal (%q): %v: %.300s", what, tg.EgressRefusal, err, b)
			return
		}
		t.Logf("%s: %s", what, firstLine(err.Error()))
	}
	proxy := func(resource, namespace, name string) ([]byte, error) {
		// A path under proxy/: the member's redirect of .../proxy to
		// .../proxy/ would name a path without /connect/<lease>.
		req := cs.CoreV1().RESTClient().Get().Resource(resource).Name(name).SubResource("proxy").Suffix("hostile")
		if namespace != "" {
			req = req.Namespace(namespace)
		}
		return req.DoRaw(t.Context())
	}
	defer func() {
		for _, o := range []string{
			"validatingwebhookconfiguration/" + forgedName, "validatingwebhookconfiguration/" + forgedName + "-url",
			"apiservice/v1.hostile.kobe.test", "node/" + forgedName,
		} {
			_, _ = testenv.Kubectl(t, kc, "delete", o, "--ignore-not-found", "--wait=false")
		}
		_, _ = testenv.Kubectl(t, kc, "delete", "-n", "default", "pod/"+forgedName, "service/"+forgedName, "endpointslice/"+forgedName+"-1",
			"endpoints/"+forgedName, "--ignore-not-found", "--grace-period=0", "--force")
	}()

	fill := strings.NewReplacer("NAME", forgedName, "TARGET", host, "PORT", port).Replace
	nodeAdmitted := admitted("a Node whose InternalIP is "+host, fill(forgedNode))
	if nodeAdmitted {
		b, err := proxy("nodes", "", forgedName+":"+port)
		mustFail("nodes/proxy of the forged Node", true, b, err)
	}
	// A pod bound to the forged Node (no kubelet corrects its status), or
	// else one that never schedules.
	pod := fill(forgedPod)
	if !nodeAdmitted {
		pod = strings.Replace(pod, `"nodeName":"`+forgedName+`"`, `"nodeSelector":{"nowhere":"true"}`, 1)
	}
	pod = strings.Replace(pod, "IMAGE", tg.Image, 1)
	if out, err := testenv.Kubectl(t, kc, "create", "-f", file(t, pod)); err != nil {
		t.Fatalf("creating a pod to forge: %v %s", err, out)
	}
	status := fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}]}}`, host, host)
	if out, err := testenv.Kubectl(t, kc, "patch", "pod", forgedName, "--subresource=status", "--type=merge", "-p", status); err != nil {
		t.Logf("a pod status naming %s refused at admission: %s", host, firstLine(out))
	} else {
		b, err := proxy("pods", "default", forgedName+":"+port)
		mustFail("pods/proxy of the forged pod", true, b, err)
	}
	if out, err := testenv.Kubectl(t, kc, "create", "-f", file(t, fill(forgedService))); err != nil {
		t.Fatalf("creating a Service without selector: %v %s", err, out)
	}
	slice := admitted("an EndpointSlice naming "+host, fill(forgedSlice))
	endpoints := admitted("Endpoints naming "+host, fill(forgedEndpoints))
	if slice || endpoints {
		b, err := proxy("services", "default", forgedName+":"+port)
		mustFail("services/proxy of the forged Service", true, b, err)
	}
	// A webhook is in effect a moment after its configuration is: until a
	// ConfigMap it sees is refused, its silence proves nothing.
	n := 0
	webhookUsed := func(what string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, what+" in effect", func() error {
			n++
			cm := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"hostile-%d","namespace":"default","labels":{"kobe-hostile":"yes"}}}`, n)
			out, err := testenv.Kubectl(t, kc, "create", "-f", file(t, cm))
			if err == nil {
				_, _ = testenv.Kubectl(t, kc, "delete", "configmap", fmt.Sprintf("hostile-%d", n))
				return fmt.Errorf("a ConfigMap was admitted: %s", out)
			}
			if tg.EgressRefusal != "" && !strings.Contains(out, tg.EgressRefusal) {
				t.Fatalf("%s failed otherwise than by the member's egress refusal (%q): %s", what, tg.EgressRefusal, out)
			}
			t.Logf("%s: the ConfigMap it sees refused: %s", what, firstLine(out))
			return nil
		})
	}
	if admitted("a webhook through the forged Service", fill(forgedWebhook)) {
		webhookUsed("the webhook through the forged Service")
		_, _ = testenv.Kubectl(t, kc, "delete", "validatingwebhookconfiguration", forgedName)
	}
	if admitted("a webhook by URL https://"+ln.Addr, fill(forgedURLWebhook)) {
		webhookUsed("the webhook by URL")
		_, _ = testenv.Kubectl(t, kc, "delete", "validatingwebhookconfiguration", forgedName+"-url")
	}
	if admitted("an APIService through the forged Service", fill(forgedAPIService)) {
		// The API server's availability check dials it too.
		time.Sleep(2 * time.Second)
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/hostile.kobe.test/v1").DoRaw(t.Context())
		// The aggregator answers 503 for an APIService its availability
		// check could not reach, whatever stopped the check.
		mustFail("the aggregated group hostile.kobe.test", false, b, err)
	}
	time.Sleep(time.Second) // a connection on its way would be in by now
	if got := ln.Conns() - before; got != 0 {
		t.Errorf("%d connections reached %s, beyond the member, from its API server", got, ln.Addr)
	}
}

// firstLine is the first line of kubectl's output that is not a warning.
func firstLine(s string) string {
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasPrefix(l, "Warning:") {
			return l
		}
	}
	return ""
}

const (
	forgedNode = `{"apiVersion":"v1","kind":"Node","metadata":{"name":"NAME"},"status":{"addresses":[{"type":"InternalIP","address":"TARGET"}],
"daemonEndpoints":{"kubeletEndpoint":{"Port":PORT}}}}`
	forgedPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"NAME","namespace":"default"},"spec":{"nodeName":"NAME",
"containers":[{"name":"c","image":"IMAGE","imagePullPolicy":"Never"}]}}`
	forgedService = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"NAME","namespace":"default"},"spec":{"ports":[{"name":"p","port":PORT,"targetPort":PORT}]}}`
	forgedSlice   = `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"NAME-1","namespace":"default","labels":{"kubernetes.io/service-name":"NAME"}},
"addressType":"IPv4","ports":[{"name":"p","port":PORT,"protocol":"TCP"}],"endpoints":[{"addresses":["TARGET"],"conditions":{"ready":true},"targetRef":{"kind":"Pod","namespace":"default","name":"NAME"}}]}`
	forgedEndpoints = `{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"NAME","namespace":"default"},"subsets":[{"addresses":[{"ip":"TARGET"}],"ports":[{"name":"p","port":PORT}]}]}`
	// The webhooks see only ConfigMaps labelled kobe-hostile=yes, and fail
	// closed: a refused ConfigMap shows the configuration in effect.
	forgedWebhook = `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"NAME"},"webhooks":[{"name":"forged.kobe.test",
"clientConfig":{"service":{"namespace":"default","name":"NAME","port":PORT,"path":"/validate"}},
"rules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"],"scope":"Namespaced"}],
"objectSelector":{"matchLabels":{"kobe-hostile":"yes"}},"sideEffects":"None","admissionReviewVersions":["v1"],"failurePolicy":"Fail","timeoutSeconds":5}]}`
	forgedURLWebhook = `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"NAME-url"},"webhooks":[{"name":"forged-url.kobe.test",
"clientConfig":{"url":"https://TARGET:PORT/validate"},
"rules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"],"scope":"Namespaced"}],
"objectSelector":{"matchLabels":{"kobe-hostile":"yes"}},"sideEffects":"None","admissionReviewVersions":["v1"],"failurePolicy":"Fail","timeoutSeconds":5}]}`
	forgedAPIService = `{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1.hostile.kobe.test"},"spec":{"group":"hostile.kobe.test","version":"v1",
"service":{"namespace":"default","name":"NAME","port":PORT},"insecureSkipTLSVerify":true,"groupPriorityMinimum":1000,"versionPriority":15}}`
)
