//go:build root

package hostcluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// crashChildEnv makes the test binary, instead of running tests, start a
// host cluster with a running pod, print "ready" and wait to be killed:
// a test run that crashes with the cluster up.
const crashChildEnv = "HOSTCLUSTER_CRASH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		if err := crashChild(); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(1)
		}
		select {} // killed by the parent
	}
	os.Exit(m.Run())
}

func crashChild() error {
	ctx := context.Background()
	c, err := New(ctx, Options{
		PauseImage: os.Getenv("HOSTCLUSTER_PAUSE_IMAGE"),
		Images:     strings.Split(os.Getenv(crashChildEnv), ","),
	})
	if err != nil {
		return err
	}
	pods := c.Client.CoreV1().Pods("default")
	_, err = pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "echo", Image: os.Getenv("HOSTCLUSTER_ECHO_IMAGE"), ImagePullPolicy: corev1.PullNever,
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	err = testenv.Poll(ctx, 2*time.Minute, func() error {
		p, err := pods.Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod phase %s", p.Status.Phase)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return nil
}

// TestTeardownAfterCrash kills (SIGKILL) a test process while its host
// cluster runs a pod: its control plane, containerd, kubelet and kube-proxy
// die with it (Pdeathsig), but the pod's shim and processes, mounts,
// network namespace, veth, rules, cgroups and changed sysctls stay. The
// teardown that the next run starts with must remove them all.
func TestTeardownAfterCrash(t *testing.T) {
	ctx := t.Context()
	pauseTar, pauseRef, echoTar, echoRef := images(t)
	if err := Teardown(ctx, DefaultDir); err != nil {
		t.Fatalf("teardown before the test: %v", err)
	}
	before, err := TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}

	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(),
		crashChildEnv+"="+pauseTar+","+echoTar,
		"HOSTCLUSTER_PAUSE_IMAGE="+pauseRef, "HOSTCLUSTER_ECHO_IMAGE="+echoRef)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = child.Wait()
			_ = Teardown(context.Background(), DefaultDir)
			t.Fatal("the child exited before its host cluster was up")
		}
	case <-time.After(4 * time.Minute):
		_ = child.Process.Kill()
		_ = child.Wait()
		_ = Teardown(context.Background(), DefaultDir)
		t.Fatal("the child's host cluster was not up within 4 minutes")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	left, err := TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := before.Diff(left)
	for _, section := range []string{"mounts:", "links:", "rules:", "cgroups:", "netns:"} {
		if !strings.Contains(d, section) {
			t.Errorf("after the crash, %s shows no leftover: the test no longer proves Teardown cleans it\n%s", section, d)
		}
	}

	start := time.Now()
	if err := Teardown(ctx, DefaultDir); err != nil {
		t.Fatalf("teardown after the crash: %v", err)
	}
	t.Logf("teardown after a crash in %v", time.Since(start).Round(time.Millisecond))
	after, err := TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Errorf("the machine differs after the teardown that follows a crash (- before only, + after only):\n%s", d)
	}
}
