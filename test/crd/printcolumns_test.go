//go:build integration

package crd_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// age is kubectl's rendering of a creation timestamp seconds or minutes ago.
var age = regexp.MustCompile(`^[0-9]+[smh]([0-9]+[sm])?$`)

func testPrinterColumns(t *testing.T, env *testenv.Env) {
	ns := newNamespace(t, env, "columns")
	ctx := t.Context()
	expires := metav1.NewTime(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))

	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ci-small"}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = kobev1.ClusterPoolStatus{Phase: kobev1.PoolHealthy, Ready: 2, Leased: 1, Creating: 1, Failures: 0}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}

	inst := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool-ci-small-0"},
		Spec: kobev1.ClusterInstanceSpec{
			PoolRef:  kobev1.ObjectRef{Name: "ci-small", UID: p.UID},
			Backend:  kobev1.BackendSpec{Type: kobev1.BackendK3s},
			LeaseRef: &kobev1.LeaseBinding{Name: "ci-run-1"},
		},
	}
	if err := env.Client.Create(ctx, inst); err != nil {
		t.Fatal(err)
	}
	inst.Status = kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceLeased, Endpoint: "https://10.0.0.7:6443", HealthFailures: 1}
	if err := env.Client.Status().Update(ctx, inst); err != nil {
		t.Fatal(err)
	}

	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ci-run-1"},
		Spec:       kobev1.ClusterLeaseSpec{Pool: "ci-small", Requester: kobev1.Requester{Identity: "my-org/my-repo:main"}},
	}
	if err := env.Client.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	l.Status = kobev1.ClusterLeaseStatus{
		Phase:       kobev1.LeaseBound,
		InstanceRef: &kobev1.ObjectRef{Name: inst.Name, UID: inst.UID},
		BoundAt:     &metav1.Time{Time: expires.Add(-time.Hour)},
		ExpiresAt:   &expires,
	}
	if err := env.Client.Status().Update(ctx, l); err != nil {
		t.Fatal(err)
	}

	queued := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ci-run-2"},
		Spec:       kobev1.ClusterLeaseSpec{Pool: "ci-small", Requester: kobev1.Requester{Identity: "my-org/my-repo:dev"}},
	}
	if err := env.Client.Create(ctx, queued); err != nil {
		t.Fatal(err)
	}
	queued.Status = kobev1.ClusterLeaseStatus{Phase: kobev1.LeasePending, QueuePosition: 1}
	if err := env.Client.Status().Update(ctx, queued); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args       []string
		wantHeader []string
		// wantRows are the rows without their trailing AGE, checked apart.
		wantRows [][]string
	}{
		{
			args:       []string{"clusterpools"},
			wantHeader: []string{"NAME", "PHASE", "READY", "LEASED", "CREATING", "FAILURES", "AGE"},
			wantRows:   [][]string{{"ci-small", "Healthy", "2", "1", "1", "0"}},
		},
		{
			args:       []string{"clusterinstances"},
			wantHeader: []string{"NAME", "PHASE", "POOL", "LEASE", "BACKEND", "AGE"},
			wantRows:   [][]string{{"pool-ci-small-0", "Leased", "ci-small", "ci-run-1", "k3s"}},
		},
		{
			args:       []string{"clusterinstances", "-o", "wide"},
			wantHeader: []string{"NAME", "PHASE", "POOL", "LEASE", "BACKEND", "ENDPOINT", "HEALTH-FAILURES", "AGE"},
			wantRows:   [][]string{{"pool-ci-small-0", "Leased", "ci-small", "ci-run-1", "k3s", "https://10.0.0.7:6443", "1"}},
		},
		{
			args:       []string{"clusterleases"},
			wantHeader: []string{"NAME", "PHASE", "POOL", "INSTANCE", "EXPIRES", "AGE"},
			wantRows: [][]string{
				{"ci-run-1", "Bound", "ci-small", "pool-ci-small-0", "2030-01-02T03:04:05Z"},
				{"ci-run-2", "Pending", "ci-small", "", ""},
			},
		},
		{
			args:       []string{"clusterleases", "-o", "wide"},
			wantHeader: []string{"NAME", "PHASE", "POOL", "INSTANCE", "EXPIRES", "IDENTITY", "QUEUE", "AGE"},
			wantRows: [][]string{
				{"ci-run-1", "Bound", "ci-small", "pool-ci-small-0", "2030-01-02T03:04:05Z", "my-org/my-repo:main", ""},
				{"ci-run-2", "Pending", "ci-small", "", "", "my-org/my-repo:dev", "1"},
			},
		},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := kubectl(t, env, append([]string{"get", "-n", ns}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if header := strings.Fields(lines[0]); !slices.Equal(header, tc.wantHeader) {
				t.Fatalf("header = %q, want %q; output:\n%s", header, tc.wantHeader, out)
			}
			rows := cells(lines)
			if len(rows) != len(tc.wantRows) {
				t.Fatalf("%d rows, want %d; output:\n%s", len(rows), len(tc.wantRows), out)
			}
			for i, row := range rows {
				if !slices.Equal(row[:len(row)-1], tc.wantRows[i]) {
					t.Errorf("row %d = %q, want %q and an age; output:\n%s", i, row, tc.wantRows[i], out)
				}
				if a := row[len(row)-1]; !age.MatchString(a) {
					t.Errorf("row %d AGE = %q, want a recent age such as 3s", i, a)
				}
			}
		})
	}
}

// cells splits the rows of kubectl's table output into cells at the offsets
// of the header's columns, so that an empty cell stays in its column.
func cells(lines []string) [][]string {
	var starts []int
	for i, r := range lines[0] {
		if r != ' ' && (i == 0 || lines[0][i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	var rows [][]string
	for _, l := range lines[1:] {
		row := make([]string, len(starts))
		for i, start := range starts {
			end := len(l)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(l))
			}
			if start < end {
				row[i] = strings.TrimSpace(l[start:end])
			}
		}
		rows = append(rows, row)
	}
	return rows
}
