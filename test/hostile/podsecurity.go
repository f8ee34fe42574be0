package hostile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Target is a leased member as its holder sees it.
type Target struct {
	// Kubeconfig is the lease's kubeconfig (Direct or through the connect
	// proxy): the only credential an attack uses.
	Kubeconfig string
	// Image is an image the member's nodes hold, run with
	// imagePullPolicy Never.
	Image string
	// RunningPod is a running pod of namespace default (ephemeral
	// containers are added to it).
	RunningPod string
	// Node is the name of one of the member's nodes.
	Node string
	// HostPath is a directory of the machine beyond the member that a pod
	// must not mount (another member's keys); "/" when empty.
	HostPath string
	// EgressRefusal is the text every use of an admitted forgery must fail
	// with, when the backend refuses the API server's dial rather than the
	// forgery (the kubernetes backend's egress proxy: "code 403"); empty:
	// any failure counts.
	EgressRefusal string
}

// refusedBy are the texts of the refusals that count: Pod Security
// admission, kobe's pod, namespace and volume policies (internal/
// podsecurity). A request that fails for another reason (a typo, a missing
// object) proves nothing and fails the attack's test.
var refusedBy = []string{"violates PodSecurity", "this member enforces Pod Security", "this member lets PersistentVolumes name no file"}

// mustBeRefused runs kubectl with args and fails t unless a policy
// refused it.
func mustBeRefused(t *testing.T, kc, what string, args ...string) {
	t.Helper()
	out, err := testenv.Kubectl(t, kc, args...)
	if err == nil {
		t.Errorf("%s was accepted: kubectl %s: %.300s", what, strings.Join(args, " "), out)
		return
	}
	for _, r := range refusedBy {
		if strings.Contains(out, r) {
			return
		}
	}
	t.Errorf("%s failed, but not by kobe's policies or Pod Security (the attack proved nothing): %v: %.300s", what, err, out)
}

// PodSecurityHolds: a lease holder cannot run a pod that owns the node,
// by any path. Fixes it proves (issue 24, item 1): the namespace rule
// covers namespaces/status and /finalize, create, update, patch and
// server-side apply (a status patch lowered the level and a privileged
// hostPID pod read the operator host's /tmp); a rule on pods and ephemeral
// containers refuses what baseline forbids in every namespace, kube-system
// included, whatever its labels; PersistentVolumes name no file of the
// node.
func PodSecurityHolds(t *testing.T, tg Target) {
	kc := tg.Kubeconfig
	hostPath := tg.HostPath
	if hostPath == "" {
		hostPath = "/"
	}
	t.Run("no namespace write path lowers the level", func(t *testing.T) {
		privileged := `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`
		mustBeRefused(t, kc, "a privileged label by label", "label", "namespace", "default", "pod-security.kubernetes.io/enforce=privileged", "--overwrite")
		mustBeRefused(t, kc, "a privileged label by patch", "patch", "namespace", "default", "--type=merge", "-p", privileged)
		mustBeRefused(t, kc, "a privileged label through namespaces/status", "patch", "namespace", "default", "--subresource=status", "--type=merge", "-p", privileged)
		mustBeRefused(t, kc, "an old enforce-version", "label", "namespace", "kube-system", "pod-security.kubernetes.io/enforce-version=v1.0", "--overwrite")
		ns := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"pwn","labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`
		mustBeRefused(t, kc, "a privileged namespace by create", "create", "-f", file(t, ns))
		mustBeRefused(t, kc, "a privileged namespace by server-side apply", "apply", "--server-side", "-f", file(t, ns))
		// An update (PUT) of the whole object, and finalize, which is one.
		whole := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default","labels":{"pod-security.kubernetes.io/enforce":"privileged"}},"spec":{"finalizers":["kubernetes"]}}`
		mustBeRefused(t, kc, "a privileged label by PUT", "replace", "-f", file(t, whole))
		mustBeRefused(t, kc, "a privileged label through namespaces/finalize", "replace", "--raw", "/api/v1/namespaces/default/finalize", "-f", file(t, whole))
	})

	t.Run("no pod that owns the node is admitted, in any namespace", func(t *testing.T) {
		container := func(extra string) string {
			return `{"name":"c","image":"` + tg.Image + `","imagePullPolicy":"Never"` + extra + `}`
		}
		specs := map[string]string{
			"privileged":                `{"containers":[` + container(`,"securityContext":{"privileged":true}`) + `]}`,
			"hostPID":                   `{"hostPID":true,"containers":[` + container("") + `]}`,
			"hostNetwork":               `{"hostNetwork":true,"containers":[` + container("") + `]}`,
			"hostIPC":                   `{"hostIPC":true,"containers":[` + container("") + `]}`,
			"hostPath":                  `{"containers":[` + container(`,"volumeMounts":[{"name":"h","mountPath":"/host"}]`) + `],"volumes":[{"name":"h","hostPath":{"path":"` + hostPath + `"}}]}`,
			"hostPort":                  `{"containers":[` + container(`,"ports":[{"containerPort":80,"hostPort":80}]`) + `]}`,
			"SYS_ADMIN":                 `{"containers":[` + container(`,"securityContext":{"capabilities":{"add":["SYS_ADMIN"]}}`) + `]}`,
			"unmasked /proc":            `{"hostUsers":false,"containers":[` + container(`,"securityContext":{"procMount":"Unmasked"}`) + `]}`,
			"unconfined seccomp":        `{"securityContext":{"seccompProfile":{"type":"Unconfined"}},"containers":[` + container("") + `]}`,
			"unconfined AppArmor":       `{"containers":[` + container(`,"securityContext":{"appArmorProfile":{"type":"Unconfined"}}`) + `]}`,
			"privileged init container": `{"initContainers":[` + strings.Replace(container(`,"securityContext":{"privileged":true}`), `"name":"c"`, `"name":"init"`, 1) + `],"containers":[` + container("") + `]}`,
		}
		// kube-system: an exemption of the system namespace (as many
		// clusters make for their own add-ons) would be the way around.
		for _, ns := range []string{"default", "kube-system"} {
			for name, spec := range specs {
				pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hostile","namespace":%q},"spec":%s}`, ns, spec)
				mustBeRefused(t, kc, "a "+name+" pod in "+ns, "create", "-f", file(t, pod))
			}
		}
		patch := `{"spec":{"ephemeralContainers":[` + strings.Replace(container(`,"securityContext":{"privileged":true}`), `"name":"c"`, `"name":"root"`, 1) + `]}}`
		mustBeRefused(t, kc, "a privileged ephemeral container", "patch", "pod", tg.RunningPod, "--subresource=ephemeralcontainers", "--type=strategic", "-p", patch)
		if tg.Node != "" {
			// kubectl debug node/... makes a pod with the host's
			// namespaces and its / mounted.
			mustBeRefused(t, kc, "kubectl debug node/"+tg.Node, "debug", "node/"+tg.Node, "--image="+tg.Image, "--image-pull-policy=Never", "--profile=sysadmin", "--", "true")
		}
	})

	t.Run("a controller's privileged pods are refused too", func(t *testing.T) {
		// The Job is admitted (Pod Security only warns about templates);
		// the pods its controller makes must not be.
		job := `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"hostile","namespace":"kube-system"},"spec":{"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never","hostPID":true,` +
			`"containers":[{"name":"c","image":"` + tg.Image + `","imagePullPolicy":"Never","securityContext":{"privileged":true}}]}}}}`
		if out, err := testenv.Kubectl(t, kc, "create", "-f", file(t, job)); err != nil {
			t.Fatalf("creating a Job: %v %s", err, out)
		}
		defer func() { _, _ = testenv.Kubectl(t, kc, "delete", "job", "-n", "kube-system", "hostile", "--wait=false") }()
		// Until the Job controller has tried (FailedCreate) no pod is no
		// proof.
		testenv.Eventually(t, 30*time.Second, "the Job controller to try its pod", func() error {
			out, err := testenv.Kubectl(t, kc, "get", "events", "-n", "kube-system", "--field-selector", "involvedObject.kind=Job,involvedObject.name=hostile,reason=FailedCreate", "-o", "name")
			if err != nil {
				return err
			}
			if out == "" {
				return fmt.Errorf("no FailedCreate Event yet")
			}
			return nil
		})
		if out, _ := testenv.Kubectl(t, kc, "get", "pods", "-n", "kube-system", "-l", "job-name=hostile", "-o", "name"); out != "" {
			t.Errorf("the Job's privileged hostPID pod exists: %s", out)
		}
	})

	t.Run("no PersistentVolume names a file of the node", func(t *testing.T) {
		// The provisioner's root itself: a pod that mounted it could plant
		// a symlink a later volume follows out. (A path with ".." is the
		// API's own refusal.)
		for _, path := range []string{"/", hostPath, node.StorageRoot, node.StorageRoot + "/x/y"} {
			pv := `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"hostile"},"spec":{"capacity":{"storage":"1Gi"},` +
				`"accessModes":["ReadWriteOnce"],"hostPath":{"path":"` + path + `"}}}`
			mustBeRefused(t, kc, "a hostPath PersistentVolume of "+path, "create", "-f", file(t, pv))
		}
		local := `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"hostile"},"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],` +
			`"local":{"path":"/"},"nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"Exists"}]}]}}}}`
		mustBeRefused(t, kc, "a local PersistentVolume of /", "create", "-f", file(t, local))
	})
}

// NetworkVolumesRefused: a lease holder cannot make a node mount storage
// from the network (issue 42, item 4): the node's kernel, the host's for a
// local member, would mount whatever the holder serves, and a hung hard
// mount leaves processes that teardown cannot kill. On a member whose pool
// leaves cluster.networkVolumes unset, the static network volume policy
// (internal/podsecurity) refuses, each time with a message naming
// networkVolumes: a pod with an inline nfs volume; nfs and iscsi
// PersistentVolumes, the nfs one pre-bound to a claim that a pod already
// uses (the claim stays unbound: no volume exists for it); and the pods a
// Job's controller makes from an nfs template.
func NetworkVolumesRefused(t *testing.T, tg Target) {
	kc := tg.Kubeconfig
	const (
		server = "192.0.2.1" // RFC 5737: serves nothing, so an admitted mount could only hang
		want   = "networkVolumes"
	)
	container := `{"name":"c","image":"` + tg.Image + `","imagePullPolicy":"Never","volumeMounts":[{"name":"v","mountPath":"/mnt"}]}`
	nfs := `{"server":"` + server + `","path":"/"}`

	t.Run("an inline nfs volume", func(t *testing.T) {
		pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hostile-nfs","namespace":"default"},"spec":{"containers":[` + container + `],` +
			`"volumes":[{"name":"v","nfs":` + nfs + `}]}}`
		mustCreateBeRefused(t, kc, "a pod with an inline nfs volume", pod, want)
	})

	t.Run("network PersistentVolumes and a pod that claims one", func(t *testing.T) {
		// The claim names the volume and the pod the claim: both are
		// admitted (neither names a network volume); the volume must not
		// be.
		claim := `{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"hostile-nfs","namespace":"default"},"spec":{"storageClassName":"",` +
			`"volumeName":"hostile-nfs","accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`
		pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hostile-nfs-claim","namespace":"default"},"spec":{"containers":[` + container + `],` +
			`"volumes":[{"name":"v","persistentVolumeClaim":{"claimName":"hostile-nfs"}}]}}`
		for _, m := range []string{claim, pod} {
			if out, err := testenv.Kubectl(t, kc, "create", "-f", file(t, m)); err != nil {
				t.Fatalf("creating the claim and its pod: %v %s", err, out)
			}
		}
		defer func() {
			_, _ = testenv.Kubectl(t, kc, "delete", "pod", "-n", "default", "hostile-nfs-claim", "--wait=false", "--grace-period=0", "--force")
			_, _ = testenv.Kubectl(t, kc, "delete", "pvc", "-n", "default", "hostile-nfs", "--wait=false")
		}()
		pv := `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"hostile-nfs"},"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],` +
			`"storageClassName":"","claimRef":{"namespace":"default","name":"hostile-nfs"},"nfs":` + nfs + `}}`
		mustCreateBeRefused(t, kc, "an nfs PersistentVolume bound to a pod's claim", pv, want)
		iscsi := `{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"hostile-iscsi"},"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],` +
			`"iscsi":{"targetPortal":"` + server + `:3260","iqn":"iqn.2001-04.com.example:storage","lun":0}}}`
		mustCreateBeRefused(t, kc, "an iscsi PersistentVolume", iscsi, want)
		if out, err := testenv.Kubectl(t, kc, "get", "pv", "hostile-nfs", "-o", "name"); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("the nfs PersistentVolume exists: %v %s", err, out)
		}
		if phase, err := testenv.Kubectl(t, kc, "get", "pvc", "-n", "default", "hostile-nfs", "-o", "jsonpath={.status.phase}"); err != nil || phase == "Bound" {
			t.Errorf("the pod's claim is %q: %v", phase, err)
		}
	})

	t.Run("a controller's nfs pods are refused too", func(t *testing.T) {
		// The Job is admitted (it is no pod); the pods its controller
		// makes must not be, and the controller's Event says why.
		job := `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"hostile-nfs","namespace":"default"},"spec":{"backoffLimit":0,"template":{"spec":{"restartPolicy":"Never",` +
			`"containers":[` + container + `],"volumes":[{"name":"v","nfs":` + nfs + `}]}}}}`
		if out, err := testenv.Kubectl(t, kc, "create", "-f", file(t, job)); err != nil {
			t.Fatalf("creating a Job: %v %s", err, out)
		}
		defer func() { _, _ = testenv.Kubectl(t, kc, "delete", "job", "-n", "default", "hostile-nfs", "--wait=false") }()
		// Until the controller has tried (a FailedCreate Event, or a pod)
		// no pod is no proof.
		var pods string
		testenv.Eventually(t, 30*time.Second, "the Job controller to try its pod", func() error {
			pods, _ = testenv.Kubectl(t, kc, "get", "pods", "-n", "default", "-l", "job-name=hostile-nfs", "-o", "name")
			if pods != "" {
				return nil
			}
			out, err := testenv.Kubectl(t, kc, "get", "events", "-n", "default", "--field-selector", "involvedObject.kind=Job,involvedObject.name=hostile-nfs,reason=FailedCreate",
				"-o", "jsonpath={.items[*].message}")
			if err != nil {
				return err
			}
			if !strings.Contains(out, want) {
				return fmt.Errorf("no FailedCreate Event naming %s yet: %.300s", want, out)
			}
			return nil
		})
		if pods != "" {
			t.Errorf("the Job's nfs pod exists: %s", pods)
		}
	})
}

// mustCreateBeRefused creates manifest with kubectl and fails t unless the
// refusal says want; what was admitted is deleted at once (a pod of a
// network volume would leave its node mounting).
func mustCreateBeRefused(t *testing.T, kc, what, manifest, want string) {
	t.Helper()
	f := file(t, manifest)
	out, err := testenv.Kubectl(t, kc, "create", "-f", f)
	if err == nil {
		t.Errorf("%s was accepted: %.300s", what, out)
		_, _ = testenv.Kubectl(t, kc, "delete", "-f", f, "--wait=false", "--grace-period=0", "--force")
		return
	}
	if !strings.Contains(out, want) {
		t.Errorf("%s failed, but not by a refusal naming %s (the attack proved nothing): %v: %.400s", what, want, err, out)
	}
}

// Seccomp: a member's pods run under the container runtime's seccomp
// filter (issue 24, item 6). status is the /proc/self/status a pod of the
// member read.
func Seccomp(t *testing.T, status string) {
	t.Helper()
	if !strings.Contains(status, "Seccomp:\t2") {
		line := "(no Seccomp line)"
		for _, l := range strings.Split(status, "\n") {
			if strings.HasPrefix(l, "Seccomp:") {
				line = l
			}
		}
		t.Errorf("a member pod runs without the runtime's seccomp filter: %s", line)
	}
}

func file(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
