//go:build root

package incluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/test/hostile"
)

// memberProcesses is the process limit a pool that sets none gets (the
// operator's --member-processes default).
const memberProcesses = 4096

// noisyNeighbour runs the hostile suite's noisy neighbour on a kubernetes
// member with nodes: the holder forks, allocates and takes inotify
// instances without end in pods of theirs, and the neighbours, on this
// backend the host cluster's own workloads (every member's control plane,
// the operator), must not notice: the host API server's GET p99 stays
// within the bound and a pod of the host keeps running. The disk attack is
// left out: past its share a node pod is evicted by the host's kubelet, not
// refused with ENOSPC (docs/security.md, "Not yet").
func (f *fixture) noisyNeighbour(t *testing.T, kc string, nodes []string) {
	// testapp on every node of the member (startSpoofer imported it into
	// the first), as a registry pull would.
	for _, n := range nodes[1:] {
		if err := f.importTestapp(t.Context(), testenv.KubectlPath(t), n); err != nil {
			t.Fatal(err)
		}
	}
	raiseHostInotifyLimits(t)
	client := filepath.Join(f.work, "client.yaml")
	if err := os.WriteFile(client, []byte(fmt.Sprintf(holdPod, "client", "nodeName: "+nodes[0])), 0o600); err != nil {
		t.Fatal(err)
	}
	neighbour := filepath.Join(f.work, "neighbour.yaml")
	if err := os.WriteFile(neighbour, []byte(fmt.Sprintf(holdPod, "kobe-neighbour", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct{ kubeconfig, manifest, pod string }{{kc, client, "client"}, {f.hc.Kubeconfig, neighbour, "kobe-neighbour"}} {
		if out, err := testenv.Kubectl(t, a.kubeconfig, "apply", "-f", a.manifest); err != nil {
			t.Fatal(out, err)
		}
		t.Cleanup(func() {
			_, _ = testenv.Kubectl(t, a.kubeconfig, "delete", "pod", a.pod, "--grace-period=0", "--ignore-not-found")
		})
		if out, err := testenv.Kubectl(t, a.kubeconfig, "wait", "--for=condition=Ready", "--timeout=25s", "pod/"+a.pod); err != nil {
			t.Fatal(out, err)
		}
	}
	hostile.NoisyNeighbour(t,
		hostile.Target{Kubeconfig: kc, Image: "kobe.local/testapp:v1", RunningPod: "client"},
		hostile.Target{Kubeconfig: f.hc.Kubeconfig, Image: "kobe.local/testapp:v1", RunningPod: "kobe-neighbour"},
		hostile.Appetite{Processes: memberProcesses})
}

// raiseHostInotifyLimits sets the machine's inotify limits as the host
// cluster's administrator does for kobe's node pods (which never change
// their host's kernel settings, and say in their log when these are low),
// and puts them back at the end.
func raiseHostInotifyLimits(t *testing.T) {
	floors, err := node.InotifyFloors()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range floors {
		path := "/proc/sys/" + k
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strconv.FormatInt(v, 10)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
	}
}

// holdPod is a pod running testapp hold (name, then an optional line of
// its spec), which baseline admits.
const holdPod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  %s
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: kobe.local/testapp:v1
    imagePullPolicy: Never
    args: ["hold", "3600"]
`
