//go:build heavy

package local

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestMemberLifecycle builds a real member and uses it the way a CI job
// and the operator would, then destroys it.
func TestMemberLifecycle(t *testing.T) {
	b := newBackend(t)
	m := newMember("lifecycle")

	start := time.Now()
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Create took %s; it must return without waiting for the control plane", d)
	} else {
		t.Logf("Create returned after %s", d.Round(time.Millisecond))
	}
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	obs := waitFor(t, b, m, backend.StateReady, readyDeadline)
	t.Logf("ready %s after Create", time.Since(start).Round(time.Millisecond))
	acc := obs.Access
	if acc == nil {
		t.Fatal("Ready without Access")
	}
	u, err := url.Parse(acc.Endpoint)
	if err != nil || u.Scheme != "https" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		t.Errorf("Endpoint %q, want https://127.0.0.1:<port>", acc.Endpoint)
	}
	for name, v := range map[string][]byte{"CACert": acc.CACert, "ClientCACert": acc.ClientCACert, "ClientCAKey": acc.ClientCAKey, "AdminKubeconfig": acc.AdminKubeconfig} {
		if len(v) == 0 {
			t.Errorf("Access.%s is empty", name)
		}
	}

	t.Run("kubectl with the admin kubeconfig", func(t *testing.T) {
		kc := testenv.KubeconfigFile(t, acc.AdminKubeconfig)
		testenv.MustKubectl(t, kc, "create", "namespace", "ci")
		testenv.MustKubectl(t, kc, "-n", "ci", "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=2")
		testenv.Eventually(t, 30*time.Second, "ReplicaSet of the Deployment", func() error {
			out, err := testenv.Kubectl(t, kc, "-n", "ci", "get", "replicasets", "-l", "app=web", "-o", "name")
			if err != nil {
				return errors.New(out)
			}
			if !strings.HasPrefix(out, "replicaset.apps/web-") {
				return errors.New("no ReplicaSet yet: " + out)
			}
			return nil
		})
		testenv.Eventually(t, 30*time.Second, "default ServiceAccount of the namespace", func() error {
			out, err := testenv.Kubectl(t, kc, "-n", "ci", "get", "serviceaccount", "default", "-o", "name")
			if err != nil {
				return errors.New(out)
			}
			return nil
		})
		testenv.Eventually(t, 30*time.Second, "kube-root-ca.crt ConfigMap of the namespace", func() error {
			out, err := testenv.Kubectl(t, kc, "-n", "ci", "get", "configmap", "kube-root-ca.crt", "-o", "name")
			if err != nil {
				return errors.New(out)
			}
			return nil
		})
	})

	t.Run("client certificate minted from ClientCAKey", func(t *testing.T) {
		ca, err := pki.LoadCA(acc.ClientCACert, acc.ClientCAKey)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		certPEM, keyPEM, err := ca.IssueClient("lease-holder", []string{"system:masters"}, now.Add(-time.Minute), now.Add(10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		kcData, err := pki.Kubeconfig(pki.KubeconfigInput{ClusterName: "lease", Server: acc.Endpoint, CAData: acc.CACert, UserName: "lease-holder", ClientCertPEM: certPEM, ClientKeyPEM: keyPEM})
		if err != nil {
			t.Fatal(err)
		}
		kc := testenv.KubeconfigFile(t, kcData)
		if out := testenv.MustKubectl(t, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "lease-holder" {
			t.Errorf("kubectl auth whoami = %q, want lease-holder", out)
		}
		testenv.MustKubectl(t, kc, "create", "configmap", "from-lease", "--from-literal=a=b")

		// A certificate from another CA is refused.
		other, err := pki.NewCA("other", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err = other.IssueClient("intruder", []string{"system:masters"}, now.Add(-time.Minute), now.Add(10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		kcData, err = pki.Kubeconfig(pki.KubeconfigInput{ClusterName: "lease", Server: acc.Endpoint, CAData: acc.CACert, ClientCertPEM: certPEM, ClientKeyPEM: keyPEM})
		if err != nil {
			t.Fatal(err)
		}
		kc = testenv.KubeconfigFile(t, kcData)
		if out, err := testenv.Kubectl(t, kc, "get", "configmaps"); err == nil || !strings.Contains(out, "Unauthorized") {
			t.Errorf("kubectl with a foreign certificate: err=%v out=%q, want Unauthorized", err, out)
		}
	})

	t.Run("TokenRequest and TokenReview round-trip", func(t *testing.T) {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(acc.AdminKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ci-runner"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "ci-runner", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest: %v", err)
		}
		rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenReview: %v", err)
		}
		if !rev.Status.Authenticated || rev.Status.User.Username != "system:serviceaccount:default:ci-runner" {
			t.Errorf("TokenReview status %+v, want authenticated as system:serviceaccount:default:ci-runner", rev.Status)
		}
		// The token also works as a bearer credential.
		kcData, err := pki.Kubeconfig(pki.KubeconfigInput{ClusterName: "sa", Server: acc.Endpoint, CAData: acc.CACert, Token: tr.Status.Token})
		if err != nil {
			t.Fatal(err)
		}
		kc := testenv.KubeconfigFile(t, kcData)
		if out := testenv.MustKubectl(t, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "system:serviceaccount:default:ci-runner" {
			t.Errorf("kubectl auth whoami with the token = %q", out)
		}
	})

	t.Run("processes log to the data directory", func(t *testing.T) {
		for _, c := range []string{compEtcd, compAPIServer, compKCM} {
			fi, err := os.Stat(b.paths(m).log(c))
			if err != nil || fi.Size() == 0 {
				t.Errorf("log of %s: %v (size %d)", c, err, sizeOf(fi))
			}
		}
	})

	t.Run("Fence cuts client certificates and minted tokens at once, for good", func(t *testing.T) {
		testFence(t, b, m, acc)
	})

	dir := b.paths(m).dir
	gone, err := b.Delete(t.Context(), m)
	if err != nil || !gone {
		t.Fatalf("Delete = %v, %v; want gone", gone, err)
	}
	if pids := runningUnder(t, dir); len(pids) > 0 {
		t.Errorf("processes left after Delete: %v", pids)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory left after Delete: %v", err)
	}
	if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
		t.Errorf("second Delete = %v, %v; want gone", gone, err)
	}
	if obs, err := b.Observe(t.Context(), m); err != nil || obs.State != backend.StateAbsent {
		t.Errorf("Observe after Delete = %+v, %v; want Absent", obs, err)
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

// TestKilledAPIServerIsFailed: a member whose process died cannot heal.
func TestKilledAPIServerIsFailed(t *testing.T) {
	b := newBackend(t)
	m := newMember("killed")
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, m, backend.StateReady, readyDeadline)
	st, err := readState(b.paths(m))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Processes, func(p process) bool { return p.Component == compAPIServer })
	if i < 0 {
		t.Fatalf("no kube-apiserver in state %+v", st.Processes)
	}
	if err := syscall.Kill(st.Processes[i].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	obs := waitFor(t, b, m, backend.StateFailed, 10*time.Second)
	if !strings.Contains(obs.Message, compAPIServer) {
		t.Errorf("Failed message %q does not name %s", obs.Message, compAPIServer)
	}
	dir := b.paths(m).dir
	if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
		t.Fatalf("Delete = %v, %v", gone, err)
	}
	if pids := runningUnder(t, dir); len(pids) > 0 {
		t.Errorf("processes left after Delete: %v", pids)
	}
}

// TestPortClashIsRetried: when the API server's port is taken between
// choosing and binding it, start-up goes on with another port.
func TestPortClashIsRetried(t *testing.T) {
	b := newBackend(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	first := true
	b.pickPort = func(host string) (int, error) {
		if first {
			first = false
			return takenPort, nil
		}
		return freePort(host)
	}
	m := newMember("clash")
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	obs := waitFor(t, b, m, backend.StateReady, readyDeadline)
	st, err := readState(b.paths(m))
	if err != nil {
		t.Fatal(err)
	}
	if st.Attempt != 2 || st.APIServerPort == takenPort || !strings.HasSuffix(obs.Access.Endpoint, ":"+strconv.Itoa(st.APIServerPort)) {
		t.Errorf("after a clash: attempt %d port %d endpoint %s; want attempt 2 on a port other than %d", st.Attempt, st.APIServerPort, obs.Access.Endpoint, takenPort)
	}

	// On this member, whose test is done with it, so that no other starts.
	t.Run("a member writing past its disk limit is Failed", func(t *testing.T) {
		testDiskLimit(t, b, m, obs.Access)
	})
}

// TestAdoptAfterOperatorCrash: members outlive an operator killed with
// SIGKILL, a new Backend adopts them (also one whose start-up the crash
// interrupted) and Sweep removes the ones nobody owns.
func TestAdoptAfterOperatorCrash(t *testing.T) {
	b := newBackend(t)
	ready := newMember("adopt-ready")
	interrupted := newMember("adopt-interrupted")
	createInHelper(t, b, ready, true)
	createInHelper(t, b, interrupted, false)

	obs := waitFor(t, b, ready, backend.StateReady, 10*time.Second)
	if out := testenv.MustKubectl(t, testenv.KubeconfigFile(t, obs.Access.AdminKubeconfig), "get", "namespace", "default", "-o", "name"); out != "namespace/default" {
		t.Errorf("kubectl against the adopted member: %q", out)
	}
	// The helper died before the controller-manager could be started; the
	// member waits for Create to resume its start-up.
	if obs, err := b.Observe(t.Context(), interrupted); err != nil || obs.State != backend.StateProvisioning {
		t.Fatalf("Observe interrupted member = %+v, %v; want Provisioning", obs, err)
	}
	if err := b.Create(t.Context(), interrupted); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, interrupted, backend.StateReady, readyDeadline)

	// A third, fresh instance sees the same.
	b2, err := New(b.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	waitFor(t, b2, ready, backend.StateReady, 10*time.Second)

	readyDir, interruptedDir := b.paths(ready).dir, b.paths(interrupted).dir
	// Leaks reports what Sweep destroys, and destroys nothing.
	leaked, err := b2.Leaks(t.Context(), func(_ string, uid types.UID) bool { return uid == ready.UID })
	if err != nil || !slices.Equal(leaked, []string{filepath.Base(interruptedDir)}) {
		t.Errorf("Leaks = %v, %v; want only %s", leaked, err, filepath.Base(interruptedDir))
	}
	if pids := runningUnder(t, interruptedDir); len(pids) == 0 {
		t.Error("Leaks stopped the processes of the member it reported")
	}
	removed, err := b2.Sweep(t.Context(), func(_ string, uid types.UID) bool { return uid == ready.UID })
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !slices.Equal(removed, []string{filepath.Base(interruptedDir)}) {
		t.Errorf("Sweep removed %v, want only %s", removed, filepath.Base(interruptedDir))
	}
	if pids := runningUnder(t, interruptedDir); len(pids) > 0 {
		t.Errorf("processes of the swept member still run: %v", pids)
	}
	if _, err := os.Stat(interruptedDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory of the swept member still exists: %v", err)
	}
	waitFor(t, b2, ready, backend.StateReady, 10*time.Second)

	// Processes whose directory vanished are strays: Sweep stops them.
	if err := os.RemoveAll(readyDir); err != nil {
		t.Fatal(err)
	}
	leaked, err = b2.Leaks(t.Context(), func(string, types.UID) bool { return true })
	if err != nil || !slices.Equal(leaked, []string{"processes of " + filepath.Base(readyDir)}) {
		t.Errorf("Leaks = %v, %v; want the processes of %s", leaked, err, filepath.Base(readyDir))
	}
	if pids := runningUnder(t, readyDir); len(pids) == 0 {
		t.Error("Leaks stopped the stray processes it reported")
	}
	removed, err = b2.Sweep(t.Context(), func(string, types.UID) bool { return true })
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !slices.Equal(removed, []string{"processes of " + filepath.Base(readyDir)}) {
		t.Errorf("Sweep removed %v, want the processes of %s", removed, filepath.Base(readyDir))
	}
	if pids := runningUnder(t, readyDir); len(pids) > 0 {
		t.Errorf("stray processes still run: %v", pids)
	}
	// And what they made outside the directory (as root: the cgroup).
	if left, err := node.CgroupPaths(NodeCgroup(string(ready.UID))); err != nil || len(left) > 0 {
		t.Errorf("the stray member's cgroup is left: %v (%v)", left, err)
	}
}

// TestObserveFromDisk covers the states Observe derives from the data
// directory alone, without starting a control plane.
func TestObserveFromDisk(t *testing.T) {
	b := newBackend(t)
	// An unrelated process that stands in for a recycled pid: it is alive,
	// but it is not one of the member's.
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
	})
	now := time.Now().UTC()
	valid := func(m backend.Member) *state {
		return &state{
			Version: stateVersion, Namespace: m.Namespace, Name: m.Name, UID: m.UID,
			Endpoint: "https://127.0.0.1:1", APIServerPort: 1, Attempt: 1, StartedAt: now, Started: true, ReadyAt: &now,
			Processes: []process{
				{Component: compEtcd, PID: sleeper.Process.Pid},
				{Component: compAPIServer, PID: sleeper.Process.Pid},
				{Component: compKCM, PID: sleeper.Process.Pid},
			},
		}
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, p paths, m backend.Member)
		want    backend.State
		message string
	}{
		{name: "nothing", setup: func(*testing.T, paths, backend.Member) {}, want: backend.StateAbsent},
		{
			name:    "directory without state file",
			setup:   func(t *testing.T, p paths, _ backend.Member) { mkdir(t, p.dir) },
			want:    backend.StateFailed,
			message: "creation was interrupted",
		},
		{
			name: "corrupt state file",
			setup: func(t *testing.T, p paths, _ backend.Member) {
				mkdir(t, p.dir)
				writeFile(t, p.state(), "{not json")
			},
			want:    backend.StateFailed,
			message: "inconsistent state",
		},
		{
			name: "state file of another UID",
			setup: func(t *testing.T, p paths, m backend.Member) {
				mkdir(t, p.dir)
				st := valid(m)
				st.UID = "someone-else"
				if err := writeState(p, st); err != nil {
					t.Fatal(err)
				}
			},
			want:    backend.StateFailed,
			message: "belongs to UID",
		},
		{
			name: "recycled pid",
			setup: func(t *testing.T, p paths, m backend.Member) {
				mkdir(t, p.dir)
				if err := writeState(p, valid(m)); err != nil {
					t.Fatal(err)
				}
			},
			want:    backend.StateFailed,
			message: "belongs to another program",
		},
		{
			name: "pid gone",
			setup: func(t *testing.T, p paths, m backend.Member) {
				mkdir(t, p.dir)
				st := valid(m)
				st.Processes[0].PID = deadPID(t)
				if err := writeState(p, st); err != nil {
					t.Fatal(err)
				}
			},
			want:    backend.StateFailed,
			message: "etcd (pid",
		},
		{
			name: "recorded failure",
			setup: func(t *testing.T, p paths, m backend.Member) {
				mkdir(t, p.dir)
				st := valid(m)
				st.Failure = "it broke"
				if err := writeState(p, st); err != nil {
					t.Fatal(err)
				}
			},
			want:    backend.StateFailed,
			message: "it broke",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMember(strings.ReplaceAll(tt.name, " ", "-"))
			p := b.paths(m)
			tt.setup(t, p, m)
			obs, err := b.Observe(t.Context(), m)
			if err != nil {
				t.Fatal(err)
			}
			if obs.State != tt.want || !strings.Contains(obs.Message, tt.message) {
				t.Errorf("Observe = %s %q, want %s with %q", obs.State, obs.Message, tt.want, tt.message)
			}
			if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
				t.Errorf("Delete = %v, %v", gone, err)
			}
			if _, err := os.Stat(p.dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Delete left %s", p.dir)
			}
		})
	}
	// Delete must not have signalled the unrelated process.
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("Delete killed an unrelated process with a recorded pid: %v", err)
	}
}

func TestCreateWithoutBinaries(t *testing.T) {
	dir := t.TempDir()
	b, err := New(Options{BinDir: dir, DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Create(t.Context(), newMember("nobin"))
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), filepath.Join(dir, compEtcd)) {
		t.Errorf("Create without binaries = %v; want ErrUnavailable naming %s", err, filepath.Join(dir, compEtcd))
	}
}

func TestInvalidMemberIdentity(t *testing.T) {
	b, err := New(Options{BinDir: t.TempDir(), DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, m := range []backend.Member{
		{Namespace: "ns", Name: "a", UID: ""},
		{Namespace: "ns", Name: "a", UID: "../x"},
		{Namespace: "ns", Name: "../../etc", UID: "0f9d3a5e-1c2b-4d6e-8f00-112233445566"},
		{Namespace: "..", Name: "a", UID: "0f9d3a5e-1c2b-4d6e-8f00-112233445566"},
	} {
		if err := b.Create(t.Context(), m); err == nil {
			t.Errorf("Create(%+v) succeeded", m)
		}
		if obs, err := b.Observe(t.Context(), m); err != nil || obs.State != backend.StateAbsent {
			t.Errorf("Observe(%+v) = %+v, %v; want Absent", m, obs, err)
		}
		if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
			t.Errorf("Delete(%+v) = %v, %v; want gone", m, gone, err)
		}
	}
}

func TestNewRequiresDataRoot(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without DataRoot succeeded")
	}
}

func TestDirNames(t *testing.T) {
	long := strings.Repeat("n", 253)
	tests := []struct {
		m backend.Member
	}{
		{backend.Member{Namespace: "ns", Name: "pool-a-0", UID: "0f9d3a5e-1c2b-4d6e-8f00-112233445566"}},
		{backend.Member{Namespace: strings.Repeat("s", 63), Name: long, UID: "0f9d3a5e-1c2b-4d6e-8f00-112233445566"}},
	}
	for _, tt := range tests {
		name := memberDirName(tt.m)
		if len(name) > 255 {
			t.Errorf("directory name of %d bytes", len(name))
		}
		if uid, ok := uidFromDirName(name); !ok || uid != tt.m.UID {
			t.Errorf("uidFromDirName(%q) = %q, %v; want %q", name, uid, ok, tt.m.UID)
		}
		if ns := namespaceFromDirName(name); ns != tt.m.Namespace {
			t.Errorf("namespaceFromDirName(%q) = %q, want %q", name, ns, tt.m.Namespace)
		}
	}
	for _, bad := range []string{"lost+found", "a_b", "ns_name_", "ns_name_../x"} {
		if uid, ok := uidFromDirName(bad); ok {
			t.Errorf("uidFromDirName(%q) = %q, want no UID", bad, uid)
		}
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestSchedulingMember: with scheduling, pods of a Deployment are scheduled
// onto the simulated node and reported Running.
func TestSchedulingMember(t *testing.T) {
	b := newBackend(t)
	for _, f := range []string{compScheduler, compKwok} {
		if _, err := os.Stat(filepath.Join(b.opts.BinDir, f)); err != nil {
			t.Fatalf("%s is missing: run `make controlplane` (hack/build-controlplane.sh) first", filepath.Join(b.opts.BinDir, f))
		}
	}
	if err := b.checkKwokStages(""); err != nil {
		t.Fatalf("%v: run `make controlplane` (hack/build-controlplane.sh) first", err)
	}
	m := newMember("scheduling")
	m.Spec.Backend.Local = &kobev1.LocalBackendSpec{Scheduling: true}
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	obs := waitFor(t, b, m, backend.StateReady, readyDeadline)
	kc := testenv.KubeconfigFile(t, obs.Access.AdminKubeconfig)
	if out := testenv.MustKubectl(t, kc, "get", "node", FakeNodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); out != "True" {
		t.Errorf("node %s Ready = %q, want True", FakeNodeName, out)
	}
	testenv.MustKubectl(t, kc, "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=3")
	testenv.Eventually(t, 60*time.Second, "3 Running pods", func() error {
		out, err := testenv.Kubectl(t, kc, "get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.status.phase}{\" \"}{end}")
		if err != nil {
			return errors.New(out)
		}
		if phases := strings.Fields(out); len(phases) != 3 || slices.ContainsFunc(phases, func(p string) bool { return p != "Running" }) {
			return errors.New("pod phases: " + out)
		}
		return nil
	})
	st, err := readState(b.paths(m))
	if err != nil {
		t.Fatal(err)
	}
	var comps []string
	for _, pr := range st.Processes {
		comps = append(comps, pr.Component)
	}
	if want := components(true); !slices.Equal(comps, want) {
		t.Errorf("member processes %v, want %v", comps, want)
	}
	dir := b.paths(m).dir
	if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
		t.Fatalf("Delete = %v, %v", gone, err)
	}
	if pids := runningUnder(t, dir); len(pids) > 0 {
		t.Errorf("processes left after Delete: %v", pids)
	}
}

// TestServingCertificateNames: the API server's certificate is valid for
// 127.0.0.1, localhost, the advertised host and the in-cluster names.
func TestServingCertificateNames(t *testing.T) {
	for _, advertise := range []string{"127.0.0.1", "kobe.example.test", "192.0.2.10"} {
		t.Run(advertise, func(t *testing.T) {
			p := paths{dir: t.TempDir()}
			if err := writeAssets(p, advertise); err != nil {
				t.Fatal(err)
			}
			caPEM, err := os.ReadFile(p.pki(serverCACert))
			if err != nil {
				t.Fatal(err)
			}
			certPEM, err := os.ReadFile(p.pki(apiserverCert))
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(caPEM) {
				t.Fatal("server CA does not parse")
			}
			block, _ := pem.Decode(certPEM)
			if block == nil {
				t.Fatal("serving certificate does not parse")
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			for _, host := range []string{"127.0.0.1", "localhost", advertise, "kubernetes.default.svc", serviceIP} {
				if _, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
					t.Errorf("serving certificate not valid for %s: %v", host, err)
				}
			}
			for _, f := range []string{apiserverKey, clientCAKey, adminKey, serviceAccountKey} {
				fi, err := os.Stat(p.pki(f))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s has mode %v, want no group or other access", f, fi.Mode().Perm())
				}
			}
		})
	}
}

// TestMemberRunsItsVersion: a member runs the binaries of its pool's
// cluster.version, from that version's directory. Without a second
// Kubernetes compiled, the second version here is the default's binaries
// linked under another version's name: what is checked is the choice of
// directory, which is all the backend decides.
func TestMemberRunsItsVersion(t *testing.T) {
	root := t.TempDir()
	def, other := filepath.Join(root, "1.37.2"), filepath.Join(root, "1.36.99")
	for _, d := range []string{def, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range memberComponents(false, 0) {
			if err := os.Symlink(filepath.Join(binDir(t), c), filepath.Join(d, c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := newBackend(t, func(o *Options) { o.BinDir = def })
	if got := b.Capabilities().KubernetesVersions; !slices.Equal(got, []string{"1.37.2", "1.36.99"}) {
		t.Fatalf("KubernetesVersions = %v", got)
	}
	m := newMember("older")
	m.Spec.Cluster.Version = "v1.36.99"
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, m, backend.StateReady, readyDeadline)
	procs := runningUnder(t, b.paths(m).dir)
	if len(procs) != len(memberComponents(false, 0)) {
		t.Fatalf("member processes %v", procs)
	}
	for _, p := range procs {
		if exe, _, _ := strings.Cut(p.Cmdline, " "); filepath.Dir(exe) != other {
			t.Errorf("member process %s runs %s, want a binary in %s", p, exe, other)
		}
	}
	if st, err := readState(b.paths(m)); err != nil || st.KubernetesVersion != "1.36.99" {
		t.Errorf("state records version %q (%v), want 1.36.99", st.KubernetesVersion, err)
	}
	refused := newMember("absent")
	refused.Spec.Cluster.Version = "1.35.0"
	if err := b.Create(t.Context(), refused); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "1.37.2, 1.36.99") {
		t.Errorf("Create of a version without binaries = %v, want ErrUnavailable naming the versions there are", err)
	}
	if _, err := os.Stat(b.paths(refused).dir); !os.IsNotExist(err) {
		t.Errorf("a refused member left a directory: %v", err)
	}
	if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
		t.Fatalf("Delete = %v, %v", gone, err)
	}
}
