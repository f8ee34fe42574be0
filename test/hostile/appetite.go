package hostile

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Appetite is what NoisyNeighbour needs besides the two members.
type Appetite struct {
	// Processes is the holder's member's cluster.limits.processes: a fork
	// without end must be refused before it.
	Processes int
	// Report, when set, receives the figures (the neighbour's quiet and
	// attacked p99s, what the attacks reached) for the docs.
	Report func(format string, args ...any)
}

// NoisyNeighbour: a lease holder cannot take the machine from the other
// tenants (issue 42, items 1 and 5). The holder of one member forks
// without end, then allocates memory without end, in a running pod of
// theirs; their member's limits stop both inside it (a fork fails with
// EAGAIN before the member's process limit, the kernel kills the eater),
// while the neighbour's API server keeps answering (p99 of a simple GET
// within 2x its quiet value, and at most 250 ms: on two shared cores a
// quiet p99 of a few milliseconds doubles with any noise) and its running
// pod keeps running. The testapp image's spawn and eat subcommands are the
// attacks; holder.RunningPod and neighbour.RunningPod run it.
func NoisyNeighbour(t *testing.T, holder, neighbour Target, a Appetite) {
	report := a.Report
	if report == nil {
		report = t.Logf
	}
	cs := clientFor(t, neighbour.Kubeconfig)
	quiet := getP99(t, cs, 40)
	report("neighbour's GET p99, quiet: %s", quiet)
	bound := min(max(2*quiet, 50*time.Millisecond), 250*time.Millisecond)

	t.Run("a fork without end fails inside the member", func(t *testing.T) {
		// The children hold their pids for 60 s, through the measurement.
		out, err := testenv.KubectlStdout(t, holder.Kubeconfig, "exec", holder.RunningPod, "--", "/testapp", "spawn", "1000000", "60")
		if err != nil {
			t.Fatalf("spawn: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`spawned (\d+), then: (.*)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("spawn's output says no start failed: %q", out)
		}
		n, _ := strconv.Atoi(m[1])
		report("fork without end: %d processes started, then %q", n, m[2])
		if n >= a.Processes {
			t.Errorf("%d processes started in one pod, beyond the member's limit of %d", n, a.Processes)
		}
		under := getP99(t, cs, 40)
		report("neighbour's GET p99 while the holder's processes are held: %s", under)
		if under > bound {
			t.Errorf("the neighbour's GET p99 is %s under the attack, quiet %s: beyond %s", under, quiet, bound)
		}
		podRuns(t, neighbour)
	})

	t.Run("memory without end is killed inside the member", func(t *testing.T) {
		out, err := testenv.KubectlStdout(t, holder.Kubeconfig, "exec", holder.RunningPod, "--", "/testapp", "eat", "65536")
		if err == nil || strings.Contains(out, "nothing stopped it") {
			t.Fatalf("64 GiB were allocated in a pod of a bounded member (%v):\n%s", err, tail(out))
		}
		report("memory without end: killed after %q (%v)", lastLine(out), err)
		under := getP99(t, cs, 40)
		report("neighbour's GET p99 after the holder's memory attack: %s", under)
		if under > bound {
			t.Errorf("the neighbour's GET p99 is %s after the attack, quiet %s: beyond %s", under, quiet, bound)
		}
		podRuns(t, neighbour)
	})
}

func clientFor(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// getP99 is the p99 of n GETs of namespace default, one at a time.
func getP99(t *testing.T, cs *kubernetes.Clientset, n int) time.Duration {
	t.Helper()
	took := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("the neighbour's API server: %v", err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[(len(took)*99+99)/100-1]
}

// podRuns fails unless the target's running pod still runs and answers.
func podRuns(t *testing.T, tg Target) {
	t.Helper()
	phase, err := testenv.KubectlStdout(t, tg.Kubeconfig, "get", "pod", tg.RunningPod, "-o", "jsonpath={.status.phase}")
	if err != nil || strings.TrimSpace(phase) != "Running" {
		t.Errorf("the neighbour's pod %s: phase %q (%v)", tg.RunningPod, phase, err)
	}
	if out, err := testenv.KubectlStdout(t, tg.Kubeconfig, "exec", tg.RunningPod, "--", "/testapp", "read", "/etc/hostname"); err != nil {
		t.Errorf("exec in the neighbour's pod %s: %v\n%s", tg.RunningPod, err, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}
